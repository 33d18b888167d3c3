"""Start-up and weight: `causewatch --version`/`--help` time, agent ready time and RSS, agent-only install size.

Goals: --version and any --help <= 0.15 s; agent ready (READY=1 on $NOTIFY_SOCKET) <= 0.5 s;
agent RSS <= 60 MB with counters and 1 kHz IP sampling; an agent-only install <= 60 MB on disk.
Times are medians of --repeats runs, printed next to `python -c pass` and, for the agent, next to
importing the libraries it cannot start without (its floor on this machine), measured in the same run.
With --nice N the agents (and the floor) run at that niceness, e.g. -15 as a node's service might: on
a loaded machine the wall time then shows what the agent itself takes, not its wait for a core.
The project's own modules are byte-compiled first, as pip does when it installs a package: with
PYTHONDONTWRITEBYTECODE set (as here) an editable tree would compile them again on every start, ~50 ms
of the agent's, which no installed agent pays.
Usage: python bench/startup.py [--repeats 7] [--no-install] [--nice N]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import psutil
from cputime import live_cpu_seconds

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
BUSY = "while True: sum(range(1000))\n"
AGENT_FLOOR = "import argparse, logging, sqlite3, subprocess, psutil, zmq, msgpack"   # what the agent needs to run
sys.path.insert(0, str(ROOT))
from causewatch.cli import COMMANDS  # noqa: E402  (the bench runs from a checkout)


def wall(argv: list[str], repeats: int, **popen) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, **popen)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def start_agent(python: str, args: list[str], folder: str, **popen) -> tuple[subprocess.Popen, float]:
    """`causewatch agent ARGS` and the seconds until it sent READY=1 to $NOTIFY_SOCKET (systemd's signal,
    sent once sampling runs; a socket file left by an earlier agent cannot fool it)."""
    notify = os.path.join(folder, f"notify-{time.monotonic_ns()}")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind(notify)
        s.settimeout(120)
        t = time.perf_counter()
        agent = subprocess.Popen([python, "-m", "causewatch.cli", "agent", *args],
                                 env=dict(os.environ, NOTIFY_SOCKET=notify), **popen)
        try:
            while s.recv(4096) != b"READY=1":
                pass
        except OSError:
            agent.kill()
            raise SystemExit(f"agent did not get ready: {agent.communicate()[1]}")
        ready = time.perf_counter() - t
    os.unlink(notify)
    return agent, ready


def agent_ready(python: str, folder: str, target: int, seconds: float = 5.0, **popen) -> tuple[float, float, float]:
    """(seconds to READY=1, its CPU seconds by then, RSS in MB after `seconds` of counters and 1 kHz IP
    sampling) of one agent. The CPU figure hardly moves with the machine's load; the wall one does."""
    cfg = os.path.join(folder, "agent.toml")
    # a spool of its own: frames an earlier agent left unacked would be loaded and counted as this one's
    Path(cfg).write_text(f'[agent]\ndaemon = "tcp://127.0.0.1:9"\nspool = "{folder}/spool-{time.monotonic_ns()}"\n'
                         f'ipc = "ipc://{folder}/agent.sock"\nbbv_frequency = 1000\ncounters_interval = 0.1\n')
    agent, ready = start_agent(python, ["--config", cfg, "--pid", str(target), "--flush-timeout", "0"], folder,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **popen)
    cpu = live_cpu_seconds(agent.pid)
    try:
        time.sleep(seconds)
        rss = psutil.Process(agent.pid).memory_info().rss / 2**20
    finally:
        agent.terminate()
        agent.communicate(timeout=60)
    return ready, cpu, rss


def agent_figures(python: str, folder: str, target: int, repeats: int, nice: int = 0) -> str:
    """Median READY wall and CPU over `repeats` starts, RSS after 5 s of the first, and the floor: the
    wall time of importing what the agent needs, in the same interpreter, alternated with the starts
    (the machine's load moves both alike)."""
    popen = {"preexec_fn": lambda: os.nice(nice)} if nice else {}
    runs, floors = [], []
    for i in range(repeats):
        floors.append(wall([python, "-c", AGENT_FLOOR], 1, **popen))
        runs.append(agent_ready(python, folder, target, 5.0 if i == 0 else 0.3, **popen))
    floor = statistics.median(floors)
    return (f"ready {statistics.median(r[0] for r in runs):.3f} s (goal <= 0.5 s; importing its libraries alone: "
            f"{floor:.3f} s), {statistics.median(r[1] for r in runs):.3f} s of its own CPU by then; RSS after 5 s "
            f"of counters + 1 kHz IP sampling on a busy target: {runs[0][2]:.1f} MB (goal <= 60 MB)")


def du(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) / 2**20


def agent_only_install(folder: str) -> tuple[Path, dict[str, float]]:
    """A venv with the core dependencies and causewatch, without pip and without any extra."""
    venv = Path(folder) / "agent-venv"
    subprocess.run([PY, "-m", "venv", "--without-pip", str(venv)], check=True)
    core = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pip = [PY, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet"]
    subprocess.run(pip + core, check=True)
    subprocess.run(pip + ["--no-deps", str(ROOT)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    sizes = {p.name: du(p) for p in site.iterdir() if p.is_dir() and not p.name.endswith((".dist-info", "__pycache__"))}
    sizes["(all of the venv)"] = du(venv)
    return venv, sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-install", action="store_true", help="skip the agent-only install")
    ap.add_argument("--nice", type=int, default=0, help="niceness of the agents started (negative needs root)")
    args = ap.parse_args()
    cli = [PY, "-m", "causewatch.cli"]
    subprocess.run([PY, "-m", "compileall", "-q", str(ROOT / "causewatch")], check=True)
    base = wall([PY, "-c", "pass"], args.repeats)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; python -c pass: {base:.3f} s "
          "(the floor of any command here)")
    print(f"causewatch --version: {wall(cli + ['--version'], args.repeats):.3f} s  (goal <= 0.15 s)")
    print(f"causewatch --help: {wall(cli + ['--help'], args.repeats):.3f} s")
    helps = {verb: wall(cli + [verb, "--help"], args.repeats) for verb in COMMANDS}
    worst = max(helps, key=helps.get)
    print("causewatch VERB --help: " + ", ".join(f"{v} {t:.3f}" for v, t in helps.items())
          + f" s; slowest {worst} {helps[worst]:.3f} s (goal <= 0.15 s)")
    busy = subprocess.Popen([PY, "-c", BUSY])
    runs = min(args.repeats, 5)
    try:
        with tempfile.TemporaryDirectory(prefix="cw-start-") as folder:
            print(f"agent (full install, median of {runs}, nice {args.nice}): "
                  f"{agent_figures(PY, folder, busy.pid, runs, args.nice)}")
            if args.no_install:
                return
            venv, sizes = agent_only_install(folder)
            top = sorted(((n, s) for n, s in sizes.items() if not n.startswith("(")), key=lambda kv: -kv[1])[:6]
            print(f"agent-only install: {sizes['(all of the venv)']:.1f} MB on disk (goal <= 60 MB); largest: "
                  + ", ".join(f"{n} {s:.1f}" for n, s in top))
            print(f"agent (agent-only install, median of {runs}, nice {args.nice}): "
                  f"{agent_figures(str(venv / 'bin' / 'python'), folder, busy.pid, runs, args.nice)}")
    finally:
        busy.kill()
        busy.wait()


if __name__ == "__main__":
    main()
