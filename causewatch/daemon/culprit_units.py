"""The units an open anomaly's candidate causes are ranked over, read from the store as rows of one
width in time (a row holds the median of the task values, or the mean of the samples, that started or
were taken in it), the baseline window's rows numbered below 0 and the incident's from 0:

- the app's task variables (the baseline model's numeric ones, `cpu_wait_seconds`, each at the baseline's
  typical causes: less what its directed parents' departures from their baseline medians explain, by a
  least-squares fit on the baseline's tasks, so a variable that only follows its causes does not move) and
  its instrumented regions (`region stream`: seconds and CPU seconds per call);
- per node that ran the incident's tasks, and up to MAX_OTHER_NODES others: the CPU beside the app's
  (`node n1: other processes' CPU`: busy CPU seconds per second less the app's tasks' there, processes
  runnable, CPU pressure), its memory, disk and network;
- on the nodes that ran the incident's tasks, each scope an agent watches (`cmd:python on n1`: its CPU,
  memory, I/O) and the busiest other processes their agents report (`process python3 -c … on n1`:
  agent/neighbours.py). Not on the others: contention is local, and a process elsewhere reaches the app
  only through what that node's own units measure (two agents on one host both report its processes,
  and the copy on the node without tasks had outranked the one beside the app).

`edges` are what is known of how a fault travels between them, as analytics.rca.CallGraph takes it (a
fault at the second shows at the first): the baseline model's directed edges, effect to cause; every task
variable and region to the units of the nodes the tasks ran on; a node's units to its processes and
watched scopes; duration to the regions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from causewatch import wire
from causewatch.analytics.causal import features
from causewatch.daemon import readers

KIND = "/"             # between a unit's name and a column's kind: column_kind reads the kind back
MAX_OTHER_NODES = 8    # nodes beside the app's whose units are ranked too (the first by name)
MAX_PROCESSES = 12     # process units a node, the busiest in the incident first
MAX_SCOPES = 12        # watched scopes (commands, units) a node, the busiest in the incident first
MAX_REGIONS = 20       # region units, the longest in all first
TOP_PROCESS = "top_process_cpu_ratio"
OTHER_CPU = "other processes' CPU"
BUSY = ("user", "nice", "system", "irq", "softirq", "steal")   # node_cpu_seconds_total's modes a CPU works in
CPU = "node_cpu_seconds_total"


@dataclass(frozen=True)
class Term:
    """One of the node_exporter series a column sums (every series of `base` whose `label` is one of
    `values`, or every one: None), times `sign`."""
    base: str
    label: str | None = None
    values: tuple[str, ...] = ()
    sign: float = 1.0

    def holds(self, base: str, labels: dict[str, str]) -> bool:
        return base == self.base and (self.label is None or labels.get(self.label) in self.values)


# node unit -> column kind -> (its terms, "rate": per second between samples, or "mean"), each larger when
# the node's other work takes more (culprits.contention counts only that)
NODE = {
    OTHER_CPU: {"cpu_other_cores": ((Term(CPU, "mode", BUSY),), "rate"),
                "cpu_runnable": ((Term("node_procs_running"),), "mean"),
                "cpu_pressure": ((Term("node_pressure_cpu_waiting_seconds_total"),), "rate")},
    "memory": {"memory_used_bytes": ((Term("node_memory_MemTotal_bytes"),
                                      Term("node_memory_MemAvailable_bytes", sign=-1.0)), "mean"),
               "memory_major_faults": ((Term("node_vmstat_pgmajfault"),), "rate"),
               "memory_swapped_pages": ((Term("node_vmstat_pswpin"), Term("node_vmstat_pswpout")), "rate"),
               "memory_pressure": ((Term("node_pressure_memory_waiting_seconds_total"),), "rate")},
    "disk": {"disk_bytes": ((Term("node_disk_read_bytes_total"), Term("node_disk_written_bytes_total")), "rate"),
             "disk_iowait_cores": ((Term(CPU, "mode", ("iowait",)),), "rate"),
             "disk_pressure": ((Term("node_pressure_io_waiting_seconds_total"),), "rate")},
    "network": {"network_bytes": ((Term("node_network_receive_bytes_total"),
                                   Term("node_network_transmit_bytes_total")), "rate"),
                "network_errors": (tuple(Term(f"node_network_{d}_{e}_total") for d in ("receive", "transmit")
                                         for e in ("errs", "drop")), "rate"),
                "network_retransmits": ((Term("node_netstat_Tcp_RetransSegs"),), "rate")},
}
# a watched scope's column kind -> (the metrics summed, how), the first of its alternatives the scope has:
# a launched command's or a process's perf and psutil counts, a unit's (a job, a service, a container)
WATCHED = {"cpu_cores": ((("task_clock_seconds",), ("process_cpu_user_seconds_total",
                                                     "process_cpu_system_seconds_total"),
                          ("unit_cpu_seconds_total",)), "rate"),
           "memory_resident_bytes": ((("process_resident_memory_bytes",), ("unit_memory_bytes",)), "mean"),
           "disk_bytes": ((("process_read_bytes_total", "process_written_bytes_total"),
                           ("unit_io_read_bytes_total", "unit_io_written_bytes_total")), "rate")}
METRICS = sorted({t.base for kinds in NODE.values() for terms, _ in kinds.values() for t in terms}
                 | {m for alts, _ in WATCHED.values() for ms in alts for m in ms})
# the labelled series read (SQL LIKE patterns): a CPU's modes, a disk's and an interface's counters, the
# busiest processes
PATTERNS = [f"{m}.%" for m in METRICS] + [TOP_PROCESS + ".%"]


@dataclass(frozen=True)
class Windows:
    """The baseline's and the incident's spans of time (task starts, sample times) and a row's width."""
    baseline: tuple[float, float]
    incident: tuple[float, float]
    width: float

    def rows(self, ts) -> np.ndarray:
        """The row number of each time (float; NaN outside both windows)."""
        ts = np.asarray(ts, dtype=float)
        inside = ((ts >= self.baseline[0]) & (ts <= self.baseline[1])) | \
                 ((ts >= self.incident[0]) & (ts <= self.incident[1]))
        return np.where(inside, np.floor((ts - self.incident[0]) / self.width), np.nan)

    def to_dict(self) -> dict:
        return {"baseline": [round(t, 3) for t in self.baseline], "incident": [round(t, 3) for t in self.incident],
                "row_seconds": round(self.width, 3)}


@dataclass
class Table:
    """The units' columns by row (index: row number), each unit's columns, the edges between units, the
    nodes the incident's tasks ran on, and which units are the app's own (its variables and regions)."""
    rows: pd.DataFrame
    units: dict[str, list[str]] = field(default_factory=dict)
    edges: list[tuple[str, str]] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    app_units: list[str] = field(default_factory=list)


class _Columns:
    """The columns gathered so far, by unit; a column without a value is left out."""

    def __init__(self):
        self.columns: dict[str, pd.Series] = {}
        self.units: dict[str, list[str]] = {}

    def add(self, unit: str, kind: str | None, values: pd.Series) -> None:
        """A column of `unit` named `unit/kind`, or the unit's own name without a kind (its only column)."""
        if len(values) and values.notna().any():
            name = unit if kind is None else f"{unit}{KIND}{kind}"
            self.columns[name] = values
            self.units.setdefault(unit, []).append(name)


def read(cur, scope: str, model, windows: Windows) -> Table:
    """The units of app `scope` (or of its tasks in one Slurm job) around an anomaly of its baseline `model`
    (a CausalModel), from the store."""
    (app, job), lo, hi = readers.tasks.app_and_job(scope), windows.baseline[0], windows.incident[1]
    got = _Columns()
    variables = _task_units(cur, app, job, model, windows, got)
    regions = _region_units(cur, app, windows, got)
    cpu = readers.tasks.task_cpu(cur, app, lo, hi, job=job)
    cpu = cpu.assign(row=windows.rows(cpu["t_start"])).dropna(subset=["row"])
    nodes = sorted(set(cpu.loc[cpu["row"] >= 0, "node"]))
    others = [n for n in readers.samples.sampled_nodes(cur) if n not in nodes][:MAX_OTHER_NODES]
    samples = readers.samples.series_between(cur, lo - 2 * windows.width, hi, METRICS, PATTERNS, nodes + others)
    samples = _with_rates(samples, windows)
    edges = [(e.dst, e.src) for e in model.edges() if e.directed and e.src in variables and e.dst in variables]
    if "duration" in variables:
        edges += [("duration", r) for r in regions]
    app_units = variables + regions
    for node in nodes + others:
        own = samples[samples["node"] == node]
        app_cpu = cpu[cpu["node"] == node].groupby("row")["cpu_seconds"].sum() / windows.width
        machine = _node_units(node, own[own["scope"] == "node"], app_cpu, got)
        if node not in nodes:
            continue
        beside = _process_units(node, own[own["scope"] == "node"], windows, got) + _watched_units(node, own, got)
        edges += [(m, b) for m in machine for b in beside] + [(a, u) for a in app_units for u in machine + beside]
    known = set(got.units)
    return Table(pd.DataFrame(got.columns).sort_index(), got.units,
                 sorted({(a, b) for a, b in edges if a in known and b in known}), nodes, app_units)


def _task_units(cur, app: str, job: str | None, model, windows: Windows, got: _Columns) -> list[str]:
    """The model's numeric variables, each its unit: the median in each row of the tasks started in it,
    each task's value at the baseline's typical causes (`at_typical_causes`)."""
    df, params, counters = readers.tasks.task_df(cur, app, started=(windows.baseline[0], windows.incident[1]), job=job)
    if df.empty:
        return []
    df, _ = features.name_task_columns(df, params, counters)
    rows = windows.rows(df["t_start"])
    base = df[(rows < 0)]
    variables = [v for v in model.nodes if v in df.columns and v not in model.discrete
                 and pd.api.types.is_numeric_dtype(df[v])]
    for v in variables:
        parents = sorted(e.src for e in model.edges() if e.directed and e.dst == v and e.src in df.columns)
        got.add(v, None, at_typical_causes(df, base, v, parents, model.discrete).groupby(rows).median())
    return [v for v in variables if v in got.units]


def at_typical_causes(df: pd.DataFrame, base: pd.DataFrame, v: str, parents: list[str], discrete) -> pd.Series:
    """`v` of each row less what its `parents` explain of it where they depart from the `base` rows' typical
    values (numeric: the median; discrete: a level's own offset), by least squares on `base`; `v` as it is
    without parents, or with too few complete base rows to fit them."""
    if not parents:
        return df[v].astype(float)
    def design(rows: pd.DataFrame) -> pd.DataFrame:
        levels = [p for p in parents if p in discrete]
        numeric = rows[[p for p in parents if p not in discrete]].astype(float)
        if not levels:
            return numeric
        return pd.concat([numeric, pd.get_dummies(rows[levels].astype(str), dtype=float)], axis=1)
    fit = design(base).assign(_y=base[v].astype(float)).dropna()
    if len(fit) < fit.shape[1] + 3:
        return df[v].astype(float)
    x, typical = fit.drop(columns="_y"), fit.drop(columns="_y").median()
    beta, *_ = np.linalg.lstsq(np.column_stack([np.ones(len(x)), x - typical]), fit["_y"].to_numpy(), rcond=None)
    departures = design(df).reindex(columns=x.columns, fill_value=0.0) - typical
    return df[v].astype(float) - departures.to_numpy() @ beta[1:]


def _region_units(cur, app: str, windows: Windows, got: _Columns) -> list[str]:
    """The app's longest regions, each its unit: seconds and CPU seconds per call in each row."""
    df = readers.regions.region_rows(cur, app, windows.baseline[0], windows.incident[1])
    df = df.assign(row=windows.rows(df["t_start"])).dropna(subset=["row"])
    names = df.groupby("region")["duration"].sum().sort_values(ascending=False).index[:MAX_REGIONS]
    units = []
    for name in sorted(names):
        sums = df[df["region"] == name].groupby("row")[["duration", "calls", "cpu_seconds"]].sum()
        calls = sums["calls"].where(sums["calls"] > 0)
        unit = f"region {name}"
        got.add(unit, "duration_per_call", sums["duration"] / calls)
        got.add(unit, "cpu_seconds_per_call", sums["cpu_seconds"] / calls)
        units += [unit] if unit in got.units else []
    return units


def _with_rates(samples: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    """The samples with each one's row and its series' rate since the sample before (a counter's
    decrease, a restart, gives none)."""
    series = samples.groupby(["node", "scope", "metric"], sort=False)
    dv, dt = series["value"].diff(), series["ts"].diff()
    rate = (dv / dt).where((dt > 0) & (dv >= 0))
    return samples.assign(rate=rate, row=windows.rows(samples["ts"])).dropna(subset=["row"])


def _summed(samples: pd.DataFrame, metrics, how: str) -> pd.Series:
    """Per row, the sum over `metrics` (names) of each one's mean value (or rate) in the row."""
    picked = samples[samples["metric"].isin(metrics)]
    value = "rate" if how == "rate" else "value"
    return picked.groupby(["row", "metric"])[value].mean().groupby(level="row").sum(min_count=1)


def _terms(samples: pd.DataFrame, terms: tuple[Term, ...], how: str) -> pd.Series:
    """Per row, the sum over the series each term holds of their mean value (or rate) in the row, each
    times its term's sign; NaN in a row without any."""
    out = None
    for term in terms:
        names = [m for m in samples["metric"].unique() if term.holds(*wire.unlabelled(m))]
        part = _summed(samples, names, how) * term.sign
        out = part if out is None else out.add(part, fill_value=0.0) if len(part) else out
    return pd.Series(dtype=float) if out is None else out


def _node_units(node: str, samples: pd.DataFrame, app_cpu: pd.Series, got: _Columns) -> list[str]:
    units = []
    for name, kinds in NODE.items():
        unit = f"node {node}: {name}"
        for kind, (terms, how) in kinds.items():
            values = _terms(samples, terms, how)
            if kind == "cpu_other_cores":
                values = values - app_cpu.reindex(values.index).fillna(0.0)
            got.add(unit, kind, values)
        units += [unit] if unit in got.units else []
    return units


def _process_units(node: str, samples: pd.DataFrame, windows: Windows, got: _Columns) -> list[str]:
    """The node's busiest other processes, each its unit: CPU seconds per second, 0 in a row the agent
    looked at and did not find it among them."""
    top = samples[samples["metric"].str.startswith(TOP_PROCESS + ".")]
    if top.empty:
        return []
    wide = _over_looks(top.pivot_table(index="ts", columns="metric", values="value", aggfunc="mean").fillna(0.0),
                       windows)
    busiest = wide[wide.index >= 0].mean().sort_values(ascending=False).index[:MAX_PROCESSES]
    units = []
    for metric in sorted(busiest):
        unit = f"process {wire.unlabelled(metric)[1].get('command', metric)} on {node}"
        got.add(unit, "cpu_cores", wide[metric])
        units.append(unit)
    return units


def _over_looks(looks: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    """Values by look time (each the mean since the look before, the agent's interval apart) as rows:
    each row the mean of the looks whose spans it overlaps, so a look every few seconds fills rows
    narrower than that."""
    times = looks.index.to_numpy(dtype=float)
    gap = float(np.median(np.diff(times))) if len(times) > 1 else windows.width
    first = np.floor((times - gap - windows.incident[0]) / windows.width) + 1
    last = np.floor((times - windows.incident[0]) / windows.width)
    spans = [(i, r) for i, (a, b) in enumerate(zip(first, last)) for r in np.arange(min(a, b), b + 1)]
    centres = windows.incident[0] + (np.array([r for _, r in spans]) + 0.5) * windows.width
    inside = ~np.isnan(windows.rows(centres))
    picked = [(i, r) for (i, r), keep in zip(spans, inside) if keep]
    rows = looks.iloc[[i for i, _ in picked]].set_axis([r for _, r in picked])
    return rows.groupby(level=0).mean()


def _watched_units(node: str, samples: pd.DataFrame, got: _Columns) -> list[str]:
    """The scopes the node's agent watches (a launched command, a process, a cgroup, the units it follows),
    each its unit: the busiest MAX_SCOPES by CPU in the incident."""
    columns = {}
    for scope in set(samples["scope"]) - {"node"}:
        own = samples[samples["scope"] == scope]
        for kind, (alternatives, how) in WATCHED.items():
            metrics = next((ms for ms in alternatives if own["metric"].isin(ms).any()), ())
            columns.setdefault(scope, {})[kind] = _summed(own, metrics, how)
    def busy(scope):
        cpu = columns[scope]["cpu_cores"]
        return -float(cpu[cpu.index >= 0].mean()) if (cpu.index >= 0).any() else 0.0
    units = []
    for scope in sorted(sorted(columns), key=busy)[:MAX_SCOPES]:
        unit = f"{scope} on {node}"
        for kind, values in columns[scope].items():
            got.add(unit, kind, values)
        units += [unit] if unit in got.units else []
    return units
