"""Benchmark of the causal job's learns in this process (LocalCompute, as the jobs worker does them) and on
a dask.distributed LocalCluster (DaskCompute, analysis_scheduler), over the same task rows.

Per way: the CPU-seconds of the process that runs the job (what the daemon's jobs worker would spend), of
the cluster's worker processes, and the wall time, for the same learns (each scope: a fit, then
partial_fits on new rows), local and Dask alternating. CPU from /proc/PID/stat (utime + stime, all
threads); wall time is printed but the machine is shared, so judge by CPU. The overhead of the cluster
is its total CPU (job process with the LocalCluster's scheduler, workers) against the local learns' CPU.

    .venv/bin/python bench/dask_learn.py                 # 4 scopes x (600 rows, then 2 x 100 more)
    .venv/bin/python bench/dask_learn.py --scopes 8 --rows 1500 --workers 2
Needs the cluster extra (distributed), which the test extra includes.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from cputime import cpu_seconds
from distributed import Client, LocalCluster

from causewatch.daemon.compute import DaskCompute, LocalCompute
from causewatch.daemon.exporter import Exporter
from causewatch.daemon.job_causal import CausalJob, learn
from causewatch.daemon.jobs import JobContext
from causewatch.daemon.store import Store

IDLE_SECONDS = 5.0   # the idle workers are watched this long for their upkeep (heartbeats, event loop)


def task_rows(app: str, seed: int, first: int, count: int) -> pd.DataFrame:
    """Tasks whose time follows their size through instructions and a cache term, with a mode parameter."""
    rng = np.random.default_rng(seed)
    size = rng.uniform(100, 2000, count)
    mode = rng.choice(["a", "b"], count)
    instructions = size ** 1.5 * rng.uniform(0.8, 1.2, count)
    misses = np.where(mode == "a", 1.0, 3.0) * size * rng.uniform(0.5, 1.5, count)
    seconds = instructions * 1e-6 + misses * 1e-4 + rng.exponential(0.01, count)
    seq = np.arange(first, first + count)
    return pd.DataFrame({"node": f"node-{app}", "boot": "b", "seq": seq, "app": app,
                         "task_id": [f"{app}-{i}" for i in seq],
                         "t_start": 1e6 + seq, "duration": seconds, "cpu_seconds": seconds * 0.9,
                         "params": [json.dumps({"size": float(s), "mode": m}) for s, m in zip(size, mode)],
                         "counters": [json.dumps({"instructions": float(i), "misses": float(x)})
                                      for i, x in zip(instructions, misses)], "bbv": None})


def insert(store: Store, df: pd.DataFrame) -> None:
    def write(con):
        con.register("t", df)
        con.execute("INSERT INTO tasks (node, boot, seq, app, task_id, t_start, duration, cpu_seconds, params, "
                    "counters, bbv) SELECT node, boot, seq, app, task_id, t_start, duration, cpu_seconds, params, "
                    "counters, bbv FROM t")
        con.execute("INSERT INTO ingest_log SELECT node, boot, seq, 'task', t_start, 0 FROM t")
        con.unregister("t")
    store.run(write)


def run(compute, folder: Path, scopes: int, rows: int, more: int, rounds: int, workers: list[int]) -> dict:
    """The job over `scopes` apps: `rows` tasks each, learnt, then `rounds` x `more` new ones (a store of its own)."""
    store = Store(tempfile.mkstemp(suffix=".duckdb", dir=folder)[1] + ".d")
    ctx = JobContext(read=store.cursor, write=store.run, send=lambda *a: True, exporter=Exporter())
    job = CausalJob(min_new=10, max_rows=rows + more * rounds, max_new=rows + more * rounds, compute=compute)
    spent = {"job_cpu_s": 0.0, "workers_cpu_s": 0.0, "wall_s": 0.0}
    learns = sum(compute.tasks.values())   # one DaskCompute serves every pair: count this run's
    try:
        for r in range(rounds + 1):
            for s in range(scopes):
                insert(store, task_rows(f"app{s}", 100 * s + r, 0 if r == 0 else rows + more * (r - 1),
                                        rows if r == 0 else more))
            before = cpu_seconds(os.getpid()), sum(map(cpu_seconds, workers)), time.monotonic()
            job.run(ctx)
            after = cpu_seconds(os.getpid()), sum(map(cpu_seconds, workers)), time.monotonic()
            for key, a, b in zip(spent, before, after):
                spent[key] += b - a
        edges = store.cursor().execute("SELECT count(*) FROM edges").fetchone()[0]
    finally:
        store.close()
    return {**{k: round(v, 2) for k, v in spent.items()}, "learns": sum(compute.tasks.values()) - learns,
            "edges": edges}


def warm() -> None:
    """One small learn in this process: numba's kernels loaded (from its cache) before anything is timed."""
    data = task_rows("warm", 0, 0, 300)
    counters = pd.DataFrame([json.loads(c) for c in data["counters"]])
    learn(None, pd.concat([data[["duration"]], counters], axis=1), False, {}, 2, 300, 400)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scopes", type=int, default=4)
    ap.add_argument("--rows", type=int, default=600)
    ap.add_argument("--more", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=3, help="local and Dask runs alternating (ABBA), pairs of them")
    args = ap.parse_args()
    logging.getLogger("causewatch").setLevel(logging.ERROR)   # the job's anomaly lines are not the figures
    shape = (args.scopes, args.rows, args.more, args.rounds)
    print(f"causal learns, {args.scopes} scopes x ({args.rows} rows, then {args.rounds} x {args.more} more), "
          f"{args.workers} Dask worker processes, {args.pairs} pairs alternating")
    overheads = []
    with tempfile.TemporaryDirectory() as tmp, \
            LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                         dashboard_address=None) as cluster, Client(cluster) as client:
        client.run(warm)   # on every worker: its imports and kernels, not timed
        warm()
        pids = [w.process.pid for w in cluster.workers.values()]
        before = sum(map(cpu_seconds, pids))
        time.sleep(IDLE_SECONDS)
        idle = (sum(map(cpu_seconds, pids)) - before) / IDLE_SECONDS   # the workers' own upkeep, CPU-s a second
        dask = DaskCompute(cluster.scheduler_address)
        for i in range(args.pairs):
            ways = [("local", LocalCompute()), ("dask", dask)]
            got = dict((name, run(compute, Path(tmp), *shape, pids)) for name, compute in
                       (ways if i % 2 == 0 else ways[::-1]))
            overheads.append(report(got["local"], got["dask"], idle))
        dask.close()
    print(f"overhead of the cluster over the local learns, per pair: "
          f"{', '.join(f'{o:+.1%}' for o in overheads)}; median {statistics.median(overheads):+.1%} (goal <= +5 %)")


def report(local: dict, remote: dict, idle: float) -> float:
    """Print one pair; return the cluster's CPU (job process and scheduler, workers less their idle
    upkeep) over the local learns' CPU, minus one."""
    net = remote["workers_cpu_s"] - idle * remote["wall_s"]   # what the learns cost the workers
    total = remote["job_cpu_s"] + net
    print(f"  local (the jobs worker):  job process {local['job_cpu_s']:.2f} CPU-s, wall {local['wall_s']:.1f} s, "
          f"{local['learns']} learns, {local['edges']} edges stored")
    print(f"  Dask (analysis_scheduler): job process {remote['job_cpu_s']:.2f} CPU-s, workers "
          f"{remote['workers_cpu_s']:.2f} CPU-s ({net:.2f} less their idle upkeep of {idle:.3f} CPU-s/s), wall "
          f"{remote['wall_s']:.1f} s, {remote['learns']} learns, {remote['edges']} edges stored")
    print(f"  the daemon side spends {remote['job_cpu_s'] / max(local['job_cpu_s'], 1e-9):.1%} of its local CPU; "
          f"cluster CPU in all {total / max(local['job_cpu_s'], 1e-9):.2f}x the local learns'", flush=True)
    return (total - local["job_cpu_s"]) / max(local["job_cpu_s"], 1e-9)


if __name__ == "__main__":
    main()
