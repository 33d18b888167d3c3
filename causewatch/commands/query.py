"""`causewatch query`: PERFQL fuzzy search over the region summaries of a DuckDB store.

Regions are ranked by the degree to which they match; --min-degree and --top cut the list.
"""

from __future__ import annotations

import json
import shutil
import sys

from causewatch.commands.source import add_source_arguments, open_source
from causewatch.daemon import verbs
from causewatch.errors import InputError

# time_share names two times (docs/fuzzy.md, "Region summaries"): side by side, a region and its function
# read as one region with two contradictory shares (render 0.66 High, tiles.py:render 0.18 Negligible).
SHARES = ("time_share: a region row's is its wall time, what it calls included, over its program's span; "
          "a bbv row's is the samples in the function's own code, what it calls left out")
MODES = ("exact", "compatible")   # analytics.fuzzy.membership.MODES, named here so --help loads no numpy
WIDTH = 100                       # a terminal's width where it tells none
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
    parser.add_argument("--wide", action="store_true",
                        help="do not shorten names to fit the terminal (a pipe or a file always gets them whole)")


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


def print_table(rows: list[dict], wide: bool = False, notes: list[str] = ()) -> None:
    """Records as a text table, every column right-aligned under its name, then the `notes`. On a
    terminal, unless `wide`, the longest text columns are shortened (with …) to fit its width, and a
    line says so; a pipe or a file gets every name whole. Plain Python: a data verb that asked a daemon
    prints its answer without loading pandas."""
    if not rows:
        print("(no matches)")
        return
    width = shutil.get_terminal_size((WIDTH, 24)).columns if not wide and sys.stdout.isatty() else None
    lines, cut = _table(rows, width)
    if cut:
        lines.append(f"(names shortened to fit {width} columns: --wide shows them whole)")
    print("\n".join([*lines, *notes]))


def _table(rows: list[dict], width: int | None) -> tuple[list[str], bool]:
    """The table's lines, its longest text columns shortened to fit `width` (None: as they are), and
    whether any was."""
    columns = list(rows[0])
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    texts = [i for i, c in enumerate(columns) if any(isinstance(r.get(c), str) for r in rows)]

    def render() -> list[str]:
        widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
        return [" ".join(v.rjust(w) for v, w in zip(line, widths)) for line in [columns, *cells]]
    lines, cut = render(), False
    while width is not None and max(map(len, lines)) > width and texts:
        lengths = {i: max(len(row[i]) for row in cells) for i in texts}
        col = max(lengths, key=lengths.get)
        keep = max(8, lengths[col] - (max(map(len, lines)) - width))
        if keep >= lengths[col]:
            break
        for row in cells:
            row[col] = row[col] if len(row[col]) <= keep else row[col][:keep - 1] + "…"
        lines, cut = render(), True
    return lines, cut


def share_legend(rows: list[dict]) -> list[str]:
    """SHARES, when the rows hold time_share values (a column, or bottlenecks' metric) of both sources."""
    sources = {r.get("source") for r in rows if r.get("metric") == "time_share" or "time_share" in r}
    return [SHARES] if {"region", "bbv"} <= sources else []


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
        print_table([{**r, "degree": round(r["degree"], 3)} for r in rows], args.wide, share_legend(rows))
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
