"""Ingest benchmark: K simulated agents -> real senders -> real daemon (child process) -> DuckDB.

Prints metric values/s committed and acked end to end, the raw rate of inserting the same rows
into DuckDB from Arrow in this process, and their ratio. Goal (2 cores, 100 agents): >= 1e6
values/s end to end and >= 50 % of the raw rate.  Run: .venv/bin/python bench/ingest.py
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support import DaemonProcess, query  # noqa: E402

from causewatch import wire  # noqa: E402
from causewatch.agent.sender import Sender  # noqa: E402
from causewatch.config import AgentConfig  # noqa: E402
from causewatch.daemon.store import Store, samples_table  # noqa: E402


def body(n_t: int, n_m: int, rng) -> dict:
    return wire.samples_body(np.arange(n_t, dtype=float), [f"metric_{i:03d}" for i in range(n_m)],
                             rng.random((n_t, n_m)))


def end_to_end(args, folder: Path) -> tuple[float, int]:
    daemon = DaemonProcess(folder / "e2e.duckdb").start()
    rng = np.random.default_rng(0)
    payloads = [body(args.timestamps, args.metrics, rng) for _ in range(4)]
    senders = [Sender(AgentConfig(daemon=daemon.endpoint, node=f"agent-{k:03d}", spool=str(folder / f"s{k}"),
                                  window=args.window)).start() for k in range(args.agents)]

    def run(s: Sender):
        for i in range(args.frames):
            s.send("samples", payloads[i % len(payloads)])

    t0 = time.perf_counter()
    threads = [threading.Thread(target=run, args=(s,)) for s in senders]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = all(s.flush(600) for s in senders)
    elapsed = time.perf_counter() - t0
    for s in senders:
        s.close()
    daemon.stop()
    stored = query(daemon.db, "SELECT count(*) FROM samples")[0][0]
    expected = args.agents * args.frames * args.timestamps * args.metrics
    if not ok or stored != expected:
        raise SystemExit(f"end-to-end run lost data: stored {stored} of {expected} values (flushed: {ok})")
    return elapsed, stored


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
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        e2e_s, e2e_n = end_to_end(args, Path(tmp))
        raw_s, raw_n = raw(args, Path(tmp))
    result = {"agents": args.agents, "values": e2e_n, "end_to_end_values_per_s": e2e_n / e2e_s,
              "raw_duckdb_values_per_s": raw_n / raw_s, "ratio": (e2e_n / e2e_s) / (raw_n / raw_s)}
    if args.json:
        print(json.dumps(result))
        return
    print(f"agents {args.agents}, {e2e_n:,} values in frames of {args.timestamps}x{args.metrics}")
    print(f"end to end (sent, committed, acked): {result['end_to_end_values_per_s']:>14,.0f} values/s")
    print(f"raw Arrow -> DuckDB, same rows:      {result['raw_duckdb_values_per_s']:>14,.0f} values/s")
    print(f"ratio end-to-end / raw:              {result['ratio']:>14.1%}")


if __name__ == "__main__":
    main()
