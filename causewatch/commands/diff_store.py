"""`causewatch diff`'s store form: an app's tasks in two time ranges of a daemon's store (`--db` or
`--daemon`), read through the verbs any data command asks (`models`, `tasks`) and made the variables its
causal job learns from (analytics/causal/features.py: params and counters named, a code phase), the task
parameters its inputs. A range not given is the task-start window of the scope's baseline model (the
baseline) or of its newest model (the other), so the plain form compares the baseline's model with now.
"""

from __future__ import annotations

from causewatch.commands.diagnose_store import window
from causewatch.daemon import verbs
from causewatch.errors import InputError


def _model_window(versions: list[dict], baseline: bool, scope: str) -> tuple[float, float]:
    """The task-start window of the scope's baseline model (or its newest), from the `models` verb."""
    chosen = [v for v in versions if v["baseline"]] if baseline else versions[:1]
    if not chosen:
        what = "baseline model yet" if baseline else "model"
        raise InputError(f"--scope {scope}: has no {what}; give --{'baseline' if baseline else 'incident'}-window "
                         "START,END")
    return float(chosen[0]["window_start"]), float(chosen[0]["window_end"])


def spans(source, scope: str, baseline_window: str | None, incident_window: str | None
          ) -> tuple[tuple[float, float], tuple[float, float]]:
    """The two ranges: as given (START,END), else the models' windows."""
    given = (baseline_window, "--baseline-window"), (incident_window, "--incident-window")
    versions = None if all(text for text, _ in given) else source.read(verbs.MODELS, scope=scope)
    return tuple(window(text, option) if text else _model_window(versions, option == "--baseline-window", scope)
                 for text, option in given)


def store_windows(args):
    """(baseline rows, incident rows, inputs, what they are): the app's tasks started in each range."""
    from causewatch.commands.source import open_source
    if not args.scope.startswith("app:"):
        raise InputError(f"--scope {args.scope}: expected app:APP (a diff compares an app's tasks)")
    with open_source(args) as source:
        return task_windows(source, args.scope, spans(source, args.scope, args.baseline_window, args.incident_window))


def task_windows(source, scope: str, ranges):
    """(baseline rows, incident rows, inputs, what they are): scope app:APP's tasks started in each
    (start, end) range, read through `source`'s verbs as the causal job's variables."""
    import pandas as pd

    from causewatch.analytics.causal import features
    from causewatch.analytics.phases import PhaseTracker
    app = scope.removeprefix("app:")
    tasks = source.read(verbs.TASKS, app=app, limit=None)
    params, counters = tasks.attrs.get("params", {}), tasks.attrs.get("counters", {})
    df, inputs = features.name_task_columns(tasks, params, counters)
    df = features.with_code_phase(df.reset_index(drop=True), PhaseTracker())
    parts = [df[(df["t_start"] >= a) & (df["t_start"] <= b)] for a, b in ranges]
    for (a, b), part, name in zip(ranges, parts, ("baseline", "incident")):
        if part.empty:
            raise InputError(f"--{name}-window {a:g},{b:g}: the store holds no tasks of app {app} started then")
    columns = list(dict.fromkeys([*parts[0].columns, *parts[1].columns]))
    what = f"{scope} {ranges[0][0]:g},{ranges[0][1]:g} -> {ranges[1][0]:g},{ranges[1][1]:g}"
    before, after = (pd.DataFrame(p).reindex(columns=columns) for p in parts)
    return before, after, inputs, what
