"""Benchmark: software-probe predictions on emulated heterogeneous nodes, against a generic CPU rating.

Nodes are emulated on this machine, the application pinned to CPU 0: clean; sharing the memory system
with a bandwidth hog on CPU 1, or with a neighbour on CPU 1 doing random gathers over 32 MiB, 256 MiB or
1 GiB (it thrashes the caches and TLB where the streaming hog is hidden by the prefetcher); sharing CPU
0 with a compute hog; under 80 % and 50 % cgroup CPU quotas (v1 or v2, when writable). Each node runs
the whole workload, the probe and the generic rating, then the whole workload again: the node's time is
the mean of its two runs, taken around the probe, and their difference shows how far one run strays. The
generic predictor scales the reference time by a fixed CPU loop's time (like HTCondor's Mips rating).
Usage: python bench/probe.py [--tasks 1500] [--seed 0] [--types integer,stream,dict,sort] [--nodes clean,...]
(about 30 minutes on a quiet 2-core machine; --types: another application's mix of task types)
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import statistics
import sys
import tempfile
import time

from scipy import stats

from causewatch.probe.build import build_kit
from causewatch.probe.kit import Worker
from causewatch.probe.quality import format_quality
from causewatch.probe.run import run_kit
from causewatch.probe.workloads import masterworker as mw
from causewatch.probe.workloads.nodes import CPU_HOG, MEMBW_HOG, cpu_quota, gather_hog, hog, quota_available

APP_CPU, OTHER_CPU = 0, 1


def generic_loop() -> float:
    """The generic rating: seconds for a fixed integer loop (median of 3)."""
    def once():
        t0 = time.perf_counter()
        x = 0
        for i in range(2_000_000):
            x = (x + i * i) % 1000003
        return time.perf_counter() - t0
    return statistics.median(once() for _ in range(3))


def report(rows: list[dict], tasks: int) -> None:
    """Per node: the two runs, the probe's prediction and the generic one against their mean; then the goals."""
    print(f"\n{'node':<10} {'runs s':>15} {'apart':>6} {'probe pred':>10} {'interval':>16} {'err':>6} {'stretch':>7} "
          f"{'cpu err':>7} {'probe/run':>9} {'generic':>8} {'err':>6}")
    for r in rows:
        truth, probe = statistics.mean(r["runs"]), r["probe"]
        r["truth"], r["err"] = truth, abs(probe["predicted_seconds"] - truth) / truth
        r["err_after"] = abs(probe["predicted_seconds"] - r["runs"][1]) / r["runs"][1]
        r["generic_err_after"] = abs(r["generic"] - r["runs"][1]) / r["runs"][1]
        r["generic_err"] = abs(r["generic"] - truth) / truth
        r["apart"] = abs(r["runs"][0] - r["runs"][1]) / truth
        cpu_err = probe["predicted_cpu_seconds"] / statistics.mean(r["cpu"]) - 1
        stretch = f"{probe['stretch']:.2f}" if probe["stretch"] is not None else "-"
        print(f"{r['node']:<10} {'%.1f / %.1f' % r['runs']:>15} {100 * r['apart']:>5.1f}% "
              f"{probe['predicted_seconds']:>10.2f} "
              f"{'[%.1f, %.1f]' % (probe['lo'], probe['hi']):>16} {100 * r['err']:>5.1f}% {stretch:>7} "
              f"{100 * cpu_err:>+6.1f}% {100 * probe['probe_seconds'] / truth:>8.1f}% {r['generic']:>8.2f} "
              f"{100 * r['generic_err']:>5.1f}%")
    truth = [r["truth"] for r in rows]
    rho_probe = stats.spearmanr(truth, [r["probe"]["predicted_seconds"] for r in rows]).statistic
    rho_generic = stats.spearmanr(truth, [r["generic"] for r in rows]).statistic
    fraction = statistics.median(r["probe"]["probe_seconds"] / r["truth"] for r in rows)
    inside = sum(r["probe"]["lo"] <= run <= r["probe"]["hi"] for r in rows for run in r["runs"])
    print("\n(runs: the whole workload before and after the probe; apart: their difference over their mean; "
          "cpu err: the predicted CPU task-seconds against the runs'; stretch: wall per CPU second in the probe)")
    print(f"median error against the mean of a node's two runs: "
          f"probe {100 * statistics.median(r['err'] for r in rows):.1f} %, "
          f"generic {100 * statistics.median(r['generic_err'] for r in rows):.1f} %  (goal: probe <= 5 %)")
    print(f"median error against the run after the probe alone (a broker's order): probe "
          f"{100 * statistics.median(r['err_after'] for r in rows):.1f} %, generic "
          f"{100 * statistics.median(r['generic_err_after'] for r in rows):.1f} %; a node's two runs differ by "
          f"{100 * statistics.median(r['apart'] for r in rows):.1f} % (median)")
    print(f"runs inside the probe's interval: {inside} of {2 * len(rows)}")
    print(f"rank correlation with the true order (Spearman): probe {rho_probe:.2f}, generic {rho_generic:.2f}")
    print(f"probe time / full run: median {100 * fraction:.1f} % at {tasks} tasks; the probe's time does not "
          f"grow with the run, so <= 2 % from about {int(tasks * fraction / 0.02)} tasks")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1500,
                        help="tasks of the full run (default 1500, about a minute on a clean node: the probe's "
                             "time is fixed, the run's grows)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--types", default=",".join(mw.DEFAULT_TYPES),
                        help=f"the application's task types, of {', '.join(mw.TASK_TYPES)} (default: the bundled mix)")
    parser.add_argument("--nodes", help="comma-separated node names to emulate (default: all)")
    args = parser.parse_args()
    os.sched_setaffinity(0, {APP_CPU})   # the application's "node" is CPU 0; spawned workers inherit it
    try:
        tasks = mw.make_tasks(args.tasks, args.seed, types=mw.parse_types(args.types))
    except ValueError as e:
        parser.error(f"--types: {e}")
    nodes = {"clean": contextlib.nullcontext, "membw-hog": lambda: hog(MEMBW_HOG, OTHER_CPU),
             **{f"gather-{name}": functools.partial(hog, gather_hog(mib), OTHER_CPU)
                for name, mib in (("32M", 32), ("256M", 256), ("1G", 1024))},
             "cpu-hog": lambda: hog(CPU_HOG, APP_CPU)}
    if quota_available():
        # a mildly slower CPU: the generic rating puts it behind the bandwidth-starved node, the truth not always
        nodes["quota-80%"] = lambda: cpu_quota(0.8)
        nodes["quota-50%"] = lambda: cpu_quota(0.5)
    else:
        print("(cgroup CPU quota not writable here: the quota nodes are skipped)")
    if args.nodes:
        wanted = args.nodes.split(",")
        if unknown := [n for n in wanted if n not in nodes]:
            parser.error(f"--nodes: no node {', '.join(unknown)} here (nodes: {', '.join(nodes)})")
        nodes = {n: nodes[n] for n in wanted}
    worker = Worker(callable="causewatch.probe.workloads.masterworker:run_task")

    t0 = time.perf_counter()
    # the bench measures whatever the machine gives it: the kit's quality is printed, not enforced
    kit = build_kit("mw", worker, tasks, tempfile.mkdtemp(prefix="cw-bench-kit-"), workers=1, seed=args.seed,
                    max_spread=1.0, max_other_cpu=1.0)
    print(f"kit: {len(kit['phases'])} phases (SimPoint k = {kit['simpoint']['k']}) from {args.tasks} tasks, "
          f"built in {time.perf_counter() - t0:.1f} s; "
          f"reference {kit['reference_seconds']:.2f} task-s; {format_quality(kit)}", flush=True)
    ref_loop = generic_loop()

    rows = []
    load_before = os.getloadavg()[0]
    for name, emulate in nodes.items():
        with emulate():
            before = mw.run_master(tasks, workers=1)
            probe, loop = run_kit(kit, repeats=3), generic_loop()
            after = mw.run_master(tasks, workers=1)
        rows.append({"node": name, "runs": (before["task_seconds"], after["task_seconds"]),
                     "cpu": (before["task_cpu_seconds"], after["task_cpu_seconds"]), "probe": probe,
                     "generic": kit["reference_seconds"] * loop / ref_loop})
        print(f"  measured {name}", flush=True)
    report(rows, args.tasks)
    print(f"\n1-minute load average {load_before:.1f} before the nodes, {os.getloadavg()[0]:.1f} after "
          f"(this run's own share is about 1-2; more is other tenants, whose drift these figures include)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
