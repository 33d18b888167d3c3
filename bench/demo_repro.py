"""Benchmark: is `causewatch demo` reproducible, on a quiet machine and beside busy loops? Runs it N
times (per --load: beside that many `while True: pass` processes, for all its runs) and compares what
each run reports.

Per run: the causal edges (with how many model versions held each), the hog's verdict and the demo's
last line, the anomalies raised with the cause the report gives, the probe predictions with their
intervals; then the agreement across runs: edges in every run or only some, runs showing the hog,
anomalies by cause, and whether each node's predictions lie within every other run's interval; last,
per load, the runs that showed the story and the 1-minute load average while they ran, when each
had its baseline and whether the causal job formed it (not the demo's pin), and how soon into the hog
its anomaly opened (goal: within 60 s). Anomalies are
marked [hog] (on the contended resource's variable), [during] (another variable, raised while the hog
ran) or [outside] (raised outside its stretch), beside the report's cause (the hog, other work,
unexplained).
Usage: python bench/demo_repro.py [--runs 3] [--seconds 30] [--load 4 8]
       (~2.5 min a run on a quiet 2-core machine; longer under load, at most the bound the demo states)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

WAIT = "cpu_wait_seconds"   # the hog's variable (causewatch.commands.demo.causes.WAIT)


BUSY = "while True: pass"
HOG_GOAL = 60.0             # the anomaly opens within this many seconds of the hog's start


def run_demo(folder: Path, seconds: float) -> dict:
    """One demo run's report, with its exit status and the 1-minute load average before and after."""
    before = os.getloadavg()[0]
    t0 = time.monotonic()
    demo = subprocess.Popen([sys.executable, "-m", "causewatch.cli", "demo", "--dir", str(folder), "--seconds",
                             str(seconds), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = demo.communicate()
    except BaseException:   # stopped (SIGTERM, ^C): the demo stops its hog, agents and daemon
        demo.terminate()
        demo.wait()
        raise
    if demo.returncode not in (0, 3):   # 3: the demo ran but could not show its story (its last line says why)
        raise SystemExit(f"demo exited {demo.returncode}: {err[-2000:]}")
    rep = json.loads(out.splitlines()[-1])
    return dict(rep, exit=demo.returncode, wall_s=round(time.monotonic() - t0, 1),
                loadavg=(round(before, 1), round(os.getloadavg()[0], 1)))


def edge(e: dict) -> str:
    a, b = (e["src"], e["dst"]) if e["directed"] else sorted((e["src"], e["dst"]))
    return f"{a} {'->' if e['directed'] else '--'} {b}"


def pair(e: dict) -> frozenset:
    return frozenset((e["src"], e["dst"]))


def cause(a: dict, hog: dict) -> str:
    """"hog": on the contended resource's variable; "during": another variable, raised while the hog ran
    (migrations and context switches rise under contention too); "outside": raised before the hog
    started or after it stopped, which the hog does not explain (a false alarm)."""
    if {WAIT, hog.get("variable", WAIT)} & {a["src"], a["dst"]}:   # the model may hold the wait in duration
        return "hog"
    started, stopped = hog["started_s"], hog["stopped_s"]
    return "during" if started is not None and started <= a["opened_s"] <= (stopped or float("inf")) else "outside"


def raised_into_hog(rep: dict) -> float | None:
    """Seconds from the hog's start to the first anomaly on its variable raised while it ran (None: none)."""
    (hog,) = rep["contention_hog"]
    if hog["started_s"] is None:
        return None
    during = [a["opened_s"] - hog["started_s"] for a in rep["anomalies"] if cause(a, hog) == "hog"
              and hog["started_s"] <= a["opened_s"] <= (hog["stopped_s"] or float("inf"))]
    return round(min(during), 1) if during else None


def show_run(i: int, rep: dict) -> None:
    (hog,) = rep["contention_hog"]
    story = rep["story"]
    print(f"\n== run {i} ==")
    print(f"demo: exit {rep['exit']}, {rep['wall_s']} s in all, workload {story['ran_s']} s of at most "
          f"{story['bound_s']} s; load average {rep['loadavg'][0]} before, {rep['loadavg'][1]} after, "
          f"{story['load'][0]}-{story['load'][1]} while the workload ran")
    print(f"hog: {hog['per_cpu']} per CPU at load {hog['load_at_start']}, baseline after {hog['baseline_after_s']} s, "
          f"started {hog['started_s']} s, stopped {hog['stopped_s']} s; wait per CPU s before/during/after "
          f"{hog.get('wait_per_cpu_s_before')}/{hog.get('wait_per_cpu_s_during')}/{hog.get('wait_per_cpu_s_after')}")
    print(f"  baseline: {hog['baseline']}")
    print(f"  shown: {hog['shown']}")
    print(f"  last line: {story['line']}")
    print("edges (held by k of n model versions):")
    for e in rep["causal_edges"]:
        print(f"  {edge(e):<48} {e['strength_bits']:>7.3f} bits  {e['held_by']}/{e['versions']}"
              f"{'  stable' if e['stable'] else ''}")
    print("anomalies:")
    for a in rep["anomalies"]:
        print(f"  {a['kind']:<18} {a['src']} -> {a['dst']}  {a['state']}, {a['when']}  ({a['score']} > "
              f"{a['threshold']} on {a['rows']} rows)  [{cause(a, hog)}]\n    cause: {a['cause']}")
    print("predictions (s per task [interval]):")
    for p in rep["probe_ranking"]:
        print(f"  {p['node']}: {p['s_per_task']} [{p['lo']}, {p['hi']}]")


def agreement(reps: list[dict]) -> None:
    n = len(reps)
    print(f"\n== agreement over {n} runs ==")
    seen = Counter(pair(e) for rep in reps for e in rep["causal_edges"])
    stable = Counter(pair(e) for rep in reps for e in rep["causal_edges"] if e["stable"])
    every = sorted(" -- ".join(sorted(p)) for p, k in seen.items() if k == n)
    some = sorted(f"{' -- '.join(sorted(p))} ({k}/{n})" for p, k in seen.items() if k < n)
    print(f"edges in every run ({len(every)}): " + "; ".join(every))
    print(f"edges in some runs ({len(some)}): " + ("; ".join(some) or "none"))
    print("stable edges (reported stable) in every run: " + "; ".join(
        sorted(" -- ".join(sorted(p)) for p, k in stable.items() if k == n)))
    shown = sum(r["story"]["shown"] == "yes" for r in reps)
    causes = [Counter(cause(a, r["contention_hog"][0]) for a in r["anomalies"]) for r in reps]
    print(f"hog shown (raised while it ran, resolved after): {shown}/{n} runs")
    for kind in ("hog", "during", "outside"):
        print(f"anomalies per run [{kind}]: {[c[kind] for c in causes]}")
    said = [Counter(a["cause"].split(":")[0] for a in r["anomalies"]) for r in reps]
    for kind in ("the hog", "other work", "unexplained"):
        print(f"anomalies per run, the report's cause {kind!r}: {[c[kind] for c in said]}")
    for node in sorted({p["node"] for r in reps for p in r["probe_ranking"]}):
        preds = [p for r in reps for p in r["probe_ranking"] if p["node"] == node]
        inside = all(q["lo"] <= p["s_per_task"] <= q["hi"] for p in preds for q in preds)
        values = [p["s_per_task"] for p in preds]
        print(f"prediction {node}: {min(values)}..{max(values)} s per task (max/min {max(values) / min(values):.2f}); "
              f"each within every run's interval: {'yes' if inside else 'no'}")


def busy(n: int) -> list[subprocess.Popen]:
    """`n` busy loops, unpinned, at the default priority: other work on the machine."""
    return [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(n)]


def main() -> None:
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))   # the loops and the demo go too
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="demo runs per load")
    ap.add_argument("--seconds", type=float, default=30.0, help="the demo's --seconds")
    ap.add_argument("--load", type=int, nargs="+", default=[0], metavar="N",
                    help="busy loops running beside the demo, one figure per set of runs (default 0)")
    args = ap.parse_args()
    summary = []
    for load in args.load:
        print(f"\n##### {load} busy loops beside the demo, {args.runs} runs #####", flush=True)
        loops = busy(load)
        reps = []
        try:
            with tempfile.TemporaryDirectory(prefix="cw-repro-") as tmp:
                for i in range(1, args.runs + 1):
                    reps.append(run_demo(Path(tmp) / f"run{i}", args.seconds))
                    show_run(i, reps[-1])
                    sys.stdout.flush()
        finally:
            for proc in loops:
                proc.kill()
                proc.wait()
        agreement(reps)
        summary.append((load, reps))
    print("\n== the story per load ==")
    for load, reps in summary:
        shown = sum(r["story"]["shown"] == "yes" for r in reps)
        averages = [v for r in reps for v in r["loadavg"]] + [v for r in reps for v in r["story"]["load"] or []]
        print(f"{load} busy loops: story shown in {shown}/{len(reps)} runs; 1-minute load average "
              f"{min(averages)}-{max(averages)}; demo {min(r['wall_s'] for r in reps)}-"
              f"{max(r['wall_s'] for r in reps)} s; " + "; ".join(
                  f"run {i}: {r['story']['line']}" for i, r in enumerate(reps, 1) if r["story"]["shown"] != "yes"))
        raised = [raised_into_hog(r) for r in reps]
        own = [r for r in reps if r["contention_hog"][0]["pinned_model"] is None]
        print(f"  baseline after (s): {[r['contention_hog'][0]['baseline_after_s'] for r in reps]}, formed on its "
              f"own (not pinned by the demo) in {len(own)}/{len(reps)} runs; "
              f"hog's anomaly raised (s into the hog): {raised}; within {HOG_GOAL:.0f} s: "
              f"{sum(x is not None and x <= HOG_GOAL for x in raised)}/{len(reps)} runs")


if __name__ == "__main__":
    main()
