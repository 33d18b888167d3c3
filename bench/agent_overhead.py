"""Agent overhead: the agent's CPU per wall second on one target, and the target's slowdown.

Prints (1) agent CPU seconds per wall second with counters and psutil at 1 Hz (goal <= 0.2 % of
a core) and at the defaults (counters 10 Hz, psutil 1 Hz, IP sampling 1 kHz); (2) the target's
slowdown under the default agent, paired A/B runs, median of the ratios (goal <= 2 %);
(3) prometheus-node-exporter's CPU at a 1 s scrape in the same run, when it is installed.
CPU time is read in nanoseconds from /proc/PID/task/*/schedstat (psutil's 10 ms ticks cannot resolve
0.2 %); the slowdown runs report from the agent's own spool that IP sampling was on (hello's "bbv"
status and the phase-vector frames it made). Usage: python bench/agent_overhead.py [--seconds 30] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from cputime import live_cpu_seconds
from startup import start_agent as start_ready_agent

from causewatch import wire

PY = sys.executable
# fixed CPU work (~1 s) after a go signal on stdin; an untimed first part lets the agent load the symbol
# tables once (a start-up cost, not a steady-state one); prints the timed part's wall and CPU seconds
WORK = """
import time
def work(n):
    s = 0
    for i in range(n):
        s += i % 7
input()
work(20_000_000)
t, c = time.perf_counter(), time.process_time()
work(40_000_000)
print(time.perf_counter() - t, time.process_time() - c, flush=True)
"""
IDLE = "import time\nwhile True: time.sleep(0.05); sum(range(20000))\n"
BUSY = "while True: sum(range(1000))\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_daemon(folder: str) -> tuple[subprocess.Popen, str]:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    p = subprocess.Popen([PY, "-m", "causewatch.cli", "daemon", "--db", f"{folder}/bench.duckdb", "--bind", endpoint,
                          "--http", ""], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if not p.stdout.readline().startswith("causewatch daemon:"):
        raise SystemExit("daemon did not start")
    return p, endpoint


def agent_config(folder: str, endpoint: str, name: str, **settings) -> str:
    path = f"{folder}/{name}.toml"
    lines = [f'daemon = "{endpoint}"', f'spool = "{folder}/spool-{name}"', f'ipc = "ipc://{folder}/{name}.sock"']
    lines += [f"{k} = {v}" for k, v in settings.items()]
    with open(path, "w") as f:
        f.write("[agent]\n" + "\n".join(lines) + "\n")
    return path


def start_agent(config: str, pid: int) -> subprocess.Popen:
    """An agent on `pid`, returned once it sent READY=1 (sampling has started)."""
    agent, _ = start_ready_agent(PY, ["--config", config, "--pid", str(pid), "--flush-timeout", "5"],
                                 os.path.dirname(config), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return agent


def ip_sampling(spool: str) -> tuple[str, int, int]:
    """From an agent's spool (nothing acked it): hello's IP-sampling status, phase-vector frames, samples."""
    status, frames, samples = "no hello", 0, 0
    with sqlite3.connect(f"{spool}/spool.sqlite") as db:
        for (data,) in db.execute("SELECT data FROM frames"):
            frame = wire.decode(data)
            if frame.type == "hello":
                status = frame.body["counters"].get("bbv", "absent")
            elif frame.type == "bbv" and frame.body.get("kind") != "python":
                frames += 1
                samples += sum(frame.body["vector"]["counts"])
    return status, frames, samples


def busy_fraction(pid: int, seconds: float, during=None) -> float:
    """CPU seconds of `pid` per wall second over `seconds` (calling `during()` every second)."""
    c0, t0 = live_cpu_seconds(pid), time.monotonic()
    for _ in range(int(seconds)):
        if during:
            during()
        time.sleep(max(0.0, t0 + _ + 1 - time.monotonic()))
    return (live_cpu_seconds(pid) - c0) / (time.monotonic() - t0)


def agent_cpu(folder: str, endpoint: str, seconds: float, daemon: int, target: str = IDLE,
              **settings) -> tuple[float, float]:
    """(agent, daemon) CPU seconds per wall second while the agent watches `target`."""
    target = subprocess.Popen([PY, "-c", target])
    agent = start_agent(agent_config(folder, endpoint, f"cpu{len(settings)}{time.monotonic_ns()}", **settings),
                        target.pid)
    try:
        time.sleep(5)                               # past start-up (imports, symbol tables, hello)
        d0 = live_cpu_seconds(daemon)
        t0 = time.monotonic()
        own = busy_fraction(agent.pid, seconds)
        return own, (live_cpu_seconds(daemon) - d0) / (time.monotonic() - t0)
    finally:
        agent.terminate()
        agent.wait(30)
        target.kill()
        target.wait()


def timed_work(folder: str, endpoint: str | None) -> tuple[float, float, str | None]:
    """(wall, CPU) seconds of one run of WORK, and with an endpoint, the spool of the agent that watched it."""
    target = subprocess.Popen([PY, "-c", WORK], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    name = f"ab{time.monotonic_ns()}"
    agent = start_agent(agent_config(folder, endpoint, name), target.pid) if endpoint else None
    try:
        time.sleep(1)                               # both arms: the agent past its start-up
        target.stdin.write("\n")
        target.stdin.flush()
        wall, cpu = map(float, target.stdout.readline().split())
        return wall, cpu, f"{folder}/spool-{name}" if endpoint else None
    finally:
        target.wait()
        if agent:
            agent.terminate()
            agent.wait(30)


def node_exporter_cpu(seconds: float) -> float | None:
    exe = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if exe is None:
        return None
    port = free_port()
    p = subprocess.Popen([exe, f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url, timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        return busy_fraction(p.pid, seconds, during=lambda: urllib.request.urlopen(url, timeout=5).read())
    finally:
        p.terminate()
        p.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0,
                    help="measuring window per CPU figure (schedstat CPU time is in ns)")
    ap.add_argument("--repeats", type=int, default=5, help="paired A/B runs for the slowdown")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cw-bench-") as folder:
        daemon, endpoint = start_daemon(folder)
        try:
            slow, _ = agent_cpu(folder, endpoint, args.seconds, daemon.pid, counters_interval=1.0,
                                psutil_interval=1.0, bbv_frequency=0)
            default, _ = agent_cpu(folder, endpoint, args.seconds, daemon.pid)
            busy, busy_daemon = agent_cpu(folder, endpoint, args.seconds, daemon.pid, target=BUSY)
            # In production the daemon runs on another host; here its ingest would compete with the target
            # for the same cores, so the A/B runs' agent spools to disk for an endpoint nobody serves.
            nowhere = f"tcp://127.0.0.1:{free_port()}"
            ratios, cpu_ratios, sampled = [], [], []
            for r in range(args.repeats):           # alternate the order so drift cancels
                runs = [("A", None), ("B", nowhere)]
                times = dict((k, timed_work(folder, e)) for k, e in (runs if r % 2 == 0 else runs[::-1]))
                ratios.append(times["B"][0] / times["A"][0])
                cpu_ratios.append(times["B"][1] / times["A"][1])
                sampled.append(ip_sampling(times["B"][2]))
            exporter = node_exporter_cpu(args.seconds)
        finally:
            daemon.terminate()
            daemon.wait(30)
    print(f"load average during the run: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"agent CPU, counters+psutil at 1 Hz, no IP sampling: {100 * slow:.3f} % of one core (goal <= 0.2 %)")
    print(f"agent CPU, defaults (counters 10 Hz, psutil 1 Hz, IP sampling 1 kHz): {100 * default:.3f} % of one core")
    print(f"agent CPU, defaults, on a busy target (1000 IP samples/s to symbolise): {100 * busy:.3f} % of one core;"
          f" the daemon ingesting its frames: {100 * busy_daemon:.3f} %")
    print(f"target slowdown under the default agent, wall time: median {100 * (statistics.median(ratios) - 1):+.2f} %"
          f" over {args.repeats} paired runs (ratios {', '.join(f'{x:.3f}' for x in ratios)}; goal <= 2 %)")
    print(f"target slowdown under the default agent, its own CPU time (sampling interrupts land here): median "
          f"{100 * (statistics.median(cpu_ratios) - 1):+.2f} % (ratios {', '.join(f'{x:.3f}' for x in cpu_ratios)})")
    print("IP sampling in the agent runs: " + "; ".join(f"{st}, {n} phase-vector frames, {k:,} samples"
                                                        for st, n, k in sampled))
    if exporter is None:
        print("prometheus-node-exporter: not installed (apt-get install prometheus-node-exporter)")
    else:
        print(f"prometheus-node-exporter at a 1 s scrape: {100 * exporter:.3f} % of one core; "
              f"agent (1 Hz) / node-exporter = {slow / exporter:.2f}, agent (defaults) / node-exporter = "
              f"{default / exporter:.2f}")


if __name__ == "__main__":
    main()
