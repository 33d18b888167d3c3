"""`causewatch rank APP`: nodes ordered by the task time their latest probe predicts for APP.

Asks a running daemon's HTTP API (/api/rank, --daemon) or reads a stopped daemon's store (--db).
"""

from __future__ import annotations

import json
import time

from causewatch.commands.source import add_source_arguments, open_source
from causewatch.daemon import verbs

EPILOG = """examples:
  causewatch rank mw                              # ask the daemon at 127.0.0.1:9464
  causewatch rank mw --daemon http://10.0.0.5:9464 --json
  causewatch rank mw --db causewatch.duckdb       # a stopped daemon's store
"""


def add_arguments(parser) -> None:
    parser.add_argument("app", help="application name (as in its probe kit)")
    add_source_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the ranking as JSON")


def _interval(lo, hi) -> str:
    return "" if lo is None else f"[{lo:.3g}, {hi:.3g}]"


def run(args) -> int:
    from causewatch.probe.rank import RATIO, age, failed_line
    with open_source(args) as source:
        answer = source.read(verbs.RANK, app=args.app)
    nodes, failed = answer["nodes"], answer.get("failed", [])
    if args.json:
        print(json.dumps({"app": args.app, "ratio": RATIO, "nodes": nodes, "failed": failed}, indent=2))
        return 0
    print(f"{'rank':>4} {'node':<20} {'s per task':>10} {'interval':>19} {'task-s per run':>14} {'interval':>19} "
          f"{'ratio':>6} {'probed':>12}")
    for n in nodes:
        task = "" if n["task_seconds"] is None else f"{n['task_seconds']:.3g}"
        print(f"{n['rank']:>4} {n['node']:<20} {task:>10} {_interval(n['task_lo'], n['task_hi']):>19} "
              f"{n['run_task_seconds']:>14.3g} {_interval(n['run_lo'], n['run_hi']):>19} {n['ratio']:>6.3f} "
              f"{age(n['age_seconds']) + ' ago':>12}{'  busy' if n.get('busy') else ''}")
    print(f"\nper run: the task-seconds (sum of task times) of one run of the kit's workload; intervals 95 %.\n"
          f"ratio: {RATIO}.")
    for n in (n for n in nodes if n.get("busy")):
        print(f"busy: other processes used {100 * n['other_cpu']:.0f} % of {n['node']}'s CPU during its probe: "
              "it may rank slower than it is")
    now = time.time()
    for f in failed:
        print(failed_line(f, now))
    for kit, quality in sorted({(n["kit"], n["quality"]) for n in nodes}):
        reference = next(n["reference_node"] for n in nodes if n["kit"] == kit)
        print(f"kit {kit} (reference node {reference or '?'}): {quality}")
    return 0
