"""Chaos benchmark: seeded rounds of daemon SIGKILLs (and one sender kill) with an audit per (node, boot,
seq), then a flood of malformed frames next to a good sender. Prints lost, doubled, nacks by reason,
the daemon's peak RSS and log bytes per refused frame. Goals: 0 lost, 0 doubled, 0 good frames refused,
every malformed frame nacked with a reason, RSS < 300 MB during the flood.
Run: .venv/bin/python bench/chaos.py --kills 50 --seeds 5 --flood 100000
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

import psutil
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from support import DaemonProcess, agent_config, free_port, samples
from test_chaos import QuickDaemon, run_chaos
from test_hostile import CORPUS

from causewatch import wire
from causewatch.agent.sender import Sender


def _legal(data: bytes) -> bool:
    """The corpus also holds legal frames (a forged node is trusted without keys): not malformed."""
    try:
        wire.decode(data)
        return True
    except wire.WireError:
        return False


def flood(folder: Path, n: int, sockets: int = 4) -> dict:
    """n malformed frames (the hostile corpus, cycled) from raw DEALERs, a good sender alongside."""
    d = QuickDaemon(folder / "flood.duckdb", port=free_port()).start()
    watched = psutil.Process(d.proc.pid)
    time.sleep(2)
    idle_rss = watched.memory_info().rss / 2**20
    corpus = [c for c in CORPUS if len(c) < 1024 * 1024 and not _legal(c)]
    raws = [zmq.Context.instance().socket(zmq.DEALER) for _ in range(sockets)]
    for r in raws:
        r.setsockopt(zmq.RCVHWM, 0)
        r.connect(d.endpoint)
    good = Sender(agent_config(folder, d.endpoint, "good")).start()
    reasons: Counter = Counter()
    peak_rss, replies, t0 = 0.0, 0, time.perf_counter()
    for i in range(n):
        raws[i % sockets].send(corpus[i % len(corpus)])
        if i % 100 == 0:
            good.send("samples", samples(i // 100))
        if i % 1000 == 0:
            peak_rss = max(peak_rss, watched.memory_info().rss / 2**20)
        for r in raws:   # read what has come back, so no queue grows without bound
            while r.poll(0):
                reply = wire.decode(r.recv(), types=wire.DAEMON_TYPES)
                reasons[reply.body.get("code", "?") if reply.type == "nack" else "ack"] += 1
                replies += 1
    deadline = time.monotonic() + 120
    while replies < n and time.monotonic() < deadline:
        for r in raws:
            while r.poll(10):
                reply = wire.decode(r.recv(), types=wire.DAEMON_TYPES)
                reasons[reply.body.get("code", "?") if reply.type == "nack" else "ack"] += 1
                replies += 1
        peak_rss = max(peak_rss, watched.memory_info().rss / 2**20)
    elapsed = time.perf_counter() - t0
    good_ok = good.flush(60)
    good_refused = good.counts["frames_refused"]
    good.close()
    for r in raws:
        r.close(linger=0)
    exit_status = d.proc.poll()   # None: the daemon is still running, as it must be
    d.stop()
    log_bytes = sum(p.stat().st_size for p in folder.glob("flood.*.log"))
    nacked = sum(v for k, v in reasons.items() if k != "ack")
    return {"frames": n, "nacked": nacked, "acked": reasons["ack"], "unanswered": n - replies,
            "nacks_by_reason": dict(reasons), "frames_per_s": n / elapsed, "daemon_idle_rss_mb": idle_rss,
            "daemon_peak_rss_mb": peak_rss,
            "log_bytes_per_refused_frame": log_bytes / max(nacked, 1), "good_all_acked": good_ok,
            "good_refused": good_refused, "daemon_survived": exit_status is None, "daemon_exit_status": exit_status}


def full_daemon_rss(folder: Path) -> dict:
    """RSS (MB) of `causewatch daemon` with its default jobs, idle, after one /api call: the ingesting
    process and its two workers (the analysis stack lives only in those)."""
    d = DaemonProcess(folder / "full.duckdb").start()
    try:
        with urllib.request.urlopen(f"http://{d.http}/api/stats", timeout=60) as reply:
            reply.read()
        time.sleep(2)
        parent = psutil.Process(d.proc.pid)
        rss = {"daemon": parent.memory_info().rss / 2**20}
        for child in parent.children():   # the two workers, and multiprocessing's resource tracker
            kind = "resource tracker" if "resource_tracker" in " ".join(child.cmdline()) else "worker"
            rss[f"{kind} {child.pid}"] = child.memory_info().rss / 2**20
        return rss
    finally:
        d.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kills", type=int, default=50, help="daemon kills per seed")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--frames", type=int, default=4000, help="frames per sender")
    p.add_argument("--flood", type=int, default=100_000, help="malformed frames in the flood")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    rounds = []
    for seed in range(args.seeds):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            audit = run_chaos(Path(tmp), seed, args.kills, frames=args.frames)
            rounds.append({"seed": seed, "seconds": time.perf_counter() - t0, **audit})
        if not args.json:
            print(f"seed {seed}: {args.kills} kills, {rounds[-1]['stored']} stored, lost {audit['lost']}, "
                  f"doubled {audit['doubled']}, invented {audit['invented']}, wrong values {audit['wrong']}, "
                  f"left in spools {audit['spooled_left']} ({rounds[-1]['seconds']:.0f} s)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        hostile = flood(Path(tmp), args.flood) if args.flood else {}
        full = full_daemon_rss(Path(tmp))
    if args.json:
        print(json.dumps({"rounds": rounds, "flood": hostile, "full_daemon_idle_rss_mb": full}))
    elif hostile:
        print(f"flood: {hostile['frames']:,} malformed frames, {hostile['nacked']:,} nacked "
              f"({hostile['nacked'] / hostile['frames']:.1%}), {hostile['acked']} acked, "
              f"{hostile['unanswered']} unanswered, {hostile['frames_per_s']:,.0f} frames/s")
        print(f"  nacks by reason: {hostile['nacks_by_reason']}")
        print(f"  daemon RSS idle {hostile['daemon_idle_rss_mb']:.0f} MB, peak {hostile['daemon_peak_rss_mb']:.0f} MB, "
              f"{hostile['log_bytes_per_refused_frame']:.2f} log bytes per refused frame")
        print(f"  good sender: all acked {hostile['good_all_acked']}, refused {hostile['good_refused']}")
        print(f"  daemon survived the flood: {'yes' if hostile['daemon_survived'] else 'NO'}"
              + ("" if hostile["daemon_survived"] else f" (exit status {hostile['daemon_exit_status']})"))
    if not args.json:
        print("causewatch daemon with its jobs, idle after one /api call, RSS: "
              + ", ".join(f"{name} {mb:.0f} MB" for name, mb in full.items()))
    if hostile and not hostile["daemon_survived"]:
        raise SystemExit(f"the daemon died during the flood (exit status {hostile['daemon_exit_status']})")


if __name__ == "__main__":
    main()
