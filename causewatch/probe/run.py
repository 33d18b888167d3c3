"""Run a probe kit on this node and predict the application's time here (Strube et al., formulas 1-2).

Each phase's representative runs with a warm-up and repeats; P = sum_i w_i * t_i(node) / t_i(ref)
with w_i the phase's fraction of reference time, and T_pred = T_ref * P. A CPU-bound phase's
t_i(node) is its CPU time here times the node's wall per CPU second (the stretch), pooled over all
CPU-bound phases: a quota or a shared core stretches every phase alike, and a 40 ms timing is
either throttled or not, while the probe as a whole sees the node's share. The interval combines
the standard errors of the timings here and of the reference with the spread of whole runs.
"""

from __future__ import annotations

import time

from causewatch.errors import InputError
from causewatch.probe import quality
from causewatch.probe.kit import Worker, check_loadable, check_manifest, load_manifest, measure_all
from causewatch.probe.prediction import prediction_interval, ratio_se2, relative_se2, span_stretch

IDLE_WINDOW = 1.0   # seconds other processes must stay under the limit for the node to count as idle


def run_kit(manifest: dict, warmup: int | None = None, repeats: int | None = None, progress=None) -> dict:
    """Time every phase's representative here; return the prediction for wall and CPU task-seconds."""
    check_manifest(manifest)
    worker = Worker.from_json(manifest["worker"])
    warmup = manifest.get("warmup", 1) if warmup is None else warmup
    repeats = manifest.get("repeats", 5) if repeats is None else repeats
    if repeats < 1 or warmup < 0:
        raise InputError("repeats must be >= 1 and warmup >= 0")
    start = time.perf_counter()
    timings = measure_all(worker, [p["input"] for p in manifest["phases"]], warmup, repeats, progress)
    stretch = _stretch(manifest, timings)
    rows = [_row(phase, here, stretch) for phase, here in zip(manifest["phases"], timings)]
    wall = _predict(manifest, rows, "reference", "weight", "ratio", stretch["se2"] if stretch else 0.0)
    cpu = _predict(manifest, rows, "reference_cpu", "weight_cpu", "cpu_ratio", 0.0)
    return {"app": manifest["app"], "kit": manifest["kit"], **wall,
            "predicted_cpu_seconds": cpu["predicted_seconds"], "cpu_lo": cpu["lo"], "cpu_hi": cpu["hi"],
            "cpu_ratio": cpu["ratio"], "reference_seconds": manifest["reference_seconds"],
            "stretch": stretch["here"] if stretch else None,
            "reference_stretch": manifest.get("reference_stretch"),
            "probe_seconds": time.perf_counter() - start, "phases": rows}


def _stretch(manifest: dict, timings: list[dict]) -> dict | None:
    """The node's wall per CPU second over the CPU-bound phases' blocks, against the reference's:
    None when the kit marks no phase CPU-bound (then every phase compares wall times)."""
    bound = [t for phase, t in zip(manifest["phases"], timings) if phase.get("cpu_bound")]
    if not bound or "reference_stretch" not in manifest:
        return None
    here, here_se2 = span_stretch(bound)
    return {"here": here, "factor": here / manifest["reference_stretch"],
            "se2": here_se2 + manifest.get("reference_stretch_se2", 0.0)}


def _row(phase: dict, here: dict, stretch: dict | None) -> dict:
    """One phase: its time here against the reference, and the ratio's squared relative standard error
    (for a CPU-bound phase without the stretch's, which is common to all of them)."""
    n = here["repeats"]
    # a kit without CPU timings (hand-written) predicts no CPU time rather than failing
    ref_cpu = max(phase.get("ref_cpu_seconds", 0.0), 1e-9)
    cpu_ratio = here["cpu_seconds"] / ref_cpu
    cpu_se2 = (relative_se2(here["cpu_seconds"], here["cpu_sd"], n)
               + relative_se2(ref_cpu, phase.get("ref_cpu_se", 0.0), 1))
    wall_ratio = here["seconds"] / phase["ref_seconds"]
    wall_se2 = (relative_se2(here["seconds"], here["sd"], n)
                + relative_se2(phase["ref_seconds"], phase.get("ref_se", 0.0), 1))
    stretched = bool(stretch and phase.get("cpu_bound"))
    return {"phase": phase["phase"], "weight": phase["weight"], "weight_cpu": phase.get("weight_cpu", phase["weight"]),
            "seconds": here["seconds"], "median": here["median"], "ref_seconds": phase["ref_seconds"],
            "wall_ratio": wall_ratio, "stretched": stretched,
            "ratio": cpu_ratio * stretch["factor"] if stretched else wall_ratio,
            "ratio_se2": cpu_se2 if stretched else wall_se2,
            "cpu_seconds": here["cpu_seconds"], "cpu_ratio": cpu_ratio, "cpu_ratio_se2": cpu_se2}


def _predict(manifest: dict, rows: list[dict], reference: str, weight: str, ratio: str, stretch_se2: float) -> dict:
    """T_pred = T_ref * P with P = sum w_i r_i / sum w_i, and its 95 % interval for one whole run here.
    The stretch's error moves all stretched phases together: it enters once, by their share of P."""
    weights, ratios = [r[weight] for r in rows], [r[ratio] for r in rows]
    p = sum(w * r for w, r in zip(weights, ratios)) / sum(weights)
    stretched = sum(w * r for w, r, row in zip(weights, ratios, rows) if row["stretched"]) / sum(weights)
    se2 = ratio_se2(weights, ratios, [r[f"{ratio}_se2"] for r in rows]) + (stretched / p) ** 2 * stretch_se2
    predicted = manifest.get(f"{reference}_seconds", 0.0) * p
    lo, hi = prediction_interval(predicted, se2, manifest.get(f"{reference}_rel_sd", 0.0),
                                 manifest.get("reference_runs", 1), manifest.get("min_spread", 0.05))
    return {"predicted_seconds": predicted, "lo": lo, "hi": hi, "ratio": p}


def wait_for_idle(max_other_cpu: float, max_wait: float, window: float = IDLE_WINDOW) -> dict:
    """Measure others' share of the machine's CPU in `window`s until one is at most `max_other_cpu`, or
    `max_wait` seconds have passed: {other_cpu_before (the last window's), idle_waited}."""
    start = time.perf_counter()
    while True:
        seen = quality.idle_window(window)["other_cpu"]
        waited = time.perf_counter() - start
        if seen <= max_other_cpu or waited >= max_wait:
            return {"other_cpu_before": seen, "idle_waited": waited}


def run_when_idle(manifest: dict, max_other_cpu: float = quality.MAX_OTHER_CPU, idle_wait: float = 0.0,
                  **run) -> dict:
    """`run_kit` once the node is idle (waiting at most `idle_wait` s; 0: at once), with the node's load:
    `other_cpu`, others' share of its CPU during the probe, and `busy` when that was over `max_other_cpu`."""
    load = {}
    if idle_wait > 0:
        check_loadable(Worker.from_json(manifest["worker"]))   # a worker that cannot load fails now, not after
        load = wait_for_idle(max_other_cpu, idle_wait)
    meter = quality.CpuMeter()   # read after run_kit has reaped its timing interpreter: its CPU is ours
    result = run_kit(manifest, **run)
    other = meter.read()["other_cpu"]
    return {**result, "load": {**load, "other_cpu": other, "max_other_cpu": max_other_cpu,
                               "busy": other > max_other_cpu}}


def probe_result_body(result: dict) -> dict:
    """A run_kit result as the wire's probe_result body."""
    return {"app": result["app"], "kit": result["kit"], "predicted_seconds": result["predicted_seconds"],
            "lo": result["lo"], "hi": result["hi"], "ratio": result["ratio"],
            "probe_seconds": result["probe_seconds"],
            "phases": [{"phase": r["phase"], "weight": r["weight"], "ratio": r["ratio"], "wall_ratio": r["wall_ratio"],
                        "cpu_ratio": r["cpu_ratio"], "stretched": r["stretched"], "seconds": r["seconds"],
                        "ref_seconds": r["ref_seconds"]} for r in result["phases"]],
            "extra": {"predicted_cpu_seconds": result["predicted_cpu_seconds"], "cpu_lo": result["cpu_lo"],
                      "cpu_hi": result["cpu_hi"], "cpu_ratio": result["cpu_ratio"],
                      "reference_seconds": result["reference_seconds"], "stretch": result["stretch"],
                      "reference_stretch": result["reference_stretch"], **result.get("load", {})}}


def handle_run_probe(body: dict, max_other_cpu: float = quality.MAX_OTHER_CPU, idle_wait: float = 0.0) -> dict:
    """What an agent does with a run_probe frame: run the kit (inline manifest, else `kit` as a path) once
    the node is idle (`run_when_idle`) and return the probe_result body to send. Blocks for the wait and
    the probe (seconds)."""
    manifest = body.get("manifest") or load_manifest(body["kit"])
    check_manifest(manifest, f"run_probe {body.get('app')}/{body.get('kit')}")
    if manifest["app"] != body["app"]:
        raise InputError(f"run_probe: the kit is for app {manifest['app']!r}, not {body['app']!r}")
    return probe_result_body(run_when_idle(manifest, max_other_cpu, idle_wait))


def format_table(result: dict) -> str:
    lines = [f"{'phase':>5} {'weight':>7} {'ref s':>9} {'here s':>9} {'wall ratio':>10} {'ratio':>7}"]
    for r in result["phases"]:
        lines.append(f"{r['phase']:>5} {r['weight']:>7.3f} {r['ref_seconds']:>9.4f} {r['seconds']:>9.4f} "
                     f"{r['wall_ratio']:>10.3f} {r['ratio']:>7.3f}{' *' if r['stretched'] else ''}")
    if result["stretch"] is not None:
        lines.append(f"* CPU-bound: CPU-time ratio x stretch {result['stretch']:.3f} wall s per CPU s here "
                     f"/ {result['reference_stretch']:.3f} on the reference")
    lines.append(f"P = {result['ratio']:.3f}; predicted {result['predicted_seconds']:.2f} task-s "
                 f"[{result['lo']:.2f}, {result['hi']:.2f}] (reference {result['reference_seconds']:.2f}); "
                 f"CPU {result['predicted_cpu_seconds']:.2f} [{result['cpu_lo']:.2f}, {result['cpu_hi']:.2f}]; "
                 f"probe took {result['probe_seconds']:.2f} s")
    load = result.get("load")
    if load and load["busy"]:
        lines.append(f"busy: other processes used {100 * load['other_cpu']:.0f} % of this machine's CPU during the "
                     f"probe (limit {100 * load['max_other_cpu']:.0f} %): this node may rank slower than it is")
    return "\n".join(lines)

