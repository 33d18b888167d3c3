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


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "NaN"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def print_table(rows: list[dict], wide: bool = False) -> None:
    """Records as a text table, every column right-aligned under its name; unless `wide`, the longest
    text columns are shortened (with …) to fit WIDTH. Plain Python: a data verb that asked a daemon
    prints its answer without loading pandas."""
    if not rows:
        print("(no matches)")
        return
    columns = list(rows[0])
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    texts = [i for i, c in enumerate(columns) if any(isinstance(r.get(c), str) for r in rows)]

    def render() -> list[str]:
        widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
        return [" ".join(v.rjust(w) for v, w in zip(line, widths)) for line in [columns, *cells]]
    lines = render()
    width = max(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns) if wide else WIDTH
    while not wide and max(map(len, lines)) > width and texts:
        lengths = {i: max(len(row[i]) for row in cells) for i in texts}
        col = max(lengths, key=lengths.get)
        keep = max(8, lengths[col] - (max(map(len, lines)) - width))
        if keep >= lengths[col]:
            break
        for row in cells:
            row[col] = row[col] if len(row[col]) <= keep else row[col][:keep - 1] + "…"
        lines = render()
    print("\n".join(lines))


def run(args) -> int:
    if args.top is not None and args.top < 1:
        raise InputError(f"--top must be at least 1, got {args.top}")
    with open_source(args) as source:
        if args.terms:   # scored here with the file's term sets; the daemon's verb knows the defaults only
            rows = _scored_here(source, args)
        else:
            rows = source.read(verbs.QUERY, q=args.query, last=args.last, node=args.node,
                               min_degree=args.min_degree, top=args.top, mode=args.mode)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print_table([{**r, "degree": round(r["degree"], 3)} for r in rows], args.wide)
    return 0


def _scored_here(source, args) -> list[dict]:
    from causewatch.analytics.fuzzy import perfql
    from causewatch.analytics.fuzzy.summaries import records
    try:
        query = perfql.Query(args.query, termsets(args), args.mode)
        df = source.read(verbs.REGIONS, last=args.last, node=args.node, metric=sorted(query.required_metrics()))
        return records(query.evaluate(df, args.min_degree, args.top))
    except ValueError as e:
        raise InputError(f"query: {e}") from None
