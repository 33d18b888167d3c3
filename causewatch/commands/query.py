"""`causewatch query`: PERFQL fuzzy search over the region summaries of a DuckDB store.

Regions are ranked by the degree to which they match; --min-degree and --top cut the list.
"""

from __future__ import annotations

import json
import time

import pandas as pd

from causewatch.analytics.fuzzy import perfql
from causewatch.analytics.fuzzy.membership import MODES
from causewatch.analytics.fuzzy.summaries import records
from causewatch.analytics.fuzzy.terms import TermsError, load_terms
from causewatch.config import DaemonConfig
from causewatch.errors import InputError

HELP = "search code regions with a fuzzy PERFQL query, best matches first"
EPILOG = """examples:
  causewatch query "(time_share is high) AND (cache_miss_ratio is very high)"
  causewatch query --db run.duckdb "(L2_TCM/L2_TCA is medium OR high)" --min-degree 0.5 --top 10
  causewatch query "(cycles/instructions is not low) OR (wait_share is somewhat high)" --last 600 --json
  causewatch query --terms my_terms.toml --mode exact "(comm_seconds/duration is high)"

grammar: Statement := Expr | Statement OR Expr; Expr := Term | Expr AND Term;
         Term := (METRIC is F_Expr), METRIC a metric name or arithmetic (+ - * /) of names;
         F_Expr: terms, hedges (not very extremely somewhat more_or_less plus intensify norm
         slightly), AND, OR, parentheses. Terms per metric: docs/fuzzy.md.
"""


def add_store_arguments(parser) -> None:
    """Options shared with `causewatch bottlenecks`: the store, the terms, the window, the output."""
    parser.add_argument("--db", default=DaemonConfig.db, metavar="FILE",
                        help=f"DuckDB store written by the daemon (default {DaemonConfig.db})")
    parser.add_argument("--terms", metavar="FILE", help="TOML term sets added to (or replacing) the defaults")
    parser.add_argument("--mode", choices=MODES, default="compatible",
                        help="membership functions: FuzzyJ-compatible point lists (default) or exact curves")
    parser.add_argument("--last", type=float, metavar="SECONDS", help="only records that started in the last SECONDS")
    parser.add_argument("--node", action="append", help="only this node (repeatable)")
    parser.add_argument("--top", type=int, metavar="N", help="show the N best rows only")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")


def add_arguments(parser) -> None:
    parser.add_argument("query", help='PERFQL statement, e.g. "(time_share is high) AND (cpi is very high)"')
    parser.add_argument("--min-degree", type=float, default=0.0, metavar="D",
                        help="only rows whose degree is at least D (default: any degree above 0)")
    add_store_arguments(parser)


def termsets(args):
    try:
        return load_terms(args.terms)
    except OSError as e:
        raise InputError(f"{args.terms}: cannot read the term sets ({e.strerror})") from None
    except TermsError as e:
        raise InputError(str(e)) from None


def since(args) -> float | None:
    return None if args.last is None else time.time() - args.last


def print_table(frame: pd.DataFrame) -> None:
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.4g}") if len(frame) else "(no matches)")


def run(args) -> int:
    if args.top is not None and args.top < 1:
        raise InputError(f"--top must be at least 1, got {args.top}")
    from causewatch.daemon import tables
    con = tables.open_store(args.db, need=("regions", "bbv"))
    try:
        query = perfql.Query(args.query, termsets(args), args.mode)
        result = tables.perfql_matches(con, query, since(args), nodes=args.node, min_degree=args.min_degree,
                                       top=args.top)
    except ValueError as e:
        raise InputError(f"query: {e}") from None
    finally:
        con.close()
    if args.json:
        print(json.dumps(records(result), indent=1))
    else:
        print_table(result.round({"degree": 3}))
    return 0
