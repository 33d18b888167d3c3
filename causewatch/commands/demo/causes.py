"""Why each anomaly was raised, as far as the demo can tell, and the contention its tasks met: the rows
an anomaly was raised on (its evidence's `raised_on`, the causal job's) timed against the hog, else
against the baseline's tasks and the machine's own load."""

from __future__ import annotations

import math

from causewatch.commands.demo.parts import APP, SCOPE
from causewatch.daemon import verbs

WAIT = "cpu_wait_seconds"   # the contended resource's variable in each task record
DURATION = "duration"       # ...which a model may hold instead (the wait as most of a task's time)
MOVED = 1.25                # tasks waiting this factor more (or less) for a CPU than the baseline's, or this
                            # factor more (fewer) processes runnable on the machine: other work moved


def rounded(v):
    return None if v is None else round(float(v), 4)


def task_waits(api, origin: float):
    """The workload's tasks (/api/tasks): start (`t`, seconds after `origin`), `duration`, the seconds
    waited for a CPU (`wait`) and per second of CPU used (`ratio`); None if the records carry no wait."""
    df = api.read(verbs.TASKS, app=APP)
    column = next((c for c, key in df.attrs.get("counters", {}).items() if key == WAIT), None)
    if column is None:
        return None
    return df.assign(t=df["t_start"] - origin, wait=df[column], ratio=df[column] / df["cpu_seconds"])[
        ["t", "duration", "wait", "ratio"]]


def baseline_of(models: list[dict]) -> dict | None:
    """The version among /api/models' that is its scope's baseline, or None while there is none."""
    return next((m for m in models if m["baseline"]), None)


def contended(api, models: list[dict], tasks, origin: float) -> tuple[str, str | None, str]:
    """The variable of the scope's baseline model the hog's contention shows in, why when it is not the wait and the
    short form the verdict's line gives (else None and ""): on a loaded machine a task's wait is most of its time,
    and the model leaves it out as a linear copy of duration (features.COPY_R), which then carries it; or the model
    orients duration -> wait, so the wait's mechanism is judged given the task time that holds it, which hides the
    change (a quiet-machine test run lost the story so, in 1 of 6)."""
    base = baseline_of(models)
    graph = api.read(verbs.MODEL, scope=SCOPE, model_id=base["model_id"]) if base else {}
    nodes = graph.get("nodes", [])
    if any(e["src"] == DURATION and e["dst"] == WAIT and e["directed"] for e in graph.get("edges", [])):
        return DURATION, (f"the baseline model has {DURATION} -> {WAIT}: the wait's change is judged given the "
                          f"task time, which holds it, so the hog shows in {DURATION}"), \
            f"the model has {DURATION} -> {WAIT}: {DURATION} shows it"
    if WAIT in nodes or DURATION not in nodes:
        return WAIT, None, ""
    why = f"{WAIT} is not a variable of the baseline model, so the hog shows in {DURATION}"
    if tasks is not None:
        lo, hi = base["window_start"] - origin, base["window_end"] - origin
        window = tasks[(tasks["t"] >= lo) & (tasks["t"] <= hi)]
        r = window["wait"].corr(window[DURATION]) if len(window) > 2 else float("nan")
        why += f" (on the baseline's tasks the two moved together, r = {r:.4f}: the wait was most of a task's time)"
    return DURATION, why, f"{WAIT} is not in the model: {DURATION} holds it"


def median(tasks, lo: float, hi: float) -> float | None:
    """The median wait per CPU second of the tasks started in [lo, hi] (seconds after the origin)."""
    if tasks is None:
        return None
    ratio = tasks["ratio"][(tasks["t"] >= lo) & (tasks["t"] <= hi)]
    return rounded(ratio.median()) if len(ratio) else None


def waits(tasks, hog) -> dict:
    """The contention the tasks met before, during and after the hog: the median of seconds waited
    for a CPU per second of CPU used."""
    if tasks is None or hog.started is None:
        return {}
    started, stopped = hog.span()
    stretches = {"before": (-math.inf, started), "during": (started, stopped), "after": (stopped, math.inf)}
    return {f"wait_per_cpu_s_{name}": median(tasks, lo, hi) for name, (lo, hi) in stretches.items()}


def opened_under_hog(a: dict, story) -> bool:
    """Whether anomaly `a` (`opened_s`: seconds after the origin) is on the contended resource's variable
    and was opened while the hog ran (the story's own when the hog is its cause too)."""
    span = story.hog.span()
    return story.contended in (a["src"], a["dst"]) and span is not None and span[0] <= a["opened_s"] <= span[1]


def by_hog(rows: tuple[float, float] | None, hog) -> bool:
    """Whether tasks started in `rows` (seconds after the origin) ran under the hog."""
    span = hog.span()
    return rows is not None and span is not None and rows[1] >= span[0] and rows[0] <= span[1]


def judged(a: dict, origin: float) -> tuple[float, float] | None:
    """The tasks an anomaly was raised on, as (first, last) start in seconds after `origin`: its
    evidence's `raised_on` (the causal job's; for an edge, the raising version's window); None
    without one."""
    rows = a["evidence"].get("raised_on")
    return None if rows is None else (rows["first_start"] - origin, rows["last_start"] - origin)


def cause(a: dict, story, tasks, base_window) -> str:
    """Why an anomaly was raised, as far as the demo can tell: "the hog" when the tasks it was judged on
    ran while the hog did; else "other work" when those tasks waited for a CPU MOVED times more or
    less than the baseline's (the machine's own load moved); else "unexplained"."""
    from causewatch.analytics.causal.anomalies import ROW_KINDS
    span = judged(a, story.origin)
    if span is None:
        return "unexplained: its evidence names no rows it was raised on"
    lo, hi = span
    on = f"{'the tasks it judged' if a['kind'] in ROW_KINDS else 'the model window'}, {lo:.0f}-{hi:.0f} s"
    if by_hog(span, story.hog):
        if story.contended in (a["src"], a["dst"]):
            return (f"the hog: {on}, ran while it contended for the CPUs, and {story.contended} "
                    + ("is that contention" if story.contended == WAIT else "holds their wait for a CPU"))
        if a["kind"] in ROW_KINDS:
            return f"the hog: {on}, ran while it did (contention moves {a['dst']} too)"
        return f"the hog: {on}, holds tasks that ran under it (edges stay until the window moves past them)"
    if base_window is None:
        return f"unexplained: {on}, outside the hog, and the baseline's window is unknown"
    now, then = median(tasks, lo, hi), median(tasks, *base_window)
    running, before = _mean_runnable(story, lo, hi), _mean_runnable(story, *base_window)
    said = f"{on}, outside the hog: they waited {now} s for a CPU per CPU second, the baseline's tasks {then}"
    if running is not None and before is not None:
        said += f"; {running:.1f} processes runnable on the machine, {before:.1f} then"
    if _moved(now, then) or _moved(running, before):
        return f"other work: {said}, so the machine's other work moved the contention"
    return f"unexplained: {said}, so neither the hog nor the machine's load explains it"


def _mean_runnable(story, lo: float, hi: float) -> float | None:
    """The processes runnable on the machine while tasks started in [lo, hi], on average, the hog's
    own left out."""
    counts = [n for t, _, n in story.loads if lo <= t <= hi]
    return sum(counts) / len(counts) if counts else None


def _moved(now: float | None, then: float | None) -> bool:
    return now is not None and then is not None and then > 0 and not 1 / MOVED < now / then < MOVED


def when(opened: float, resolved: float | None, hog) -> str:
    """An anomaly's opening and resolution (seconds after the origin) said against the hog's stretch."""
    if hog.started is None:
        return "the hog never ran"
    said = f"raised {opened - hog.started:+.1f} s from the hog's start"
    if resolved is None:
        return said + ", still open"
    if hog.stopped is None:
        return said + f", resolved {resolved - hog.started:+.1f} s from its start"
    return said + f", resolved {resolved - hog.stopped:+.1f} s from its stop"
