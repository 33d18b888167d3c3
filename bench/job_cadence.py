"""The causal job's cadence on a live daemon: how far apart its checks come and what each costs its jobs
worker in CPU-seconds, beside N busy loops (the machine's other load).

A `causewatch daemon` child with the daemon's defaults but `causal_interval` (5 s here), the busy loops
started once it serves; an agent's Sender in this process streams task records at `--rate` a second (a
master-worker app's tasks: a size and a kind parameter, two counters). Every `--every` s it reads the jobs
worker's CPU from /proc/PID/stat and `causewatch_job_runs_total{analysis="causal"}` from /metrics; a check
is a step of that counter. Prints the gaps between checks, the CPU-s each took, the lag series the daemon
exports, and the frames the Sender still had unacked after a 10-s drain.

    .venv/bin/python bench/job_cadence.py --seconds 90 --busy 0
    .venv/bin/python bench/job_cadence.py --seconds 90 --busy 8 --json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import psutil

from causewatch.agent.sender import Sender
from causewatch.config import AgentConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support import free_port

TICK = os.sysconf("SC_CLK_TCK")
BUSY = "while True: pass"


def task_body(rng, i: int, now: float) -> dict:
    """One task: duration from the size (~ n^2 instructions) and the kind (memory traffic), with noise."""
    n, kind = int(rng.integers(40, 160)), str(rng.choice(["sum", "sort", "copy"]))
    instructions = n * n * rng.uniform(0.8, 1.2) * 1e3
    misses = {"sum": 1.0, "sort": 3.0, "copy": 6.0}[kind] * rng.uniform(50, 150)
    duration = instructions * 1e-9 + misses * 1e-4 + abs(rng.normal(0, 0.002))
    return {"app": "mw", "task_id": f"t{i}", "start": now - duration, "duration": duration,
            "cpu_seconds": duration * 0.9, "params": {"n": n, "kind": kind},
            "counters": {"instructions": instructions, "cache_misses": misses}}


def jobs_pid(daemon: int) -> int | None:
    for child in psutil.Process(daemon).children(recursive=True):
        try:
            if child.name() == "causewatch-jobs":
                return child.pid
        except psutil.NoSuchProcess:
            continue
    return None


def cpu_seconds(pid: int) -> float:
    """utime + stime of /proc/PID/stat (fields 14 and 15), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def scrape(url: str) -> dict[str, float]:
    text = urllib.request.urlopen(url, timeout=30).read().decode()
    out = {}
    for name in ("causewatch_job_runs_total", "causewatch_job_lag_seconds", "causewatch_job_overruns_total"):
        m = re.search(rf'^{name}\{{analysis="causal"\}} (\S+)$', text, re.M)
        if m:
            out[name] = float(m.group(1))
    return out


def stream(sender: Sender, rate: float, stop: threading.Event) -> None:
    rng, i, t0 = np.random.default_rng(0), 0, time.monotonic()
    while not stop.is_set():
        i += 1
        sender.send("task", task_body(rng, i, time.time()))
        stop.wait(max(0.0, t0 + i / rate - time.monotonic()))


def measure(args) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="cw-cadence-"))
    port, http = free_port(), free_port()
    (folder / "daemon.toml").write_text(f'db = "{folder / "cw.duckdb"}"\nbind = "tcp://127.0.0.1:{port}"\n'
                                        f'http = "127.0.0.1:{http}"\ncausal_interval = {args.interval}\n')
    daemon = subprocess.Popen([sys.executable, "-m", "causewatch.cli", "-v", "daemon", "--config",
                               str(folder / "daemon.toml")], stderr=open(folder / "daemon.log", "w"))
    sender = Sender(AgentConfig(daemon=f"tcp://127.0.0.1:{port}", node="n1", spool=str(folder / "spool"))).start()
    stop = threading.Event()
    feeder = threading.Thread(target=stream, args=(sender, args.rate, stop), daemon=True)
    feeder.start()
    url = f"http://127.0.0.1:{http}/metrics"
    checks, last, unacked, busy, lags, spent = [], None, [], [], [], 0.0
    try:
        # the busy loops start once the daemon serves and its jobs worker runs (a start beside them takes
        # minutes: the fork server's imports at a share of a core)
        while (pid := jobs_pid(daemon.pid)) is None or not sender.connected.is_set():
            time.sleep(0.5)
        busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.busy)]
        end, cpu0 = time.monotonic() + args.seconds, cpu_seconds(pid)
        while time.monotonic() < end:
            time.sleep(args.every)
            now, cpu, seen = time.monotonic(), cpu_seconds(pid), scrape(url)
            unacked.append(sender.unacked)
            lags.append(seen.get("causewatch_job_lag_seconds", 0.0))
            runs = seen.get("causewatch_job_runs_total", 0.0)
            if last is not None and runs > last[1]:
                checks.append({"t": now, "runs": runs - last[1], "cpu_s": cpu - last[2], **seen})
            if last is None or runs > last[1]:
                last = (now, runs, cpu)
        spent = cpu_seconds(pid) - cpu0
    finally:
        stop.set()
        feeder.join()
        left = (sender.flush(10), sender.unacked)   # as an agent's stop_drain_seconds would wait
        sender.close()
        daemon.terminate()
        daemon.wait(120)
        for b in busy:
            b.kill()
            b.wait()
    gaps = [b["t"] - a["t"] for a, b in zip(checks, checks[1:])]
    per_check = [c["cpu_s"] / c["runs"] for c in checks]
    return {"busy": args.busy, "rate": args.rate, "interval": args.interval, "checks": len(checks),
            "gap_median_s": statistics.median(gaps) if gaps else None, "gap_max_s": max(gaps, default=None),
            "cpu_per_check_median_s": statistics.median(per_check) if per_check else None,
            "cpu_per_check_max_s": max(per_check, default=None), "load_1min": os.getloadavg()[0],
            "unacked_max": max(unacked, default=None), "unacked_after_10s_drain": left[1],
            "jobs_cpu_s": round(spent, 2), "lag_max_s": round(max(lags, default=0.0), 1),
            "overruns": checks[-1].get("causewatch_job_overruns_total") if checks else None,
            "each": [(round(c["t"] - checks[0]["t"], 1), c["runs"], round(c["cpu_s"], 2)) for c in checks],
            "log": str(folder / "daemon.log")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=90.0)
    p.add_argument("--busy", type=int, default=0, help="busy loops beside the daemon")
    p.add_argument("--rate", type=float, default=40.0, help="task records a second")
    p.add_argument("--interval", type=float, default=5.0, help="the daemon's causal_interval")
    p.add_argument("--every", type=float, default=0.5, help="seconds between two readings")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    r = measure(args)
    print(json.dumps(r, indent=2) if args.json else
          f"busy {r['busy']}, {r['checks']} checks: gap median {r['gap_median_s']} s, max {r['gap_max_s']} s; "
          f"CPU a check median {r['cpu_per_check_median_s']} s, max {r['cpu_per_check_max_s']} s; "
          f"load {r['load_1min']:.1f}")


if __name__ == "__main__":
    main()
