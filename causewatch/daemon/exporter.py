"""The daemon's exporter: everything /metrics serves, kept in memory (a scrape never touches DuckDB).

Ingest counters are fixed series; the agents' newest sample values are node metrics (NodeState);
each analysis job publishes its gauges as one snapshot, swapped in whole at the end of its run
(Snapshots), so a scrape never sees a half-updated set. `render` gives the exposition in the format a
scrape asks for, using client_python's content negotiation and encoders.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, UntypedMetricFamily
from prometheus_client.exposition import choose_encoder

from causewatch import wire
from causewatch.daemon import gpu_families, node_families, node_metrics
from causewatch.daemon.unit_series import UnitSeries

# An agent metric name `base[.cpuN]` (perf's per-CPU counts): the CPU is a label, not in the name.
_PER_CPU = re.compile(r"^(?P<base>.+)\.cpu(?P<cpu>\d+)$")
_THEIRS = ("node_", "DCGM_FI_")   # node_exporter's and DCGM-exporter's names, exported as they are
EOF = b"# EOF\n"   # OpenMetrics' closing line: one per exposition


def gauge_family(name: str, help: str, labels: Sequence[str],
                 series: Iterable[tuple[Mapping[str, str], float]]) -> GaugeMetricFamily:
    """A gauge with one sample per (label values by name, value)."""
    family = GaugeMetricFamily(name, help, labels=list(labels))
    for values, value in series:
        family.add_metric([str(values[k]) for k in labels], float(value))
    return family


class Snapshots:
    """Each publisher's families from its latest complete run, rendered once per exposition format: a
    job publishes once per run, a scrape may come many times, and rendering many series costs CPU
    while holding the daemon's GIL beside ingest (docs/perf-log.md, "job snapshots rendered once")."""

    def __init__(self):
        # (families by publisher, their rendering by content type): replaced whole by a publish, so a
        # scrape that read the old state renders into a dict nobody reads again
        self._state: tuple[dict[str, tuple[Metric, ...]], dict[str, bytes]] = ({}, {})

    def publish(self, publisher: str, families: Iterable[Metric]) -> None:
        self._state = ({**self._state[0], publisher: tuple(families)}, {})

    def collect(self) -> Iterable[Metric]:
        for families in self._state[0].values():
            yield from families

    def rendered(self, encoder, ctype: str) -> bytes:
        """Every publisher's families as `encoder` renders them (OpenMetrics' closing line left off)."""
        published, rendered = self._state
        if ctype not in rendered:
            families = tuple(f for fs in published.values() for f in fs)
            rendered[ctype] = encoder(_Fixed(families)).removesuffix(EOF)
        return rendered[ctype]


class _Fixed:
    """A collector of families known in advance."""

    def __init__(self, families: tuple[Metric, ...]):
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return iter(self.families)


def node_series(metric: str) -> tuple[str, dict[str, str]]:
    """An agent metric name as (exported name, extra labels): a labelled name (`wire.labelled`) gives
    its labels, and one under node_exporter's or DCGM-exporter's names (`node_...`, `DCGM_FI_...`) is
    exported as it is, as is one a node's textfile gave (`wire.TEXTFILE` stripped); `cycles.cpu3` is
    causewatch_cycles_total{cpu="3"}, a cumulative perf count gaining _total (node_metrics.exported); a
    name's other parts stay as they are."""
    metric, labels = wire.unlabelled(metric)
    if metric.startswith(_THEIRS):
        return metric, labels
    if metric.startswith(wire.TEXTFILE):
        return metric.removeprefix(wire.TEXTFILE), labels
    m = _PER_CPU.match(metric)
    if m:
        metric, labels["cpu"] = m["base"], m["cpu"]
    return "causewatch_" + node_metrics.exported(metric), labels


# One entry per (node, scope) a site has: at 10,000 agents a cache of 4,096 was swept round-robin and
# missed every frame (50 names worked out again per frame: a fifth of the daemon's GIL). The keys it
# holds are the very objects NodeState's values are keyed by, so an entry costs its outer tuple.
@functools.lru_cache(maxsize=1 << 17)
def _series_keys(node: str, scope: str, names: tuple[str, ...]) -> tuple[tuple[str, tuple], ...]:
    """The (exported name, sorted labels) of each metric a node's frames carry: an agent sends the same
    names frame after frame, so they are worked out once, not per value."""
    keys = []
    for metric in names:
        name, labels = node_series(metric)
        labels.update(node=node, scope=scope)
        keys.append((name, tuple(sorted(labels.items()))))
    return tuple(keys)


def _newest_values(rows: dict) -> dict[tuple[str, tuple], float]:
    """(exported name, sorted label items) -> the newest value of each series (NaN: a null); a series
    in several name lists of one node takes the most recently updated."""
    values = {}
    for (node, scope, names), (raw, nulls) in rows.items():
        last = np.frombuffer(raw, "<f8")
        if nulls is not None:
            last = np.where(np.frombuffer(nulls, np.uint8) != 0, np.nan, last)
        values.update(zip(_series_keys(node, scope, names), last.tolist()))
    return values


def _unit_values(rows: dict, units: dict[tuple[str, str], dict]) -> dict[tuple[str, tuple], float]:
    """As `_newest_values`, for the rows of running units: labelled by their records, not their scope."""
    values = {}
    for (node, scope, names), (raw, nulls) in rows.items():
        last = np.frombuffer(raw, "<f8")
        if nulls is not None:
            last = np.where(np.frombuffer(nulls, np.uint8) != 0, np.nan, last)
        for metric, value in zip(names, last.tolist()):
            name, labels = node_series(metric)
            values[(name, tuple(sorted({**units[(node, scope)], **labels}.items())))] = value
    return values


class NodeState:
    """A custom collector of what the agents sent last: each metric's newest value per (node, scope,
    labels) while the agent still sends it, when each node's newest frame was stored, and frames stored
    per node. Updated by the writer thread after each commit; a scrape copies it under a lock."""

    def __init__(self, clock=time.time, shard: str = ""):
        """`shard`: this daemon's shard name, a `shard` label on every node series (several shards'
        nodes meet in one Prometheus; "" = none, a lone daemon's series as before)."""
        self.clock, self.shard = clock, shard
        self._lock = threading.Lock()
        # (node, scope, names) -> the newest row's value bytes and null flags, oldest update first: a
        # frame costs a slice of its bytes, and a scrape works the rows out into series (per frame, 50
        # values into series keys had been a twelfth of the writer's CPU on the agent's 5 x 50 frames)
        self._rows: dict[tuple[str, str, tuple[str, ...]], tuple[bytes, bytes | None]] = {}
        self._lists: dict[tuple[str, str], list[tuple[str, ...]]] = {}   # (node, scope) -> its rows' names
        self._last_seen: dict[str, float] = {}
        self._frames: dict[str, int] = {}
        self.units = UnitSeries()
        self._unit_rows: dict[tuple[str, str], set] = {}   # (node, unit) -> its keys in _rows

    def observe(self, frames: Iterable[wire.Frame]) -> None:
        now, newest = self.clock(), {}
        changes = self.units.changes(frames)
        for f in frames:
            self._frames[f.node] = self._frames.get(f.node, 0) + 1
            self._last_seen[f.node] = now
            if f.type == "samples" and len(f.body["t"]):
                newest[(f.node, f.body["scope"], tuple(f.body["names"]))] = f.body   # a batch's last frame
            elif f.type == "unit" and f.body["event"] == "end":   # its samples before its end go with it
                newest = {k: b for k, b in newest.items() if (k[0], k[1]) != (f.node, f.body["unit"])}
        with self._lock:
            self.units.apply(changes)
            for unit in (k for k, body in changes.items() if body is None):
                for key in self._unit_rows.pop(unit, ()):
                    self._rows.pop(key, None)
            for key, body in newest.items():
                if (key[0], key[1]) in self.units.ended:
                    continue
                if wire.unit_kind(key[1]):
                    self._unit_rows.setdefault((key[0], key[1]), set()).add(key)
                width, nulls = len(key[2]), body.get("nulls")
                if self._rows.pop(key, None) is None:
                    self._replace(key)
                self._rows[key] = (body["values"][-8 * width:], nulls[-width:] if nulls else None)

    def _replace(self, key: tuple[str, str, tuple[str, ...]]) -> None:
        """A name list new to its (node, scope) replaces the earlier lists that share a name with it: a
        series the agent sends no more (a device or a mount gone) leaves, as from node_exporter's next
        scrape. Lists that share none are other batches (a slower collector's, the target's counters)."""
        node, scope, names = key
        new = set(names)
        lists = self._lists.setdefault((node, scope), [])
        for old in [old for old in lists if not new.isdisjoint(old)]:
            lists.remove(old)
            del self._rows[(node, scope, old)]
        lists.append(names)

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            rows, seen, frames = dict(self._rows), dict(self._last_seen), dict(self._frames)
            units = {key: self.units.labels(*key) for key in self._unit_rows}
            running = dict(self.units.running)
        unit_rows = {k: rows.pop(k) for k in [k for k in rows if (k[0], k[1]) in units]}
        values = {**_newest_values(rows), **_unit_values(unit_rows, units)}
        shard = {"shard": self.shard} if self.shard else {}
        yield from self.units.families(running, shard)
        yield gauge_family("causewatch_agent_last_seen_timestamp_seconds", "When the daemon stored the node's "
                           "newest frame, unix seconds", ["node", *shard],
                           (({"node": n, **shard}, t) for n, t in seen.items()))
        stored = CounterMetricFamily("causewatch_node_frames_stored", "Frames stored per node",
                                     labels=["node", *shard])
        for n, count in frames.items():
            stored.add_metric([n, *shard.values()], count)
        yield stored
        by_name: dict[str, list] = {}
        # an all-CPU value beside the per-CPU ones of the same series would be counted twice by a sum
        # (3.99 busy CPUs had been shown on a 2-core node): node_exporter exports per CPU only
        per_cpu = {(name, tuple(kv for kv in labels if kv[0] != "cpu")) for name, labels in values
                   if any(k == "cpu" for k, _ in labels)}
        for (name, labels), value in values.items():
            if value == value and (name, labels) not in per_cpu:   # nor a null sample (NaN)
                by_name.setdefault(name, []).append(({**dict(labels), **shard}, value))
        for name, series in sorted(by_name.items()):
            keys = sorted({k for labels, _ in series for k in labels})
            kind, help = (node_families.describe(name) if name.startswith("node_")
                          else gpu_families.describe(name) if name.startswith("DCGM_FI_")
                          else node_metrics.describe(name.removeprefix("causewatch_")) if name.startswith("causewatch_")
                          else node_families.describe_textfile(name))
            family = (CounterMetricFamily(name.removesuffix("_total"), help, labels=keys) if kind == "counter"
                      else UntypedMetricFamily(name, help, labels=keys) if kind == "untyped"
                      else GaugeMetricFamily(name, help, labels=keys))
            for labels, value in series:
                family.add_metric([labels.get(k, "") for k in keys], value)
            yield family


class Restricted:
    """The series of `collectors` whose sample names are in `names` (what `/metrics?name[]=` asks for).
    A registry's own restricted_registry finds collectors by the names they describe, and NodeState's
    and the jobs' names are only known when they collect."""

    def __init__(self, collectors: Iterable, names: Iterable[str]):
        self.collectors, self.names = tuple(collectors), set(names)

    def collect(self) -> Iterable[Metric]:
        for metric in (m for c in self.collectors for m in c.collect()):
            samples = [s for s in metric.samples if s.name in self.names]
            if samples:
                kept = Metric(metric.name, metric.documentation, metric.type, metric.unit)
                kept.samples = samples
                yield kept


class Exporter:
    """Every series /metrics serves: ingest's counters and the agents' newest values (NodeState) in
    `registry`, and the jobs' snapshots."""

    def __init__(self, shard: str = ""):
        self.registry = CollectorRegistry()
        r = self.registry
        self.frames_received = Counter("causewatch_frames_received", "Frames decoded, by type", ["type"], registry=r)
        self.frames_stored = Counter("causewatch_frames_stored", "Frames committed to DuckDB, by type", ["type"],
                                     registry=r)
        self.frames_duplicate = Counter("causewatch_frames_duplicate", "Resent frames recognised as already stored",
                                        registry=r)
        self.frames_refused = Counter("causewatch_frames_refused", "Frames refused with a nack, by reason",
                                      ["reason"], registry=r)
        self.values_stored = Counter("causewatch_sample_values_stored", "Metric values committed", registry=r)
        self.store_errors = Counter("causewatch_store_errors", "Batches whose commit failed", registry=r)
        # `analysis`, not `job`: Prometheus sets `job` on every scraped series itself.
        self.job_errors = Counter("causewatch_job_errors", "Analysis job runs that raised, by analysis",
                                  ["analysis"], registry=r)
        self.job_runs = Counter("causewatch_job_runs", "Analysis job runs finished, raised or not, by analysis",
                                ["analysis"], registry=r)
        self.job_lag = Gauge("causewatch_job_lag_seconds", "Seconds the latest run of an analysis job started "
                             "after it was due, by analysis (0 while it keeps up)", ["analysis"], registry=r)
        self.job_overruns = Counter("causewatch_job_overruns", "Analysis job runs that ended after the next run "
                                    "was due (its missed intervals skipped), by analysis", ["analysis"], registry=r)
        self.commit_seconds = Counter("causewatch_commit_seconds", "Time spent committing batches", registry=r)
        # at the batch bounds the writer is what limits ingest; near 1 each frame pays a whole commit
        self.commit_frames = Histogram("causewatch_commit_frames", "Frames per committed batch", registry=r,
                                       buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, float("inf")))
        self.agents_connected = Gauge("causewatch_agents_connected", "Agent connections heard from in the last 30 s",
                                      registry=r)
        self.credit_share_bytes = Gauge("causewatch_credit_share_bytes", "Bytes each agent may have unacked now: "
                                        "max_in_flight_bytes shared among the connections", registry=r)
        self.snapshots = Snapshots()
        self.nodes = NodeState(shard=shard)
        r.register(self.nodes)

    def publish(self, publisher: str, families: Iterable[Metric]) -> None:
        """Replace every gauge `publisher` exported before with `families` (its complete new state)."""
        self.snapshots.publish(publisher, families)

    def render(self, accept: str | None = None, names: list[str] | None = None) -> tuple[bytes, str]:
        """(exposition, content type) in the format `accept` asks for, as client_python's make_wsgi_app
        chooses it (text, or OpenMetrics): the registry rendered now, the jobs' snapshots as rendered
        once since they were published; with `names`, only those series."""
        encoder, ctype = choose_encoder(accept)
        if names:
            return encoder(Restricted((self.registry, self.snapshots), names)), ctype
        live = encoder(self.registry)
        ending = EOF if live.endswith(EOF) else b""
        return live.removesuffix(EOF) + self.snapshots.rendered(encoder, ctype) + ending, ctype

    def exposition(self) -> bytes:
        """The exposition in Prometheus' text format (what a plain scrape of /metrics gets)."""
        return self.render()[0]
