"""The instrument API's cost to the program: CPU per task against no-op stubs, and the switches it adds.

(1) CPU per task of N tasks of fixed work (~10 ms, one region inside each), instrumented, against the same
code with `task`/`region` replaced by null context managers, for N = 100, 1,000 and 10,000 (goal: <= 5 %
at 10,000). CPU is the whole process's (`time.process_time`: the sampler's and ZeroMQ's threads too),
in alternating blocks (stub, real, real, stub, ...) so that the machine's drift cancels; the last fifth
of the real tasks against the first fifth (goal: <= 1.1, flat over the run), beside the stubs' same ratio.
(2) The context switches and CPU seconds that CPU-bound tasks of 20/50/100/200 ms report, with the frame
sampler at its default 5 ms and at 1 s (effectively off), alternating, on the main thread and on
another thread; run first, so that a leak of watched vectors (which keeps a sampler busy) cannot blur it.
Records go to a sink (a ZeroMQ PULL socket in a child process, where the agent's ipc relay would be),
which counts them and checks that each phase vector has as many counts as keys.
Usage: python bench/instrument.py [--sizes 100,1000,10000] [--task-ms 10] [--repeats 7] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from causewatch.agent import instrument as api

PY = sys.executable
BLOCKS = 100           # blocks per arm and size, alternating: each fifth of the run is 20 of them
SWITCH_MS = (20, 50, 100, 200)
# A PULL socket where the agent's relay would be: prints one row per record once told "done" and idle.
SINK = """
import json, sys
import msgpack, zmq
pull = zmq.Context().socket(zmq.PULL)
pull.bind(sys.argv[1])
print("ready", flush=True)
poller = zmq.Poller()
poller.register(pull, zmq.POLLIN)
poller.register(sys.stdin.fileno(), zmq.POLLIN)
rows, done = [], False
while True:
    events = dict(poller.poll(1000))
    if sys.stdin.fileno() in events:
        sys.stdin.readline()          # "done", or the end of input: the program has flushed
        done = True
        poller.unregister(sys.stdin.fileno())
    if pull in events:
        msg = msgpack.unpackb(pull.recv(), raw=False)
        body = msg["body"]
        bbv = body.get("bbv") or {"keys": [], "counts": []}
        rows.append([msg["type"], body.get("params", {}), body["counters"].get("context_switches"),
                     body["cpu_seconds"], len(bbv["keys"]) == len(bbv["counts"])])
    elif done and not events:
        break
print(json.dumps(rows))
"""


def work(n: int) -> int:
    s = 0
    for i in range(n):
        s += i % 7
    return s


def calibrate(ms: float) -> int:
    """Iterations of `work` that take about `ms` of this thread's CPU."""
    n = 200_000
    t = time.thread_time()
    work(n)
    return max(1, int(n * ms / 1000 / max(time.thread_time() - t, 1e-6)))


def null_task(**_):
    return contextlib.nullcontext()


def null_region(_name):
    return contextlib.nullcontext()


def block(n: int, iters: int, task, region, arm: str) -> float:
    """Process CPU seconds of `n` tasks of `iters` iterations each, the first half in a region opened
    first thing (where a task and its region hold equal vectors until a sample lands after the region)."""
    c0 = time.process_time()
    for i in range(n):
        with task(params={"arm": arm, "i": i % 8}):
            with region("inner"):
                work(iters // 2)
            work(iters // 2)
    return time.process_time() - c0


def overhead(size: int, iters: int) -> dict:
    """Alternating stub and real blocks of one size: CPU per task of each arm, and by fifths."""
    per = max(1, size // BLOCKS)
    cpu: dict[str, list[float]] = {"stub": [], "real": []}
    for b in range(BLOCKS):
        order = [("stub", null_task, null_region), ("real", api.task, api.region)]
        for arm, task, region in order if b % 2 == 0 else order[::-1]:
            cpu[arm].append(block(per, iters, task, region, arm) / per)
    fifth = BLOCKS // 5
    mean = {arm: statistics.fmean(v) for arm, v in cpu.items()}
    first = {arm: statistics.fmean(v[:fifth]) for arm, v in cpu.items()}
    last = {arm: statistics.fmean(v[-fifth:]) for arm, v in cpu.items()}
    return {"tasks": per * BLOCKS, "stub_cpu_per_task": mean["stub"], "real_cpu_per_task": mean["real"],
            "overhead": mean["real"] / mean["stub"] - 1, "real_last_over_first_fifth": last["real"] / first["real"],
            "stub_last_over_first_fifth": last["stub"] / first["stub"],
            "overhead_first_fifth": first["real"] / first["stub"] - 1,
            "overhead_last_fifth": last["real"] / last["stub"] - 1}


def switch_tasks(repeats: int, thread: str) -> None:
    """CPU-bound tasks of each length, with the sampler at 5 ms and at 1 s in turn, on `thread`."""
    def run():
        for r in range(repeats):
            for ms in SWITCH_MS:
                iters = calibrate(ms)
                for interval in ((0.005, 1.0) if r % 2 == 0 else (1.0, 0.005)):
                    api._sampler.interval = interval
                    time.sleep(1.05)   # a timer thread at 1 s sleeps that long after a sample; both arms alike
                    with api.task(params={"ms": ms, "interval": interval, "thread": thread}):
                        work(iters)
        api._sampler.interval = 0.005
    if thread == "main":
        run()
    else:
        worker = threading.Thread(target=run)
        worker.start()
        worker.join()


def switch_table(rows: list) -> list[dict]:
    """Median context switches and CPU seconds per (thread, length, interval)."""
    groups: dict[tuple, list] = {}
    for kind, params, switches, cpu, _ in rows:
        if kind == "task" and "ms" in params:
            groups.setdefault((params["thread"], params["ms"], params["interval"]), []).append((switches, cpu))
    return [{"thread": th, "task_ms": ms, "interval": iv,
             "context_switches": statistics.median(s for s, _ in v), "cpu_seconds": statistics.median(c for _, c in v)}
            for (th, ms, iv), v in sorted(groups.items())]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000,10000", help="task counts, comma-separated ('': none)")
    ap.add_argument("--task-ms", type=float, default=10.0, help="each task's work in CPU milliseconds")
    ap.add_argument("--repeats", type=int, default=7,
                    help="tasks per length and interval for the switches (0: none)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cw-bench-") as folder:
        endpoint = f"ipc://{folder}/sink.sock"
        sink = subprocess.Popen([PY, "-c", SINK, endpoint], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if sink.stdout.readline().strip() != "ready":
            raise SystemExit("the sink did not start")
        api.configure(app="instrument-bench", ipc=endpoint, spool=f"{folder}/spool", daemon="tcp://127.0.0.1:1")
        if args.repeats:
            switch_tasks(args.repeats, "main")
            switch_tasks(args.repeats, "worker")
        iters = calibrate(args.task_ms)
        sizes = [overhead(int(s), iters) for s in args.sizes.split(",") if s]
        left = api._sampler.watched()
        api.flush()
        rows = json.loads(sink.communicate("done\n", timeout=120)[0])
    sent = sum(2 * s["tasks"] for s in sizes) + len(SWITCH_MS) * 2 * args.repeats * 2   # task+region; 2 threads
    result = {"sizes": sizes, "switches": switch_table(rows), "records_sent": sent, "records_received": len(rows),
              "vectors_with_mismatched_counts": sum(not ok for *_, ok in rows), "vectors_left_watched": left}
    result["load_average"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(result))
        return
    print(f"load average at the end: {result['load_average']:.2f} on {os.cpu_count()} CPUs")
    for s in sizes:
        print(f"{s['tasks']:>6,} tasks: CPU per task {1e3 * s['real_cpu_per_task']:.3f} ms against "
              f"{1e3 * s['stub_cpu_per_task']:.3f} ms with stubs: overhead {100 * s['overhead']:+.2f} % (goal <= 5 %); "
              f"last fifth / first {s['real_last_over_first_fifth']:.3f} (stubs {s['stub_last_over_first_fifth']:.3f}; "
              f"goal <= 1.1); overhead in the first fifth {100 * s['overhead_first_fifth']:+.2f} %, in the last "
              f"{100 * s['overhead_last_fifth']:+.2f} %")
    table = {(r["thread"], r["task_ms"], r["interval"]): r for r in result["switches"]}
    if table:
        print("context switches (CPU seconds) per task, median of the repeats, sampler at 5 ms against 1 s:")
    for thread in ("main", "worker") if table else ():
        cells = [f"{ms} ms {table[thread, ms, 0.005]['context_switches']:.0f} "
                 f"({table[thread, ms, 0.005]['cpu_seconds']:.3f}) vs {table[thread, ms, 1.0]['context_switches']:.0f} "
                 f"({table[thread, ms, 1.0]['cpu_seconds']:.3f})" for ms in SWITCH_MS]
        print(f"  {thread} thread: " + "; ".join(cells))
    print(f"records: {sent} sent, {len(rows)} received, {result['vectors_with_mismatched_counts']} with a phase "
          f"vector whose counts and keys disagree; vectors still watched at the end: {left}")


if __name__ == "__main__":
    main()
