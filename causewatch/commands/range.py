"""`causewatch range`: stored samples over a time range, computed where they are stored (docs/queries.md):
each series' function over its window at every step, or an aggregation across series by labels; or a
PromQL expression of the subset `/api/v1/query_range` answers.
"""

from __future__ import annotations

import json
import time

from causewatch.commands.query import print_table
from causewatch.commands.source import add_source_arguments, open_source
from causewatch.daemon import verbs
from causewatch.errors import InputError

# rangeq.FUNCTIONS and AGGREGATIONS, named here so --help loads no pyarrow
FUNCTIONS = ("avg", "min", "max", "sum", "count", "last")
AGGREGATIONS = ("avg", "min", "max", "sum", "count")
EPILOG = """examples:
  causewatch range node_load1 --last 3600 --step 60                     # each series' mean a minute
  causewatch range node_load1 --node n1 --node n2 --fn max --window 300 --step 60
  causewatch range node_load1 --agg avg --by node --last 86400 --step 3600 --json
  causewatch range --promql 'avg by (node) (avg_over_time(node_load1[5m]))' --last 3600 --step 60
  causewatch range --db cw.duckdb node_memory_MemAvailable_bytes --start 1767225600 --end 1767229200 --step 300

times in seconds since the epoch; a point at t covers the rows with t - window < ts <= t.
"""


def add_arguments(parser) -> None:
    parser.add_argument("metric", nargs="*", help="metrics to read (any number; none: every metric)")
    add_source_arguments(parser)
    parser.add_argument("--node", action="append", help="only this node (repeatable)")
    parser.add_argument("--scope", help="only this scope (node, or a command's)")
    parser.add_argument("--start", type=float, metavar="T", help="the first point (default: --last before --end)")
    parser.add_argument("--end", type=float, metavar="T", help="the last point (default: now)")
    parser.add_argument("--last", type=float, default=3600.0, metavar="SECONDS",
                        help="without --start, the SECONDS before --end (default 3600)")
    parser.add_argument("--step", type=float, default=60.0, metavar="SECONDS", help="between points (default 60)")
    parser.add_argument("--window", type=float, metavar="SECONDS", help="each point's window (default: the step)")
    parser.add_argument("--fn", choices=FUNCTIONS, default="avg", help="over each series' window (default avg)")
    parser.add_argument("--agg", choices=AGGREGATIONS, help="across series (default: each series alone)")
    parser.add_argument("--by", action="append", choices=("node", "scope", "metric"),
                        help="group --agg by this label (repeatable; none: one group)")
    parser.add_argument("--promql", metavar="EXPR", help="a PromQL expression of the subset (docs/queries.md) "
                        "instead of the metrics and --fn/--agg/--by")
    parser.add_argument("--json", action="store_true", help="print the rows (or Prometheus' matrix) as JSON")


def run(args) -> int:
    end = time.time() if args.end is None else args.end
    start = end - args.last if args.start is None else args.start
    answer = _promql(args, start, end) if args.promql is not None else _range(args, start, end)
    if args.json:
        print(json.dumps(answer, indent=1))
    else:
        print_table(_matrix_rows(answer) if args.promql is not None else answer)
    return 0


def _promql(args, start: float, end: float) -> dict:
    if args.metric or args.node or args.scope or args.agg or args.by or args.window:
        raise InputError("--promql: the expression names the series and the functions; give no metric, "
                         "--node, --scope, --window, --agg or --by beside it")
    with open_source(args) as source:
        return source.read(verbs.PROMQL_RANGE, query=args.promql, start=str(start), end=str(end), step=str(args.step))


def _range(args, start: float, end: float) -> list[dict]:
    with open_source(args) as source:
        df = source.read(verbs.RANGE, metric=args.metric or None, node=args.node, scope=args.scope, start=start,
                         end=end, step=args.step, window=args.window, fn=args.fn, agg=args.agg, by=args.by)
    return [{k: (None if v != v else v) for k, v in r.items()} for r in df.to_dict("records")]


def _matrix_rows(matrix: dict) -> list[dict]:
    return [{**s["metric"], "t": t, "value": float(v)} for s in matrix["data"]["result"] for t, v in s["values"]]
