"""Benchmark: is `causewatch demo` reproducible? Runs it N times and compares what each run reports.

Per run: the causal edges (with how many model versions held each), the hog's verdict, the anomalies
raised, the probe predictions with their intervals; then the agreement across runs: edges in every run
or only some, runs showing the hog, anomalies by cause, and whether each node's predictions lie within
every other run's interval. Anomalies are marked [hog] (on the contended resource's variable), [during]
(another variable, raised while the hog ran) or [outside] (raised outside its stretch: false alarms).
Usage: python bench/demo_repro.py [--runs 3] [--seconds 30]   (~90 s a run on a quiet 2-core machine)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

WAIT = "cpu_wait_seconds"   # the hog's variable (causewatch.commands.demo.WAIT)


def run_demo(folder: Path, seconds: float) -> dict:
    r = subprocess.run([sys.executable, "-m", "causewatch.cli", "demo", "--dir", str(folder), "--seconds",
                        str(seconds), "--json"], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"demo exited {r.returncode}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.splitlines()[-1])


def edge(e: dict) -> str:
    a, b = (e["src"], e["dst"]) if e["directed"] else sorted((e["src"], e["dst"]))
    return f"{a} {'->' if e['directed'] else '--'} {b}"


def pair(e: dict) -> frozenset:
    return frozenset((e["src"], e["dst"]))


def cause(a: dict, hog: dict) -> str:
    """"hog": on the contended resource's variable; "during": another variable, raised while the hog ran
    (migrations and context switches rise under contention too); "outside": raised before the hog
    started or after it stopped, which the hog does not explain (a false alarm)."""
    if WAIT in (a["src"], a["dst"]):
        return "hog"
    started, stopped = hog["started_s"], hog["stopped_s"]
    return "during" if started is not None and started <= a["opened_s"] <= (stopped or float("inf")) else "outside"


def show_run(i: int, rep: dict) -> None:
    (hog,) = rep["contention_hog"]
    print(f"\n== run {i} ==")
    print(f"hog: started {hog['started_s']} s, stopped {hog['stopped_s']} s; wait per CPU s before/during/after "
          f"{hog.get('wait_per_cpu_s_before')}/{hog.get('wait_per_cpu_s_during')}/{hog.get('wait_per_cpu_s_after')}")
    print(f"  shown: {hog['shown']}")
    print("edges (held by k of n model versions):")
    for e in rep["causal_edges"]:
        print(f"  {edge(e):<48} {e['strength_bits']:>7.3f} bits  {e['held_by']}/{e['versions']}"
              f"{'  stable' if e['stable'] else ''}")
    print("anomalies:")
    for a in rep["anomalies"]:
        print(f"  {a['kind']:<18} {a['src']} -> {a['dst']}  {a['state']}, {a['when']}  ({a['score']} > "
              f"{a['threshold']} on {a['rows']} rows)  [{cause(a, hog)}]")
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
    shown = sum(r["contention_hog"][0]["shown"].startswith("yes") for r in reps)
    causes = [Counter(cause(a, r["contention_hog"][0]) for a in r["anomalies"]) for r in reps]
    print(f"hog shown (raised while it ran, resolved after): {shown}/{n} runs")
    for kind in ("hog", "during", "outside"):
        print(f"anomalies per run [{kind}]: {[c[kind] for c in causes]}")
    for node in sorted({p["node"] for r in reps for p in r["probe_ranking"]}):
        preds = [p for r in reps for p in r["probe_ranking"] if p["node"] == node]
        inside = all(q["lo"] <= p["s_per_task"] <= q["hi"] for p in preds for q in preds)
        values = [p["s_per_task"] for p in preds]
        print(f"prediction {node}: {min(values)}..{max(values)} s per task (max/min {max(values) / min(values):.2f}); "
              f"each within every run's interval: {'yes' if inside else 'no'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=30.0, help="the demo's --seconds")
    args = ap.parse_args()
    reps = []
    with tempfile.TemporaryDirectory(prefix="cw-repro-") as tmp:
        for i in range(1, args.runs + 1):
            reps.append(run_demo(Path(tmp) / f"run{i}", args.seconds))
            show_run(i, reps[-1])
    agreement(reps)


if __name__ == "__main__":
    main()
