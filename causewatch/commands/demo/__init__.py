"""`causewatch demo`: the whole system on embedded defaults, end to end, with a report.

A daemon on a DuckDB file under the demo folder, a local agent watching a phased master-worker
workload, live progress while data arrives, then what was stored and what the analyses made of it,
all read through the daemon's API. The parts: `session` (the demo on its running daemon), `parts` (its
folder, kit and agents), `story` (the stretches), `hog` (the contention), `causes` (why each anomaly
was raised), `report` and `sections` (what the report holds), `words` (the report printed), `shards`
(--shards). No submodule is named `run`: importing it would shadow this module's `run`.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from causewatch.commands.demo.story import RATE, WAIT_MORE

EPILOG = """The story: a calm start until app:demo has a baseline model, then a CPU hog until an anomaly on
the tasks' CPU wait is raised, then a calm end until it resolves. Each stretch ends when what it needs
has come, within its share of --seconds plus --wait; under load the demo waits longer, and says up
front how long at most. Its last line says whether the story was shown, and if not, why.
Exit status: 0 the story was shown, 3 the demo ran but could not show it, 1 a part failed, 130
interrupted (Ctrl-C, in any step: a line says what it had done; no report of the cut run).

examples:
  causewatch demo                      # about 80 s on an idle machine, files under ./demo-out
  causewatch demo --seconds 60 --dir /tmp/cw-demo
  causewatch demo --wait 300           # a busy machine: give each stretch up to 5 min more
  causewatch demo --json               # the final report as JSON (the last line on stderr)
  causewatch demo --analysis-scheduler tcp://127.0.0.1:8786   # the causal learns on a Dask cluster
  causewatch demo --shards 2           # then two daemons as shards over one lake, asked as one
"""


def add_arguments(p):
    p.add_argument("--dir", default="demo-out",
                   help="demo folder (DuckDB file, spool, kits): a new or empty one, or one an earlier demo made")
    p.add_argument("--seconds", type=float, default=30.0,
                   help=f"how long the workload runs on an idle machine, {RATE} tasks a second (default 30: a calm "
                        "start, the hog, a calm end)")
    p.add_argument("--wait", type=float, default=WAIT_MORE,
                   help="seconds each stretch may run beyond its share of --seconds, waiting for what it needs "
                        "(a baseline model, the anomaly, its resolution) on a loaded machine "
                        f"(default {WAIT_MORE:.0f})")
    p.add_argument("--json", action="store_true", help="print the final report as JSON")
    p.add_argument("--shards", type=int, default=1, metavar="N",
                   help="after the story, N daemons as shards over one lake with agents spread by hashing, "
                        "asked as one (default 1: no such section; 2-8)")
    p.add_argument("--analysis-scheduler", default="", metavar="tcp://HOST:PORT",
                   help="a running dask.distributed scheduler to run the causal learns on (default: the "
                        "daemon's jobs worker; docs/cluster.md)")


def _terminated(signum, frame):
    raise SystemExit(128 + signum)   # the way out stops the hog, the agents and the daemon


def run(args) -> int:
    from causewatch import config
    from causewatch.commands.demo import parts
    from causewatch.commands.demo.session import CAUSAL, STORE, Steps, tell
    from causewatch.daemon.server import Daemon
    from causewatch.errors import ConfigError, InputError
    signal.signal(signal.SIGTERM, _terminated)
    folder = Path(args.dir).resolve()
    db, quiet = folder / "causewatch.duckdb", args.json or args.quiet
    if not 1 <= args.shards <= 8:
        raise InputError(f"--shards {args.shards}: give 1 (no shards section) to 8")
    problem = config.scheduler_problem(args.analysis_scheduler)
    if problem:
        raise ConfigError("analysis_scheduler", problem, "--analysis-scheduler")
    cfg = config.DaemonConfig(db=str(db), bind="tcp://127.0.0.1:0", http="127.0.0.1:0", **CAUSAL, **STORE,
                              analysis_scheduler=args.analysis_scheduler)
    steps = Steps()
    signal.signal(signal.SIGINT, steps.interrupt)   # even where SIGINT was inherited ignored: Ctrl-C stops it
    try:
        parts.prepare(folder)
        steps.begin("building the probe kit")
        parts.build_kit(folder, quiet)
        steps.begin("starting the daemon")
        daemon = Daemon(cfg).start()
        try:
            return tell(args, folder, daemon, quiet, steps)
        finally:
            daemon.stop()
    except (KeyboardInterrupt, Exception):   # each step's own `finally` has stopped what it started
        if not steps.interrupted:
            raise
        print(steps.summary(folder), file=sys.stderr)
        return 130
