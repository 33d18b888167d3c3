"""`causewatch learn`: offline causal structure learning on a CSV, Parquet file or DuckDB table.

PC-stable with the KDE mutual-information test (or the papers' estimator, Fisher-z, G²), background
knowledge from flags; prints the edges, or JSON, and writes DOT / TETRAD files on request.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from causewatch.analytics.causal.background import Background, BackgroundError
from causewatch.analytics.causal.ci import CIError, make_ci_test
from causewatch.analytics.causal.pc import PCLearner
from causewatch.errors import InputError

HELP = "learn a causal model (PC-stable, KDE mutual information) from CSV, Parquet or a DuckDB table"
EPILOG = """examples:
  causewatch learn runs.csv --discrete dtype --tier inputs:n,dtype --tier outputs:seconds
  causewatch learn runs.parquet --forbid n-dtype --require n->instructions --max-depth 2 --json
  causewatch learn duckdb:causewatch.duckdb:tasks --app lu --dot lu.dot --tetrad lu.txt
  causewatch learn runs.csv --estimator lemeire --submodels     # the papers' estimator, fitted formulas

DATA is a .csv / .parquet file or duckdb:FILE:TABLE. For the daemon's `tasks` table the JSON params
and counters become columns (params are inputs unless --tier says otherwise).
"""


def add_arguments(parser) -> None:
    parser.add_argument("data", help="CSV or Parquet file, or duckdb:FILE:TABLE")
    parser.add_argument("--app", help="with duckdb:FILE:tasks, only this app's tasks")
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
                        help="CI test: auto (default: RCoT on mixed discrete/continuous data, else calibrated KDE "
                             "MI, counting G² when all discrete), kde, rcot, the papers' KDE MI, Fisher-z, G²")
    parser.add_argument("--alpha", type=float, default=0.01, help="significance level (not for lemeire)")
    parser.add_argument("--no-equivalences", action="store_true", help="plain PC: no information-equivalence rule")
    parser.add_argument("--submodels", action="store_true", help="also fit each node on its parents (MDL)")
    parser.add_argument("--dot", metavar="FILE", help="write the graph as Graphviz DOT")
    parser.add_argument("--tetrad", metavar="FILE", help="write the graph in TETRAD's text format")
    parser.add_argument("--json", action="store_true", help="print {nodes, edges, equivalences} as JSON")


def load_frame(spec: str, app: str | None = None) -> tuple[pd.DataFrame, list[str]]:
    """The table DATA names, and the columns known to be inputs (task parameters)."""
    if spec.startswith("duckdb:"):
        return _load_duckdb(spec, app)
    if app:
        raise InputError("--app applies only to duckdb:FILE:tasks")
    path = Path(spec)
    if not path.exists():
        raise InputError(f"{spec}: no such file (expected a .csv, .parquet or duckdb:FILE:TABLE)")
    try:
        if path.suffix.lower() in (".parquet", ".pq"):
            return pd.read_parquet(path), []
        return pd.read_csv(path), []
    except (ValueError, OSError) as e:
        raise InputError(f"{spec}: cannot read as {'Parquet' if path.suffix.lower() in ('.parquet', '.pq') else 'CSV'} ({e})") from None


def _load_duckdb(spec: str, app: str | None):
    import duckdb

    from causewatch.analytics.phases.simpoint import PhaseTracker
    from causewatch.daemon.job_causal import BOOKKEEPING, task_frame, with_code_phase
    _, _, rest = spec.partition(":")
    file, _, table = rest.rpartition(":")
    if not file or not table:
        raise InputError(f"{spec}: expected duckdb:FILE:TABLE")
    try:
        con = duckdb.connect(file, read_only=True)
    except duckdb.Error as e:
        raise InputError(f"{file}: cannot open the DuckDB file read-only ({e})") from None
    try:
        if table == "tasks":
            frame, inputs = task_frame(con, app)
            if frame.empty:
                raise InputError(f"{file}: no tasks" + (f" of app {app!r}" if app else ""))
            return with_code_phase(frame, PhaseTracker()).drop(columns=BOOKKEEPING), inputs
        if app:
            raise InputError("--app applies only to duckdb:FILE:tasks")
        try:
            return con.execute(f'SELECT * FROM "{table}"').df(), []
        except duckdb.Error as e:
            raise InputError(f"{file}: cannot read table {table!r} ({e})") from None
    finally:
        con.close()


def _names(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def background_from_args(args, inputs: list[str]) -> Background:
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


def usable_columns(frame: pd.DataFrame, wanted: list[str] | None, discrete: list[str]) -> pd.DataFrame:
    """The chosen columns without rows holding missing values; constant columns are dropped."""
    if wanted:
        missing = [c for c in wanted if c not in frame.columns]
        if missing:
            raise InputError(f"--columns: no column(s) {missing}; the data has {list(frame.columns)}")
        frame = frame[wanted]
    unknown = [c for c in discrete if c not in frame.columns]
    if unknown:
        raise InputError(f"--discrete: no column(s) {unknown}; the data has {list(frame.columns)}")
    frame = frame.dropna()
    keep = [c for c in frame.columns if frame[c].nunique() > 1]
    if len(keep) < 2:
        raise InputError(f"need at least 2 columns that vary over complete rows; got {keep} from {len(frame)} rows")
    return frame[keep].reset_index(drop=True)


def learn(frame: pd.DataFrame, args, inputs: list[str]) -> PCLearner:
    discrete = _names(args.discrete)
    frame = usable_columns(frame, _names(args.columns) if args.columns else None, discrete)
    bg = background_from_args(args, [c for c in inputs if c in frame.columns])
    params = {} if args.estimator == "lemeire" else {"alpha": args.alpha}
    try:
        test = make_ci_test(args.estimator, **params)
        learner = PCLearner(ci_test=test, max_depth=args.max_depth, background=bg,
                            discrete=[d for d in discrete if d in frame.columns],
                            equivalences=not args.no_equivalences)
        return learner.fit(frame)
    except (BackgroundError, CIError, ValueError) as e:
        raise InputError(str(e)) from None


def run(args) -> int:
    frame, inputs = load_frame(args.data, args.app)
    if not args.json:
        print(f"learning from {len(frame)} rows x {frame.shape[1]} columns ...", file=sys.stderr)
    return report(learn(frame, args, inputs), args)


def report(learner: PCLearner, args) -> int:
    """Print the learnt model (text or --json) and write the --dot / --tetrad files."""
    model = learner.model_
    subs = model.fit_submodels() if args.submodels else {}
    if args.dot:
        Path(args.dot).write_text(model.to_dot())
    if args.tetrad:
        Path(args.tetrad).write_text(model.to_tetrad())
    if args.json:
        out = {k: v for k, v in model.to_dict().items() if k in ("nodes", "edges", "equivalences")}
        out["ci_tests"] = learner.n_tests_
        if subs:
            out["submodels"] = {v: {"parents": list(s.parents), "kind": s.kind, "formula": s.formula,
                                    "bits": round(s.bits, 3)} for v, s in subs.items()}
        print(json.dumps(out, indent=2))
        return 0
    print(f"{len(model.nodes)} variables, {len(model.edges())} edges, {learner.n_tests_} CI tests")
    for e in model.edges():
        print(f"  {e.src} {'-->' if e.directed else '---'} {e.dst}   ({e.strength:.3f} bits)")
    for q in model.equivalences:
        print(f"  equivalent for {q['target']}: {', '.join(q['variables'])} (kept {q['kept']})")
    for s in subs.values():
        print(f"  {s.formula}   [{s.kind}, {s.bits:.1f} bits]")
    return 0
