"""Benchmark: a stored run's tasks replayed through the daemon's causal job, in the run's own time.

Reads a daemon's DuckDB file (a `bench/anomaly_live.py` run's folder holds one: `cw.duckdb`), copies
its task frames (ingest_log, tasks, regions) into a fresh store in steps of --interval seconds of their
receive time, and runs daemon/job_causal.CausalJob after each step with its clock at the step's end,
the job's CPU-seconds counted per run. What the live bench cannot separate, this does: whether the
models, the baseline and the anomalies come from the job's rules on these tasks, or from the job
having run late on a busy machine. The nodes' samples and units are not copied, so causes are ranked
over the app's own variables only.

Prints a line per model version (its rows, edges, the baseline) and per anomaly opened or resolved
(its score, threshold, the medians it moved between and the effect in sd), then the CPU-seconds per run (median, 90th
percentile, max) and the anomalies opened; --json prints them as JSON. Progress on stderr.

Usage: python bench/anomaly_replay.py DB [--app NAME] [--interval 5] [--until SECONDS]
       [--tested-rows N] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from causewatch.daemon.exporter import Exporter
from causewatch.daemon.job_causal import CausalJob
from causewatch.daemon.jobs import JobContext
from causewatch.daemon.store import Store

COPIED = ("ingest_log", "tasks", "regions")   # what the causal job reads of a run


def _copy(con, start: float, end: float) -> int:
    """The source's frames received in (start, end] into the store; their number of tasks."""
    con.execute("INSERT INTO ingest_log SELECT * FROM src.ingest_log WHERE received > ? AND received <= ?",
                [start, end])
    for table in COPIED[1:]:
        con.execute(f"INSERT INTO {table} SELECT t.* FROM src.{table} t JOIN src.ingest_log l USING (node, boot, seq) "
                    "WHERE l.received > ? AND l.received <= ?", [start, end])
    return con.execute("SELECT count(*) FROM src.tasks t JOIN src.ingest_log l USING (node, boot, seq) "
                       "WHERE l.received > ? AND l.received <= ?", [start, end]).fetchone()[0]


def _changes(cur, seen: dict) -> list[str]:
    """Lines for the model versions and the anomaly openings and resolutions not yet printed."""
    lines = []
    for model_id, n_rows, edges in cur.execute(
            "SELECT m.model_id, m.n_rows, count(e.src) FROM models m LEFT JOIN edges e USING (model_id) "
            "WHERE m.model_id > ? GROUP BY ALL ORDER BY 1", [seen["model"]]).fetchall():
        seen["model"] = model_id
        lines.append(f"model {model_id}: {n_rows} rows, {edges} edges")
    base = cur.execute("SELECT max(model_id) FROM baselines").fetchone()[0]
    if base != seen["baseline"]:
        seen["baseline"] = base
        lines.append(f"baseline: model {base}")
    for aid, kind, src, dst, resolved, score, threshold, before, newest, effect in cur.execute(
            "SELECT anomaly_id, kind, src, dst, resolved, score, threshold, evidence->>'before', "
            "evidence->>'newest', evidence->>'effect_sd' FROM anomalies ORDER BY 1").fetchall():
        if aid not in seen["opened"]:
            seen["opened"].add(aid)
            moved = "" if before is None else f", median {before} -> {newest}"
            moved += "" if effect is None else f", {effect} sd"
            lines.append(f"anomaly {aid} opened: {kind} {src} -> {dst} ({score:.3f} bits > {threshold:.3f}{moved})")
        if resolved is not None and aid not in seen["resolved"]:
            seen["resolved"].add(aid)
            lines.append(f"anomaly {aid} resolved")
    return lines


def replay(db: str, app: str | None, interval: float, until: float | None, tested_rows: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(str(Path(tmp) / "cw.duckdb"))
        try:
            store.con.execute(f"ATTACH '{db}' AS src (READ_ONLY)")
            where = "" if app is None else "WHERE t.app = ?"
            first, last = store.con.execute(
                "SELECT min(l.received), max(l.received) FROM src.tasks t "
                "JOIN src.ingest_log l USING (node, boot, seq) " + where, [] if app is None else [app]).fetchone()
            if first is None:
                raise SystemExit(f"anomaly_replay: {db} holds no tasks{'' if app is None else f' of app {app}'}")
            end = last if until is None else min(last, first + until)
            clock = [first]
            job = CausalJob(min_new=20, confirm=2, interval=interval, clock=lambda: clock[0], tested_rows=tested_rows)
            ctx = JobContext(read=store.cursor, write=store.run, send=lambda *a: True, exporter=Exporter())
            seen = {"model": 0, "baseline": None, "opened": set(), "resolved": set()}
            cpu, lines, at = [], [], first - interval
            while at < end:
                store.run(lambda con: _copy(con, at, at + interval))
                at += interval
                clock[0] = at
                started = time.process_time()
                job.run(ctx)
                cpu.append(time.process_time() - started)
                for line in _changes(store.cursor(), seen):
                    lines.append(f"{at - first:7.1f} s  {line}")
                    print(lines[-1], file=sys.stderr)
        finally:
            store.close()
    return {"runs": len(cpu), "cpu_seconds": {"median": float(np.median(cpu)), "p90": float(np.quantile(cpu, 0.9)),
                                              "max": float(max(cpu)), "total": float(sum(cpu))},
            "opened": len(seen["opened"]), "resolved": len(seen["resolved"]), "lines": lines}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("db", help="a daemon's DuckDB file (stopped)")
    ap.add_argument("--app", help="the app whose tasks are replayed (default: all)")
    ap.add_argument("--interval", type=float, default=5.0, help="seconds of receive time per step and job run")
    ap.add_argument("--until", type=float, help="seconds of the run replayed (default: all)")
    ap.add_argument("--tested-rows", type=int, default=CausalJob().tested_rows, help="the job's tested_rows")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    out = replay(args.db, args.app, args.interval, args.until, args.tested_rows)
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print("\n".join(out["lines"]))
    c = out["cpu_seconds"]
    print(f"{out['runs']} job runs: CPU-s per run median {c['median']:.2f}, p90 {c['p90']:.2f}, max {c['max']:.2f}, "
          f"total {c['total']:.1f}; {out['opened']} anomalies opened, {out['resolved']} resolved")
    return 0


if __name__ == "__main__":
    sys.exit(main())
