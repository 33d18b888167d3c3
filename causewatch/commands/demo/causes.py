"""Each anomaly against the hog and the contention its tasks met: the rows it was raised on (its
evidence's `raised_on`) timed against the hog's stretch, and its cause as the causal job ranked them
(its evidence's `causes`: the demo adds no rule of its own)."""

from __future__ import annotations

import math

from causewatch.commands.demo.parts import APP, NODES, SCOPE
from causewatch.daemon import verbs

WAIT = "cpu_wait_seconds"   # the contended resource's variable in each task record
DURATION = "duration"       # ...which a model may hold instead (the wait as most of a task's time)
WATCHED = next(node for node, watch in NODES if watch)   # the node whose agent watches the workload
NONE = "none beyond the cut"   # an anomaly whose best-ranked cause did not change enough to count (score < 1)


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
    """Whether anomaly `a` (`opened_s`: seconds after the origin) is on the contended resource's variable,
    or has it among its related findings' (one voice), and was opened while the hog ran (the story's own
    when the hog is its cause too)."""
    span = story.hog.span()
    on = story.contended in (a["src"], a["dst"], *a.get("related", ()))
    return on and span is not None and span[0] <= a["opened_s"] <= span[1]


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


def first_cause(a: dict) -> dict | None:
    """The first of an anomaly's candidate causes as the causal job ranked them (its evidence's `causes`)."""
    return next(iter(a["evidence"].get("causes") or []), None)


def by_the_hog(a: dict, story) -> bool:
    """Whether the causal job ranks the hog first among an anomaly's causes (its processes, as the
    agent watching the workload reports them)."""
    first = first_cause(a)
    return first is not None and first["score"] >= 1 and first["unit"] == story.hog.unit(WATCHED)


def cause(a: dict, story) -> str:
    """An anomaly's first candidate cause in words, as the causal job ranked them ("the hog: …" when it is
    the hog), or why there is none."""
    first = first_cause(a)
    if first is None:
        why = a["evidence"].get("causes_ranked", {}).get("why", "raised before causes were ranked")
        return f"not ranked: {why}"
    said = f"{first['unit']} (score {first['score']:.2f}): {first['evidence']}"
    if by_the_hog(a, story):
        return f"the hog: {said}"
    return said if first["score"] >= 1 else f"{NONE}: {said}"


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
