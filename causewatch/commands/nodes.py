"""`causewatch nodes`: the nodes whose agents have said hello, with their facts, when last seen, and how
their node collectors fared at the agent's start (each one not ok with its reason).

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
    print(f"{'node':<24} {'host':<20} {'cores':>5} {'memory GiB':>10} {'agent':>8} {'last seen':>12}  collectors")
    for n in nodes:
        memory = (n.get("memory_bytes") or 0) / 2**30
        ago = f"{now - n['last_seen']:.0f} s ago" if n.get("last_seen") else "never"
        collectors = n.get("collectors") or {}
        print(f"{n['node']:<24.24} {str(n.get('hostname') or ''):<20.20} {n.get('cores') or 0:>5} {memory:>10.1f} "
              f"{str(n.get('agent_version') or ''):>8.8} {ago:>12}  {_counted(collectors)}")
        for name, c in sorted(collectors.items()):
            if c.get("state") != "ok":
                print(f"  {name}: {c.get('state')}")
    return 0


def _counted(collectors: dict) -> str:
    """'21 ok, 1 off, 1 unavailable, 1 failing' of a node's collectors at its agent's start ('' for an agent
    that lists none); unavailable: nothing for it here (NVML on a node without a GPU)."""
    states = [c.get("state", "") for c in collectors.values()]
    counts = {"ok": states.count("ok"), "off": sum(s.startswith("off") for s in states),
              "unavailable": sum(s.startswith("unavailable") for s in states)}
    counts["failing"] = len(states) - sum(counts.values())
    return ", ".join(f"{n} {what}" for what, n in counts.items() if n)
