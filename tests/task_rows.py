"""Made-up task records of app `lu` and their insertion into a store, for the causal job's tests: the
duration follows instructions and cache misses, or (broken) also the size n directly; of app `mw`,
whose tasks wait for a CPU; and of app `svc`, whose tasks call a service and write, in regions.

Import as `from task_rows import ...` (tests/ is on pytest's pythonpath).
"""

from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd


def lu_tasks(seed, start, count, broken=False):
    rng = np.random.default_rng(seed)
    n = rng.integers(50, 300, count)
    dtype = rng.choice(["int", "double"], count)
    size = np.where(dtype == "int", 4, 8)
    instructions = n.astype(float) ** 2 * rng.uniform(0.5, 1.5, count)
    misses = size * rng.uniform(50, 150, count)
    # broken: the duration starts to depend on n directly (say, a new cache effect)
    duration = instructions * 1e-5 + misses * 1e-3 + (0.03 * n if broken else 0) + rng.normal(0, 0.1, count)
    return pd.DataFrame({
        "node": "node-1", "boot": "b1", "seq": np.arange(start, start + count), "app": "lu",
        "task_id": [f"t{i}" for i in range(start, start + count)], "t_start": 1000.0 + np.arange(start, start + count),
        "duration": duration, "cpu_seconds": duration * rng.uniform(0.85, 0.95, count),
        "params": [json.dumps({"n": int(a), "dtype": b}) for a, b in zip(n, dtype)],
        "counters": [json.dumps({"instructions": a, "l2_misses": b}) for a, b in zip(instructions, misses)],
    })


def waiting_tasks(seed, start, count, wait_per_cpu=0.4, task_clock=True):
    """Tasks of app `mw` on node-1, one a second, whose CPU time is set by their size and whose time is
    that plus time waited for a CPU; `task_clock`: with a task-clock counter beside the wait."""
    rng = np.random.default_rng(seed)
    size = rng.choice([1, 3], count)
    cpu = 0.05 * size * rng.uniform(0.8, 1.2, count)
    wait = cpu * wait_per_cpu * rng.exponential(1.0, count)
    counters = [{"cpu_wait_seconds": w, **({"task_clock_seconds": c * 1.01} if task_clock else {})}
                for w, c in zip(wait, cpu)]
    return pd.DataFrame({
        "node": "node-1", "boot": "b1", "seq": np.arange(start, start + count), "app": "mw",
        "task_id": [f"t{i}" for i in range(start, start + count)], "t_start": 1000.0 + np.arange(start, start + count),
        "duration": cpu + wait + rng.normal(0, 1e-3, count), "cpu_seconds": cpu,
        "params": [json.dumps({"size": int(s)}) for s in size],
        "counters": [json.dumps(c) for c in counters],
    })


def service_tasks(seed, start, count, call=0.002):
    """Tasks of app `svc` on node-1, one a second on two worker threads in turn, each computing for a time
    its size n sets, then one `catalog call` region of `call` seconds or so (a local service), then a
    `write` region; duration is the three and a little more. Returns (tasks, regions)."""
    rng = np.random.default_rng(seed)
    i = np.arange(start, start + count)
    n = rng.integers(40, 161, count)
    compute = 1e-3 * n * rng.uniform(0.9, 1.1, count)
    calls = call * rng.uniform(0.8, 1.2, count)
    writes = rng.uniform(0.004, 0.006, count)
    t0 = 1000.0 + i
    extra = [json.dumps({"pid": 4242, "thread": f"worker-{k % 2}"}) for k in i]
    tasks = pd.DataFrame({
        "node": "node-1", "boot": "b1", "seq": 2 * i, "app": "svc", "task_id": [f"t{k}" for k in i], "t_start": t0,
        "duration": compute + calls + writes + rng.uniform(1e-4, 3e-4, count), "cpu_seconds": compute,
        "params": [json.dumps({"n": int(a)}) for a in n], "counters": "{}", "extra": extra})
    regions = pd.concat([
        pd.DataFrame({"region": "catalog call", "t_start": t0 + compute, "duration": calls, "seq": 2 * i + 1}),
        pd.DataFrame({"region": "write", "t_start": t0 + compute + calls, "duration": writes, "seq": 2 * i + 1})])
    return tasks, regions.assign(node="node-1", boot="b1", app="svc", calls=1, cpu_seconds=0.0,
                                 extra=np.tile(extra, 2))


def ingest_regions(store, df):
    """Insert region rows `df` (node, boot, seq, app, region, t_start, duration, calls, cpu_seconds, extra)."""
    def write(con):
        con.register("r", df)
        con.execute("INSERT INTO regions (node, boot, seq, app, region, t_start, duration, calls, cpu_seconds, extra) "
                    "SELECT node, boot, seq, app, region, t_start, duration, calls, cpu_seconds, extra FROM r")
        con.unregister("r")
    store.run(write)


def ingest_tasks(store, df, received=None):
    """Insert task rows `df` into `store` (a daemon.store.Store) as ingest would, in one transaction
    received at `received` (default: now)."""
    df = df.assign(**{c: None for c in ("bbv", "extra") if c not in df})

    def write(con):
        con.register("t", df)
        con.execute("INSERT INTO tasks (node, boot, seq, app, task_id, t_start, duration, cpu_seconds, params, "
                    "counters, bbv, extra) SELECT node, boot, seq, app, task_id, t_start, duration, cpu_seconds, "
                    "params, counters, bbv, extra FROM t")
        con.execute("INSERT INTO ingest_log SELECT node, boot, seq, 'task', t_start, ? FROM t",
                    [time.time() if received is None else received])
        con.unregister("t")
    store.run(write)
