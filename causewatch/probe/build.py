"""Build a probe kit (ProbeGen after Strube et al.): record one BBV per task, cluster, time the phases.

A task's input stands in for the paper's checkpoint. Steps: BBVs -> SimPoint phases (each task one
variable-length interval) -> rounds of a timed whole run with warm timings of each phase's
representative task between its parts -> manifest.json + inputs/ + SimPoint files in the kit folder.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import platform
import signal
import socket
import time
from pathlib import Path

import numpy as np
import psutil
from tqdm import tqdm

from causewatch.analytics.phases import MergedPhases, SimPoint, formats, merge_close_phases, vectors_to_matrix
from causewatch.errors import InputError
from causewatch.probe import bbvsource, quality
from causewatch.probe.kit import FORMAT, MANIFEST, Worker, instrument_off, measure_all
from causewatch.probe.prediction import prediction_interval, relative_sd, span_stretch

# a phase is CPU-bound when its timings on the (idle) reference keep one thread busy: wall ~ CPU time.
# Its time on another node is then its CPU time there times that node's wall per CPU second.
CPU_BOUND = (0.9, 1.1)
MIN_PART_TASKS = 50   # tasks per part of a reference run, at least (--windows)


def reference_facts() -> dict:
    """The node the kit is built on, as a hello would describe it."""
    cpu_model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"node": socket.gethostname(), "cpu_model": cpu_model, "cores": os.cpu_count(),
            "memory_bytes": psutil.virtual_memory().total, "python": platform.python_version(),
            "platform": platform.platform()}


def _timed_in_worker(args):
    worker_json, task_input = args
    return Worker.from_json(worker_json).timed(task_input)


def _reference(prefix: str, totals: np.ndarray, min_spread: float) -> dict:
    """Mean of the whole runs, their relative sd, and the 95 % interval for one more run here."""
    centre = float(totals.mean())
    rel_sd = relative_sd(totals)
    lo, hi = prediction_interval(centre, 0.0, rel_sd, len(totals), min_spread)
    return {f"{prefix}_seconds": centre, f"{prefix}_rel_sd": rel_sd, f"{prefix}_lo": lo, f"{prefix}_hi": hi}


@instrument_off()   # the build's runs of an instrumented worker send no records
def build_kit(app: str, worker: Worker, tasks: list, out_dir, *, kit: str | None = None, workers: int = 2,
              bbv: str = "auto", max_k: int | None = None, merge_distance: float = 0.5, coverage: float = 0.99,
              seed: int = 0, reference_runs: int = 3, windows: int = 4,
              warmup: int = 1, repeats: int = 5, min_spread: float = 0.05, max_spread: float = quality.MAX_SPREAD,
              max_other_cpu: float = quality.MAX_OTHER_CPU, retries: int = 1, show_progress: bool = False) -> dict:
    """Build a kit for `app` from `tasks` (JSON-able task inputs) in `out_dir`; return its manifest.

    Refuses (InputError) a reference noisier than `max_spread` / `max_other_cpu` after `retries` more
    attempts at the reference runs. Progress bars go to stderr when it is a terminal or `show_progress`.
    An instrumented worker's task and region records of the build's runs are sent nowhere."""
    if len(tasks) < 2:
        raise InputError(f"a kit needs at least 2 tasks, got {len(tasks)}")
    if reference_runs < 1 or windows < 1 or repeats < 1 or warmup < 0:
        raise InputError("reference_runs, windows and repeats must be >= 1 and warmup >= 0")
    if not 0 < coverage <= 1:
        raise InputError(f"coverage must lie in (0, 1], got {coverage}")
    if retries < 0 or max_spread < 0 or not 0 <= max_other_cpu <= 1:
        raise InputError("retries and max_spread must be >= 0 and max_other_cpu must lie in [0, 1]")
    out = Path(out_dir)
    (out / "inputs").mkdir(parents=True, exist_ok=True)
    source = bbvsource.source_for(bbv, worker)
    vectors = []
    with _bar(f"BBVs ({source.name})", len(tasks), show_progress) as step:
        for task in tasks:
            vectors.append(source.record(worker, task))
            step.update()
    model, kit_phases = _cluster(out, vectors, max_k, merge_distance, seed)
    kept = covering(kit_phases.weights_, coverage)
    reps = [int(kit_phases.simpoints_[p]) for p in kept]
    # each part comes after a pause (workers idle, caches cold): only long parts time like the whole run
    windows = max(1, min(windows, len(tasks) // MIN_PART_TASKS))
    runs, timings, quiet = _quiet_reference(worker, tasks, reps, workers, reference_runs, windows, warmup, repeats,
                                            max_spread, max_other_cpu, retries, show_progress)
    per_task = np.median(np.stack(runs), axis=0)       # tasks x (wall, cpu)
    totals = np.array([r.sum(axis=0) for r in runs])     # runs x (wall, cpu)
    covered = np.isin(kit_phases.labels_, kept)
    rows = [_phase_row(out, p, tasks[rep], rep, kit_phases, per_task, covered, [t[i] for t in timings])
            for i, (p, rep) in enumerate(zip(kept, reps))]
    bound = [i for i, row in enumerate(rows) if row["cpu_bound"]]
    manifest = {
        "format": FORMAT, "app": app, "kit": kit or f"{app}-{time.strftime('%Y%m%dT%H%M%S')}",
        "created": time.time(), "reference": reference_facts(), "worker": worker.to_json(),
        "bbv_source": source.name, "bbv_kind": source.kind, "tasks": len(tasks), "workers": workers,
        "simpoint": {"k": int(model.k_), "max_k": model.max_k, "seed": seed,
                     "bic": {str(k): v for k, v in model.bic_.items()},
                     "merge_distance": merge_distance, "merged_k": kit_phases.k_, "coverage": coverage},
        "reference_runs": reference_runs, "reference_windows": windows, "warmup": warmup, "repeats": repeats,
        "min_spread": min_spread,
        # task-seconds of the whole workload (mean of the runs), with a 95 % interval for one more run
        **_reference("reference", totals[:, 0], min_spread),
        **_reference("reference_cpu", totals[:, 1], min_spread),
        "covered_weight": float(per_task[covered, 0].sum() / per_task[:, 0].sum()),
        **_stretch("reference_stretch", [t[i] for t in timings for i in bound]),
        "phases": rows,
        "quality": {**quiet, "cpu_bound_phases": len(bound), "phases": len(rows)},
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return manifest


def covering(weights: np.ndarray, coverage: float) -> list[int]:
    """SimPoint's -coveragePct: the largest phases that together hold `coverage` of the weight, in
    phase order. A phase of a few stray intervals costs the probe as much as a big one and moves P by
    its tiny weight; the probe weighs the phases it keeps up to 1."""
    order = np.argsort(-weights, kind="stable")
    n = int(np.searchsorted(np.cumsum(weights[order]), coverage * weights.sum() * (1 - 1e-12))) + 1
    return sorted(int(p) for p in order[:n])


def _quiet_reference(worker: Worker, tasks: list, reps: list[int], workers: int, rounds: int, windows: int,
                     warmup: int, repeats: int, max_spread: float, max_other_cpu: float, retries: int,
                     show_progress: bool) -> tuple[list[np.ndarray], list[list[dict]], dict]:
    """The reference rounds on a machine quiet enough, measured: other processes' CPU share while idle
    before them (too busy: no rounds this attempt) and during them, and the runs' spread; retried, then
    refused, when too noisy."""
    earlier = []
    for attempt in range(retries + 1):
        before = quality.idle_window(quality.RETRY_WAIT if attempt else quality.QUIET_WINDOW)
        busy = quality.noise(None, before["other_cpu"], max_spread, max_other_cpu, "before the reference runs")
        if busy:   # runs now would be as noisy: wait for the load to pass, not minutes of runs
            earlier.append("; ".join(busy))
            continue
        meter = quality.CpuMeter()   # read once every child of the rounds is reaped: their CPU is ours
        with _bar("reference runs", rounds * (len(tasks) + windows * len(reps)), show_progress) as step:
            runs, timings = _reference_rounds(worker, tasks, reps, workers, rounds, windows, warmup, repeats,
                                              step.update)
        during = meter.read()
        spread = relative_sd([r[:, 0].sum() for r in runs])
        reasons = quality.noise(spread, during["other_cpu"], max_spread, max_other_cpu)
        if not reasons:
            return runs, timings, {"spread": spread, "max_spread": max_spread, "other_cpu": during["other_cpu"],
                                   "steal": during["steal"], "load1": during["load1"],
                                   "other_cpu_before": before["other_cpu"], "max_other_cpu": max_other_cpu,
                                   "retries": attempt, "retried_because": earlier}
        earlier.append("; ".join(reasons))
    attempts = f"{retries + 1} attempt{'s' if retries else ''}"
    raise InputError(f"probe build: the reference is too noisy to trust ({attempts}): "
                     + " | ".join(earlier) + ". A kit's prediction intervals carry its reference's noise: build on "
                     "a quiet machine (stop other work), or accept the noise with --max-spread / --max-other-cpu")


def _bar(label: str, total: int, force: bool) -> tqdm:
    # disable=None: tqdm draws only when stderr is a terminal
    return tqdm(total=total, desc=label, disable=False if force else None)


def _reference_rounds(worker: Worker, tasks: list, reps: list[int], workers: int, rounds: int, windows: int,
                      warmup: int, repeats: int, progress) -> tuple[list[np.ndarray], list[list[dict]]]:
    """`rounds` times: the whole workload as the application runs it (`workers` spawned processes),
    (wall, cpu) per task, with the representatives timed after each of `windows` equal parts of it.

    Timed inside the runs, the representatives sample the node over the same minutes as T_ref:
    other load, clock and memory drift over minutes, and a t_i(ref) timed at a few moments apart
    from the runs put every node's prediction off by the same few per cent.
    """
    ctx = multiprocessing.get_context("spawn")
    worker_json = worker.to_json()
    runs, timings = [], []
    for _ in range(rounds):
        run = []
        # workers settle before their first task, as the bundled workload's own do
        with _started_pool(ctx, workers, worker) as pool:
            for part in np.array_split(np.arange(len(tasks)), windows):
                for timing in pool.imap(_timed_in_worker, [(worker_json, tasks[i]) for i in part]):
                    run.append(timing)
                    progress()
                timings.append(measure_all(worker, [tasks[r] for r in reps], warmup, repeats, progress))
        runs.append(np.array(run))
    return runs, timings


def _started_pool(ctx, workers: int, worker: Worker):
    """A pool of `workers` processes, SIGINT held while they start: one that lands between a worker's
    spawn and the write of its start-up data leaves the worker reading an empty pipe (an EOFError
    traceback on the terminal). Held, it stops the pool once all started."""
    held = []
    previous = signal.signal(signal.SIGINT, lambda *_: held.append(True))
    try:
        pool = ctx.Pool(workers, initializer=Worker.settle, initargs=(worker,))
    finally:
        signal.signal(signal.SIGINT, previous)
    if held and callable(previous):
        pool.terminate()
        previous(signal.SIGINT, None)
    return pool


def _stretch(key: str, timings: list[dict]) -> dict:
    """Wall per CPU second of the CPU-bound phases' timing blocks, pooled, and its squared relative
    standard error (none without a CPU-bound phase)."""
    if not timings:
        return {}
    value, se2 = span_stretch(timings)
    return {key: value, f"{key}_se2": se2}


def _cluster(out: Path, vectors: list[dict], max_k: int | None, merge_distance: float,
             seed: int) -> tuple[SimPoint, MergedPhases]:
    """Each task one variable-length interval weighted by its size; SimPoint's phases closer than
    `merge_distance` are joined (each phase costs the probe time); the SimPoint files of the merged
    phases go next to the kit."""
    X, keys = vectors_to_matrix(vectors)
    if max_k is None:
        # SimPoint's BIC drifts toward one phase per interval when intervals are few; sqrt(n) bounds it
        max_k = int(np.ceil(np.sqrt(len(vectors)))) + 1
    try:
        # SimPoint 3.2's own starts and BIC: with a few dozen tasks k-means++ finds the optima its sampled
        # starts miss and the BIC rises to max_k (docs/perf-log.md, "A kit's SimPoint starts")
        model = SimPoint(max_k=max_k, fixed_length=False, seed=seed, init="samp", variance_floor=0.0).fit(X)
    except formats.PhaseError as e:
        raise InputError(f"probe build: clustering the task vectors failed: {e}") from None
    merged = merge_close_phases(X, model.labels_, merge_distance)
    formats.write_frequency_vectors(out / "tasks.bb", X)
    (out / "tasks.keys").write_text("".join(f"{k}\n" for k in keys))
    formats.write_simpoints(out / "tasks.simpoints", merged.simpoints_)
    formats.write_weights(out / "tasks.weights", merged.weights_)
    formats.write_labels(out / "tasks.labels", merged.labels_, merged.distances_)
    return model, merged


def _phase_row(out: Path, p: int, task_input, rep: int, kit_phases: MergedPhases, per_task: np.ndarray,
               covered: np.ndarray, timings: list[dict]) -> dict:
    """One phase of the manifest: its share of the covered reference time (and CPU time), representative,
    its timings over the windows (the mean and its standard error) and whether it is CPU-bound."""
    members = kit_phases.labels_ == p
    name = f"phase-{p}"
    (out / "inputs" / f"{name}.json").write_text(json.dumps(task_input))
    return {"phase": p, "tasks": int(members.sum()), "representative": rep,
            "weight": float(per_task[members, 0].sum() / per_task[covered, 0].sum()),
            "weight_cpu": float(per_task[members, 1].sum() / max(per_task[covered, 1].sum(), 1e-12)),
            "weight_size": float(kit_phases.weights_[p]),
            "input": task_input, "input_file": f"inputs/{name}.json",
            **_mean_se("ref_seconds", "ref_se", [t["seconds"] for t in timings], timings[0]["sd"],
                       timings[0]["repeats"]),
            **_mean_se("ref_cpu_seconds", "ref_cpu_se", [t["cpu_seconds"] for t in timings], timings[0]["cpu_sd"],
                       timings[0]["repeats"]),
            "cpu_bound": cpu_bound(timings)}


def cpu_bound(timings: list[dict]) -> bool:
    """Whether a phase's timing blocks kept one thread busy: wall per CPU second within CPU_BOUND."""
    if sum(t["span_cpu_seconds"] for t in timings) <= 0:
        return False
    return CPU_BOUND[0] <= span_stretch(timings)[0] <= CPU_BOUND[1]


def _mean_se(mean_key: str, se_key: str, means: list[float], sd: float, repeats: int) -> dict:
    """The mean of per-window means and its standard error: from the windows' scatter when there are
    several (it holds the node's drift over the runs), else from the one window's repeats."""
    values = np.array(means)
    se = values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else sd / np.sqrt(repeats)
    return {mean_key: float(values.mean()), se_key: float(se)}
