"""`causewatch rank APP`: nodes ordered by the task time their latest probe predicts for APP.

Asks a running daemon's HTTP API (/api/rank, --daemon) or reads a stopped daemon's store (--db).
"""

from __future__ import annotations

import json

from causewatch.commands.source import add_source_arguments, open_source

EPILOG = """examples:
  causewatch rank mw                              # ask the daemon at 127.0.0.1:9464
  causewatch rank mw --daemon http://10.0.0.5:9464 --json
  causewatch rank mw --db causewatch.duckdb       # a stopped daemon's store
"""


def add_arguments(parser) -> None:
    parser.add_argument("app", help="application name (as in its probe kit)")
    add_source_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the ranking as JSON")


def run(args) -> int:
    with open_source(args) as source:
        nodes = source.rank(args.app)
    if args.json:
        print(json.dumps({"app": args.app, "nodes": nodes}, indent=2))
        return 0
    if not nodes:
        print(f"no probe results for {args.app!r} yet")
        return 0
    print(f"{'rank':>4} {'node':<24} {'predicted s':>12} {'interval':>21} {'ratio':>7}")
    for n in nodes:
        print(f"{n['rank']:>4} {n['node']:<24} {n['predicted_seconds']:>12.2f} "
              f"{'[' + format(n['lo'], '.2f') + ', ' + format(n['hi'], '.2f') + ']':>21} {n['ratio']:>7.3f}")
    return 0
