"""`causewatch jobs`: the units the agents followed by themselves (Slurm jobs by default; steps, services,
containers, pods by --kind), newest first, each with its owner, allocation and efficiency so far.

Reads a running daemon's HTTP API (--daemon) or a stopped daemon's store (--db).
"""

from __future__ import annotations

import json
import time

from causewatch.commands.source import add_source_arguments, open_source
from causewatch.daemon import verbs

EPILOG = """examples:
  causewatch jobs                                   # every job, running and finished
  causewatch jobs --running --user ann              # ann's running jobs
  causewatch jobs --finished --last 86400 --node n17 --json
  causewatch jobs --kind service                    # the systemd services, as units
"""


def add_arguments(parser) -> None:
    parser.add_argument("--kind", default="job", choices=["job", "step", "service", "container", "pod"],
                        help="which units (default job)")
    parser.add_argument("--user", action="append", help="only this user's (repeatable)")
    parser.add_argument("--node", action="append", help="only on this node (repeatable)")
    state = parser.add_mutually_exclusive_group()
    state.add_argument("--running", action="store_const", dest="state", const="running", help="only running ones")
    state.add_argument("--finished", action="store_const", dest="state", const="finished", help="only finished ones")
    parser.add_argument("--last", type=float, metavar="SECONDS", help="only those running in the last SECONDS")
    parser.add_argument("--limit", type=int, default=200, help="at most this many (default 200)")
    add_source_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the units as JSON")


def _share(x) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _size(x) -> str:
    return "-" if x is None else f"{x / 2**20:.0f}M"


def run(args) -> int:
    with open_source(args) as source:
        found = source.read(verbs.JOBS, kind=args.kind, user=args.user, node=args.node, state=args.state or "all",
                            last=args.last, limit=args.limit)
    if args.json:
        print(json.dumps(found, indent=2, default=str))
        return 0
    if not found:
        print(f"no {args.kind} units seen yet")
        return 0
    now = time.time()
    print(f"{'unit':<22} {'node':<12} {'user':<10} {'name':<14} {'state':<9} {'elapsed':>8} {'cpus':>5} "
          f"{'cpu use':>7} {'mem peak':>8} {'of mem':>6}")
    for u in found:
        cpus = "-" if u["cpus"] is None else f"{u['cpus']:g}"
        state = u["state"] if u["ended"] is None else f"ended {now - u['ended']:.0f}s"
        print(f"{u['unit']:<22.22} {u['node']:<12.12} {u['user'] or '-':<10.10} {u['job_name'] or '-':<14.14} "
              f"{state:<9.9} {u['elapsed_seconds']:>7.0f}s {cpus:>5} {_share(u['cpu_efficiency']):>7} "
              f"{_size(u['memory_peak_bytes']):>8} {_share(u['memory_efficiency']):>6}")
    return 0
