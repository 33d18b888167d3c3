"""A causal model learnt on request and its report: the `learn` verb on a store's tasks or samples (run
where the store is read: the daemon's API worker, or the CLI on a stopped store's file), and `causewatch
learn` / `experiment` on a table of their own. A CLI that asks a daemon so loads none of the analysis
stack: the daemon's workers have it loaded already (docs/memory.md).

`Options` holds the learner's and the report's settings as the CLI's flags give them; `stored(con, …)`
reads the daemon's tasks or samples as the causal job sees them; `learn(df, inputs, drop, options)`
returns the report, JSON-able: what `causewatch learn` prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from causewatch.analytics.causal import Background, BackgroundError, CIError, PCLearner, features, make_ci_test
from causewatch.analytics.phases import PhaseTracker
from causewatch.daemon import readers, verbs
from causewatch.daemon.cursor import Cursor
from causewatch.errors import InputError

STORED = ("tasks", "samples")
ESTIMATORS = ("auto", "kde", "rcot", "lemeire", "fisher-z", "g2")


@dataclass
class Options:
    """columns: the variables to use (None: all usable); discrete: columns to treat as discrete; tiers
    "NAME:a,b", forbid "a-b", require "a->b": background knowledge; the rest: the learner and the report."""
    columns: list[str] | None = None
    discrete: list[str] = field(default_factory=list)
    tiers: list[str] = field(default_factory=list)
    forbid: list[str] = field(default_factory=list)
    require: list[str] = field(default_factory=list)
    max_depth: int = 3
    estimator: str = "auto"
    alpha: float | None = None
    equivalences: bool = True
    submodels: bool = False
    dot: bool = False
    tetrad: bool = False


def names(text: str | None) -> list[str]:
    """A comma-separated list's names."""
    return [v.strip() for v in (text or "").split(",") if v.strip()]


def stored(con: Cursor, data: str, app: str | None = None, metric: list[str] | None = None, bucket: float | None = None,
           rows: int = verbs.LEARN_ROWS) -> tuple[pd.DataFrame, list[str], tuple[str, ...]]:
    """The store's `tasks` (params and counters unpacked, a code phase: the variables its causal job has)
    or `samples` (one column per scope/metric, a row per node and time bucket), the newest `rows` of
    them (0: all); with the columns known to be inputs (task parameters) and the bookkeeping columns that
    are not variables."""
    if data not in STORED:
        raise InputError(f"data: expected one of {', '.join(STORED)}, got {data!r}")
    if app and data != "tasks":
        raise InputError("--app applies only to tasks")
    if (metric or bucket) and data != "samples":
        raise InputError("--metric and --bucket apply only to samples")
    if data == "tasks":
        tasks, pkeys, ckeys = readers.tasks.task_df(con, app, last=rows or None)
        df, inputs = features.name_task_columns(tasks, pkeys, ckeys)
        if df.empty:
            raise InputError("no tasks stored" + (f" of app {app!r}" if app else ""))
        return features.with_code_phase(df, PhaseTracker()), inputs, tuple(features.BOOKKEEPING)
    long = readers.samples.samples_df(con, metric)
    if long.empty:
        raise InputError("no samples stored" + (f" of {', '.join(metric)}" if metric else ""))
    wide = features.samples_wide(long, bucket or 1.0)
    return (wide.iloc[-rows:].reset_index(drop=True) if rows else wide), [], ("node", "t")


def background(options: Options, inputs: list[str]) -> Background:
    tiers: dict[str, list[str]] = {}
    for spec in options.tiers:
        name, sep, vs = spec.partition(":")
        if not sep or not name or not names(vs):
            raise InputError(f"--tier {spec!r}: expected NAME:a,b (e.g. inputs:n,dtype)")
        tiers.setdefault(name, []).extend(names(vs))
    if inputs and "inputs" not in tiers:
        tiers["inputs"] = inputs
    forbidden = []
    for spec in options.forbid:
        a, sep, b = spec.partition("-")
        if not sep or not a or not b or b.startswith(">"):
            raise InputError(f"--forbid {spec!r}: expected a-b")
        forbidden.append((a.strip(), b.strip()))
    required = []
    for spec in options.require:
        a, sep, b = spec.partition("->")
        if not sep or not a or not b:
            raise InputError(f"--require {spec!r}: expected a->b")
        required.append((a.strip(), b.strip()))
    return Background(tiers=tiers, forbidden=forbidden, required=required)


def variables(df: pd.DataFrame, options: Options, drop: tuple[str, ...] = ()):
    """The model's variables by the shared preparation (analytics.causal.features.model_variables)."""
    wanted = options.columns or None
    if wanted:
        missing = [c for c in wanted if c not in df.columns]
        if missing:
            raise InputError(f"--columns: no column(s) {missing}; the data has {list(df.columns)}")
    unknown = [c for c in options.discrete if c not in df.columns]
    if unknown:
        raise InputError(f"--discrete: no column(s) {unknown}; the data has {list(df.columns)}")
    chosen = features.model_variables(df, wanted, drop)
    if chosen.data.shape[1] < 2:
        raise InputError(f"need at least 2 columns that vary over complete rows; got {chosen.summary()}")
    return chosen


def learn(df: pd.DataFrame, inputs: list[str], drop: tuple[str, ...], options: Options) -> dict:
    """PC-stable over the model's variables of `df` with the options' background; the report."""
    chosen = variables(df, options, drop)
    data = chosen.data
    bg = background(options, [c for c in inputs if c in data.columns])
    if options.estimator not in ESTIMATORS:
        raise InputError(f"estimator: expected one of {', '.join(ESTIMATORS)}, got {options.estimator!r}")
    params = {} if options.estimator == "lemeire" or options.alpha is None else {"alpha": options.alpha}
    try:
        learner = PCLearner(ci_test=make_ci_test(options.estimator, **params), max_depth=options.max_depth,
                            background=bg, discrete=[d for d in options.discrete if d in data.columns],
                            equivalences=options.equivalences).fit(data)
    except (BackgroundError, CIError, ValueError) as e:
        raise InputError(str(e)) from None
    return report(learner, options, chosen.summary())


def report(learner: PCLearner, options: Options, summary: str = "") -> dict:
    """{summary, nodes, edges, equivalences, ci_tests, ci_test, alpha} and, when asked, submodels and the
    graph as DOT and TETRAD text."""
    model = learner.model_
    test = learner.ci_test.chosen(learner.tested_) if hasattr(learner.ci_test, "chosen") else learner.ci_test
    out = {k: v for k, v in model.to_dict().items() if k in ("nodes", "edges", "equivalences")}
    out.update(summary=summary, ci_tests=learner.n_tests_, ci_test=test.name, alpha=getattr(test, "alpha", None))
    if options.submodels:
        out["submodels"] = {v: {"parents": list(s.parents), "kind": s.kind, "formula": s.formula,
                                "bits": round(s.bits, 3)} for v, s in model.fit_submodels().items()}
    if options.dot:
        out["dot"] = model.to_dot()
    if options.tetrad:
        out["tetrad"] = model.to_tetrad()
    return out
