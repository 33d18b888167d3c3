"""`causewatch nodes`: the nodes whose agents have said hello, with their facts and when last seen.

Reads a running daemon's HTTP API (--daemon) or a stopped daemon's store (--db).
"""

from __future__ import annotations

import json
import time

from causewatch.commands.source import add_source_arguments, open_source
from causewatch.daemon import verbs

EPILOG = """examples:
  causewatch nodes
  causewatch nodes --json --daemon http://10.0.0.5:9464
  causewatch nodes --db causewatch.duckdb
"""


def add_arguments(parser) -> None:
    add_source_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the nodes as JSON")


def run(args) -> int:
    with open_source(args) as source:
        nodes = source.read(verbs.NODES)
    if args.json:
        print(json.dumps(nodes, indent=2, default=str))
        return 0
    if not nodes:
        print("no agent has said hello yet")
        return 0
    now = time.time()
    print(f"{'node':<24} {'host':<20} {'cores':>5} {'memory GiB':>10} {'agent':>8} {'last seen':>12}")
    for n in nodes:
        memory = (n.get("memory_bytes") or 0) / 2**30
        ago = f"{now - n['last_seen']:.0f} s ago" if n.get("last_seen") else "never"
        print(f"{n['node']:<24.24} {str(n.get('hostname') or ''):<20.20} {n.get('cores') or 0:>5} {memory:>10.1f} "
              f"{str(n.get('agent_version') or ''):>8.8} {ago:>12}")
    return 0
