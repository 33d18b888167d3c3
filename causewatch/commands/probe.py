"""`causewatch probe build|run|register|status`: make a software probe kit, run it on a node, register
it, see each node's probe.

build records one BBV per task, clusters the tasks into phases and times the representatives; run
predicts this node's task time from the kit; register puts a kit in a daemon store's probe_kits;
status lists each node's probe of each kit: pending, done (busy or not) or failed, and why.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path

from causewatch.commands import check_output
from causewatch.commands.source import add_source_arguments, open_source
from causewatch.daemon import verbs
from causewatch.errors import InputError
from causewatch.probe import quality
from causewatch.probe.rank import age

EPILOG = """examples:
  causewatch probe build mw --workload masterworker --tasks 40 --out kits/mw        # the bundled workload
  causewatch probe build sim --command "./worker {input}" --tasks-file tasks.json --out kits/sim --bbv valgrind
  causewatch probe build mw --callable mypkg.work:run_one --tasks-file tasks.json --out kits/mw \\
      --register causewatch.duckdb
  causewatch probe run kits/mw                   # table: phases, ratios, predicted task-seconds
  causewatch probe run kits/mw --json --send     # and send the probe_result to the daemon
  causewatch probe register kits/mw                         # with the running daemon (its HTTP API)
  causewatch probe register kits/mw --db causewatch.duckdb  # in a stopped daemon's store
  causewatch probe status                        # each node's probe: pending, done or failed (and why)

A task input is any JSON value; a callable worker is called with it, a command worker gets a JSON
file holding it in place of {input}. A callable's module is imported from the current folder, an
installed package or PYTHONPATH; each node's agent must import it too (install it there, or give the
agent PYTHONPATH). The build's runs send no task or region records (CAUSEWATCH_INSTRUMENT=off).
"""


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    b = sub.add_parser("build", help="build a kit on this (reference) node")
    b.add_argument("app", help="application name the kit predicts")
    worker = b.add_mutually_exclusive_group()
    worker.add_argument("--callable", help="worker as module:function (called with one task input)")
    worker.add_argument("--command", dest="worker_command",
                        help="worker command line with {input} (a JSON file per task)")
    b.add_argument("--tasks-file", help="JSON list of task inputs (or one JSON value per line)")
    b.add_argument("--workload", choices=("masterworker",), help="use the bundled phased workload's tasks")
    b.add_argument("--tasks", type=int, default=40, help="with --workload: number of tasks (default 40)")
    b.add_argument("--task-seed", type=int, default=0, help="with --workload: seed of the task list")
    b.add_argument("--scale", type=float, default=1.0, help="with --workload: task size factor")
    b.add_argument("--out", required=True, help="kit folder to write")
    b.add_argument("--kit", help="kit name (default APP-<timestamp>)")
    b.add_argument("--workers", type=int, default=2, help="worker processes of the reference runs")
    b.add_argument("--bbv", default="auto",
                   help="BBV source: auto, cprofile (callables), valgrind (exact), agent (sampled)")
    b.add_argument("--max-k", type=int, help="largest number of phases (default ceil(sqrt(tasks)) + 1)")
    b.add_argument("--merge-distance", type=float, default=0.5,
                   help="join phases whose centroids are this close (Manhattan distance of normalised "
                        "vectors, 0-2; default 0.5, the online tracker's): each phase costs probe time")
    b.add_argument("--coverage", type=float, default=0.99,
                   help="keep the largest phases holding this share of the work (SimPoint's -coveragePct; "
                        "default 0.99): stray tasks in a phase of their own cost probe time for nothing")
    b.add_argument("--seed", type=int, default=0, help="clustering seed")
    b.add_argument("--reference-runs", type=int, default=3, help="whole-workload timing runs (default 3)")
    b.add_argument("--min-spread", type=float, default=0.05,
                   help="the prediction interval's least half-width, relative (default 0.05)")
    b.add_argument("--max-spread", type=float, default=quality.MAX_SPREAD,
                   help="refuse a reference whose runs spread more than this "
                        f"(relative sd; default {quality.MAX_SPREAD})")
    b.add_argument("--max-other-cpu", type=float, default=quality.MAX_OTHER_CPU,
                   help="refuse a reference during which other processes used more than this share of the "
                        f"machine's CPU (default {quality.MAX_OTHER_CPU})")
    b.add_argument("--retries", type=int, default=1, help="reference attempts after a noisy one (default 1)")
    b.add_argument("--windows", type=int, default=4,
                   help="timings of the representatives inside each reference run, after each of this many equal "
                        "parts (default 4; fewer when a part would hold under 50 tasks)")
    b.add_argument("--warmup", type=int, default=1, help="warm-up runs per representative")
    b.add_argument("--repeats", type=int, default=5, help="timed runs per representative")
    b.add_argument("--register", metavar="URL|DB",
                   help="also register the kit with the daemon at URL (http://...) or in a stopped daemon's store")
    b.add_argument("--json", action="store_true", help="print the manifest as JSON")

    r = sub.add_parser("run", help="run a kit here and predict this node's task time")
    r.add_argument("kit", help="kit folder or manifest.json")
    r.add_argument("--warmup", type=int, help="warm-up runs per phase (default: the kit's)")
    r.add_argument("--repeats", type=int, help="timed runs per phase (default: the kit's)")
    r.add_argument("--send", action="store_true", help="send the result to the daemon as a probe_result")
    r.add_argument("--config", help="agent TOML config for --send (section [agent])")
    r.add_argument("--daemon", help="daemon endpoint for --send (default from config)")
    r.add_argument("--idle-wait", type=float, default=0.0, metavar="SECONDS",
                   help="first wait up to this long for other processes to leave the machine idle (default 0)")
    r.add_argument("--json", action="store_true", help="print the result as JSON")

    g = sub.add_parser("register", help="register a built kit with the daemon (or in a stopped daemon's store)")
    g.add_argument("kit", help="kit folder")
    add_source_arguments(g)
    g.add_argument("--json", action="store_true", help="print the registered manifest as JSON")

    t = sub.add_parser("status", help="each node's probe of each kit: pending, done or failed (and why)",
                       description="Each node's probe of each kit: pending (a node heard from has no result "
                                   "for a registered kit), done (with whether the node was busy) or failed "
                                   "(and why), with when.")
    t.add_argument("app", nargs="?", help="only this application's kits")
    add_source_arguments(t)
    t.add_argument("--json", action="store_true", help="print the rows as JSON")


def _tasks(args) -> list:
    if args.workload:
        from causewatch.probe.workloads import masterworker
        return masterworker.make_tasks(args.tasks, args.task_seed, args.scale)
    if not args.tasks_file:
        raise InputError("probe build needs --tasks-file FILE or --workload masterworker")
    try:
        text = open(args.tasks_file).read()
    except OSError as e:
        raise InputError(f"{args.tasks_file}: cannot read ({e.strerror})") from None
    try:
        tasks = json.loads(text)
    except json.JSONDecodeError:
        try:
            tasks = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as e:
            raise InputError(f"{args.tasks_file}: neither a JSON list nor JSON lines ({e})") from None
    if not isinstance(tasks, list):
        raise InputError(f"{args.tasks_file}: expected a JSON list of task inputs")
    return tasks


def _worker(args):
    from causewatch.probe.kit import Worker
    if args.worker_command:
        return Worker(command=tuple(shlex.split(args.worker_command)))
    if args.callable:
        return Worker(callable=args.callable)
    if args.workload:
        return Worker(callable="causewatch.probe.workloads.masterworker:run_task")
    raise InputError("probe build needs --callable module:function, --command '... {input}' or --workload masterworker")


def _build(args) -> int:
    from causewatch.probe.build import build_kit
    check_output(args.out, "--out", folder=True)
    # as `python -m` and `python script.py` do, a module in the folder the build runs in is found (the
    # console script's own folder is on sys.path in its place); last, so it shadows no installed module
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    if args.register:    # a store or daemon that cannot take it is refused now, not after minutes of building
        _registry(args.register).close()
    # SIGINT stops a build even where it was started with it ignored (a script's background job, the demo's
    # build under one): the build then stops its pool's workers, where a kill leaves them to broken pipes
    signal.signal(signal.SIGINT, signal.default_int_handler)
    manifest = build_kit(args.app, _worker(args), _tasks(args), args.out, kit=args.kit, workers=args.workers,
                         bbv=args.bbv, max_k=args.max_k, seed=args.seed, reference_runs=args.reference_runs,
                         windows=args.windows, min_spread=args.min_spread,
                         merge_distance=args.merge_distance, coverage=args.coverage, warmup=args.warmup,
                         repeats=args.repeats, max_spread=args.max_spread, max_other_cpu=args.max_other_cpu,
                         retries=args.retries, show_progress=sys.stderr.isatty())
    if args.register:
        _register_folder(_registry(args.register), args.out)
    if args.json:
        print(json.dumps(manifest, indent=2))
        return 0
    print(f"kit {manifest['kit']} for {manifest['app']} in {args.out}: {len(manifest['phases'])} phases from "
          f"{manifest['tasks']} tasks ({manifest['bbv_source']} BBVs); reference {manifest['reference_seconds']:.2f} "
          f"task-s [{manifest['reference_lo']:.2f}, {manifest['reference_hi']:.2f}]"
          + (f"; registered in {args.register}" if args.register else ""))
    print(f"  quality: {quality.format_quality(manifest)}")
    for p in manifest["phases"]:
        print(f"  phase {p['phase']:>2}: {p['tasks']:>3} tasks, {100 * p['weight']:5.1f} % of time, "
              f"representative {p['representative']} ({p['ref_seconds'] * 1000:.1f} ms)")
    found = _worker(args).module_file() if args.callable else None
    if found:
        print(f"  {_importable(args.callable, found)}")
    return 0


def _importable(callable_: str, path: str) -> str:
    """Where the worker's module was found here, and what each node's agent needs to import it."""
    module = callable_.partition(":")[0]
    # the folder to put on PYTHONPATH: above the module's file by its dotted depth (a package: its __init__)
    depth = module.count(".") + (Path(path).name == "__init__.py")
    return (f"each node's agent must import {module} (here: {path}): install it there, or start the agent "
            f"with PYTHONPATH={Path(path).parents[depth]}")


def _run(args) -> int:
    from tqdm import tqdm

    from causewatch.probe.kit import load_manifest
    from causewatch.probe.run import format_table, probe_result_body, run_when_idle
    manifest = load_manifest(args.kit)
    if args.idle_wait < 0:
        raise InputError(f"--idle-wait must be 0 or more seconds, got {args.idle_wait}")
    with tqdm(total=len(manifest["phases"]), desc="probe", disable=None) as bar:   # None: only on a terminal
        result = run_when_idle(manifest, idle_wait=args.idle_wait, warmup=args.warmup, repeats=args.repeats,
                               progress=bar.update)
    if args.send:
        _send(args, probe_result_body(result))
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0


def _send(args, body: dict) -> None:
    from causewatch import config
    from causewatch.agent.sender import Sender
    cfg = config.load(config.AgentConfig, args.config, "agent", daemon=args.daemon)
    sender = Sender(cfg).start()
    try:
        sender.send("probe_result", body)
        if not sender.flush(10.0):
            print(f"probe run: the daemon at {cfg.daemon} did not ack within 10 s; the result stays spooled",
                  file=sys.stderr)
    finally:
        sender.close()


def _registry(where: str):
    """--register's daemon (http://...) or stopped store file, as a source to register with."""
    return open_source(argparse.Namespace(daemon=where, db=None) if "://" in where else
                       argparse.Namespace(daemon=None, db=where))


def _register_folder(source, kit: str) -> dict:
    from causewatch.probe.registry import kit_folder_row
    row = kit_folder_row(kit)
    manifest = json.loads(row["manifest"])
    with source:
        source.write(verbs.KITS, {"manifest": manifest, "path": row["path"]})
    return manifest


def _register(args) -> int:
    source = open_source(args)
    manifest = _register_folder(source, args.kit)
    print(json.dumps(manifest, indent=2) if args.json else
          f"registered kit {manifest['kit']} for {manifest['app']} with {source.where}")
    return 0


def _status(args) -> int:
    with open_source(args) as source:
        rows = source.read(verbs.PROBE_STATUS, app=args.app)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    if not rows:
        print("no probe yet: no kit registered" + (f" for app {args.app!r}" if args.app else "")
              + ", or no agent has said hello")
        return 0
    now = time.time()
    print(f"{'node':<20} {'app':<12} {'kit':<24} {'state':<8} {'when':>12}  note")
    for r in rows:
        when = f"{age(now - r['ts'])} ago" if r.get("ts") is not None else ""
        print(f"{r['node']:<20} {r['app']:<12} {r['kit']:<24} {r['state']:<8} {when:>12}  {_note(r, now)}")
    return 0


def _note(row: dict, now: float) -> str:
    """What a status row's state means: why it failed, whether the node was busy, what it waits for."""
    if row["state"] == "failed":
        return row["reason"]
    if row["state"] == "pending":
        seen = row.get("last_seen")
        return "asked at the node's hello" + (f"; node last seen {age(now - seen)} ago" if seen else "")
    load = "" if row.get("other_cpu") is None else f"others used {100 * row['other_cpu']:.0f} % CPU"
    return f"busy: {load}" if row.get("busy") else load


def run(args) -> int:
    return {"build": _build, "run": _run, "register": _register, "status": _status}[args.action](args)
