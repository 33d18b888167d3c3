"""`causewatch diagnose`'s store form: the two windows read from a daemon's store by time range (`--db`
or `--daemon`), through the verbs any data command asks, and pivoted into the frames the ranking takes:
one row a step, one unit per node and scope (a node's own metrics, a command's) and per app (its task
variables), one column a metric.

Columns are `NODE:METRIC` (scope node), `NODE/SCOPE:METRIC` (another scope) and `app:APP:VARIABLE`
(duration, cpu_seconds and the counters of the app's tasks that started in each step, averaged); a
task's params are its inputs, not its unit's behaviour, and are left out.
"""

from __future__ import annotations

import math

from causewatch.daemon import verbs
from causewatch.errors import InputError

TASK_VARIABLES = ("duration", "cpu_seconds")


def window(text: str, option: str) -> tuple[float, float]:
    """START,END in seconds since the epoch, START before END."""
    try:
        start, end = (float(x) for x in text.split(","))
    except ValueError:
        raise InputError(f"{option} {text!r}: expected START,END in seconds since the epoch") from None
    if not (math.isfinite(start) and math.isfinite(end)) or start >= end:
        raise InputError(f"{option} {text!r}: START must be before END")
    return start, end


def sample_unit(node: str, scope: str) -> str:
    return node if scope == "node" else f"{node}/{scope}"


def _samples(source, span, step: float, scope: str | None):
    """(t, column) -> value of every stored series in the window, each step's mean; column -> unit."""
    df = source.read(verbs.RANGE, metric=None, node=None, scope=scope, start=span[0], end=span[1], step=step,
                     window=None, fn="avg", agg=None, by=None)
    if df.empty:
        return df, {}
    units = [sample_unit(n, s) for n, s in zip(df["node"], df["scope"])]
    df = df.assign(column=[f"{u}:{m}" for u, m in zip(units, df["metric"])])
    owners = dict(zip(df["column"], units))
    return df.pivot_table(index="t", columns="column", values="value", aggfunc="mean"), owners


def _tasks(source, app: str, span, step: float):
    """(t, column) -> the mean of each task variable over the tasks that started in each step."""
    import numpy as np
    df = source.read(verbs.TASKS, app=app, limit=None)
    counters = df.attrs.get("counters", {})
    df = df[(df["t_start"] > span[0] - step) & (df["t_start"] <= span[1])]
    if df.empty:
        return df, {}
    values = df[[*TASK_VARIABLES, *counters]].rename(columns=counters).apply(lambda c: c.astype(float))
    values.columns = [f"app:{app}:{c}" for c in values.columns]
    t = span[0] + np.ceil((df["t_start"].to_numpy(dtype=float) - span[0]) / step) * step
    grouped = values.groupby(t).mean()
    grouped.index.name = "t"
    return grouped, {c: f"app:{app}" for c in grouped.columns}


def _apps(source, scope: str | None) -> list[str]:
    if scope is not None and not scope.startswith("app:"):
        return []
    apps = [r["app"] for r in source.read(verbs.TASK_APPS)]
    return [a for a in apps if scope is None or f"app:{a}" == scope]


def window_frame(source, span, step: float, scope: str | None):
    """The window's frame (a row a step) and unit -> its columns."""
    import pandas as pd
    sample_scope = None if scope is None or scope.startswith("app:") else scope
    parts = [_samples(source, span, step, sample_scope)] + [_tasks(source, a, span, step) for a in _apps(source, scope)]
    parts = [part for part in parts if len(part[1])]
    if not parts:
        return pd.DataFrame(), {}
    frame = pd.concat([df for df, _ in parts], axis=1).sort_index()
    units: dict[str, list[str]] = {}
    for _, owners in parts:
        for column, unit in owners.items():
            units.setdefault(unit, []).append(column)
    return frame, units


def store_windows(args):
    """(baseline, incident, units) read from the store: both frames with the union of their columns."""
    from causewatch.commands.source import open_source
    spans = window(args.baseline_window, "--baseline-window"), window(args.incident_window, "--incident-window")
    if args.step <= 0:
        raise InputError(f"--step {args.step}: expected a positive number of seconds")
    with open_source(args) as source:
        (base, base_units), (inc, inc_units) = (window_frame(source, s, args.step, args.scope) for s in spans)
    for name, frame, span in (("baseline", base, spans[0]), ("incident", inc, spans[1])):
        if frame.empty:
            scope = f" of scope {args.scope}" if args.scope else ""
            raise InputError(f"--{name}-window {span[0]:g},{span[1]:g}: the store holds no samples or tasks{scope} "
                             "in that range")
    columns = list(dict.fromkeys([*base.columns, *inc.columns]))
    units = {u: list(dict.fromkeys(base_units.get(u, []) + inc_units.get(u, [])))
             for u in dict.fromkeys([*base_units, *inc_units])}
    return base.reindex(columns=columns), inc.reindex(columns=columns), units
