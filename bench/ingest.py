"""Ingest benchmark: K simulated agents -> real senders -> real daemon (child process) -> DuckDB.

Prints metric values/s committed and acked end to end, the raw rate of inserting the same rows
into DuckDB from Arrow in this process, their ratio (goal >= 85 % at 100 and at 1,000 agents), and
the daemon's peak RSS and open descriptors. Senders are spread over --procs processes (one process
holding 1,000 DEALER sockets runs out of descriptors). Run: .venv/bin/python bench/ingest.py --agents 1000
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support import DaemonProcess, query  # noqa: E402

from causewatch import wire  # noqa: E402
from causewatch.agent.sender import Sender  # noqa: E402
from causewatch.config import AgentConfig  # noqa: E402
from causewatch.daemon.ingest import raise_nofile_limit  # noqa: E402
from causewatch.daemon.store import Store, samples_table  # noqa: E402


def body(n_t: int, n_m: int, rng) -> dict:
    return wire.samples_body(np.arange(n_t, dtype=float), [f"metric_{i:03d}" for i in range(n_m)],
                             rng.random((n_t, n_m)))


def sender_process(args, endpoint: str, folder: Path, agents: range, go, done) -> None:
    """One process's share of the agents: each a real Sender on its own spool, in its own thread."""
    raise_nofile_limit()
    rng = np.random.default_rng(agents.start)
    payloads = [body(args.timestamps, args.metrics, rng) for _ in range(4)]
    senders = [Sender(AgentConfig(daemon=endpoint, node=f"agent-{k:04d}", spool=str(folder / f"s{k}"),
                                  window=args.window)).start() for k in agents]

    def run(s: Sender):
        for i in range(args.frames):
            s.send("samples", payloads[i % len(payloads)])

    go.wait()
    threads = [threading.Thread(target=run, args=(s,)) for s in senders]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = all(s.flush(900) for s in senders)
    for s in senders:
        s.close()
    done.put(ok)


def end_to_end(args, folder: Path) -> tuple[float, int, dict]:
    daemon = DaemonProcess(folder / "e2e.duckdb").start()
    watched = psutil.Process(daemon.proc.pid)
    ctx = mp.get_context("fork")
    go, done = ctx.Event(), ctx.Queue()
    shares = np.array_split(np.arange(args.agents), args.procs)
    procs = [ctx.Process(target=sender_process, args=(args, daemon.endpoint, folder, range(s[0], s[-1] + 1), go, done))
             for s in shares if len(s)]
    for p in procs:
        p.start()
    time.sleep(args.settle)   # every sender connected before the clock starts
    peak = {"rss_mb": 0.0, "open_fds": 0}
    t0 = time.perf_counter()
    go.set()
    results = []
    while len(results) < len(procs):
        peak["rss_mb"] = max(peak["rss_mb"], watched.memory_info().rss / 2**20)
        peak["open_fds"] = max(peak["open_fds"], watched.num_fds())
        try:
            results.append(done.get(timeout=0.2))
        except Exception:   # queue.Empty: keep sampling the daemon
            pass
    elapsed = time.perf_counter() - t0
    for p in procs:
        p.join()
    daemon.stop()
    stored = query(daemon.db, "SELECT count(*) FROM samples")[0][0]
    expected = args.agents * args.frames * args.timestamps * args.metrics
    if not all(results) or stored != expected:
        raise SystemExit(f"end-to-end run lost data: stored {stored} of {expected} values (flushed: {results})")
    return elapsed, stored, peak


def raw(args, folder: Path) -> tuple[float, int]:
    """The same rows, the same batch size, straight from Arrow into DuckDB: the ceiling."""
    store = Store(str(folder / "raw.duckdb"))
    rng = np.random.default_rng(0)
    frames = [wire.decode(wire.encode("samples", f"agent-{k:03d}", "b", 1, body(args.timestamps, args.metrics, rng)))
              for k in range(args.agents)]
    batch = samples_table(frames)  # noqa: F841 (DuckDB reads it by name)
    con: duckdb.DuckDBPyConnection = store.con
    t0 = time.perf_counter()
    for _ in range(args.frames):
        con.begin()
        con.execute("INSERT INTO samples SELECT * FROM batch")
        con.commit()
    elapsed = time.perf_counter() - t0
    n = con.execute("SELECT count(*) FROM samples").fetchone()[0]
    store.close()
    return elapsed, n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--agents", type=int, default=100)
    p.add_argument("--frames", type=int, default=20, help="frames per agent")
    p.add_argument("--timestamps", type=int, default=100, help="rows of timestamps per frame")
    p.add_argument("--metrics", type=int, default=100, help="metrics per frame")
    p.add_argument("--window", type=int, default=8)
    p.add_argument("--procs", type=int, default=4, help="sender processes the agents are spread over")
    p.add_argument("--settle", type=float, default=3.0, help="seconds for the senders to connect before timing")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        e2e_s, e2e_n, peak = end_to_end(args, Path(tmp))
        raw_s, raw_n = raw(args, Path(tmp))
    result = {"agents": args.agents, "values": e2e_n, "end_to_end_values_per_s": e2e_n / e2e_s,
              "raw_duckdb_values_per_s": raw_n / raw_s, "ratio": (e2e_n / e2e_s) / (raw_n / raw_s),
              "daemon_peak_rss_mb": peak["rss_mb"], "daemon_peak_open_fds": peak["open_fds"]}
    if args.json:
        print(json.dumps(result))
        return
    print(f"agents {args.agents}, {e2e_n:,} values in frames of {args.timestamps}x{args.metrics}")
    print(f"end to end (sent, committed, acked): {result['end_to_end_values_per_s']:>14,.0f} values/s")
    print(f"raw Arrow -> DuckDB, same rows:      {result['raw_duckdb_values_per_s']:>14,.0f} values/s")
    print(f"ratio end-to-end / raw:              {result['ratio']:>14.1%}")
    print(f"daemon peak RSS {peak['rss_mb']:.0f} MB, peak open descriptors {peak['open_fds']}")


if __name__ == "__main__":
    main()
