"""`causewatch bottlenecks`: fuzzy bottleneck search over the region summaries of a DuckDB store.

Each metric with a bottleneck term set is checked against its threshold; bottlenecks get degrees in
the severity terms and regions near the threshold a degree in the negligible band (paper Fig. 5).
"""

from __future__ import annotations

import json

from causewatch.commands.query import add_store_arguments, print_table, share_legend, termsets
from causewatch.commands.source import open_source
from causewatch.daemon import verbs
from causewatch.errors import InputError

EPILOG = """examples:
  causewatch bottlenecks
  causewatch bottlenecks --db run.duckdb --metric l2_miss_ratio --metric time_share
  causewatch bottlenecks --no-negligible --top 20 --json
  causewatch bottlenecks --terms site_terms.toml --last 3600 --node node17

output: per region and metric the value and the degree of each term, "Medium 0.502/High 0.495" in the
table (--json: "Medium (degree=0.502)/High (degree=0.495)/", as in the paper, and the degrees as a map);
severity = the degree of the most severe term times its level (k/K), used for ranking.
"""


def add_arguments(parser) -> None:
    parser.add_argument("--metric", action="append", metavar="NAME",
                        help="only this term set (repeatable; default: every one with a bottleneck section "
                             "whose inputs the store has)")
    parser.add_argument("--no-negligible", dest="negligible", action="store_false",
                        help="leave out regions that are only near the threshold")
    add_store_arguments(parser)


def run(args) -> int:
    if args.top is not None and args.top < 1:
        raise InputError(f"--top must be at least 1, got {args.top}")
    with open_source(args) as source:
        if args.terms:   # scored here with the file's term sets; the daemon's verb knows the defaults only
            rows = _scored_here(source, args)
        else:
            rows = source.read(verbs.BOTTLENECKS, last=args.last, node=args.node, top=args.top, metric=args.metric,
                               mode=args.mode, negligible=int(args.negligible))
    rows = [{**r, "severity": round(r["severity"], 3)} for r in rows]
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        # the paper's "High (degree=0.495)/" would take the table's width from the names that need it
        print_table([{**{k: v for k, v in r.items() if k not in ("degrees", "bottleneck")},
                      "bottleneck": "/".join(f"{term.capitalize()} {d:g}" for term, d in r["degrees"].items() if d)}
                     for r in rows], args.wide, share_legend(rows))
    return 0


def _scored_here(source, args) -> list[dict]:
    from causewatch.analytics.fuzzy import find_bottlenecks, summarise_bottlenecks
    from causewatch.analytics.fuzzy.summaries import records
    try:
        df = source.read(verbs.REGIONS, last=args.last, node=args.node)
        found = find_bottlenecks(df, termsets(args), args.metric, args.mode, args.negligible)
    except ValueError as e:
        raise InputError(f"bottlenecks: {e}") from None
    return records(summarise_bottlenecks(found).head(args.top))
