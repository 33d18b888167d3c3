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

EPILOG = """examples:
  causewatch learn runs.csv --discrete dtype --tier inputs:n,dtype --tier outputs:seconds
  causewatch learn runs.parquet --forbid n-dtype --require n->instructions --max-depth 2 --json
  causewatch learn tasks --app lu --dot lu.dot       # the running daemon's tasks of app lu
  causewatch learn samples --metric cpu_seconds --metric page_faults --bucket 5 --db causewatch.duckdb
  causewatch learn duckdb:exp.duckdb:runs             # any table of a DuckDB file
  causewatch learn runs.csv --estimator lemeire --submodels     # the papers' estimator, fitted formulas
  causewatch learn runs.csv --analysis-scheduler tcp://sched:8786   # the learn on a Dask cluster

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
    parser.add_argument("--rows", type=int, default=verbs.LEARN_ROWS, metavar="N",
                        help="with tasks or samples, learn from the newest N rows, as the daemon's causal job "
                             f"does (default {verbs.LEARN_ROWS}; 0: all)")
    add_source_arguments(parser)
    add_learning_arguments(parser)
    parser.add_argument("--analysis-scheduler", metavar="tcp://HOST:PORT",
                        help="learn a file's table on this dask.distributed cluster instead of here (the daemon's "
                             "tasks and samples are learnt where its analysis_scheduler says; docs/cluster.md)")


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
                        help="significance level (not for lemeire; default 0.01, 0.03 when auto picks RCoT, "
                             "0.05 when it picks G² for all-discrete data)")
    parser.add_argument("--no-equivalences", action="store_true", help="plain PC: no information-equivalence rule")
    parser.add_argument("--submodels", action="store_true", help="also fit each node on its parents (MDL)")
    parser.add_argument("--dot", metavar="FILE", help="write the graph as Graphviz DOT")
    parser.add_argument("--tetrad", metavar="FILE", help="write the graph in TETRAD's text format")
    parser.add_argument("--json", action="store_true", help="print {nodes, edges, equivalences} as JSON")


STORED = ("tasks", "samples")   # daemon/learning.py's STORED, named here so --help loads no pandas


def options(args):
    """The learner's and the report's settings of the flags (daemon/learning.py's Options)."""
    from causewatch.daemon.learning import Options, names
    return Options(columns=names(args.columns) or None, discrete=names(args.discrete), tiers=args.tier,
                   forbid=args.forbid, require=args.require, max_depth=args.max_depth, estimator=args.estimator,
                   alpha=args.alpha, equivalences=not args.no_equivalences, submodels=args.submodels,
                   dot=bool(args.dot), tetrad=bool(args.tetrad))


def _only_for(args, table: str) -> None:
    if args.app and table != "tasks":
        raise InputError("--app applies only to tasks")
    if (args.metric or args.bucket) and table != "samples":
        raise InputError("--metric and --bucket apply only to samples")


def learn_stored(table: str, args) -> dict:
    """The daemon's `tasks` or `samples` learnt where they are read (the `learn` verb: in the daemon's
    API worker, or here on a stopped daemon's store): the report."""
    _only_for(args, table)
    with open_source(args) as source:
        with waiting("learning", args.json or getattr(args, "quiet", False)):
            return source.read(verbs.LEARN, data=table, app=args.app, metric=args.metric, bucket=args.bucket,
                               rows=args.rows,
                               columns=args.columns, discrete=args.discrete or None, tier=args.tier or None,
                               forbid=args.forbid or None, require=args.require or None, max_depth=args.max_depth,
                               estimator=args.estimator, alpha=args.alpha, equivalences=int(not args.no_equivalences),
                               submodels=int(args.submodels), dot=int(bool(args.dot)), tetrad=int(bool(args.tetrad)))


def load_df(spec: str, args) -> pd.DataFrame:
    """The table of a file DATA names: CSV, Parquet, or duckdb:FILE:TABLE (any table but the store's)."""
    import pandas as pd
    if spec.startswith("duckdb:"):
        return _load_duckdb(spec, args)
    _only_for(args, "")
    path = Path(spec)
    if not path.exists():
        raise InputError(f"{spec}: no such file (expected a .csv, .parquet or duckdb:FILE:TABLE)")
    try:
        if path.suffix.lower() in (".parquet", ".pq"):
            return pd.read_parquet(path)
        return pd.read_csv(path)
    except (ValueError, OSError) as e:
        kind = "Parquet" if path.suffix.lower() in (".parquet", ".pq") else "CSV"
        raise InputError(f"{spec}: cannot read as {kind} ({e})") from None


def _load_duckdb(spec: str, args):
    from causewatch.daemon import readers
    _, _, rest = spec.partition(":")
    file, _, table = rest.rpartition(":")
    if not file or not table:
        raise InputError(f"{spec}: expected duckdb:FILE:TABLE")
    _only_for(args, table)
    con = readers.shared.open_store(file)
    try:
        return readers.shared.read_table(con, table)
    finally:
        con.close()


def learn_here(df: pd.DataFrame, args, inputs: list[str]) -> dict:
    """PC-stable over `df` in this process (a file's table, an experiment's runs): the report."""
    from causewatch.daemon import learning
    quiet = args.json or getattr(args, "quiet", False)
    chosen = learning.variables(df, options(args))
    if not quiet:
        print(f"learning from {chosen.summary()} ...", file=sys.stderr)
    scheduler = getattr(args, "analysis_scheduler", None)
    if not scheduler:
        with waiting("learning", quiet):
            return learning.learn(df, inputs, (), options(args))
    from causewatch.config import scheduler_problem
    from causewatch.daemon.compute import DaskCompute
    problem = scheduler_problem(scheduler)
    if problem:
        raise InputError(f"--analysis-scheduler: {problem}")
    # no re-runs of a learn that raised (bad input raises the same each time); a dead worker's still are
    compute = DaskCompute(scheduler, retries=0, fall_back=False)
    try:
        with waiting(f"learning on {scheduler}", quiet):
            return compute(learning.learn, df, inputs, (), options(args))
    except ConnectionError as e:
        raise InputError(f"--analysis-scheduler: {e}") from None
    finally:
        compute.close()


def run(args) -> int:
    check_output(args.dot, "--dot")
    check_output(args.tetrad, "--tetrad")
    spec = args.data
    if spec.startswith("duckdb:") and spec.rpartition(":")[2] in STORED:   # the store's tables, as `--db FILE`
        spec, args.db = spec.rpartition(":")[2], spec[len("duckdb:"):].rpartition(":")[0]
    if spec in STORED:
        if args.analysis_scheduler:
            raise InputError(f"--analysis-scheduler applies to a file's table: the daemon learns its {spec} where "
                             "its own analysis_scheduler says")
        found = learn_stored(spec, args)
        if not (args.json or getattr(args, "quiet", False)):
            print(f"learning from {found['summary']} ...", file=sys.stderr)
        return report(found, args)
    return report(learn_here(load_df(spec, args), args, []), args)


def report(found: dict, args) -> int:
    """Print a learnt model's report (text or --json) and write the --dot / --tetrad files."""
    if args.dot:
        Path(args.dot).write_text(found["dot"])
    if args.tetrad:
        Path(args.tetrad).write_text(found["tetrad"])
    subs = found.get("submodels") or {}
    if args.json:
        out = {k: found[k] for k in ("nodes", "edges", "equivalences", "ci_tests", "ci_test", "alpha")}
        if subs:
            out["submodels"] = subs
        print(json.dumps(out, indent=2))
        return 0
    alpha = found["alpha"]
    level = "" if alpha is None else f", alpha {alpha:g}"
    print(f"{len(found['nodes'])} variables, {len(found['edges'])} edges, {found['ci_tests']} CI tests "
          f"({found['ci_test']}{level})")
    for e in found["edges"]:
        print(f"  {e['src']} {'-->' if e['directed'] else '---'} {e['dst']}   ({e['strength']:.3f} bits)")
    for q in found["equivalences"]:
        print(f"  equivalent for {q['target']}: {', '.join(q['variables'])} (kept {q['kept']})")
    for s in subs.values():
        print(f"  {s['formula']}   [{s['kind']}, {s['bits']:.1f} bits]")
    return 0
