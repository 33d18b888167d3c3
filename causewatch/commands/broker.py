"""`causewatch broker condor|slurm`: tell a scheduler causewatch's ranking in its own language, so a job lands
on the node predicted fastest: HTCondor slot attributes (a startd cron job) or Slurm weights and features.

Reads the ranking from /api/rank (--daemon) or a stopped store (--db); the Kubernetes extender is the
daemon's POST /api/k8s/prioritize (docs/brokers.md).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import time

from causewatch.commands.source import add_source_arguments, open_source
from causewatch.daemon import verbs
from causewatch.errors import InputError, NotFoundError

log = logging.getLogger("causewatch.broker")

EPILOG = """examples:
  causewatch broker condor mw sweep3d                 # startd cron: this machine's attributes, per slot
  causewatch broker condor mw --node n17 --slots 4    # another node's, as its startd would publish them
  causewatch broker slurm mw --dry-run                # the scontrol commands, not run
  causewatch broker slurm mw --config /etc/causewatch/broker.toml   # [slurm] nodes = {cw-name = "slurm-name"}
  causewatch broker slurm mw --watch 60               # apply on every change, and after a controller restart

Slurm: the fresh ranked nodes get weights 1, 2, ... in rank order (lowest is allocated first), stale and
unprobed ones a weight after all of them; the best node(s) carry the feature cw_<app>_best for
`srun --prefer=cw_<app>_best`. HTCondor: causewatch_<app>_seconds, _seconds_hi, _tasks_per_hour and
_probe_time (epoch s), each absent when unknown (docs/brokers.md has the submit-file recipe).
"""


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="broker", metavar="BROKER", required=True)
    c = sub.add_parser("condor", help="HTCondor startd cron: print this node's attributes, one ad per slot")
    c.add_argument("apps", nargs="+", metavar="APP", help="applications to publish (as in their probe kits)")
    c.add_argument("--node", help="the causewatch node name of this machine (default: the host name, as the agent's)")
    c.add_argument("--slots", type=int, default=os.cpu_count() or 1,
                   help="slots to publish for, SlotId 1..N (default: the CPU count, HTCondor's default slots)")
    c.add_argument("--json", action="store_true", help="print the attributes as JSON instead")
    add_source_arguments(c)
    s = sub.add_parser("slurm", help="set Slurm node weights and the best-node feature from an app's ranking")
    s.add_argument("app", help="application whose ranking sets the weights")
    s.add_argument("--config", metavar="FILE", help="TOML with a [slurm] table: nodes = {causewatch = \"slurm\"}, "
                                                    "best, max_age")
    s.add_argument("--map", action="append", default=[], metavar="CW=SLURM",
                   help="Slurm's name of a causewatch node (repeatable; default: the same name)")
    s.add_argument("--nodes", help="Slurm's node names, comma-separated (default: asked from scontrol)")
    s.add_argument("--best", type=int, help="how many of the best nodes carry cw_<app>_best (default 1)")
    s.add_argument("--max-age", type=float, help="seconds after which a result is stale (default 172800)")
    s.add_argument("--dry-run", action="store_true", help="print the scontrol commands, run nothing")
    s.add_argument("--watch", type=float, metavar="SECONDS",
                   help="check every SECONDS and apply what differs (a restarted controller forgets weights)")
    s.add_argument("--json", action="store_true", help="print the plan and the commands as JSON")
    add_source_arguments(s)


def run(args) -> int:
    return _condor(args) if args.broker == "condor" else _slurm(args)


def ranking(source, app: str) -> list[dict]:
    """/api/rank's rows for `app`; none yet (a 404) is an empty ranking: every node is unprobed."""
    try:
        return source.read(verbs.RANK, app=app)["nodes"]
    except NotFoundError:
        return []


# ---- HTCondor -------------------------------------------------------------------------------------

def _condor(args) -> int:
    import socket

    from causewatch.probe.broker import condor_attributes, condor_cron_output
    if args.slots < 1:
        raise InputError(f"--slots {args.slots}: give 1 or more")
    node = args.node or socket.gethostname()
    attributes = {}
    with open_source(args) as source:
        for app in args.apps:
            attributes.update(condor_attributes(app, next((r for r in ranking(source, app) if r["node"] == node),
                                                          None)))
    if args.json:
        print(json.dumps({"node": node, "slots": args.slots, "attributes": attributes}, indent=2))
    else:
        print(condor_cron_output(attributes, list(range(1, args.slots + 1))), end="")
    return 0


# ---- Slurm ----------------------------------------------------------------------------------------

def _slurm(args) -> int:
    from causewatch.config import SlurmConfig, load
    overrides = {"best": args.best, "max_age": args.max_age}
    config = load(SlurmConfig, args.config, section="slurm", **overrides)
    node_map = dict(config.nodes)
    for item in args.map:
        cw, sep, name = item.partition("=")
        if not sep or not cw or not name:
            raise InputError(f"--map {item!r}: expected CAUSEWATCH_NODE=SLURM_NODE")
        node_map[cw] = name
    if args.watch is None:
        result = slurm_pass(args, config, node_map)
        _print_slurm(args, result)
        return 0
    if args.watch <= 0:
        raise InputError(f"--watch {args.watch}: give a period in seconds above 0")
    while True:   # until stopped: each pass applies only what differs from the controller's state
        try:
            result = slurm_pass(args, config, node_map)
            if result["commands"]:
                _print_slurm(args, result)
        except InputError as e:
            log.warning("slurm pass failed: %s", e)
        time.sleep(args.watch)


def slurm_pass(args, config, node_map: dict[str, str]) -> dict:
    """Read the ranking and the controller's nodes, plan, and run (or with --dry-run only list) the updates."""
    from causewatch.probe.broker import best_feature, parse_scontrol_nodes, slurm_plan, slurm_updates
    current = None
    if shutil.which("scontrol"):
        shown = subprocess.run(["scontrol", "show", "node", "--oneliner"], capture_output=True, text=True)
        if shown.returncode == 0:
            current = parse_scontrol_nodes(shown.stdout)
        elif not args.dry_run:
            raise InputError(f"scontrol show node failed: {shown.stderr.strip() or shown.returncode}")
    elif not args.dry_run:
        raise InputError("scontrol not found: run this where Slurm's client is, or give --dry-run")
    names = [n for n in args.nodes.split(",") if n] if args.nodes else list(current) if current is not None else None
    with open_source(args) as source:
        rows = ranking(source, args.app)
    plan = slurm_plan(args.app, rows, names, node_map, config.max_age, config.best)
    commands = slurm_updates(args.app, plan, current)
    if not args.dry_run:
        for command in commands:
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode:
                raise InputError(f"{' '.join(command)} failed: {done.stderr.strip() or done.returncode}")
    return {"app": args.app, "feature": best_feature(args.app), "plan": plan, "commands": commands,
            "applied": not args.dry_run, "slurm_state_known": current is not None}


def _print_slurm(args, result: dict) -> None:
    if args.json:
        print(json.dumps(result, indent=2), flush=True)
        return
    print(f"{'slurm node':<16} {'causewatch node':<16} {'state':<9} {'rank':>4} {'s per task':>10} {'weight':>6}  "
          f"{result['feature']}")
    for p in result["plan"]:
        task = "" if p["task_seconds"] is None else f"{p['task_seconds']:.3g}"
        print(f"{p['slurm_node']:<16} {p['node'] or '-':<16} {p['state']:<9} {p['rank'] or '':>4} {task:>10} "
              f"{p['weight']:>6}  {'yes' if p['best'] else ''}")
    if not result["commands"]:
        print("Slurm already has these weights and features.")
    for command in result["commands"]:
        print(("ran: " if result["applied"] else "would run: ") + " ".join(command))
    if not result["slurm_state_known"]:
        print("(Slurm not asked: every node's weight listed, and its other features left out)")
