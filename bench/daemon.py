"""The daemon's weight and its data verbs' speed: the proportional set size (PSS: a page shared by n
processes counts 1/n to each) of each of its processes after a run with two agents, their CPU while
the agents are idle, and the first call of each data verb on a freshly started daemon, quiet and with
--load busy loops beside it.

Goals: the daemon's processes together <= 400 MB PSS with 2 agents after 15 minutes and
<= 5 % of a core while idle between analysis cycles; at load 8 on two cores `nodes` <= 1 s and
`bottlenecks`, `query`, `learn tasks` <= 3 s.

The run: `causewatch daemon`, two `causewatch agent`s watching their node, and beside each an
instrumented program sending 5 tasks a second with a region each (app bench-1, bench-2) for --minutes;
then the programs stop, the causal job learns their last tasks, and the processes' CPU is read from
/proc over --idle seconds (two idle agents: their samples still arrive; the jobs' periodic runs find
nothing new). Then, for each load: the daemon is restarted on the same store, given
--settle seconds, the busy loops (`while True: pass`, nice 0) start, and each verb runs once as a new
`causewatch` process (a verb's first call on that daemon: its API worker's first answers included).
The machine's load average is printed: other work on it slows the loaded figures further.
Usage: python bench/daemon.py [--minutes 15] [--idle 60] [--load 8] [--settle 20] [--verbs-only DB --app APP]
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from cputime import live_cpu_seconds

PY = sys.executable

PROGRAM = """
import random, sys, time
from causewatch.agent.instrument import region, task
app, rate, until = sys.argv[1], float(sys.argv[2]), time.time() + float(sys.argv[3])
rng = random.Random(app)
while time.time() < until:
    n = rng.randint(2_000, 40_000)
    with task(app, params={"n": n}):
        with region("square"):
            sum(i * i for i in range(n))
    time.sleep(1 / rate)
"""
BUSY = "while True: pass"
VERBS = {   # label -> argv after `causewatch`, and its goal at load 8 in seconds
    "nodes": (["nodes"], 1.0),
    "bottlenecks": (["bottlenecks"], 3.0),
    "query": (["query", "(time_share is high)"], 3.0),
    "learn tasks": (["learn", "tasks", "--app", "bench-1"], 3.0),
    "anomalies": (["anomalies"], 3.0),
}


def free_port() -> int:
    """A free port below the ephemeral range (as tests/support.py picks them)."""
    while True:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", random.randrange(20000, 32768)))
            except OSError:
                continue
            return s.getsockname()[1]


class Daemon:
    def __init__(self, folder: Path, db: Path):
        self.folder, self.db = folder, db
        self.port, self.http = free_port(), f"127.0.0.1:{free_port()}"
        self.endpoint = f"tcp://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> float:
        """Seconds until it printed its serving line (its jobs built, its API worker starting)."""
        t = time.perf_counter()
        self.proc = subprocess.Popen([PY, "-m", "causewatch.cli", "daemon", "--db", str(self.db), "--bind",
                                      self.endpoint, "--http", self.http], stdout=subprocess.PIPE,
                                     stderr=open(self.folder / "daemon.log", "a"), text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("causewatch daemon:"):
            raise SystemExit(f"the daemon did not start: {line}; see {self.folder / 'daemon.log'}")
        return time.perf_counter() - t

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)

    def processes(self) -> list[psutil.Process]:
        me = psutil.Process(self.proc.pid)
        return [me, *me.children(recursive=True)]


def label(p: psutil.Process) -> str:
    """The process's part: daemon, fork server, resource tracker, causewatch-jobs, causewatch-api (the
    workers name themselves; an older daemon spawned them unnamed: "worker PID")."""
    cmd = " ".join(p.cmdline())
    if p.name().startswith("causewatch-"):
        return p.name()
    if "resource_tracker" in cmd:
        return "resource tracker"
    if "forkserver import main" in cmd:
        return "fork server"
    if "spawn_main" in cmd:
        return f"worker {p.pid}"
    return "daemon"


def pss(daemon: Daemon) -> tuple[float, str]:
    """(total MB, 'name MB, …') of the daemon's processes."""
    parts = []
    for p in daemon.processes():
        try:
            parts.append((label(p), p.memory_full_info().pss / 2**20))
        except psutil.Error:
            pass
    return sum(mb for _, mb in parts), ", ".join(f"{name} {mb:.0f}" for name, mb in parts)


def agents(folder: Path, daemon: Daemon) -> list[subprocess.Popen]:
    procs = []
    for n in (1, 2):
        cfg = folder / f"agent-{n}.toml"
        cfg.write_text(f'[agent]\ndaemon = "{daemon.endpoint}"\nnode = "bench-node-{n}"\n'
                       f'spool = "{folder}/spool-{n}"\nipc = "ipc://{folder}/agent-{n}.sock"\n')
        procs.append(subprocess.Popen([PY, "-m", "causewatch.cli", "agent", "--config", str(cfg)],
                                      stdout=subprocess.DEVNULL, stderr=open(folder / f"agent-{n}.log", "w")))
    return procs


def programs(folder: Path, seconds: float) -> list[subprocess.Popen]:
    return [subprocess.Popen([PY, "-c", PROGRAM, f"bench-{n}", "5", str(seconds)], stdout=subprocess.DEVNULL,
                             stderr=open(folder / f"program-{n}.log", "w"),
                             env=dict(os.environ, CAUSEWATCH_CONFIG=str(folder / f"agent-{n}.toml")))
            for n in (1, 2)]


def serving_cpu(daemon: Daemon) -> float:
    """CPU seconds so far of the processes that answer a verb: the daemon and its API worker (not the jobs
    worker, whose runs are not the verb's)."""
    pids = [p.pid for p in daemon.processes() if label(p) in ("daemon", "causewatch-api")]
    return sum(map(live_cpu_seconds, pids))


def verb_times(daemon: Daemon) -> dict[str, tuple[float, float]]:
    """Each verb's (wall seconds, CPU seconds of its CLI process plus the daemon's side): the CPU figure
    hardly moves with the machine's load, and on two cores shared with 8 busy loops a verb gets about
    2/9 of a core, so its wall time there is about 4.5 times it."""
    times = {}
    for name, (argv, _) in VERBS.items():
        cli, served = os.times(), serving_cpu(daemon)
        t = time.perf_counter()
        out = subprocess.run([PY, "-m", "causewatch.cli", *argv, "--daemon", f"http://{daemon.http}"],
                             capture_output=True, text=True, timeout=600)
        wall = time.perf_counter() - t
        done = os.times()
        used = done.children_user - cli.children_user + done.children_system - cli.children_system
        times[name] = (wall, used + serving_cpu(daemon) - served)   # a retired API worker's CPU is not counted
        if out.returncode not in (0,):
            print(f"  ({name} exited {out.returncode}: {out.stderr.strip()[-200:]})")
    return times


def run(folder: Path, db: Path, minutes: float, idle: float) -> None:
    daemon = Daemon(folder, db)
    print(f"daemon ready in {daemon.start():.1f} s")
    watch = agents(folder, daemon)
    work = programs(folder, minutes * 60)
    try:
        t0 = time.monotonic()
        for mark in sorted({1, 5, 10, 15, minutes} - {m for m in (5, 10, 15) if m > minutes}):
            time.sleep(max(0.0, t0 + mark * 60 - time.monotonic()))
            total, parts = pss(daemon)
            print(f"PSS after {mark:g} min with 2 agents: {total:.0f} MB ({parts}) (goal <= 400 MB at 15 min)",
                  flush=True)
        for p in work:
            p.wait(120)
        time.sleep(75)   # the causal job (every 60 s) learns the last tasks: then only periodic checks run
        pids = {p.pid: label(p) for p in daemon.processes()}
        before = {pid: live_cpu_seconds(pid) for pid in pids}
        time.sleep(idle)
        after = {pid: live_cpu_seconds(pid) for pid in pids}
        used = {pid: after[pid] - before[pid] for pid in pids}
        print(f"CPU over {idle:g} s, 2 idle agents: {100 * sum(used.values()) / idle:.1f} % of a core in all "
              f"(goal <= 5 %): " + ", ".join(f"{pids[pid]} {100 * s / idle:.1f} %" for pid, s in used.items()))
        total, parts = pss(daemon)
        print(f"PSS after the idle minute: {total:.0f} MB ({parts})")
    finally:
        for p in work:
            p.kill()
        daemon.stop()
        for a in watch:
            a.terminate()
        for a in watch:
            a.wait(60)


def verbs(folder: Path, db: Path, loads: list[int], settle: float) -> None:
    results = {}
    for load in loads:
        daemon = Daemon(folder, db)
        ready = daemon.start()
        time.sleep(settle)
        busy = [subprocess.Popen([PY, "-c", BUSY]) for _ in range(load)]
        try:
            time.sleep(3 if load else 0)
            avg = os.getloadavg()[0]
            results[load] = verb_times(daemon)
            avg = max(avg, os.getloadavg()[0])
        finally:
            for b in busy:
                b.kill()
            daemon.stop()
        print(f"load {load} (busy loops; load average {avg:.1f} on {os.cpu_count()} CPUs), daemon ready in "
              f"{ready:.1f} s: " + ", ".join(f"{v} {t:.2f} s ({c:.2f} CPU-s)" for v, (t, c) in results[load].items()),
              flush=True)
    print("verb: wall (CPU-s of the CLI and the daemon's side) " + "  ".join(f"load {load}" for load in loads)
          + "  (goal at load 8)")
    for name, (_, goal) in VERBS.items():
        print(f"  {name:<12} " + "  ".join(f"{results[load][name][0]:6.2f} s ({results[load][name][1]:.2f})"
                                           for load in loads) + f"  (<= {goal:g} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=15.0, help="the run with two agents (default 15)")
    ap.add_argument("--idle", type=float, default=60.0, help="seconds of idle CPU measured (default 60)")
    ap.add_argument("--load", type=int, action="append", help="busy loops beside the verbs (default: 0 and 8)")
    ap.add_argument("--settle", type=float, default=20.0, help="seconds between a daemon's start and its verbs")
    ap.add_argument("--verbs-only", metavar="DB", help="skip the run: time the verbs on this store (a copy)")
    ap.add_argument("--app", default="bench-1", help="the app `learn tasks` learns (default bench-1, the run's)")
    args = ap.parse_args()
    VERBS["learn tasks"] = (["learn", "tasks", "--app", args.app], VERBS["learn tasks"][1])
    loads = args.load or [0, 8]
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="cw-daemon-") as folder:
        folder = Path(folder)
        db = folder / "cw.duckdb"
        if args.verbs_only:
            db.write_bytes(Path(args.verbs_only).read_bytes())
        else:
            run(folder, db, args.minutes, args.idle)
        verbs(folder, db, loads, args.settle)


if __name__ == "__main__":
    main()
