"""A phased master-worker workload: a master hands seeded tasks to spawned worker processes.

Task types stress different resources (integer/branchy, float, random access, streaming, dict churn,
in-cache sorting); `run_task(task)` runs one task and is the worker a probe kit describes. Run as a
module to time a run; `--types` picks another mix of them (another application).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import multiprocessing
import os
import sys
import threading
import time
from multiprocessing.util import Finalize

import numpy as np

from causewatch.agent import instrument
from causewatch.probe.kit import wait_until_quiet

# base size per type, chosen so that one task takes a few tens of milliseconds on a 2020s x86 core
TASK_TYPES = {
    "integer": 6_000,      # Collatz chains of this many starting numbers (branchy Python integers)
    "float": 250_000,      # transcendental maps over an array this long (numpy, FPU bound, in cache)
    "random": 800_000,     # random gathers over a 32 MiB working set (cache and TLB misses)
    "stream": 4_000_000,   # triad passes over arrays of this many doubles (memory bandwidth)
    "dict": 120_000,       # inserts, lookups and deletes of string keys (allocator, hashing)
    "sort": 60_000,        # repeated sorts of an array this long (480 KB: in the L2 cache)
}
# the bundled application's mix; "sort" joins others' (bench/probe.py --types)
DEFAULT_TYPES = ("integer", "float", "random", "stream", "dict")
WORKING_SET = 4 * 1024 * 1024  # doubles of the random-access array (32 MiB)


def _integer(n: int, rng) -> float:
    start = int(rng.integers(1, 1_000_000))
    steps = 0
    for x in range(start, start + n):
        while x != 1:
            x = x // 2 if x % 2 == 0 else 3 * x + 1
            steps += 1
    return float(steps)


def _float(n: int, rng) -> float:
    # elementwise maps on one thread; BLAS products would pick up a thread pool and time the pool
    a = rng.standard_normal(n)
    for _ in range(6):
        a = np.sin(a) * np.exp(-a * a) + np.sqrt(np.abs(a))
    return float(a.sum())


def _random(n: int, rng) -> float:
    table = np.arange(WORKING_SET, dtype=np.float64)
    idx = rng.integers(0, WORKING_SET, size=n)
    total = 0.0
    for _ in range(4):
        total += float(table[idx].sum())
        idx = (idx * 1103515245 + 12345) % WORKING_SET
    return total


def _stream(n: int, rng) -> float:
    a = np.full(n, rng.random())
    b = np.ones(n)
    c = np.empty(n)
    for _ in range(8):
        np.multiply(b, 2.5, out=c)
        np.add(a, c, out=c)
        a, c = c, a
    return float(a[::4096].sum())


def _dict(n: int, rng) -> float:
    keys = [f"k{i}-{i * 7919 % 1000}" for i in rng.permutation(n).tolist()]
    table = {}
    for i, key in enumerate(keys):
        table[key] = i
    hits = sum(1 for key in keys[::2] if key in table)
    for key in keys[::3]:
        del table[key]
    return float(hits + len(table))


def _sort(n: int, rng) -> float:
    a = rng.random(n)
    total = 0.0
    for _ in range(100):
        b = np.sort(a, kind="quicksort")
        total += float(b[n // 2])
        a = np.roll(a, 1) * 0.999 + b * 0.001
    return total


_KERNELS = {"integer": _integer, "float": _float, "random": _random, "stream": _stream, "dict": _dict,
            "sort": _sort}


def run_task(task: dict) -> float:
    """Run one task {"id", "type", "size", "seed"} and return its checksum."""
    try:
        kernel = _KERNELS[task["type"]]
    except KeyError:
        raise ValueError(f"task {task.get('id')!r}: type must be one of {', '.join(_KERNELS)}, "
                         f"got {task.get('type')!r}") from None
    return kernel(int(task["size"]), np.random.default_rng(int(task["seed"])))


def timed_task(task: dict, app: str | None = None) -> dict:
    """Run one task and return its id, wall and CPU seconds and checksum (what a worker reports).

    With `app`, the task is measured by causewatch's task API (a `task` record with its type and size
    as parameters) inside a `region` named for its type, and the records go to the local agent.
    """
    w0, c0 = time.perf_counter(), time.process_time()
    if app:
        with instrument.task(app, params={"type": task["type"], "size": task["size"]}, task_id=task["id"]):
            with instrument.region(task["type"], app=app):
                checksum = run_task(task)
    else:
        checksum = run_task(task)
    return {"id": task["id"], "type": task["type"], "wall": time.perf_counter() - w0,
            "cpu": time.process_time() - c0, "checksum": checksum}


def iter_tasks(seed: int = 0, scale: float = 1.0, types=DEFAULT_TYPES):
    """The phased task stream without end: runs of one task type of `types` each (the program's phases),
    sizes jittered +-10 %. The order of the runs, their lengths and the jitter all follow `seed`."""
    unknown = [t for t in types if t not in TASK_TYPES]
    if unknown or not types:
        raise ValueError(f"task types must be some of {', '.join(TASK_TYPES)}; "
                         f"{'not one: ' + ', '.join(unknown) if unknown else 'none given'}")
    rng = np.random.default_rng(seed)
    types = list(types)
    n = 0
    while True:
        kind = types[int(rng.integers(len(types)))]
        for _ in range(int(rng.integers(2, 7))):
            size = max(1, int(TASK_TYPES[kind] * scale * rng.uniform(0.9, 1.1)))
            yield {"id": f"t{n:04d}", "type": kind, "size": size, "seed": int(rng.integers(2**31))}
            n += 1


def parse_types(text: str) -> tuple[str, ...]:
    """The task types of a comma-separated --types value (checked by iter_tasks)."""
    return tuple(t for t in text.split(",") if t)


def make_tasks(n: int, seed: int = 0, scale: float = 1.0, types=DEFAULT_TYPES) -> list[dict]:
    """The first `n` tasks of `iter_tasks(seed, scale, types)`."""
    return list(itertools.islice(iter_tasks(seed, scale, types), n))


def until(tasks, path: str, ahead: threading.Semaphore):
    """`tasks` until a file at `path` exists, each handed out once `ahead` allows (a pool's feeder
    thread reads its input as fast as it can: without the semaphore it would run far ahead of the
    workers and past the file)."""
    for task in tasks:
        ahead.acquire()
        if os.path.exists(path):
            return
        yield task


def _worker_start(app: str | None) -> None:
    """Pool initializer: settle before the first task (numpy's OpenBLAS threads spin for about 0.1 s
    after loading, CPU time the first tasks would be charged); with `app`, flush task records in a
    finalizer, since pool workers end without atexit."""
    wait_until_quiet()
    if app:
        Finalize(None, instrument.flush, exitpriority=10)


def run_master(tasks, workers: int = 2, progress=None, app: str | None = None, stop: str | None = None) -> dict:
    """Hand `tasks` to `workers` spawned processes; return per-task records and the run's wall time.

    With `app`, every task sends a causewatch task record (see `timed_task`). With `stop` (a path),
    tasks are handed out until a file there exists, two per worker ahead of the results.
    """
    ctx = multiprocessing.get_context("spawn")
    w0 = time.perf_counter()
    records = []
    ahead = threading.Semaphore(2 * workers)
    with ctx.Pool(workers, initializer=_worker_start, initargs=(app,)) as pool:
        stream = tasks if stop is None else until(tasks, stop, ahead)
        for record in pool.imap(functools.partial(timed_task, app=app), stream):
            records.append(record)
            ahead.release()
            if progress:
                progress(len(records))
        pool.close()
        pool.join()  # workers exit normally, so their finalizers deliver the records
    return {"wall": time.perf_counter() - w0, "tasks": records,
            "task_seconds": sum(r["wall"] for r in records), "task_cpu_seconds": sum(r["cpu"] for r in records)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m causewatch.probe.workloads.masterworker",
        description="Run the phased master-worker workload (or, with --run-task, one task as a command worker).")
    parser.add_argument("--tasks", type=int, default=40, help="number of tasks (default 40, a few seconds)")
    parser.add_argument("--until", metavar="FILE",
                        help="hand out tasks until FILE exists, without end (--tasks is then ignored)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the task list")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (spawned)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every task's size")
    parser.add_argument("--types", default=",".join(DEFAULT_TYPES),
                        help=f"comma-separated task types to mix, of {', '.join(TASK_TYPES)} (default: %(default)s)")
    parser.add_argument("--app", help="send a causewatch task record per task under this app name "
                                       "(to the agent named by $CAUSEWATCH_CONFIG, else the defaults)")
    parser.add_argument("--run-task", metavar="FILE", help="run the one task in this JSON file and exit")
    parser.add_argument("--json", action="store_true", help="print per-task records as JSON")
    args = parser.parse_args(argv)
    if args.run_task:
        with open(args.run_task) as f:
            print(json.dumps(timed_task(json.load(f))))
        return 0
    types = parse_types(args.types)
    try:
        tasks = iter_tasks(args.seed, args.scale, types) if args.until else \
            make_tasks(args.tasks, args.seed, args.scale, types)
    except ValueError as e:
        parser.error(f"--types: {e}")
    result = run_master(tasks, args.workers, app=args.app, stop=args.until)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    by_type: dict[str, list[float]] = {}
    for r in result["tasks"]:
        by_type.setdefault(r["type"], []).append(r["wall"])
    print(f"{len(result['tasks'])} tasks on {args.workers} workers: {result['wall']:.2f} s wall, "
          f"{result['task_seconds']:.2f} task-seconds")
    for kind, times in sorted(by_type.items()):
        print(f"  {kind:8} {len(times):3} tasks  median {np.median(times) * 1000:7.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
