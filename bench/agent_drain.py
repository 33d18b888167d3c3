"""One agent's ack rate into a daemon beside N busy loops, by the sender's `window`: how many frames a
second the daemon acks when its threads wait for a CPU (each round trip then takes long, and at most
`window` frames make one), hence how many are left unacked when an agent stops.

A daemon child without analysis jobs; a Sender in this process spools `--frames` task records at once
and waits for every ack. Each window runs `--repeats` times, alternating (the machine's other load moves).

    .venv/bin/python bench/agent_drain.py --busy 8 --frames 2000 --windows 32 256
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from causewatch.agent.sender import Sender
from causewatch.config import AgentConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from job_cadence import BUSY, task_body
from support import free_port

DAEMON = ("import sys; from causewatch.config import DaemonConfig; from causewatch.daemon.server import Daemon; "
          "Daemon(DaemonConfig(db=sys.argv[1], bind=sys.argv[2], http=''), jobs=[]).serve()")


def acked_rate(frames: int, window: int) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="cw-drain-"))
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    daemon = subprocess.Popen([sys.executable, "-c", DAEMON, str(folder / "cw.duckdb"), endpoint],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sender = Sender(AgentConfig(daemon=endpoint, node="n1", spool=str(folder / "spool"), window=window)).start()
    try:
        if not sender.connected.wait(300):
            raise SystemExit("the daemon did not answer in 300 s")
        rng = np.random.default_rng(0)
        began = time.perf_counter()
        for i in range(frames):
            sender.send("task", task_body(rng, i, time.time()))
        flushed = sender.flush(600)
        seconds = time.perf_counter() - began
    finally:
        sender.close()
        daemon.terminate()
        daemon.wait(120)
    return {"window": window, "frames": frames, "seconds": round(seconds, 1), "acked_per_s": round(frames / seconds),
            "flushed": flushed, "load_1min": round(os.getloadavg()[0], 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--busy", type=int, default=8, help="busy loops beside the daemon")
    p.add_argument("--frames", type=int, default=2000)
    p.add_argument("--windows", type=int, nargs="+", default=[32, 256])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.busy)]
    try:
        runs = [acked_rate(args.frames, w) for _ in range(args.repeats) for w in args.windows]
    finally:
        for b in busy:
            b.kill()
            b.wait()
    for r in runs:
        print(json.dumps(r) if args.json else
              f"window {r['window']}: {r['frames']} frames acked in {r['seconds']} s, {r['acked_per_s']} a second "
              f"(load {r['load_1min']})")


if __name__ == "__main__":
    main()
