"""`causewatch diagnose`: rank the units that may have caused an incident, from a calm baseline window and
the incident's window of the same columns (analytics/rca), with each unit's evidence in words; the
windows are two files, or two time ranges of a daemon's store (commands/diagnose_store.py)."""

from __future__ import annotations

import json
import math
import shutil
import textwrap
from pathlib import Path
from types import SimpleNamespace

from causewatch.commands.source import add_source_arguments
from causewatch.errors import InputError

EPILOG = """examples:
  causewatch diagnose --baseline normal.csv --incident incident.csv
  causewatch diagnose --baseline normal.csv --incident incident.csv --target PetSite_latency_Average \\
      --graph edges.csv --units units.json --json
  causewatch diagnose --baseline duckdb:runs.duckdb:calm --incident duckdb:runs.duckdb:slow --top 5
  causewatch diagnose --db cw.duckdb --baseline-window 1767225600,1767229200 \
      --incident-window 1767229500,1767229800 --step 30 --target app:lu:duration

Each window is a .csv / .parquet file or duckdb:FILE:TABLE with the same columns (a first column named
time, timestamp or unix_timestamp is the rows' time, not a metric; an empty cell is no value).
--units names each unit's columns ({"unit": ["column", ...]}); without it the units are the --graph's
nodes (a column goes to the longest node name it starts with) or else each column alone. --graph is a
CSV with header src,dst: src calls dst, so a fault at dst shows at src. --target is the symptom's column.
A unit scoring 1 or more changed beyond the cut (robust z 4 in the symptom's kind); all below 1 means
nothing anomalous. With --json: {"causes": [{"unit", "score", "evidence"}, ...]} best first, every unit.

From a store (--db FILE, --daemon URL or --daemons), --baseline-window and --incident-window are
START,END in seconds since the epoch, read a row each --step seconds (each series' mean over the step):
a unit per node (columns NODE:METRIC), per node and scope (NODE/SCOPE:METRIC) and per app
(app:APP:VARIABLE, the mean of its tasks' duration, cpu_seconds and counters that started in the step);
--scope keeps one scope's samples, or with app:APP that app's tasks beside every node's samples.
"""

TIME_COLUMNS = ("time", "timestamp", "unix_timestamp")


def add_arguments(parser) -> None:
    parser.add_argument("--baseline", metavar="DATA", help="the calm window: CSV, Parquet or duckdb:FILE:TABLE")
    parser.add_argument("--incident", metavar="DATA", help="the incident's window, same columns")
    parser.add_argument("--baseline-window", metavar="START,END", help="the calm window as a time range of a "
                        "daemon's store (seconds since the epoch), instead of --baseline")
    parser.add_argument("--incident-window", metavar="START,END", help="the incident's time range, with "
                        "--baseline-window")
    add_source_arguments(parser)
    parser.add_argument("--scope", help="from a store: only this scope's units (node, cmd:NAME, app:APP)")
    parser.add_argument("--step", type=float, default=60.0, metavar="SECONDS",
                        help="from a store: seconds a row (default 60)")
    parser.add_argument("--target", metavar="COLUMN", help="the symptom's column (default: none; every kind alike)")
    parser.add_argument("--graph", metavar="EDGES.csv", help="call edges between units, header src,dst")
    parser.add_argument("--units", metavar="UNITS.json", help='{"unit": ["column", ...]}: the candidate units')
    parser.add_argument("--top", type=int, default=10, metavar="N",
                        help="rows of the table (default 10; --json lists every unit)")
    parser.add_argument("--json", action="store_true", help='print {"causes": [{"unit", "score", "evidence"}]}')


def read_window(spec: str, name: str):
    """A window's table from a file: a first time column becomes its index, not a metric; empty is refused."""
    from causewatch.commands.learn import load_df
    df = load_df(spec, SimpleNamespace(app=None, metric=None, bucket=None))
    first = df.columns[0] if len(df.columns) else None
    if first is not None and str(first).lower() in TIME_COLUMNS:
        df = df.set_index(first)
    df.columns = [str(c) for c in df.columns]
    if df.empty:
        raise InputError(f"--{name} {spec}: the window has no rows")
    return df


def _units(path: str | None) -> dict[str, list[str]] | None:
    if path is None:
        return None
    try:
        units = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"--units {path}: cannot read as JSON ({e})") from None
    if not isinstance(units, dict) or not all(isinstance(v, list) and all(isinstance(c, str) for c in v)
                                              for v in units.values()):
        raise InputError(f'--units {path}: expected {{"unit": ["column", ...]}}')
    return {str(u): cols for u, cols in units.items()}


def _edges(path: str | None) -> list[tuple[str, str]] | None:
    if path is None:
        return None
    import pandas as pd
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, ValueError) as e:
        raise InputError(f"--graph {path}: cannot read as CSV ({e})") from None
    if not {"src", "dst"} <= set(df.columns):
        raise InputError(f"--graph {path}: expected a header src,dst, found {','.join(map(str, df.columns))}")
    return list(zip(df["src"], df["dst"]))


def by_prefix(columns, nodes) -> dict[str, list[str]]:
    """node -> its columns, each column going to the longest node name it starts with; a column no node
    names is a unit of its own."""
    units: dict[str, list[str]] = {n: [] for n in nodes}
    longest = sorted(nodes, key=len, reverse=True)
    for col in columns:
        node = next((n for n in longest if col == n or col.startswith(n)), None)
        units.setdefault(node or col, []).append(col)
    return units


def resolve_units(columns, units, edges, graph_path) -> dict[str, list[str]]:
    """The candidate units; a graph naming a unit that is neither a unit nor a column prefix is refused."""
    nodes = sorted({n for e in edges for n in e}) if edges else []
    if units is None:
        return by_prefix(columns, nodes) if nodes else {c: [c] for c in columns}
    if not any(c in columns for cols in units.values() for c in cols):
        raise InputError("--units: no unit has a column of the windows")
    unknown = [n for n in nodes if n not in units and not any(c.startswith(n) for c in columns)]
    if unknown:
        raise InputError(f"--graph {graph_path}: names units that --units and the columns lack: "
                         f"{', '.join(unknown[:3])}" + (f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""))
    return units


def _windows(args):
    """(baseline, incident, units from the store or None) from the two files or the store's two ranges."""
    files, ranges = (args.baseline, args.incident), (args.baseline_window, args.incident_window)
    if all(files) and not any(ranges):
        return read_window(args.baseline, "baseline"), read_window(args.incident, "incident"), None
    if all(ranges) and not any(files):
        from causewatch.commands.diagnose_store import store_windows
        return store_windows(args)
    raise InputError("give the two windows as files (--baseline and --incident) or as a store's time ranges "
                     "(--baseline-window and --incident-window), one pair")


def diagnose(args) -> list:
    from causewatch.analytics.rca import CallGraph, RCAError, rank_causes
    baseline, incident, found = _windows(args)
    edges = _edges(args.graph)
    given = _units(args.units)
    units = resolve_units(list(baseline.columns), given if given is not None or found is None else found, edges,
                          args.graph)
    try:
        return rank_causes(baseline, incident, units, args.target, CallGraph(edges) if edges else None)
    except RCAError as e:
        raise InputError(str(e)) from None


def print_table(causes, top: int) -> None:
    width = max(60, shutil.get_terminal_size((120, 20)).columns)
    if not causes or causes[0].score < 1:
        print("nothing changed beyond the cut (every score below 1)")
    shown = causes[:top]
    name = max([len("unit")] + [len(c.unit) for c in shown])
    print(f"{'#':>3}  {'unit':<{name}}  {'score':>7}  evidence")
    for i, c in enumerate(shown, 1):
        lines = textwrap.wrap(c.evidence, max(30, width - name - 16)) or [""]
        score = f"{c.score:7.3f}" if math.isfinite(c.score) else f"{'-':>7}"
        print(f"{i:>3}  {c.unit:<{name}}  {score}  {lines[0]}")
        for line in lines[1:]:
            print(" " * (name + 16) + line)
    if len(causes) > top:
        print(f"({len(causes) - top} more units; --top N shows more, --json all)")


def run(args) -> int:
    causes = diagnose(args)
    if args.json:
        print(json.dumps({"causes": [c.as_dict() for c in causes]}, indent=1))
    else:
        print_table(causes, args.top)
    return 0
