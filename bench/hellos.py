"""Benchmark: a fleet reconnecting. N agents' hellos reach a real daemon at once (a restart, a network
back); reports the CPU-seconds of the daemon and its worker processes from the first hello until the
daemon is idle again (its jobs' hello hooks included) and how long that took.

With --baseline DIR (another checkout with its own .venv, e.g. `git worktree add /tmp/wt-old ba8e304`)
that checkout's daemon takes the same hellos, the two alternating round by round (ABBA), and the
median of new / old is printed. Run: .venv/bin/python bench/hellos.py --agents 1000 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import zmq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from cputime import tree_cpu_seconds
from support import DaemonProcess  # tests/support.py: the daemon as a child process

from causewatch import wire

SETTLE_S = 3.0     # the daemon's own start-up (fork server, preload) left to finish before the clock starts
IDLE_CPU_S = 0.004  # a 0.2 s tick with less CPU than this counts as idle
IDLE_TICKS = 10     # idle for this many ticks in a row (2 s) ends the measurement


def storm(agents: int, checkout: Path | None) -> dict:
    """One daemon, `agents` DEALER sockets, one hello each; CPU and time to acked and to idle."""
    with tempfile.TemporaryDirectory() as folder:
        daemon = DaemonProcess(Path(folder) / "h.duckdb", checkout=checkout).start()
        ctx = zmq.Context()
        socks = []
        try:
            time.sleep(SETTLE_S)
            pid = daemon.proc.pid
            for _ in range(agents):
                s = ctx.socket(zmq.DEALER)
                s.setsockopt(zmq.LINGER, 0)
                s.connect(daemon.endpoint)
                socks.append(s)
            c0, t0 = tree_cpu_seconds(pid), time.monotonic()
            for k, s in enumerate(socks):
                s.send(wire.encode("hello", f"node-{k:05d}", "b1", 1,
                                   {"hostname": f"h{k}", "agent_version": "bench", "cores": 2}))
            poller = zmq.Poller()
            for s in socks:
                poller.register(s, zmq.POLLIN)
            acked = 0
            while acked < agents:
                ready = poller.poll(10_000)
                if not ready:
                    raise RuntimeError(f"only {acked} of {agents} hellos acked in 10 s")
                for s, _ in ready:
                    s.recv_multipart()
                    acked += 1
            acked_s, acked_cpu = time.monotonic() - t0, tree_cpu_seconds(pid) - c0
            last, still = tree_cpu_seconds(pid), 0
            while still < IDLE_TICKS:
                time.sleep(0.2)
                now = tree_cpu_seconds(pid)
                still = still + 1 if now - last < IDLE_CPU_S else 0
                last = now
            return {"acked_s": acked_s, "acked_cpu_s": acked_cpu, "cpu_s": last - c0,
                    "idle_after_s": time.monotonic() - t0 - IDLE_TICKS * 0.2}
        finally:
            for s in socks:
                s.close()
            ctx.term()
            daemon.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", metavar="DIR", help="also run this checkout's daemon (DIR/.venv), alternating")
    args = ap.parse_args()
    daemons = [("new", None)] + ([("baseline", Path(args.baseline).resolve())] if args.baseline else [])
    runs: dict[str, list[dict]] = {name: [] for name, _ in daemons}
    for r in range(args.rounds):
        for name, checkout in daemons if r % 2 == 0 else daemons[::-1]:
            x = storm(args.agents, checkout)
            runs[name].append(x)
            print(f"round {r + 1} {name}: {args.agents} hellos acked in {x['acked_s']:.2f} s "
                  f"({x['acked_cpu_s']:.2f} CPU-s); idle again after {x['idle_after_s']:.1f} s, "
                  f"{x['cpu_s']:.2f} CPU-s of the daemon and its workers ({x['cpu_s'] / args.agents * 1e3:.2f} ms "
                  f"a hello)", flush=True)
    for name, xs in runs.items():
        print(f"{name}: median {statistics.median(x['cpu_s'] for x in xs):.2f} CPU-s for {args.agents} hellos")
    if args.baseline:
        ratios = [b["cpu_s"] / n["cpu_s"] for n, b in zip(runs["new"], runs["baseline"])]
        print(f"CPU-s old / new, median of {args.rounds}: {statistics.median(ratios):.1f}x "
              f"(each: {', '.join(f'{x:.1f}' for x in ratios)})")


if __name__ == "__main__":
    main()
