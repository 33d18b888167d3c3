"""Ingest benchmark: K simulated agents -> real daemon (child process) -> DuckDB, and a soak mode.

Senders: the agents are spread over --procs processes; each process drives its share from one thread,
one DEALER socket per agent on a zmq.Poller, speaking the real protocol: ZMTP handshake asking for
credit, a hello frame acked before the clock starts, at most --window frames and the daemon's credit
grant in bytes in flight (one frame before the first grant), each settled by its ack, and every
unacked frame sent again when the oldest has waited --resend-after seconds. What they
do not do is the agent's own work: a frame's body is msgpack-packed once per process and only the
small envelope (seq, ts) per frame (byte-identical to wire.encode, checked at start), and nothing
is spooled to disk, so the two cores go to the daemon, which is what this measures.

Throughput (default): every agent sends --frames frames of --timestamps x --metrics as fast as the
window allows; prints values/s committed and acked end to end, the raw rate of inserting the same
rows into DuckDB from Arrow in this process (the writer's own batch builder, schema and DuckDB
settings, one commit per statement of the daemon's batch_max_frames frames), their ratio (goal
>= 85 % at 100 and at 1,000 agents), CPU seconds of the daemon and of the senders, and the daemon's
peak RSS and open descriptors. The raw and end-to-end runs alternate, --rounds end-to-end runs each
between two raw ones, and the median of the rounds' ratios is the figure.
CPU per value: the daemon's CPU-seconds are its own utime + stime from /proc/<pid>/stat
(all its threads, not its worker children) while timed; the raw runs' are this process's CPU time
over the inserts alone. Goal: daemon CPU per value <= 1.15x the raw insert's. With --baseline DIR
(another checkout with its own .venv, e.g. `git worktree add /work/wt-ingest-old 4f8bcc0`), each
round also runs that checkout's daemon on the very same frames, the two in alternating order (ABBA),
and reports values stored per daemon CPU-second, new over baseline (goal >= 1.5).
Soak (--seconds S): every agent sends one frame per --interval seconds for S seconds (default
1 Hz x 1 x 50 metrics); prints the daemon's RSS and descriptors sampled over time (start/peak/end).
Both end with an audit: every frame acked, each (node, boot, seq) in ingest_log once, every value
stored once. Run: .venv/bin/python bench/ingest.py --agents 1000 --procs 8
"""

from __future__ import annotations

import argparse
import heapq
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import duckdb
import msgpack
import numpy as np
import psutil
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from cputime import cpu_seconds, tree_cpu_seconds
from support import DaemonProcess, query

from causewatch import wire
from causewatch.config import DaemonConfig
from causewatch.daemon.ingest import raise_nofile_limit
from causewatch.daemon.store import Store


def body(n_t: int, n_m: int, rng, t0: float = 0.0) -> dict:
    return wire.samples_body(t0 + np.arange(n_t, dtype=float), [f"metric_{i:03d}" for i in range(n_m)],
                             rng.random((n_t, n_m)))


def packed_frame(kind: str, node: str, boot: str, seq: int, ts: float, packed_body: bytes) -> bytes:
    """wire.encode's bytes from a body packed once: the envelope map with `body` last, its value spliced in."""
    head = msgpack.packb({"v": wire.VERSION, "type": kind, "node": node, "boot": boot, "seq": seq, "ts": ts,
                          "body": None}, use_bin_type=True)
    return head[:-1] + packed_body   # the packed None (0xc0) is the last byte


class SimAgent:
    """One simulated agent: its socket, seqs, frames in flight (seq -> (sent at, bytes)) and due times."""

    def __init__(self, ctx: zmq.Context, endpoint: str, node: str, resend_after: float):
        self.node, self.boot, self.seq, self.resend_after = node, uuid.uuid4().hex[:16], 0, resend_after
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.IMMEDIATE, 1)
        self.sock.setsockopt(zmq.METADATA, f"{wire.CREDIT_PROPERTY}:1".encode())
        self.sock.connect(endpoint)
        self.in_flight: dict[int, tuple[float, bytes]] = {}
        self.sent = self.due_at = self.credit = self.in_flight_bytes = self.tick_bytes = 0

    def send(self, kind: str, packed_body: bytes) -> None:
        self.seq += 1
        data = packed_frame(kind, self.node, self.boot, self.seq, time.time(), packed_body)
        self.in_flight[self.seq] = (time.monotonic(), data)
        self.in_flight_bytes += len(data)
        self.sock.send(data)

    def settle(self, seq: int) -> bool:
        sent = self.in_flight.pop(seq, None)
        if sent:
            self.in_flight_bytes -= len(sent[1])
        return sent is not None

    def receive(self, counts: dict) -> None:
        while self.sock.poll(0):
            frame = wire.decode(self.sock.recv(), types=wire.DAEMON_TYPES)
            b = frame.body
            if frame.type == "credit":
                self.credit = b["bytes"]
                counts["max_credit"] = max(counts["max_credit"], self.credit)
            elif frame.type == "ack" and b["boot"] == self.boot and self.settle(b["seq"]):
                counts["acked"] += 1
            elif (frame.type == "nack" and b.get("code") not in wire.RETRY_CODES and b.get("boot") == self.boot
                  and self.settle(b.get("seq"))):
                counts["refused"] += 1
                counts["last_refusal"] = f"{b['field']}: {b['reason']}"

    def fill(self, payloads, frames: int, window: int, interval: float, now: float) -> None:
        """Send the ticks that are due while credit lasts (ticks of one size: the first one's bytes stand
        for all); `payloads(i)` is the packed bodies of the i-th tick's frames (one, or a few scopes')."""
        if not self.tick_bytes:
            self.tick_bytes = sum(len(b) + 100 for b in payloads(0))
        while (self.sent < frames and self.due_at <= now and len(self.in_flight) < window
               and (not self.in_flight or self.in_flight_bytes + self.tick_bytes <= self.credit)):
            for packed_body in payloads(self.sent):
                self.send("samples", packed_body)
            self.sent += 1
            self.due_at += interval

    def resend_if_stale(self, counts: dict) -> None:
        if self.in_flight and min(t for t, _ in self.in_flight.values()) + self.resend_after < time.monotonic():
            for seq, (_, data) in list(self.in_flight.items()):
                self.in_flight[seq] = (time.monotonic(), data)
                self.sock.send(data)
                counts["resent"] += 1


class RandomFeed:
    """The bench's own samples: four random bodies of --timestamps x --metrics per sender process, sent in
    turn, one frame a tick (a soak's timed when sent). Another feed (bench/peers.py's) has the same three
    methods: `payloads(agent number)` gives that agent's `payloads(i)`, the packed bodies of its i-th tick."""

    def __init__(self, args):
        self.args, self._payloads = args, None

    def frames(self, agents: int) -> int:
        return agents * self.args.frames

    def values(self, agents: int) -> int:
        return self.frames(agents) * self.args.timestamps * self.args.metrics

    def payloads(self, number: int):
        if self._payloads is None:   # once per sender process, for all its agents
            self._payloads = self._make(np.random.default_rng(number))
        return self._payloads

    def _make(self, rng):
        n_t, n_m = (self.args.timestamps, self.args.metrics)
        # timestamps of today: the daemon's retention job deletes samples older than 14 days
        bodies = [body(n_t, n_m, rng, time.time()) for _ in range(4)]
        packed = [[msgpack.packb(b, use_bin_type=True)] for b in bodies]
        if self.args.seconds:   # a soak's rows are timed when sent, as an agent's: the hot window moves past them
            def payloads(i: int) -> list[bytes]:
                t = time.time() + np.arange(n_t, dtype=float)
                return [msgpack.packb({**bodies[i % 4], "t": t.astype("<f8").tobytes()}, use_bin_type=True)]
        else:
            def payloads(i: int) -> list[bytes]:
                return packed[i % 4]
        return payloads


def sender_process(args, endpoint: str, agents: range, ready, go, done, feed=None) -> None:
    """This process's share of the agents, driven from one thread (see the module docstring)."""
    raise_nofile_limit()
    feed = feed or RandomFeed(args)
    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, len(agents) + 64)   # a context holds 1,023 sockets by default
    rng = np.random.default_rng(agents.start)
    probe = body(1, 1, rng)
    assert packed_frame("samples", "n", "b", 7, 1.5, msgpack.packb(probe, use_bin_type=True)) == \
        wire.encode("samples", "n", "b", 7, probe, ts=1.5), "pre-packed frames differ from wire.encode"
    hello = msgpack.packb({"hostname": "bench", "agent_version": "bench"}, use_bin_type=True)
    sims = [SimAgent(ctx, endpoint, f"agent-{k:04d}", args.resend_after) for k in agents]
    payloads = [feed.payloads(k) for k in agents]
    by_sock = {a.sock: a for a in sims}
    poller = zmq.Poller()
    for a in sims:
        poller.register(a.sock, zmq.POLLIN)
    counts = {"acked": 0, "refused": 0, "resent": 0, "last_refusal": "", "max_credit": 0}
    for a in sims:   # IMMEDIATE: a send before the handshake would block, so wait until each can send
        while not a.sock.poll(50, zmq.POLLOUT):
            pass
        a.send("hello", hello)
    while any(a.in_flight for a in sims):
        for sock, _ in poller.poll(100):
            by_sock[sock].receive(counts)
        for a in sims:
            a.resend_if_stale(counts)
    ready.put(counts["refused"])
    go.wait()
    start = checked = time.monotonic()
    settled = counts["acked"] + counts["refused"] + feed.frames(len(sims))   # when every frame is settled
    # agents by the time their next frame is due (soak: every `interval` s, staggered over the first one);
    # an agent out of credit is not in the heap: its next ack sends what is due
    due = [(start + args.interval * i / len(sims), i) for i in range(len(sims))]
    for when, i in due:
        sims[i].due_at = when
    queued = set(range(len(sims)))

    def step(i: int, now: float) -> None:
        a = sims[i]
        a.fill(payloads[i], args.frames, args.window, args.interval, now)
        if i not in queued and a.sent < args.frames and a.due_at > now:
            queued.add(i)
            heapq.heappush(due, (a.due_at, i))

    index = {a.sock: i for i, a in enumerate(sims)}
    while counts["acked"] + counts["refused"] < settled:
        now = time.monotonic()
        while due and due[0][0] <= now:
            _, i = heapq.heappop(due)
            queued.discard(i)
            step(i, now)
        if now - checked > 1.0:
            checked = now
            for a in sims:
                a.resend_if_stale(counts)
        timeout = 100 if not due else max(0, min(100, int((due[0][0] - time.monotonic()) * 1000) + 1))
        for sock, _ in poller.poll(timeout):
            by_sock[sock].receive(counts)
            step(index[sock], time.monotonic())
    counts["final_credit"] = [min(a.credit for a in sims), max(a.credit for a in sims)]
    for a in sims:
        a.sock.close(linger=0)
    ctx.term()
    done.put(counts)


class Watch:
    """The daemon's RSS (MB) and open descriptors, sampled over time."""

    def __init__(self, pid: int):
        self.proc, self.samples = psutil.Process(pid), []   # (seconds since start, rss MB, fds, workers' MB)
        self.t0 = time.monotonic()

    def sample(self) -> None:
        workers = 0.0
        for child in self.proc.children(recursive=True):   # the analysis, API and jobs workers
            try:
                workers += child.memory_info().rss / 2**20
            except psutil.NoSuchProcess:   # a worker retired between the listing and the look
                pass
        self.samples.append((time.monotonic() - self.t0, self.proc.memory_info().rss / 2**20, self.proc.num_fds(),
                             workers))

    def table(self) -> dict:
        t, rss, fds, _ = np.array(self.samples).T
        peak = int(np.argmax(rss))
        late = t >= t[-1] / 2   # the last half: a bounded daemon's RSS has stopped rising by then
        slope = np.polyfit(t[late], rss[late], 1)[0] * 60 if late.sum() > 2 else float("nan")
        return {"start": {"s": t[0], "rss_mb": rss[0], "fds": int(fds[0])},
                "peak": {"s": t[peak], "rss_mb": rss[peak], "fds": int(fds.max())},
                "end": {"s": t[-1], "rss_mb": rss[-1], "fds": int(fds[-1])},
                "last_half_mb_per_min": slope}


def end_to_end(args, folder: Path, checkout: Path | None = None, feed=None, settle=None) -> dict:
    """One daemon (a child process, this checkout's or `checkout`'s) fed by the sender processes, then
    audited; `feed` says what the agents send (default RandomFeed), `settle(daemon)` what to wait for once
    every frame is acked, before the daemon stops (a compaction, say)."""
    feed = feed or RandomFeed(args)
    extra, settings = [], {"max_queue_bytes": args.queue_mb, "store_memory_bytes": args.store_mb,
                           "max_in_flight_bytes": args.in_flight_mb}
    plain = {"batch_max_frames": args.batch_frames, "store_hot_seconds": args.hot_seconds,
             "compaction_interval": args.compaction_interval}
    exact = {"commit_delay": args.commit_delay}   # 0 is a setting of its own
    if any(settings.values()) or any(v is not None and v != 0 for v in plain.values()) or \
            any(v is not None for v in exact.values()):
        lines = "".join(f"{k} = {v * 2**20}\n" for k, v in settings.items() if v)
        lines += "".join(f"{k} = {v}\n" for k, v in plain.items() if v is not None and v != 0)
        lines += "".join(f"{k} = {v}\n" for k, v in exact.items() if v is not None)
        (folder / "daemon.toml").write_text(f"[daemon]\n{lines}")
        extra = ["--config", str(folder / "daemon.toml")]
    daemon = DaemonProcess(folder / "e2e.duckdb", extra=extra, checkout=checkout).start()
    watch = Watch(daemon.proc.pid)
    ctx = mp.get_context("fork")
    ready, go, done = ctx.Queue(), ctx.Event(), ctx.Queue()
    shares = [s for s in np.array_split(np.arange(args.agents), args.procs) if len(s)]
    procs = [ctx.Process(target=sender_process, args=(args, daemon.endpoint, range(s[0], s[-1] + 1), ready, go, done,
                                                      feed)) for s in shares]
    for p in procs:
        p.start()
    refused_hellos = sum(ready.get(timeout=600) for _ in procs)   # every agent connected and its hello acked
    # An API answer comes from the API worker: once one has, that child's start (its imports, 2-3 CPU-s
    # on these 2 cores) is over, and the rate measured is a running daemon's, not its first seconds'.
    urllib.request.urlopen(f"http://{daemon.http}/api/stats", timeout=120).read()
    senders = [psutil.Process(p.pid) for p in procs]
    cpu0 = cpu_seconds(daemon.proc.pid), [s.cpu_times() for s in senders], tree_cpu_seconds(daemon.proc.pid)
    load = [os.getloadavg()[0]]
    watch.t0 = time.monotonic()   # the table's seconds count from here
    watch.sample()
    t0 = time.perf_counter()
    go.set()
    results, every = [], (1.0 if args.seconds else 0.2)
    while len(results) < len(procs):
        watch.sample()
        try:
            results.append(done.get(timeout=every))
        except Exception:   # queue.Empty: keep sampling the daemon
            pass
    elapsed = time.perf_counter() - t0
    cpu = {"daemon": cpu_seconds(daemon.proc.pid) - cpu0[0], "tree": tree_cpu_seconds(daemon.proc.pid) - cpu0[2],
           "senders": sum(_cpu(s.cpu_times()) - _cpu(c) for s, c in zip(senders, cpu0[1]))}
    load.append(os.getloadavg()[0])
    for p in procs:
        p.join()
    if settle:
        settle(daemon)
    daemon.stop()
    frames = feed.frames(args.agents)
    stored, hot = query(daemon.db, "SELECT (SELECT count(*) FROM samples), (SELECT count(*) FROM samples_hot)")[0]
    logged, keys = query(daemon.db, "SELECT count(*), count(DISTINCT (node, boot, seq)) FROM ingest_log "
                                    "WHERE type = 'samples'")[0]
    acked = sum(r["acked"] for r in results) - args.agents   # the hellos' acks came before the clock
    expected = feed.values(args.agents)
    if (refused_hellos or any(r["refused"] for r in results) or acked != frames or logged != frames
            or keys != frames or stored != expected):
        raise SystemExit(f"end-to-end run lost data: acked {acked}, logged {logged} ({keys} distinct) of {frames} "
                         f"frames, stored {stored} of {expected} values, refused: "
                         f"{[r['last_refusal'] for r in results if r['refused']]}")
    return {"elapsed": elapsed, "values": stored, "frames": frames, "cpu": cpu, "load": load, "watch": watch.table(),
            "samples": watch.samples, "resent": sum(r["resent"] for r in results),
            "tiers": [("hot", hot), ("lake", stored - hot)] if stored != hot else [],
            "credit": [min(r["final_credit"][0] for r in results), max(r["final_credit"][1] for r in results)]}


def _cpu(times) -> float:
    return times.user + times.system + getattr(times, "children_user", 0) + getattr(times, "children_system", 0)


def raw(args, folder: Path) -> tuple[float, float, int]:
    """The same rows straight from Arrow into DuckDB, built by the writer's own batch builder into its
    schema, a statement and commit per batch of the daemon's largest (batch_max_frames, batch_max_bytes): the
    ceiling. Returns (wall seconds, CPU seconds of this process, values) over the inserts alone."""
    cfg = DaemonConfig()
    store = Store(str(folder / "raw.duckdb"), args.store_mb * 2**20 or cfg.store_memory_bytes)
    rng = np.random.default_rng(0)
    sent = [wire.encode("samples", f"agent-{k:04d}", "b", 1, body(args.timestamps, args.metrics, rng))
            for k in range(args.agents)]
    frames = [wire.decode(data) for data in sent]
    per = min(args.batch_frames or cfg.batch_max_frames, max(1, cfg.batch_max_bytes // len(sent[0])))
    batches = [store.samples_batch(frames[i:i + per]) for i in range(0, len(frames), per)]
    con: duckdb.DuckDBPyConnection = store.con
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(args.frames):
        for batch in batches:   # DuckDB reads `batch` by name
            con.begin()
            con.execute("INSERT INTO samples_hot SELECT * FROM batch")
            con.commit()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    n = con.execute("SELECT count(*) FROM samples_hot").fetchone()[0]
    store.close()
    return elapsed, cpu, n


def throughput(args, folder: Path) -> dict:
    """Raw and end-to-end runs alternate (raw, e2e, raw, ... raw): each end-to-end rate is compared with
    the mean of the raw runs just before and after it, so a drift in what the shared cores give the
    bench (the raw rate alone has swung 1.5-6.5 M values/s between runs) falls on both sides of a ratio.
    With a baseline checkout, each round runs both daemons between the same two raw runs, new first in
    even rounds and baseline first in odd ones."""
    daemons = [("new", None)] + ([("baseline", Path(args.baseline).resolve())] if args.baseline else [])
    rounds, raws = [], [_raw(args, folder / "raw-0")]
    for r in range(args.rounds):
        runs = {}
        for name, checkout in daemons if r % 2 == 0 else daemons[::-1]:
            (folder / f"{name}-{r}").mkdir()
            runs[name] = end_to_end(args, folder / f"{name}-{r}", checkout)
        raws.append(_raw(args, folder / f"raw-{r + 1}"))
        raw_rate = (raws[-2]["values_per_s"] + raws[-1]["values_per_s"]) / 2
        raw_cpu = (raws[-2]["cpu_ns_per_value"] + raws[-1]["cpu_ns_per_value"]) / 2
        row = {"raw_duckdb_values_per_s": raw_rate, "raw_cpu_ns_per_value": raw_cpu}
        for name, e2e in runs.items():
            rate, cpu = e2e["values"] / e2e["elapsed"], e2e["cpu"]["daemon"]
            row[name] = {"end_to_end_values_per_s": rate, "ratio": rate / raw_rate, "daemon_cpu_s": cpu,
                         "values_per_daemon_cpu_s": e2e["values"] / cpu,
                         "daemon_cpu_ns_per_value": cpu / e2e["values"] * 1e9,
                         "senders_cpu_s": e2e["cpu"]["senders"], "wall_s": e2e["elapsed"],
                         "daemon_peak_rss_mb": e2e["watch"]["peak"]["rss_mb"],
                         "daemon_peak_open_fds": e2e["watch"]["peak"]["fds"], "resent": e2e["resent"],
                         "credit_bytes": e2e["credit"]}
        row["daemon_over_raw_cpu"] = row["new"]["daemon_cpu_ns_per_value"] / raw_cpu
        if args.baseline:
            row["cpu_gain_over_baseline"] = (row["new"]["values_per_daemon_cpu_s"]
                                             / row["baseline"]["values_per_daemon_cpu_s"])
        rounds.append(row)
        if not args.json:
            _print_round(args, r, runs, row, raws[-2:])
    median = lambda key: float(np.median([x[key] for x in rounds]))   # noqa: E731
    result = {"agents": args.agents, "values": runs["new"]["values"], "rounds": rounds,
              "ratio_median": float(np.median([x["new"]["ratio"] for x in rounds])),
              "daemon_over_raw_cpu_median": median("daemon_over_raw_cpu"),
              "daemon_peak_rss_mb": max(x["new"]["daemon_peak_rss_mb"] for x in rounds)}
    if args.baseline:
        result["cpu_gain_over_baseline_median"] = median("cpu_gain_over_baseline")
    if not args.json:
        print(f"ratio end-to-end / raw, median of {args.rounds}: {result['ratio_median']:.1%} "
              f"(each: {', '.join(format(x['new']['ratio'], '.1%') for x in rounds)}); daemon peak RSS "
              f"{result['daemon_peak_rss_mb']:.0f} MB")
        print(f"daemon CPU per value / raw insert's, median: {result['daemon_over_raw_cpu_median']:.2f}x "
              f"(each: {', '.join(format(x['daemon_over_raw_cpu'], '.2f') for x in rounds)}; goal <= 1.15)")
        if args.baseline:
            print(f"values per daemon CPU-second, new / baseline, median: "
                  f"{result['cpu_gain_over_baseline_median']:.2f}x (each: "
                  f"{', '.join(format(x['cpu_gain_over_baseline'], '.2f') for x in rounds)}; goal >= 1.5)")
    return result


def _raw(args, folder: Path) -> dict:
    folder.mkdir()
    elapsed, cpu, n = raw(args, folder)
    return {"values_per_s": n / elapsed, "cpu_ns_per_value": cpu / n * 1e9}


def _print_round(args, r: int, runs: dict, row: dict, raws: list[dict]) -> None:
    if r == 0:
        print(f"agents {args.agents}, {runs['new']['values']:,} values per run in frames of "
              f"{args.timestamps}x{args.metrics}")
    print(f"round {r + 1}: raw Arrow -> DuckDB, same rows, before/after {raws[0]['values_per_s']:,.0f}/"
          f"{raws[1]['values_per_s']:,.0f} values/s, {raws[0]['cpu_ns_per_value']:.1f}/"
          f"{raws[1]['cpu_ns_per_value']:.1f} CPU-ns per value")
    for name, e2e in runs.items():
        x = row[name]
        print(f"  {name}: end to end (sent, committed, acked) {x['end_to_end_values_per_s']:,.0f} values/s, "
              f"ratio to raw {x['ratio']:.1%}; daemon {x['daemon_cpu_s']:.1f} CPU-s, "
              f"{x['values_per_daemon_cpu_s'] / 1e6:.2f} M values per CPU-s ({x['daemon_cpu_ns_per_value']:.1f} "
              f"ns per value), senders {x['senders_cpu_s']:.1f} CPU-s (wall {x['wall_s']:.1f})")
        print(f"    daemon peak RSS {x['daemon_peak_rss_mb']:.0f} MB, peak open descriptors "
              f"{x['daemon_peak_open_fds']}; frames resent {x['resent']}; credit granted per agent at the end "
              f"{e2e['credit'][0] / 1024:,.0f}-{e2e['credit'][1] / 1024:,.0f} KiB")
    line = f"  daemon CPU per value / raw insert's: {row['daemon_over_raw_cpu']:.2f}x"
    if "cpu_gain_over_baseline" in row:
        line += f"; values per daemon CPU-s, new / baseline: {row['cpu_gain_over_baseline']:.2f}x"
    print(line)


def soak(args, e2e: dict) -> dict:
    result = {"agents": args.agents, "seconds": e2e["elapsed"], "frames": e2e["frames"], "values": e2e["values"],
              "lost": 0, "resent": e2e["resent"], "daemon": e2e["watch"],
              "daemon_cpu_s": e2e["cpu"]["daemon"], "tree_cpu_s": e2e["cpu"]["tree"],
              "senders_cpu_s": e2e["cpu"]["senders"], "load": e2e["load"]}
    if not args.json:
        print(f"soak: {args.agents} agents x {args.frames} frames ({args.timestamps}x{args.metrics} values, one per "
              f"{args.interval:g} s) in {e2e['elapsed']:.0f} s: {e2e['frames']:,} frames, {e2e['values']:,} values, "
              f"0 lost, 0 doubled, {e2e['resent']} resent")
        tenths: dict[int, tuple] = {}   # the first sample of each tenth of the run
        for sample in e2e["samples"]:
            tenths.setdefault(int(10 * sample[0] / e2e["elapsed"]), sample)
        print(f"{'daemon':<8}{'at s':>8}{'RSS MB':>10}{'open fds':>10}{'workers MB':>12}")
        for name in ("start", "peak", "end"):
            row = e2e["watch"][name]
            print(f"{name:<8}{row['s']:>8.0f}{row['rss_mb']:>10.0f}{row['fds']:>10}")
        for t, rss, fds, workers in tenths.values():
            print(f"{'at':<8}{t:>8.0f}{rss:>10.0f}{fds:>10.0f}{workers:>12.0f}")
        if e2e["tiers"]:
            print("store at the end: " + ", ".join(f"{tier} {n:,} values" for tier, n in e2e["tiers"]))
        print(f"RSS slope over the last half: {e2e['watch']['last_half_mb_per_min']:+.1f} MB/min")
        print(f"CPU seconds: daemon {result['daemon_cpu_s']:.1f} ({result['daemon_cpu_s'] / e2e['elapsed']:.0%} of a "
              f"core; with its workers {result['tree_cpu_s']:.1f}), senders {result['senders_cpu_s']:.1f}; "
              f"{result['daemon_cpu_s'] / e2e['values'] * 1e6:.2f} daemon CPU-s per million values; load "
              f"{e2e['load'][0]:.1f}-{e2e['load'][1]:.1f}")
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--agents", type=int, default=100)
    p.add_argument("--frames", type=int, default=20, help="frames per agent (throughput mode)")
    p.add_argument("--timestamps", type=int, default=None, help="rows of timestamps per frame (default 100; soak 1)")
    p.add_argument("--metrics", type=int, default=None, help="metrics per frame (default 100; soak 50)")
    p.add_argument("--window", type=int, default=8, help="frames in flight per agent")
    p.add_argument("--procs", type=int, default=4, help="sender processes the agents are spread over")
    p.add_argument("--resend-after", type=float, default=120.0,
                   help="seconds before unacked frames are sent again (a fixed timer: the agent's own adapts to the "
                        "acks' latency; a frame waits behind what the credit lets the others have in flight)")
    p.add_argument("--seconds", type=float, default=0, help="soak: send for this long, one frame per --interval")
    p.add_argument("--interval", type=float, default=1.0, help="soak: seconds between an agent's frames")
    p.add_argument("--batch-frames", type=int, default=0,
                   help="daemon batch_max_frames, frames per commit at most (default: its own)")
    p.add_argument("--commit-delay", type=float, default=None,
                   help="daemon commit_delay, seconds a group commit gathers (default: its own; 0: none)")
    p.add_argument("--queue-mb", type=int, default=0, help="daemon max_queue_bytes in MiB (default: its own)")
    p.add_argument("--store-mb", type=int, default=0, help="daemon store_memory_bytes in MiB (default: its own)")
    p.add_argument("--in-flight-mb", type=int, default=0, help="daemon max_in_flight_bytes in MiB (default: its own)")
    p.add_argument("--hot-seconds", type=float, default=None,
                   help="daemon store_hot_seconds: samples older move to the Parquet lake (default: its own)")
    p.add_argument("--compaction-interval", type=float, default=None,
                   help="daemon compaction_interval, seconds between the lake's moves (default: its own)")
    p.add_argument("--rounds", type=int, default=3,
                   help="throughput: end-to-end runs, each between two raw runs (the ratio's median is reported)")
    p.add_argument("--baseline", metavar="DIR", help="throughput: also run this checkout's daemon (DIR/.venv) "
                   "on the same frames, alternating with this one's (e.g. a worktree of the commit before)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.seconds:
        args.frames = max(1, round(args.seconds / args.interval))
        args.timestamps, args.metrics = args.timestamps or 1, args.metrics or 50
    else:
        args.interval = 0.0
        args.timestamps, args.metrics = args.timestamps or 100, args.metrics or 100
    with tempfile.TemporaryDirectory() as tmp:
        if args.seconds:
            result = soak(args, end_to_end(args, Path(tmp)))
        else:
            result = throughput(args, Path(tmp))
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
