"""`causewatch learn`: offline causal structure learning on a CSV, Parquet file or DuckDB table.

PC-stable with the KDE mutual-information test (or the papers' estimator, Fisher-z, G²), background
knowledge from flags; prints the edges, or JSON, and writes DOT / TETRAD files on request.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from causewatch.commands import check_output, waiting
from causewatch.commands.source import add_source_arguments, open_source
from causewatch.daemon import verbs
from causewatch.errors import InputError

if TYPE_CHECKING:   # for annotations only: the libraries load in the functions, so --help stays light
    import pandas as pd

    from causewatch.analytics.causal import Background, PCLearner

EPILOG = """examples:
  causewatch learn runs.csv --discrete dtype --tier inputs:n,dtype --tier outputs:seconds
  causewatch learn runs.parquet --forbid n-dtype --require n->instructions --max-depth 2 --json
  causewatch learn tasks --app lu --dot lu.dot       # the running daemon's tasks of app lu
  causewatch learn samples --metric cpu_seconds --metric page_faults --bucket 5 --db causewatch.duckdb
  causewatch learn duckdb:exp.duckdb:runs             # any table of a DuckDB file
  causewatch learn runs.csv --estimator lemeire --submodels     # the papers' estimator, fitted formulas

DATA is a .csv / .parquet file, `tasks` or `samples` (read from the daemon at --daemon, or from a
stopped daemon's store with --db), or duckdb:FILE:TABLE. For the daemon's `tasks` the JSON params
and counters become columns (params are inputs unless --tier says otherwise) and task code vectors a
code_phase, as in the daemon's model; its `samples` become one column per scope/metric, one row per
node and --bucket seconds. Columns present in under 80 % of the rows are left out (and said so).
"""


def add_arguments(parser) -> None:
    parser.add_argument("data", help="CSV or Parquet file, `tasks` or `samples` (the daemon's), or duckdb:FILE:TABLE")
    parser.add_argument("--app", help="with tasks, only this app's tasks")
    parser.add_argument("--metric", action="append", metavar="NAME",
                        help="with samples, only this metric (repeatable; default all)")
    parser.add_argument("--bucket", type=float, metavar="SECONDS",
                        help="with samples, the time bucket rows are averaged over (default 1)")
    add_source_arguments(parser)
    add_learning_arguments(parser)


def add_learning_arguments(parser) -> None:
    """The options of the learner and of its output (shared with `causewatch experiment`)."""
    parser.add_argument("--columns", help="comma-separated columns to use (default: all usable)")
    parser.add_argument("--discrete", default="", help="comma-separated discrete columns (text columns always are)")
    parser.add_argument("--tier", action="append", default=[], metavar="NAME:a,b",
                        help="tier of variables; 'inputs' only get outgoing edges, 'outputs' only incoming; "
                             "other names are ordered as given (repeatable)")
    parser.add_argument("--forbid", action="append", default=[], metavar="a-b", help="no edge between a and b")
    parser.add_argument("--require", action="append", default=[], metavar="a->b", help="edge a -> b always present")
    parser.add_argument("--max-depth", type=int, default=3, help="largest conditioning set (default 3)")
    parser.add_argument("--estimator", default="auto", choices=("auto", "kde", "rcot", "lemeire", "fisher-z", "g2"),
                        help="CI test: auto (default: Fisher-z on jointly Gaussian data, counting G² when all "
                             "discrete, else RCoT), kde (calibrated KDE MI), rcot, the papers' KDE MI, Fisher-z, G²")
    parser.add_argument("--alpha", type=float, default=None,
                        help="significance level (not for lemeire; default 0.01, and 0.05 when auto picks G² "
                             "for all-discrete data)")
    parser.add_argument("--no-equivalences", action="store_true", help="plain PC: no information-equivalence rule")
    parser.add_argument("--submodels", action="store_true", help="also fit each node on its parents (MDL)")
    parser.add_argument("--dot", metavar="FILE", help="write the graph as Graphviz DOT")
    parser.add_argument("--tetrad", metavar="FILE", help="write the graph in TETRAD's text format")
    parser.add_argument("--json", action="store_true", help="print {nodes, edges, equivalences} as JSON")


def load_df(spec: str, args) -> tuple[pd.DataFrame, list[str], tuple[str, ...]]:
    """The table DATA names, the columns known to be inputs (task parameters) and the bookkeeping
    columns that are not variables."""
    import pandas as pd
    if spec in STORED:
        return _load_stored(spec, args)
    if spec.startswith("duckdb:"):
        return _load_duckdb(spec, args)
    _only_for(args, "")
    path = Path(spec)
    if not path.exists():
        raise InputError(f"{spec}: no such file (expected a .csv, .parquet or duckdb:FILE:TABLE)")
    try:
        if path.suffix.lower() in (".parquet", ".pq"):
            return pd.read_parquet(path), [], ()
        return pd.read_csv(path), [], ()
    except (ValueError, OSError) as e:
        kind = "Parquet" if path.suffix.lower() in (".parquet", ".pq") else "CSV"
        raise InputError(f"{spec}: cannot read as {kind} ({e})") from None


def _load_duckdb(spec: str, args):
    """duckdb:FILE:TABLE: the daemon's tasks and samples as `tasks`/`samples --db FILE` give them; any
    other table of any DuckDB file as it is."""
    from causewatch.daemon import readers
    _, _, rest = spec.partition(":")
    file, _, table = rest.rpartition(":")
    if not file or not table:
        raise InputError(f"{spec}: expected duckdb:FILE:TABLE")
    if table in STORED:
        args.db = file
        return _load_stored(table, args)
    _only_for(args, table)
    con = readers.shared.open_store(file)
    try:
        return readers.shared.read_table(con, table), [], ()
    finally:
        con.close()


STORED = ("tasks", "samples")


def _only_for(args, table: str) -> None:
    if args.app and table != "tasks":
        raise InputError("--app applies only to tasks")
    if (args.metric or args.bucket) and table != "samples":
        raise InputError("--metric and --bucket apply only to samples")


def _load_stored(table: str, args):
    """The daemon's `tasks` (params and counters unpacked, a code phase: the variables its causal job
    has) or `samples` (one column per scope/metric, a row per node and time bucket), read through
    its API or from its stopped store."""
    from causewatch.analytics.causal import features
    from causewatch.analytics.phases import PhaseTracker
    _only_for(args, table)
    with open_source(args) as source:
        if table == "tasks":
            tasks = source.read(verbs.TASKS, app=args.app)
            df, inputs = features.name_task_columns(tasks, tasks.attrs["params"], tasks.attrs["counters"])
            if df.empty:
                raise InputError("no tasks stored" + (f" of app {args.app!r}" if args.app else ""))
            return features.with_code_phase(df, PhaseTracker()), inputs, tuple(features.BOOKKEEPING)
        long = source.read(verbs.SAMPLES, metric=args.metric)
        if long.empty:
            raise InputError("no samples stored" + (f" of {', '.join(args.metric)}" if args.metric else ""))
        return features.samples_wide(long, args.bucket or 1.0), [], ("node", "t")


def _names(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def background_from_args(args, inputs: list[str]) -> Background:
    from causewatch.analytics.causal import Background
    tiers: dict[str, list[str]] = {}
    for spec in args.tier:
        name, sep, vs = spec.partition(":")
        if not sep or not name or not _names(vs):
            raise InputError(f"--tier {spec!r}: expected NAME:a,b (e.g. inputs:n,dtype)")
        tiers.setdefault(name, []).extend(_names(vs))
    if inputs and "inputs" not in tiers:
        tiers["inputs"] = inputs
    forbidden = []
    for spec in args.forbid:
        a, sep, b = spec.partition("-")
        if not sep or not a or not b or b.startswith(">"):
            raise InputError(f"--forbid {spec!r}: expected a-b")
        forbidden.append((a.strip(), b.strip()))
    required = []
    for spec in args.require:
        a, sep, b = spec.partition("->")
        if not sep or not a or not b:
            raise InputError(f"--require {spec!r}: expected a->b")
        required.append((a.strip(), b.strip()))
    return Background(tiers=tiers, forbidden=forbidden, required=required)


def variables(df: pd.DataFrame, args, drop: tuple[str, ...] = ()) -> pd.DataFrame:
    """The model's variables by the shared preparation (analytics.causal.features), said on stderr."""
    from causewatch.analytics.causal import features
    wanted = _names(args.columns) if args.columns else None
    if wanted:
        missing = [c for c in wanted if c not in df.columns]
        if missing:
            raise InputError(f"--columns: no column(s) {missing}; the data has {list(df.columns)}")
    unknown = [c for c in _names(args.discrete) if c not in df.columns]
    if unknown:
        raise InputError(f"--discrete: no column(s) {unknown}; the data has {list(df.columns)}")
    chosen = features.model_variables(df, wanted, drop)
    if chosen.data.shape[1] < 2:
        raise InputError(f"need at least 2 columns that vary over complete rows; got {chosen.summary()}")
    if not (args.json or getattr(args, "quiet", False)):
        print(f"learning from {chosen.summary()} ...", file=sys.stderr)
    return chosen.data


def learn(df: pd.DataFrame, args, inputs: list[str]) -> PCLearner:
    """PC-stable over `df`'s columns (already the model's variables) with the flags' background."""
    from causewatch.analytics.causal import BackgroundError, CIError, PCLearner, make_ci_test
    discrete = _names(args.discrete)
    bg = background_from_args(args, [c for c in inputs if c in df.columns])
    params = {} if args.estimator == "lemeire" or args.alpha is None else {"alpha": args.alpha}
    try:
        test = make_ci_test(args.estimator, **params)
        learner = PCLearner(ci_test=test, max_depth=args.max_depth, background=bg,
                            discrete=[d for d in discrete if d in df.columns],
                            equivalences=not args.no_equivalences)
        return learner.fit(df)
    except (BackgroundError, CIError, ValueError) as e:
        raise InputError(str(e)) from None


def run(args) -> int:
    check_output(args.dot, "--dot")
    check_output(args.tetrad, "--tetrad")
    df, inputs, drop = load_df(args.data, args)
    data = variables(df, args, drop)
    with waiting("learning", args.json or getattr(args, "quiet", False)):
        learner = learn(data, args, inputs)
    return report(learner, args)


def report(learner: PCLearner, args) -> int:
    """Print the learnt model (text or --json) and write the --dot / --tetrad files."""
    model = learner.model_
    subs = model.fit_submodels() if args.submodels else {}
    test = learner.ci_test.chosen(learner.tested_) if hasattr(learner.ci_test, "chosen") else learner.ci_test
    test_name, alpha = test.name, getattr(test, "alpha", None)
    if args.dot:
        Path(args.dot).write_text(model.to_dot())
    if args.tetrad:
        Path(args.tetrad).write_text(model.to_tetrad())
    if args.json:
        out = {k: v for k, v in model.to_dict().items() if k in ("nodes", "edges", "equivalences")}
        out["ci_tests"] = learner.n_tests_
        out["ci_test"] = test_name
        out["alpha"] = alpha
        if subs:
            out["submodels"] = {v: {"parents": list(s.parents), "kind": s.kind, "formula": s.formula,
                                    "bits": round(s.bits, 3)} for v, s in subs.items()}
        print(json.dumps(out, indent=2))
        return 0
    level = "" if alpha is None else f", alpha {alpha:g}"
    print(f"{len(model.nodes)} variables, {len(model.edges())} edges, {learner.n_tests_} CI tests ({test_name}{level})")
    for e in model.edges():
        print(f"  {e.src} {'-->' if e.directed else '---'} {e.dst}   ({e.strength:.3f} bits)")
    for q in model.equivalences:
        print(f"  equivalent for {q['target']}: {', '.join(q['variables'])} (kept {q['kept']})")
    for s in subs.values():
        print(f"  {s.formula}   [{s.kind}, {s.bits:.1f} bits]")
    return 0
