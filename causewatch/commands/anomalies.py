"""`causewatch anomalies`: dependency anomalies the daemon raised against each scope's baseline model,
open first, with their evidence (score and the test's own threshold, rows, window) and the best of their
ranked candidate causes (all of them, each with its evidence: --json).

Reads a running daemon's HTTP API (--daemon) or a stopped daemon's store (--db).
"""

from __future__ import annotations

import json
import time

from causewatch.commands.source import add_source_arguments, open_source
from causewatch.daemon import verbs

EPILOG = """examples:
  causewatch anomalies                 # open ones
  causewatch anomalies --all --scope app:lu --json
  causewatch anomalies --all --scope job:42    # those of every scope of Slurm job 42's tasks
"""


def add_arguments(parser) -> None:
    parser.add_argument("--scope", help="only this scope, e.g. app:lu or app:lu@job:42; job:42: every "
                        "scope of that Slurm job's tasks")
    parser.add_argument("--all", action="store_true", help="resolved ones too (newest first)")
    parser.add_argument("--limit", type=int, default=200, help="at most this many (default 200)")
    add_source_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the anomalies as JSON")


def run(args) -> int:
    with open_source(args) as source:
        found = source.read(verbs.ANOMALIES, scope=args.scope, open=int(not args.all), limit=args.limit)
    if args.json:
        print(json.dumps(found, indent=2, default=str))
        return 0
    if not found:
        print("no open anomalies" if not args.all else "no anomalies")
        return 0
    now = time.time()
    print(f"{'id':>4} {'scope':<20} {'kind':<17} {'dependency':<30} {'score':>7} {'threshold':>9}  "
          f"{'state':<12} first cause")
    for a in found:
        state = f"open {now - a['opened']:.0f} s" if a["resolved"] is None else "resolved"
        dependency = f"{a['src']} -> {a['dst']}"
        also = related(a["evidence"])
        print(f"{a['anomaly_id']:>4} {a['scope']:<20.20} {a['kind']:<17} {dependency:<30.30} {a['score']:>7.3f} "
              f"{a['threshold']:>9.3f}  {state:<12} {first_cause(a['evidence'])}"
              + (f"; with {', '.join(also)}" if also else ""))
    return 0


def related(evidence: dict) -> list[str]:
    """The variables of the findings related to an anomaly (one voice: raised with it or while it was
    open), in their order."""
    return list(dict.fromkeys(r["dst"] for r in evidence.get("related", [])))


def first_cause(evidence: dict) -> str:
    """The best of an anomaly's ranked candidate causes, with its score (every one: --json)."""
    causes = evidence.get("causes") or []
    if not causes:
        return "not ranked" if "causes_ranked" in evidence else "-"
    return f"{causes[0]['unit'][:60]} ({causes[0]['score']:.2f})"
