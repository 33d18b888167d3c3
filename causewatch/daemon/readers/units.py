"""The units the agents follow (jobs, steps, services, containers, pods), from their `units` rows and, where
a unit's end brought no totals (it runs, or ended while its agent was down), from its newest samples or,
once retention deleted them, from the summary it kept of them (`unit_summaries`): the listing of
`causewatch jobs` and the efficiency report of `causewatch job ID`.
"""

from __future__ import annotations

import json
import time

from causewatch.analytics.phases import phase_mix
from causewatch.daemon.cursor import Cursor
from causewatch.daemon.readers import shared
from causewatch.daemon.readers.phases import bbv_rows
from causewatch.daemon.store import units as store_units

# What a report reads of a unit's counters: the figure's name and the agent's metric
FIGURES = {"cpu_seconds": "unit_cpu_seconds_total", "cpu_user_seconds": "unit_cpu_user_seconds_total",
           "cpu_system_seconds": "unit_cpu_system_seconds_total",
           "cpu_throttled_seconds": "unit_cpu_throttled_seconds_total",
           "memory_peak_bytes": "unit_memory_peak_bytes", "oom_kills": "unit_memory_oom_kills_total",
           "io_read_bytes": "unit_io_read_bytes_total", "io_written_bytes": "unit_io_written_bytes_total",
           "io_reads": "unit_io_reads_total", "io_writes": "unit_io_writes_total"}
PRESSURE = {"cpu_waiting": "unit_pressure_cpu_waiting_seconds_total",
            "memory_waiting": "unit_pressure_memory_waiting_seconds_total",
            "memory_stalled": "unit_pressure_memory_stalled_seconds_total",
            "io_waiting": "unit_pressure_io_waiting_seconds_total",
            "io_stalled": "unit_pressure_io_stalled_seconds_total"}
PERF = "unit_perf_"   # a unit's perf events in cgroup mode: unit_perf_EVENT_total and its _running_ratio
_METRICS = (*FIGURES.values(), *PRESSURE.values(), "unit_memory_bytes")
_COLUMNS = ("node, unit, kind, job_id, step, parent, uid, user, job_name, started, ended, cpus, cpuset, memory_bytes, "
            "gpus, source, counted, totals, extra")


def units(con: Cursor, kind: str | None = None, users=None, nodes=None, state: str = "all", since: float | None = None,
          job_id: str | None = None, limit: int | None = None) -> list[dict]:
    """The units rows, newest start first: of `kind` (any: None), these users and nodes, `state` running,
    finished or all, running at or after `since`, of this Slurm job."""
    where, params = ["TRUE"], []
    for column, values in (("kind", [kind] if kind else None), ("user", users), ("node", nodes),
                           ("job_id", [job_id] if job_id else None)):
        if values:
            where.append(f"{column} IN ({', '.join('?' * len(values))})")
            params += list(values)
    if state != "all":
        where.append("ended IS NULL" if state == "running" else "ended IS NOT NULL")
    if since is not None:
        where.append("coalesce(ended, ?) >= ?")
        params += [time.time(), since]
    rows = shared.records(con.execute(f"SELECT {_COLUMNS} FROM units WHERE {' AND '.join(where)} "
                                      "ORDER BY started DESC, node, unit LIMIT ?", [*params, limit]))
    for r in rows:
        for column in ("counted", "totals", "extra"):
            r[column] = json.loads(r[column]) if r[column] else {}
    return rows


def newest(con: Cursor, rows: list[dict]) -> dict[tuple[str, str], dict[str, float]]:
    """(node, unit) -> {metric: newest value} of these units' samples, with `unit_memory_bytes_high` the
    highest memory sampled and `counted_from` "samples", or, once retention deleted them, the same of
    the summary it kept ("summary"); in two queries for all of them."""
    scopes = [r["unit"] for r in rows]
    now, kept = store_units.sampled(con, scopes), store_units.summaries(con, scopes)
    out: dict[tuple[str, str], dict[str, float]] = {}
    for key in {*now, *kept}:
        figures = store_units.merged(kept.get(key, {}), now.get(key, {}))
        values = out[key] = {m: v for m, (v, _) in figures.items() if m in _METRICS or m.startswith(PERF)}
        if "unit_memory_bytes" in figures:
            values["unit_memory_bytes_high"] = figures["unit_memory_bytes"][1]
        values["counted_from"] = "samples" if key in now else "summary"
    return out


def _ratio(a, b) -> float | None:
    return a / b if a is not None and b else None


def figures(row: dict, sampled: dict[str, float], now: float) -> dict:
    """A unit's efficiency: its counters (the end's totals, else the newest samples) against its
    allocation and its elapsed time."""
    values = row["totals"] or sampled
    elapsed = max(0.0, (row["ended"] or now) - row["started"])
    out = {"state": "running" if row["ended"] is None else "finished", "elapsed_seconds": elapsed,
           "counted_from": "totals" if row["totals"] else sampled.get("counted_from")}
    out.update({name: values.get(metric) for name, metric in FIGURES.items()})
    if out["memory_peak_bytes"] is None:
        out["memory_peak_bytes"] = sampled.get("unit_memory_bytes_high")
    out["cpu_efficiency"] = _ratio(out["cpu_seconds"], (row["cpus"] or 0) * elapsed)
    out["memory_efficiency"] = _ratio(out["memory_peak_bytes"], row["memory_bytes"])
    out["counters"] = perf_counters(values)
    out["pressure"] = {name: {"seconds": values.get(metric), "share": _ratio(values.get(metric), elapsed)}
                       for name, metric in PRESSURE.items() if values.get(metric) is not None}
    return out


def perf_counters(values: dict) -> dict:
    """{event: {count, running_ratio}} of a unit's perf events (the ratio: the share of its time counted)."""
    events = [m[len(PERF):-len("_total")] for m in values if m.startswith(PERF) and m.endswith("_total")]
    return {e: {"count": values[f"{PERF}{e}_total"], "running_ratio": values.get(f"{PERF}{e}_running_ratio")}
            for e in sorted(events)}


def listing(con: Cursor, kind: str, users, nodes, state: str, since: float | None, limit: int | None) -> list[dict]:
    """`causewatch jobs`: each unit with its owner, allocation and efficiency so far."""
    rows = units(con, kind, users, nodes, state, since, limit=limit)
    sampled, now = newest(con, [r for r in rows if not r["totals"]]), time.time()
    keep = ("node", "unit", "kind", "job_id", "step", "user", "uid", "job_name", "started", "ended", "cpus",
            "memory_bytes", "gpus", "source")
    out = []
    for r in rows:
        f = figures(r, sampled.get((r["node"], r["unit"]), {}), now)
        out.append({**{k: r[k] for k in keep}, **{k: f[k] for k in ("state", "elapsed_seconds", "cpu_seconds",
                                                                    "cpu_efficiency", "memory_peak_bytes",
                                                                    "memory_efficiency")}})
    return out


def anomalies_during(con: Cursor, job_id: str, start: float, end: float) -> list[dict]:
    """The dependency anomalies of the job's own scopes (its tasks' as the causal job learnt them), then
    those of every scope not a job's open at some time between `start` and `end`."""
    return shared.records(con.execute(
        "SELECT anomaly_id, scope, kind, src, dst, opened, resolved, score, threshold FROM anomalies "
        "WHERE ends_with(scope, ?) OR scope NOT LIKE '%@job:%' AND opened <= ? AND coalesce(resolved, ?) >= ? "
        "ORDER BY NOT ends_with(scope, ?), opened", [f"@job:{job_id}", end, end, start, f"@job:{job_id}"]))


def phases(vectors, row: dict, now: float) -> list[dict]:
    """A job's phase mix on the node of its `row`, from its stored native vectors (`vectors`, long form) of
    that node while it ran (a requeued job runs again under its id): each phase's weight, intervals and top
    functions, heaviest first; [] without vectors."""
    ran = (vectors.node == row["node"]) & vectors.t_start.between(row["started"], row["ended"] or now)
    return phase_mix(vectors[ran])


def report(con: Cursor, job_id: str, nodes=None) -> list[dict]:
    """`causewatch job ID`: the job's report on each node it ran on (newest start first): owner,
    allocation, efficiency, I/O, pressure, its phases, its steps, the anomalies during it. [] when no agent
    saw it."""
    rows = units(con, "job", nodes=nodes, job_id=job_id)
    steps = units(con, "step", nodes=nodes, job_id=job_id)
    sampled, now = newest(con, [r for r in rows + steps if not r["totals"]]), time.time()
    vectors = bbv_rows(con, f"job:{job_id}", "native")
    out = []
    for r in rows:
        f = figures(r, sampled.get((r["node"], r["unit"]), {}), now)
        mine = [s for s in steps if s["node"] == r["node"] and s["started"] >= r["started"] - 60]
        out.append({**{k: v for k, v in r.items() if k != "totals"}, **f,
                    "steps": [{"unit": s["unit"], "step": s["step"], "started": s["started"], "ended": s["ended"],
                               **{k: v for k, v in figures(s, sampled.get((s["node"], s["unit"]), {}), now).items()
                                  if k in ("state", "elapsed_seconds", "cpu_seconds", "memory_peak_bytes",
                                           "counted_from")}}
                              for s in mine],
                    "phases": phases(vectors, r, now),
                    "anomalies": anomalies_during(con, job_id, r["started"], r["ended"] or now)})
    return out
