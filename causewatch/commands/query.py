"""`causewatch query`: PERFQL fuzzy search over the region summaries of a DuckDB store.

Regions are ranked by the degree to which they match; --min-degree and --top cut the list.
"""

from __future__ import annotations

import json
import shutil

from causewatch.commands.source import add_source_arguments, open_source
from causewatch.daemon import verbs
from causewatch.errors import InputError

MODES = ("exact", "compatible")   # analytics.fuzzy.membership.MODES, named here so --help loads no numpy
WIDTH = 100                       # tables fit this many columns unless --wide
EPILOG = """examples:
  causewatch query "(time_share is high) AND (cache_miss_ratio is very high)"
  causewatch query --db run.duckdb "(L2_TCM/L2_TCA is medium OR high)" --min-degree 0.5 --top 10
  causewatch query --daemon http://10.0.0.5:9464 "(cpi is high)"    # a running daemon elsewhere
  causewatch query "(cycles/instructions is not low) OR (wait_share is somewhat high)" --last 600 --json
  causewatch query --terms my_terms.toml --mode exact "(comm_seconds/duration is high)"

grammar: Statement := Expr | Statement OR Expr; Expr := Term | Expr AND Term;
         Term := (METRIC is F_Expr), METRIC a metric name or arithmetic (+ - * /) of names;
         F_Expr: terms, hedges (not very extremely somewhat more_or_less plus intensify norm
         slightly), AND, OR, parentheses. Terms per metric: docs/fuzzy.md.
"""


def add_store_arguments(parser) -> None:
    """Options shared with `causewatch bottlenecks`: the source, the terms, the window, the output."""
    add_source_arguments(parser)
    parser.add_argument("--terms", metavar="FILE", help="TOML term sets added to (or replacing) the defaults")
    parser.add_argument("--mode", choices=MODES, default="compatible",
                        help="membership functions: FuzzyJ-compatible point lists (default) or exact curves")
    parser.add_argument("--last", type=float, metavar="SECONDS", help="only records that started in the last SECONDS")
    parser.add_argument("--node", action="append", help="only this node (repeatable)")
    parser.add_argument("--top", type=int, metavar="N", help="show the N best rows only")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--wide", action="store_true", help=f"do not shorten names to fit {WIDTH} columns")


def add_arguments(parser) -> None:
    parser.add_argument("query", help='PERFQL statement, e.g. "(time_share is high) AND (cpi is very high)"')
    parser.add_argument("--min-degree", type=float, default=0.0, metavar="D",
                        help="only rows whose degree is at least D (default: any degree above 0)")
    add_store_arguments(parser)


def termsets(args):
    from causewatch.analytics.fuzzy import TermsError, load_terms
    try:
        return load_terms(args.terms)
    except OSError as e:
        raise InputError(f"{args.terms}: cannot read the term sets ({e.strerror})") from None
    except TermsError as e:
        raise InputError(str(e)) from None


def print_table(df, wide: bool = False) -> None:
    """The DataFrame as text; unless `wide`, the longest text columns are shortened (with …) to fit WIDTH."""
    from pandas.api.types import is_numeric_dtype
    if not len(df):
        print("(no matches)")
        return

    def render(f):
        return f.to_string(index=False, float_format=lambda v: f"{v:.4g}")
    text = render(df)
    width = max(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns) if wide else WIDTH
    df = df.copy()
    while not wide and max(map(len, text.splitlines())) > width:
        texts = [c for c in df.columns if not is_numeric_dtype(df[c])]
        if not texts:
            break
        lengths = {c: int(df[c].astype(str).str.len().max()) for c in texts}
        col = max(lengths, key=lengths.get)
        over = max(map(len, text.splitlines())) - width
        keep = max(8, lengths[col] - over)
        if keep >= lengths[col]:
            break
        df[col] = df[col].astype(str).map(lambda v: v if len(v) <= keep else v[:keep - 1] + "…")
        text = render(df)
    print(text)


def run(args) -> int:
    from causewatch.analytics.fuzzy import perfql
    from causewatch.analytics.fuzzy.summaries import records
    if args.top is not None and args.top < 1:
        raise InputError(f"--top must be at least 1, got {args.top}")
    with open_source(args) as source:
        try:
            query = perfql.Query(args.query, termsets(args), args.mode)
            df = source.read(verbs.REGIONS, last=args.last, node=args.node,
                             metric=sorted(query.required_metrics()))
            result = query.evaluate(df, args.min_degree, args.top)
        except ValueError as e:
            raise InputError(f"query: {e}") from None
    if args.json:
        print(json.dumps(records(result), indent=1))
    else:
        print_table(result.round({"degree": 3}), args.wide)
    return 0
