"""Scale-out benchmark: N shard daemons on loopback against one lone daemon, the same simulated
agents (bench/ingest.py's SimAgent: the real protocol, credit and acks, frames packed once) spread over
the shards by rendezvous hashing of their node names, as agents with `daemons` configured are.

Prints per run: frames acked, each (node, boot, seq) stored once across the shards (audited in the
DuckDB files), each daemon's CPU-seconds (utime + stime from /proc, its own process) per million values
stored, its peak RSS and descriptors while the agents send (sampled each second); the sharded site's CPU
per value over the lone daemon's (goal: within 10 %); and a global query (/api/stats and
/api/samples?limit=) through one shard (the fan-out to all) against the same query on the lone daemon
holding every row: the asking daemon's CPU-seconds for it and its wall time (goal: <= 1.5x; the wall
figure is noisy on a shared machine, the CPU one is not).
Run: .venv/bin/python bench/scale.py --shards 4 --agents 400 --frames 20
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import msgpack
import numpy as np
import psutil
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from cputime import cpu_seconds
from ingest import SimAgent, body
from support import free_port, query

from causewatch import shards
from causewatch.daemon.ingest import raise_nofile_limit


def senders(args, endpoint: str, nodes: list[str], done) -> None:
    """Drive `nodes` as simulated agents of one daemon: a hello each, then --frames frames of
    --timestamps x --metrics as fast as the window and credit allow, until every one is acked."""
    raise_nofile_limit()
    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, len(nodes) + 64)   # a context holds 1,023 sockets by default
    rng = np.random.default_rng(len(nodes))
    packed = [msgpack.packb(body(args.timestamps, args.metrics, rng, time.time()), use_bin_type=True)
              for _ in range(4)]

    def payloads(i: int) -> bytes:
        return packed[i % 4]

    hello = msgpack.packb({"hostname": "bench", "agent_version": "bench"}, use_bin_type=True)
    sims = [SimAgent(ctx, endpoint, node, 10.0) for node in nodes]
    poller = zmq.Poller()
    for a in sims:
        poller.register(a.sock, zmq.POLLIN)
    by_sock = {a.sock: a for a in sims}
    counts = {"acked": 0, "refused": 0, "resent": 0, "last_refusal": "", "max_credit": 0}
    for a in sims:
        while not a.sock.poll(50, zmq.POLLOUT):
            pass
        a.send("hello", hello)
    want = len(sims) * (args.frames + 1)
    while counts["acked"] + counts["refused"] < want:
        now = time.monotonic()
        for a in sims:
            a.fill(payloads, args.frames, args.window, 0.0, now)
        for sock, _ in poller.poll(100):
            by_sock[sock].receive(counts)
        for a in sims:
            a.resend_if_stale(counts)
    for a in sims:
        a.sock.close(linger=0)
    ctx.term()
    done.put(counts)


class Daemon:
    """`causewatch daemon --config` as a child process (full daemon: jobs and API worker)."""

    def __init__(self, folder: Path, name: str, ports: dict, peers: list[str], lake: Path):
        self.name, self.db = name, folder / f"{name}.duckdb"
        zport, hport = ports[name]
        self.endpoint, self.url = f"tcp://127.0.0.1:{zport}", f"http://127.0.0.1:{hport}"
        shard = f'shard = "{name}"\npeers = {json.dumps([f"{p}=http://127.0.0.1:{ports[p][1]}" for p in peers])}\n' \
            if peers else ""
        cfg = folder / f"{name}.toml"
        cfg.write_text(f'[daemon]\ndb = "{self.db}"\nbind = "{self.endpoint}"\nhttp = "127.0.0.1:{hport}"\n'
                       f'store_lake = "{lake}"\npeer_timeout = 120.0\n{shard}')
        self.proc = subprocess.Popen([sys.executable, "-m", "causewatch.cli", "daemon", "--config", str(cfg)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def ready(self) -> "Daemon":
        line = self.proc.stdout.readline()
        if not line.startswith("causewatch daemon:"):
            raise SystemExit(f"daemon {self.name} did not start: {line}{self.proc.stderr.read()}")
        urllib.request.urlopen(f"{self.url}/api/nodes", timeout=300).read()   # its API worker started
        return self

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(120)


def run(args, folder: Path, names: list[str]) -> dict:
    """One site: the daemons `names` (one: a lone daemon), every agent sending to its owner; the daemons
    are stopped whatever happens, then every frame is audited in their files."""
    ports = {n: (free_port(), free_port()) for n in names}
    lake = folder / "lake"
    daemons = {n: Daemon(folder, n, ports, [p for p in names if p != n] if len(names) > 1 else [], lake)
               for n in names}
    try:
        site = drive(args, daemons)
    finally:
        for d in daemons.values():
            d.stop()
    frames = args.agents * args.frames
    logged = sum(query(d.db, "SELECT count(*) FROM ingest_log WHERE type = 'samples'")[0][0] for d in daemons.values())
    keys = {k for d in daemons.values()
            for k in query(d.db, "SELECT node, boot, seq FROM ingest_log WHERE type = 'samples'")}
    stored = sum(query(d.db, "SELECT count(*) FROM samples")[0][0] for d in daemons.values())
    acked = site.pop("acked") - args.agents
    if acked != frames or logged != frames or len(keys) != frames or stored != frames * args.timestamps * args.metrics:
        raise SystemExit(f"{names}: acked {acked}, logged {logged} ({len(keys)} distinct) of {frames} frames, "
                         f"stored {stored}")
    return {"names": names, "values": stored, **site}


def drive(args, daemons: dict[str, Daemon]) -> dict:
    """Send every agent's frames to its owner and time the global queries through the first daemon."""
    names = list(daemons)
    for d in daemons.values():
        d.ready()
    by_owner = {n: [] for n in names}
    for node in (f"node{k:05d}" for k in range(args.agents)):
        by_owner[shards.owner(node, names) if len(names) > 1 else names[0]].append(node)
    ctx = mp.get_context("fork")
    done = ctx.Queue()
    procs = [ctx.Process(target=senders, args=(args, daemons[n].endpoint, share[i::args.procs], done), daemon=True)
             for n, share in by_owner.items() for i in range(args.procs) if share[i::args.procs]]
    cpu0 = {n: cpu_seconds(d.proc.pid) for n, d in daemons.items()}
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    results, mem = [], {n: (0.0, 0) for n in names}
    watched = {n: psutil.Process(d.proc.pid) for n, d in daemons.items()}
    while len(results) < len(procs):   # each daemon's peak RSS and descriptors while its agents send
        for n, proc in watched.items():
            mem[n] = (max(mem[n][0], proc.memory_info().rss / 2**20), max(mem[n][1], proc.num_fds()))
        try:
            results.append(done.get(timeout=1.0))
        except queue.Empty:
            if time.perf_counter() - t0 > 3600:
                raise SystemExit(f"{names}: the senders did not finish in an hour") from None
    elapsed = time.perf_counter() - t0
    cpu = {n: cpu_seconds(d.proc.pid) - cpu0[n] for n, d in daemons.items()}
    for p in procs:
        p.join()
    asker = daemons[names[0]]
    queries = {}
    for q in ("/api/stats", "/api/samples?limit=100000"):
        walls, cpus = [], []
        for _ in range(args.queries):
            c0, w0 = cpu_seconds(asker.proc.pid), time.perf_counter()
            with urllib.request.urlopen(f"{asker.url}{q}", timeout=600) as r:
                r.read()
                partial = r.headers.get("X-Causewatch-Partial")
            walls.append(time.perf_counter() - w0)
            cpus.append(cpu_seconds(asker.proc.pid) - c0)
            if partial:
                raise SystemExit(f"{q}: partial answer ({partial})")
        queries[q] = {"wall_s": statistics.median(walls), "daemon_cpu_s": statistics.median(cpus)}
    return {"agents": {n: len(v) for n, v in by_owner.items()}, "elapsed_s": elapsed, "cpu_s": cpu,
            "rss_mb_fds": mem, "queries": queries, "acked": sum(r["acked"] for r in results)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--agents", type=int, default=400, help="simulated agents in total (both sites)")
    p.add_argument("--frames", type=int, default=20, help="frames per agent")
    p.add_argument("--metrics", type=int, default=50)
    p.add_argument("--timestamps", type=int, default=1)
    p.add_argument("--window", type=int, default=8)
    p.add_argument("--procs", type=int, default=1, help="sender processes per daemon")
    p.add_argument("--queries", type=int, default=5, help="repeats of each global query (median)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args()
    if min(args.shards, args.agents, args.frames, args.window, args.procs, args.queries) < 1:
        p.error("--shards, --agents, --frames, --window, --procs and --queries must be at least 1")
    # a SIGTERM (timeout, kill) unwinds like an error, so run()'s finally stops the daemons
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out = {}
    for label, names in (("lone", ["lone"]), ("sharded", [chr(ord("a") + i) for i in range(args.shards)])):
        with tempfile.TemporaryDirectory(prefix=f"cw-scale-{label}-") as folder:
            out[label] = run(args, Path(folder), names)
    lone, sharded = out["lone"], out["sharded"]
    per = {k: 1e6 * sum(v["cpu_s"].values()) / v["values"] for k, v in out.items()}
    out["cpu_per_value_ratio"] = per["sharded"] / per["lone"]
    out["query_ratio"] = {q: {m: sharded["queries"][q][m] / max(lone["queries"][q][m], 1e-9)
                              for m in ("wall_s", "daemon_cpu_s")} for q in lone["queries"]}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for label, v in (("lone", lone), ("sharded", sharded)):
        print(f"{label}: {args.agents} agents x {args.frames} frames x {args.timestamps * args.metrics} values "
              f"over {len(v['names'])} daemon(s) {v['agents']}; every frame stored once; {v['elapsed_s']:.1f} s")
        for n in v["names"]:
            rss, fds = v["rss_mb_fds"][n]
            print(f"  {n}: {v['cpu_s'][n]:.2f} CPU-s, peak RSS {rss:.0f} MB, peak {fds} descriptors while sending")
        print(f"  daemon CPU per million values: {per[label]:.2f} s")
        for q, m in v["queries"].items():
            print(f"  {q}: {m['wall_s'] * 1000:.0f} ms wall, {m['daemon_cpu_s'] * 1000:.0f} ms asking daemon's CPU")
    print(f"sharded / lone CPU per value: {out['cpu_per_value_ratio']:.2f} (goal <= 1.10)")
    for q, r in out["query_ratio"].items():
        print(f"global {q} over {args.shards} shards / one daemon: wall {r['wall_s']:.2f}x, "
              f"asking daemon CPU {r['daemon_cpu_s']:.2f}x (goal <= 1.5x)")


if __name__ == "__main__":
    main()
