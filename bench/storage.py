"""Storage benchmark: bytes per value of the hot DuckDB store, the Parquet lake and a real
Prometheus TSDB on the very same samples, in the same run; and store bytes per node-day.

RECORDING (once, cached). The real agent (`causewatch agent -- CMD`, its defaults: node psutil metrics
and system-wide perf counters at 1 Hz, the command's psutil metrics at 1 Hz and its perf counters at
10 Hz, IP sampling at 1 kHz; on a VM without a PMU, software counters only) runs three stretches on
this machine, one agent run each: `idle` (the command sleeps), `busy` (two processes spin, one per
core) and `mixed` (an instrumented Python program: two threads of tasks that compress, sort, write and
fsync, hold 1-64 MB and sleep). Its daemon endpoint is a loopback port nobody serves, so every frame
the agent makes stays in its spool, byte for byte as it would have been sent; the spools are read and
the frames kept, gzipped, in ~/.cache/causewatch-bench/agent-recording-v1.msgpack.gz with the
stretches' commands, host and time. `--record` records again; `--record-seconds` sets a stretch's length.

REALISTIC SET. The recording's samples frames, with two clean-ups: every command scope becomes
`cmd:workload` (so the command's series continue across the three stretches), and a row less than
2 ms after its series' previous row is dropped (at its stop the agent samples the fast counters once
more, often under 1 ms after the last tick: Prometheus keeps one sample per millisecond). The
stretches in order make one loop (frames keep their recorded spacing; 1 s between stretches). Node k
of N plays the loop from phase k/N for --hours, wrapping round as often as needed, its times shifted to
start at T0 (frame and row times keep their recorded sub-millisecond jitter). Each frame keeps its
recorded shape (rows, metrics, nulls) and values, but for two changes made per copy of a stretch (each
time a node's replay enters one), both in whole quanta of the series (`quantum`: integers the largest
power of two up to 4096 dividing them all, page-aligned sizes 4096; else a binary fraction, load
averages 1/2048; else 10^-d, d <= 9, up to float noise, psutil's CPU seconds 0.01; none for full-
precision series), so every value keeps its recorded precision:
- counters (`_total` names, also per CPU, and perf's cumulative counts) continue from the node's last
  value plus the stretch's own first increment, so they stay monotone; the first time a node plays
  one, it starts at a level of its own, up to the recorded maximum (nodes up for different times);
- any other non-constant series moves by a random number of quanta within a tenth of its recorded
  spread (full-precision ones are scaled by 0.95-1.05, ratios in [0, 1] by 0.9-1).
Why: a node's two hours replay the same few minutes 30 times, and N nodes the same recording.
Repeated values would flatter Parquet's dictionary pages and zstd, which find repeats anywhere in a
page or row group, where Prometheus's XOR chunks see only the previous sample. `--exact-loop` adds
the set replayed without both changes (only counters continued) to show by how much. (Some sharing
between nodes remains, as in a real cluster: constant and small-integer gauges, and the recorded
increments; row groups of several nodes' data let zstd find it: keep a row group to about one node.)

SYNTHETIC SET (the worst case): bench/stream.py (d)'s node-hours on N nodes: 65 full-precision gauges
(per node-hour a level U(0, 100), plus N(0, 1) noise each second) at whole-second times, 10 rows a frame.

STORES. A set's frames go through the daemon's ingest path (`Store.commit_frames`, --commit-frames a commit,
all nodes' frames interleaved in time order as the daemon receives them), then CHECKPOINT. Hot: the
blocks the file uses (`pragma_database_size().used_blocks`) beyond an empty migrated store's, less
ingest_log's (dropped, CHECKPOINT again: retention trims it; shown apart, with the file's own growth).
Lake: `lake_bytes`, one function: the store's own compaction (the lake's figure, marked *), beside
reference Parquet files in each other layout of LAKE_VARIANTS (how the lake's layout was chosen).
Prometheus: the same non-null samples as OpenMetrics text written by DuckDB from the hot store (a
`.cpuN` name suffix becomes a `cpu` label, other characters outside [a-zA-Z0-9_:] `_`; `# TYPE counter`
for counters, whose samples end in `_total`, else gauge; times in seconds with 3 decimals: Prometheus
keeps ms), `promtool tsdb create-blocks-from openmetrics`, and its blocks' bytes (chunks, index,
meta.json, tombstones); every sample is checked to be there. No WAL: promtool writes blocks only. A
live Prometheus also keeps its last 2-3 h in a WAL of raw samples before cutting them into a block (the
counterpart of our hot hour), and larger compacted blocks later (the same chunks, a smaller index share).

    .venv/bin/python bench/storage.py                          # records first if nothing is cached
    .venv/bin/python bench/storage.py --nodes 200 --hours 2    # the issue's scale: 15 x the time and disk
    .venv/bin/python bench/storage.py --exact-loop --keep /tmp/storage   # + the unmoved replay; keep files
    .venv/bin/python bench/storage.py --record --record-seconds 120
    .venv/bin/python bench/storage.py --sets realistic --variants "the store's compaction" --hot-layouts
"""

from __future__ import annotations

import argparse
import gzip
import heapq
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import msgpack
import numpy as np
import pyarrow as pa

from causewatch import wire
from causewatch.agent import perf
from causewatch.config import DaemonConfig
from causewatch.daemon.store import Store
from causewatch.daemon.store import lake as store_lake

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "causewatch-bench"
RECORDING = CACHE / "agent-recording-v1.msgpack.gz"
TARGET_SCOPE = "cmd:workload"

# ---- recording real agent output -----------------------------------------------------------------

LOADS = {
    "idle": "the command sleeps: the node's own load (other jobs share this machine)",
    "busy": "two processes spin, one per core",
    "mixed": "an instrumented Python program: 2 threads of tasks that compress, sort, write+fsync, "
             "hold 1-64 MB and sleep",
}


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x += 1


def workload(kind: str, seconds: float) -> None:
    """What the agent watches in one recorded stretch (run as its `-- CMD`)."""
    if kind == "idle":
        time.sleep(seconds)
    elif kind == "busy":
        import multiprocessing as mp
        procs = [mp.Process(target=_spin, args=(seconds,)) for _ in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    else:
        _mixed(seconds)


def _mixed(seconds: float) -> None:
    import random
    import threading
    import zlib

    # only the workload's own process loads the instrument API (it registers an atexit flush)
    from causewatch.agent.instrument import configure, region, task
    configure(app="storage-bench")
    end = time.monotonic() + seconds

    def worker(k: int) -> None:
        rng = random.Random(k)
        words = [f"w{i}" for i in range(5000)]
        i = 0
        while time.monotonic() < end:
            i += 1
            n = rng.choice([1, 2, 4, 8])
            with task(params={"n": n, "worker": k}, task_id=f"{k}-{i}"):
                with region("compress"):
                    text = " ".join(rng.choices(words, k=20_000 * n)).encode()
                    zlib.compress(text, 6)
                with region("sort"):
                    sorted(rng.random() for _ in range(50_000 * n))
                with region("io"), tempfile.TemporaryFile() as f:
                    f.write(text)
                    f.flush()
                    os.fsync(f.fileno())
                with region("hold"):
                    held = bytearray(rng.randint(1, 64) << 20)
                    held[::4096] = b"x" * len(held[::4096])
                    time.sleep(rng.uniform(0.0, 0.5))
                    del held
            time.sleep(rng.uniform(0.0, 0.3))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _agent_command() -> list[str]:
    script = Path(sys.executable).with_name("causewatch")
    return [str(script)] if script.exists() else [shutil.which("causewatch") or "causewatch"]


def _unserved_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"   # closed again: nobody serves it


def record(path: Path, seconds: float) -> dict:
    """Run the agent over each load for `seconds` and keep every frame it spooled."""
    import sqlite3
    stretches = []
    with tempfile.TemporaryDirectory() as tmp:
        script = shutil.copy(__file__, tmp)     # the workloads run from a copy: edits meanwhile do not reach them
        for kind in LOADS:
            spool = Path(tmp) / f"spool-{kind}"
            cmd = [*_agent_command(), "agent", "-q", "--daemon", _unserved_endpoint(), "--node", "recorder",
                   "--spool", str(spool), "--ipc", f"ipc://{tmp}/{kind}.ipc", "--flush-timeout", "0",
                   "--", sys.executable, script, "--workload", kind, str(seconds)]
            print(f"recording {kind} ({seconds:.0f} s): {LOADS[kind]}", file=sys.stderr, flush=True)
            started = time.time()
            code = subprocess.run(cmd, cwd=tmp).returncode
            if code not in (0, 3):      # 3: frames left in the spool, which is the point here
                raise SystemExit(f"the agent recording {kind} exited {code}")
            with sqlite3.connect(spool / "spool.sqlite") as db:
                frames = [bytes(d) for (d,) in db.execute("SELECT data FROM frames ORDER BY id")]
            stretches.append({"load": kind, "what": LOADS[kind], "seconds": seconds, "started": started,
                              "command": cmd, "frames": frames})
    doc = {"version": 1, "host": platform.node(), "cpus": os.cpu_count(), "recorded": time.time(),
           "load_1min": os.getloadavg()[0], "stretches": stretches}
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    with gzip.open(partial, "wb") as f:
        f.write(msgpack.packb(doc, use_bin_type=True))
    partial.replace(path)
    return doc


def read_recording(path: Path) -> dict:
    """The cached recording with its frames decoded (wire.Frame)."""
    with gzip.open(path, "rb") as f:
        doc = msgpack.unpackb(f.read(), raw=False)
    for s in doc["stretches"]:
        s["frames"] = [wire.decode(data) for data in s["frames"]]
    return doc


# ---- the realistic set: the recording replayed on N nodes ----------------------------------------

T0 = 1_700_006_400.0   # a multiple of 2 h: a set of --hours 2 starts and ends on Prometheus's block bounds
SEED = 27


def is_counter(name: str) -> bool:
    """Cumulative: `_total` names (psutil's, per CPU as NAME.cpuN too) and perf's event counts."""
    base = name.split(".", 1)[0]
    return base.endswith("_total") or base in perf.EVENTS


def quantum(values: np.ndarray) -> tuple[float, int | None]:
    """(q, d) of a series' recorded values: all are whole multiples of q, and d is the decimals a moved
    value is rounded back to (None: none needed). Integers: the largest power of two up to 4096 that
    divides them (d 0); else a binary fraction 2^-k, k <= 16 (exact in binary: d None); else 10^-d,
    d <= 9, up to float noise (psutil's sums over CPUs: 1939.3200000000002); else (0, None): full
    precision. A constant series: (0, None)."""
    v = values[np.isfinite(values)]
    if v.size == 0 or np.all(v == v[0]):
        return 0.0, None
    if np.all(v == np.rint(v)):
        j = 12
        while j > 0 and np.any(np.fmod(v, 2.0 ** j) != 0):
            j -= 1
        return 2.0 ** j, 0
    for k in range(1, 17):
        scaled = v * 2.0 ** k
        if np.all(scaled == np.rint(scaled)):
            return 2.0 ** -k, None
    for d in range(1, 10):
        p = 10.0 ** d
        if np.all(np.abs(np.rint(v * p) / p - v) <= 1e-12 * np.maximum(np.abs(v), 1.0)):
            return 10.0 ** -d, d
    return 0.0, None


@dataclass
class Series:
    """What replaying one recorded (scope, metric) needs: counter or not, quantum, recorded range."""
    counter: bool
    q: float
    d: int | None
    lo: float
    hi: float


@dataclass
class RecFrame:
    """One recorded samples frame: times and values as arrays (NaN where null), which values are
    exact at their series' decimals (re-rounded there once moved), and each column's 10^d."""
    scope: str
    ts: float
    t: np.ndarray
    names: list[str]
    values: np.ndarray
    clean: np.ndarray
    scale: np.ndarray


@dataclass
class Stretch:
    load: str
    frames: list[RecFrame]
    start: float
    duration: float
    first: dict = field(default_factory=dict)    # counter key -> first recorded value
    step: dict = field(default_factory=dict)     # counter key -> its first increment (>= 0)
    last: dict = field(default_factory=dict)     # counter key -> last recorded value


def _spaced(frames: list[tuple], gap: float = 0.002) -> list[tuple]:
    """Drop each row less than `gap` seconds after the previous row of the same series: at its stop the
    agent takes one more sample of the fast counters, often well under 1 ms after the last tick, which
    Prometheus (ms times) keeps as one sample and the stores as two (at any shift of the times)."""
    last: dict[tuple[str, str], float] = {}
    out = []
    for scope, ts, t, names, values in frames:
        prev = max(last.get((scope, n), -np.inf) for n in names)
        keep = np.ones(len(t), bool)
        for i in range(len(t)):
            keep[i] = t[i] - prev >= gap
            prev = t[i] if keep[i] else prev
        for n in names:
            last[(scope, n)] = prev
        if keep.any():
            out.append((scope, ts, t[keep], names, values[keep]))
    return out


def prepare(doc: dict) -> tuple[list[Stretch], dict[tuple[str, str], Series]]:
    """The recording's samples frames as arrays, each target scope renamed TARGET_SCOPE, and each
    series' facts over the whole recording."""
    raw = []
    for s in doc["stretches"]:
        frames = []
        for f in s["frames"]:
            if f.type != "samples":
                continue
            t, names, values, mask = wire.samples_arrays(f.body)
            values = values.copy()
            if mask is not None:
                values[mask] = np.nan
            scope = "node" if f.body["scope"] == "node" else TARGET_SCOPE
            frames.append((scope, f.ts, t.copy(), list(names), values))
        raw.append((s["load"], _spaced(sorted(frames, key=lambda x: x[1]))))
    columns: dict[tuple[str, str], list[np.ndarray]] = {}
    for _, frames in raw:
        for scope, _, _, names, values in frames:
            for j, name in enumerate(names):
                columns.setdefault((scope, name), []).append(values[:, j])
    series = {}
    for key, parts in columns.items():
        v = np.concatenate(parts)
        q, d = quantum(v)
        finite = v[np.isfinite(v)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
        series[key] = Series(is_counter(key[1]), q, d, lo, hi)
    stretches = []
    for load, frames in raw:
        recs = []
        for scope, ts, t, names, values in frames:
            d = [series[(scope, n)].d for n in names]
            scale = np.array([10.0 ** x if x is not None else 1.0 for x in d])
            with np.errstate(invalid="ignore"):
                clean = np.array([x is not None for x in d]) & (np.rint(values * scale) / scale == values)
            recs.append(RecFrame(scope, ts, t, names, values, clean, scale))
        times = np.concatenate([r.t for r in recs])
        st = Stretch(load, recs, float(times.min()), float(times.max() - times.min()))
        seen: dict[tuple[str, str], list[np.ndarray]] = {}
        for r in recs:
            for j, name in enumerate(r.names):
                if series[(r.scope, name)].counter:
                    seen.setdefault((r.scope, name), []).append(r.values[:, j])
        for key, parts in seen.items():
            v = np.concatenate(parts)
            v = v[np.isfinite(v)]
            if v.size:
                st.first[key], st.last[key] = float(v[0]), float(v[-1])
                st.step[key] = float(max(v[1] - v[0], 0.0)) if v.size > 1 else 0.0
        stretches.append(st)
    return stretches, series


def _round(x: float, d: int | None) -> float:
    return float(np.round(x, d)) if d is not None else x


def copy_levels(stretch: Stretch, series: dict, last: dict, rng, exact: bool) -> dict:
    """(add, multiply) per series for one copy of a stretch on one node. A counter continues from the
    node's last value plus the stretch's first increment; the first time a node plays it, it starts
    at a level of its own (a whole number of quanta up to the recorded maximum: nodes up for different
    times). Other series move by whole quanta within a tenth of their recorded spread (full-precision
    ones: scaled by 0.95-1.05, ratios in [0, 1] by 0.9-1). With `exact`, only the counters'
    continuation: every node replays the recorded values."""
    levels = {}
    for key in sorted({(r.scope, n) for r in stretch.frames for n in r.names}):
        s = series[key]
        if s.counter:
            if key in last and key in stretch.first:
                levels[key] = (_round(last[key] - stretch.first[key] + stretch.step[key], s.d), 1.0)
            elif exact or s.hi == s.lo:
                levels[key] = (0.0, 1.0)
            else:
                base = _round(s.q * int(rng.integers(0, s.hi / s.q + 1)), s.d) if s.q else rng.uniform(0, s.hi)
                levels[key] = (float(base), 1.0)
        elif exact or s.hi == s.lo:
            levels[key] = (0.0, 1.0)
        elif s.q > 0:
            m = int(0.1 * (s.hi - s.lo) / s.q)
            add = s.q * int(rng.integers(-m, m + 1))
            if s.lo >= 0 and s.lo + add < 0:
                add = -add
            levels[key] = (add, 1.0)
        else:
            ratio = 0 <= s.lo and s.hi <= 1
            levels[key] = (0.0, float(rng.uniform(0.9, 1.0) if ratio else rng.uniform(0.95, 1.05)))
    return levels


def node_frames(k: int, nodes: int, hours: float, stretches: list[Stretch], series: dict,
                exact: bool = False):
    """Node k's frames in time order: the recording's loop from phase k/nodes, --hours long from T0."""
    node, boot = f"node-{k:04d}", f"boot-{k:04d}"
    rng = np.random.default_rng([SEED, k])
    gaps = [s.duration + 1.0 for s in stretches]
    loop = sum(gaps)
    bases = np.concatenate([[0.0], np.cumsum(gaps)[:-1]])
    phase, span = loop * k / nodes, hours * 3600.0
    last: dict = {}
    seq = j = 0
    while True:
        for stretch, base in zip(stretches, bases):
            lo = base + j * loop
            if lo + stretch.duration < phase:
                continue
            if lo >= phase + span:
                return
            levels = copy_levels(stretch, series, last, rng, exact)
            shift = T0 - phase + lo - stretch.start
            plans: dict = {}
            for r in stretch.frames:
                t = r.t + shift
                keep = (t >= T0) & (t < T0 + span - 0.0005)   # in ms too: one block of 2 h for Prometheus
                if not keep.any():
                    continue
                plan = plans.get((r.scope, id(r.names)))
                if plan is None:
                    add, mul = zip(*(levels[(r.scope, n)] for n in r.names))
                    plan = plans[(r.scope, id(r.names))] = (np.array(add), np.array(mul))
                out = r.values * plan[1] + plan[0]
                out = np.where(r.clean, np.rint(out * r.scale) / r.scale, out)
                if not keep.all():
                    t, out = t[keep], out[keep]
                seq += 1
                yield wire.Frame("samples", node, boot, seq, r.ts + shift,
                                 wire.samples_body(t, r.names, out, scope=r.scope))
            for key, value in stretch.last.items():
                last[key] = value + levels[key][0]
        j += 1


def realistic_frames(doc: dict, nodes: int, hours: float, exact: bool = False):
    stretches, series = prepare(doc)
    return heapq.merge(*(node_frames(k, nodes, hours, stretches, series, exact) for k in range(nodes)),
                       key=lambda f: f.ts)


# ---- the synthetic set: bench/stream.py (d)'s full-precision gauges on N nodes -------------------

def synthetic_frames(nodes: int, hours: float, metrics: int = 65):
    """stream.py's node_hour_frames samples (per node-hour: levels U(0, 100), plus N(0, 1) noise each
    second; 10 rows a frame, whole-second times), for each node, in time order across nodes."""
    names = [f"metric_{i:02d}" for i in range(metrics)]
    rngs = [np.random.default_rng([SEED, k]) for k in range(nodes)]
    level = None
    for start in range(0, int(hours * 3600), 10):
        if start % 3600 == 0:
            level = [rng.uniform(0, 100, metrics) for rng in rngs]
        t = T0 + start + np.arange(10.0)
        for k, rng in enumerate(rngs):
            values = level[k] + rng.normal(0, 1, (10, metrics))
            yield wire.Frame("samples", f"node-{k:04d}", f"boot-{k:04d}", start // 10 + 1, t[-1],
                             wire.samples_body(t, names, values))


# ---- the hot store: the daemon's ingest path ------------------------------------------------------

def used_bytes(con) -> int:
    """Bytes of the blocks a DuckDB file uses (free blocks left by dropped tables not counted)."""
    size, used = con.execute("SELECT block_size, used_blocks FROM pragma_database_size()").fetchone()
    return size * used


def hot_store(path: Path, frames, batch: int) -> dict:
    """Commit the frames through Store.commit_frames, `batch` a commit in the order given, CHECKPOINT.
    Bytes: `hot_bytes`, the blocks the file uses beyond an empty migrated store's, ingest_log's left
    out (dropped, CHECKPOINT again; it is trimmed by retention, and reported apart); `file_growth`,
    the file's own growth at the first CHECKPOINT (free blocks and ingest_log in: what bench/stream.py
    (d) measures). The store stays open for the lake and Prometheus steps."""
    empty = Store(str(path.with_name("empty.duckdb")))
    base = used_bytes(empty.con)
    empty.close()
    base_file = path.with_name("empty.duckdb").stat().st_size
    store = Store(str(path))
    store.con.execute("SET enable_progress_bar = false")
    frames_n = 0
    t0 = time.perf_counter()
    pending: list[wire.Frame] = []
    for f in frames:
        pending.append(f)
        if len(pending) == batch:
            store.commit_frames(pending)
            frames_n += len(pending)
            pending = []
    if pending:
        store.commit_frames(pending)
        frames_n += len(pending)
    seconds = time.perf_counter() - t0
    con = store.con
    con.execute("CHECKPOINT")
    total, file_growth = used_bytes(con) - base, path.stat().st_size - base_file
    rows, values, series, nodes = con.execute(
        "SELECT count(*), count(value), count(DISTINCT (node, scope, metric)), count(DISTINCT node) "
        "FROM samples").fetchone()
    con.execute("DROP TABLE ingest_log")
    con.execute("CHECKPOINT")
    hot = used_bytes(con) - base
    return {"path": str(path), "store": store, "frames": frames_n, "rows": rows, "values": values,
            "series": series, "nodes": nodes, "hot_bytes": hot, "ingest_log_bytes": total - hot,
            "file_growth": file_growth, "ingest_seconds": seconds}


# ---- the lake -------------------------------------------------------------------------------------

MS = "CAST(round(ts * 1000) AS BIGINT) AS ts"
COMPACTION = "the store's compaction"
SORTED = "FROM samples ORDER BY node, scope, metric, ts"   # the lake's order: series, then time
# name -> (SELECT list, COPY options): the layouts the lead chooses from. Every variant keeps the
# values exactly (DOUBLE) and sorts by series then time; `ts` in ms is Prometheus's resolution.
LAKE_VARIANTS = {
    "ts DOUBLE, zstd": ("node, scope, metric, ts, value", "COMPRESSION zstd"),
    "ts ms, zstd": (f"node, scope, metric, {MS}, value", "COMPRESSION zstd"),
    "ts ms, zstd, v2": (f"node, scope, metric, {MS}, value", "COMPRESSION zstd, PARQUET_VERSION v2"),
    "ts ms, zstd 9, v2": (f"node, scope, metric, {MS}, value",
                          "COMPRESSION zstd, COMPRESSION_LEVEL 9, PARQUET_VERSION v2"),
    "ts ms, zstd 19, v2": (f"node, scope, metric, {MS}, value",
                           "COMPRESSION zstd, COMPRESSION_LEVEL 19, PARQUET_VERSION v2"),
    "ts ms, zstd, v2, 1M rows": (f"node, scope, metric, {MS}, value",
                                 "COMPRESSION zstd, PARQUET_VERSION v2, ROW_GROUP_SIZE 1048576"),
    # DICTIONARY_SIZE_LIMIT 1: no dictionary pages (DuckDB otherwise picks one for a column chunk of
    # few distinct values, and the doubles then lose BYTE_STREAM_SPLIT and zstd's view of their bytes)
    "ts ms, zstd, v2, no dict": (f"node, scope, metric, {MS}, value",
                                 "COMPRESSION zstd, PARQUET_VERSION v2, DICTIONARY_SIZE_LIMIT 1"),
    "ts ms, zstd, v2, no dict, 1M rows": (f"node, scope, metric, {MS}, value", "COMPRESSION zstd, "
                                          "PARQUET_VERSION v2, DICTIONARY_SIZE_LIMIT 1, ROW_GROUP_SIZE 1048576"),
    "ts ms, zstd 9, v2, no dict, 1M rows": (f"node, scope, metric, {MS}, value", "COMPRESSION zstd, "
                                            "COMPRESSION_LEVEL 9, PARQUET_VERSION v2, DICTIONARY_SIZE_LIMIT 1, "
                                            "ROW_GROUP_SIZE 1048576"),
    "series id, ts ms, zstd, v2, no dict, 1M rows": ("series", "COMPRESSION zstd, PARQUET_VERSION v2, "
                                                     "DICTIONARY_SIZE_LIMIT 1, ROW_GROUP_SIZE 1048576"),
    # the real thing: the store's own compaction (causewatch.daemon.store.lake) moving every row
    COMPACTION: ("compaction", store_lake.COPY_OPTIONS),
}


def lake_bytes(con, folder: Path, variant: str) -> int:
    """Bytes the lake takes for every row of `samples` in the store `con` holds.

    Until causewatch.daemon.store.lake lands: one reference Parquet file written the way the lake will
    write a partition (sorted by series and time, zstd), in the layout LAKE_VARIANTS[variant] names.
    With the real lake, this becomes: run its compaction on the store (hot window 0), then sum the
    bytes of the files under the store's lake folder."""
    columns, options = LAKE_VARIANTS[variant]
    out = lake_file(folder, variant)
    if columns == "compaction":
        con.begin()
        store_lake.compact(con, str(out), cutoff_ms=2**62)
        con.commit()
        return sum(p.stat().st_size for p in out.rglob("*.parquet"))
    out.parent.mkdir(parents=True, exist_ok=True)
    _sorted(con)
    if columns == "series":
        # the series dictionary (id -> node, scope, metric) as its own file; samples keyed by the id
        keys = folder / "lake" / "series.parquet"
        con.execute(f"COPY (SELECT DISTINCT ON (series) series, node, scope, metric FROM bench_sorted ORDER BY "
                    f"series) TO '{keys}' (FORMAT parquet, {options})")
        con.execute(f"COPY (SELECT series, {MS}, value FROM bench_sorted) TO '{out}' (FORMAT parquet, {options})")
        return out.stat().st_size + keys.stat().st_size
    con.execute(f"COPY (SELECT {columns} FROM bench_sorted) TO '{out}' (FORMAT parquet, {options})")
    return out.stat().st_size


def lake_sql(variant: str) -> str:
    """The COPY statement(s) of a variant, as the lead would write them over `samples`."""
    columns, options = LAKE_VARIANTS[variant]
    if columns == "compaction":
        return "causewatch.daemon.store.lake.compact: " + store_lake.__doc__.split("\n")[0]
    if columns == "series":
        return (f"COPY (SELECT DISTINCT ON (series) series, node, scope, metric FROM s ORDER BY series) TO "
                f"'series.parquet' (FORMAT parquet, {options}); COPY (SELECT series, {MS}, value FROM s) TO "
                f"'x.parquet' (FORMAT parquet, {options}), s being (SELECT dense_rank() OVER (ORDER BY node, scope, "
                f"metric) AS series, * {SORTED})")
    return f"COPY (SELECT {columns} {SORTED}) TO 'x.parquet' (FORMAT parquet, {options})"


def lake_file(folder: Path, variant: str) -> Path:
    """Where a variant's reference file goes; for the compaction, the lake folder it fills."""
    if LAKE_VARIANTS[variant][0] == "compaction":
        return folder / "store.lake"
    return folder / "lake" / (variant.replace(" ", "_").replace(",", "") + ".parquet")


def _sorted(con) -> None:
    """`samples` in the lake's order, once per store (a TEMP table: rows come out in insertion
    order, so each variant's COPY writes them sorted without sorting again), with a series number."""
    if not con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'bench_sorted'").fetchone()[0]:
        con.execute(f"CREATE TEMP TABLE bench_sorted AS SELECT dense_rank() OVER (ORDER BY node, scope, metric)"
                    f"::INTEGER AS series, * {SORTED}")


# ---- Prometheus -------------------------------------------------------------------------------------

def om_names(metrics: list[str]) -> list[tuple[str, str, str, str, str]]:
    """(metric, family, sample name, type, cpu label) for OpenMetrics: a NAME.cpuN metric is NAME with
    cpu="N"; other characters outside [a-zA-Z0-9_:] become _; a counter's samples end in _total, its
    family is the name without it."""
    out = []
    for m in metrics:
        name, cpu = m, ""
        match = re.fullmatch(r"(.+)\.cpu(\d+)", m)
        if match:
            name, cpu = match.groups()
        name = re.sub(r"[^a-zA-Z0-9_:]", "_", name)
        if is_counter(m):
            sample = name if name.endswith("_total") else f"{name}_total"
            out.append((m, sample[:-len("_total")], sample, "counter", cpu))
        else:
            out.append((m, name, name, "gauge", cpu))
    return out


def write_openmetrics(con, path: Path) -> int:
    """Every non-null sample of `samples` as OpenMetrics text, written by DuckDB: each family's
    `# TYPE` line, then its series (sorted by labels) each in time order; `# EOF`. Values are DuckDB's
    shortest round-trip text of the double; times seconds with 3 decimals (Prometheus keeps ms)."""
    metrics = [m for (m,) in con.execute("SELECT DISTINCT metric FROM samples ORDER BY 1").fetchall()]
    names = pa.table(dict(zip(["metric", "family", "sample", "kind", "cpu"], map(list, zip(*om_names(metrics))))))
    con.register("om_names", names)
    body = path.with_suffix(".body")
    con.execute(rf"""COPY (
        SELECT line FROM (
            SELECT DISTINCT family, 0 AS k, '' AS node, '' AS scope, '' AS cpu, 0::BIGINT AS ms,
                '# TYPE ' || family || ' ' || kind AS line FROM om_names
            UNION ALL
            SELECT family, 1, node, scope, cpu, ms,
                sample || '{{node="' || node || '",scope="' || scope || '"'
                || CASE WHEN cpu = '' THEN '' ELSE ',cpu="' || cpu || '"' END || '}} '
                || CAST(value AS VARCHAR) || ' '
                || CAST(ms // 1000 AS VARCHAR) || '.' || lpad(CAST(ms % 1000 AS VARCHAR), 3, '0')
            FROM (SELECT *, CAST(round(ts * 1000) AS BIGINT) AS ms FROM samples WHERE value IS NOT NULL)
            JOIN om_names USING (metric))
        ORDER BY family, k, node, scope, cpu, ms
    ) TO '{body}' (FORMAT csv, HEADER false, QUOTE '', ESCAPE '', DELIMITER '\t')""")
    con.unregister("om_names")
    with open(path, "wb") as out, open(body, "rb") as src:
        shutil.copyfileobj(src, out, 1 << 20)
        out.write(b"# EOF\n")
    body.unlink()
    return path.stat().st_size


def prometheus_blocks(om: Path, out: Path) -> dict:
    """promtool's blocks from the OpenMetrics file: bytes of every file in them (chunks, index,
    meta.json, tombstones), and the samples and series their meta.json count."""
    promtool = shutil.which("promtool")
    if promtool is None:
        raise SystemExit("promtool not found: sudo apt-get install -y prometheus (Debian ships it)")
    t0 = time.perf_counter()
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(om), str(out)], check=True)
    seconds = time.perf_counter() - t0
    blocks = [d for d in out.iterdir() if (d / "meta.json").exists()]
    size = sum(f.stat().st_size for d in blocks for f in d.rglob("*") if f.is_file())
    chunks = sum(f.stat().st_size for d in blocks for f in (d / "chunks").iterdir())
    index = sum((d / "index").stat().st_size for d in blocks)
    stats = [json.loads((d / "meta.json").read_text())["stats"] for d in blocks]
    return {"bytes": size, "chunks_bytes": chunks, "index_bytes": index, "blocks": len(blocks),
            "samples": sum(s["numSamples"] for s in stats), "series": sum(s["numSeries"] for s in stats),
            "seconds": seconds, "openmetrics_bytes": om.stat().st_size}


# ---- one set, every store ----------------------------------------------------------------------------

def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def measure(name: str, frames, folder: Path, variants: list[str], batch: int, keep: bool = False,
            with_layouts: bool = False) -> dict:
    """Hot store, each lake variant and Prometheus's blocks on one set of frames."""
    folder.mkdir(parents=True, exist_ok=True)
    log(f"{name}: ingest")
    hot = hot_store(folder / f"{name}.duckdb", frames, batch)
    store = hot.pop("store")
    lake = {}
    for v in variants:
        log(f"{name}: lake, {v}")
        t0 = time.perf_counter()
        lake[v] = {"bytes": lake_bytes(store.con, folder, v), "seconds": time.perf_counter() - t0}
        path = lake_file(folder, v)
        lake[v]["columns"] = dict(store.con.execute(
            "SELECT path_in_schema, sum(total_compressed_size)::BIGINT FROM parquet_metadata(?) GROUP BY 1 "
            "ORDER BY 2 DESC", [str(path / "**" / "*.parquet" if path.is_dir() else path)]).fetchall())
        if not keep and not path.is_dir():     # the compaction's lake stays: `samples` reads it
            path.unlink()
    layouts = {}
    if with_layouts:
        log(f"{name}: hot layouts")
        layouts = hot_layouts(store.con, folder)
    log(f"{name}: OpenMetrics text, promtool")
    om = folder / "samples.om"
    t0 = time.perf_counter()
    write_openmetrics(store.con, om)
    om_seconds = time.perf_counter() - t0
    store.close()
    prom = prometheus_blocks(om, folder / "prometheus")
    prom["openmetrics_seconds"] = om_seconds
    if not keep:
        om.unlink()
    if prom["samples"] != hot["values"]:
        raise SystemExit(f"{name}: Prometheus's blocks hold {prom['samples']:,} samples, the store "
                         f"{hot['values']:,} values")
    return {"hot": hot, "lake": lake, "prometheus": prom, "hot_layouts": layouts}


# ---- hot layouts: what DuckDB's own codecs make of other orders of the same rows ----------------------

# A list row per node and span: the series of one node sampled at the same times share one time list,
# and each series' values of the span sit together (series by series in `vals`). Such a row exists
# only once its span has ended.
NODE_BLOCKS = """WITH per AS (SELECT node_id, series_id, ts // {ms} AS span, list(ts ORDER BY ts) AS ts,
                        list(value ORDER BY ts) AS vals FROM rows GROUP BY ALL)
    SELECT node_id, span, ts, list(series_id ORDER BY series_id) AS series,
           flatten(list(vals ORDER BY series_id)) AS vals
    FROM per GROUP BY node_id, span, ts ORDER BY node_id, span"""
ROWS = f"""SELECT dense_rank() OVER (ORDER BY node, scope, metric)::INTEGER AS series_id,
    dense_rank() OVER (ORDER BY node)::INTEGER AS node_id, {MS}, value FROM samples"""
HOT_LAYOUTS = {
    "rows sorted by (series, ts)": "SELECT series_id, ts, value FROM rows ORDER BY series_id, ts",
    **{f"a list row per node and {m} min": NODE_BLOCKS.format(ms=60_000 * m) for m in (1, 10, 60)},
}


def hot_layouts(con, folder: Path) -> dict[str, int]:
    """Bytes of `samples`' rows (series id, ts in ms, value) in each of HOT_LAYOUTS, each in a bare
    DuckDB file of its own, CHECKPOINTed (used blocks): whether any order of a DuckDB table reaches issue
    27's hot <= 3x the lake."""
    rows = folder / "rows.parquet"
    con.execute(f"COPY ({ROWS}) TO '{rows}' (FORMAT parquet)")
    out = {}
    for name, select in HOT_LAYOUTS.items():
        path = folder / "layout.duckdb"
        bare = duckdb.connect(str(path))
        # one thread: with more, the table's row groups came out differently from run to run (the
        # 10-minute blocks 3.71 and 4.00 B a value); with one, the same bytes every time
        bare.execute("SET enable_progress_bar = false; SET threads = 1")
        bare.execute(f"CREATE VIEW rows AS SELECT * FROM read_parquet('{rows}')")
        bare.execute(f"CREATE TABLE t AS {select}")
        bare.execute("DROP VIEW rows")
        bare.execute("CHECKPOINT")
        out[name] = used_bytes(bare)
        bare.close()
        path.unlink()
    rows.unlink()
    return out


# ---- bytes per node-day: samples, phase vectors and tasks -------------------------------------------

# Phase vectors and tasks in the reference lake: their tables as they are, sorted, zstd, Parquet v2
# (dictionary pages left on: their keys and JSON repeat).
TABLE_OPTIONS = "COMPRESSION zstd, PARQUET_VERSION v2"
TABLE_ORDER = {"bbv": "node, boot, target, t_start, key", "tasks": "node, boot, app, t_start"}


def _measured(value, factor: float):
    """A recorded measurement as another run's: floats times `factor`, counts rounded (bools kept)."""
    if isinstance(value, dict):
        return {k: _measured(v, factor) for k, v in value.items()}
    if isinstance(value, list):
        return [_measured(v, factor) for v in value]
    if isinstance(value, float):
        return value * factor
    if isinstance(value, int) and not isinstance(value, bool):
        return max(1, round(value * factor))
    return value


def task_frames(doc: dict, hours: float) -> list[wire.Frame]:
    """One task a second on one node for `hours`: the recorded task records (the `mixed` stretch's
    instrument API output) in turn, each with a new id and start and its measurements (duration, CPU
    seconds, counters, phase-vector counts) scaled by a factor of its own (0.8-1.25): no two alike,
    as no two real tasks are; params as recorded."""
    recorded = [f.body for s in doc["stretches"] for f in s["frames"] if f.type == "task"]
    if not recorded:
        raise SystemExit("the recording holds no task records: record again (--record)")
    rng = np.random.default_rng(SEED)
    frames = []
    for i in range(int(hours * 3600)):
        body = dict(recorded[i % len(recorded)])
        factor = float(rng.uniform(0.8, 1.25))
        body.update({k: _measured(body[k], factor) for k in ("duration", "cpu_seconds", "counters") if k in body})
        if "bbv" in body:
            body["bbv"] = {"keys": body["bbv"]["keys"], "counts": _measured(body["bbv"]["counts"], factor)}
        body.update(task_id=f"t{i}", start=T0 + i)
        frames.append(wire.Frame("task", "node-0000", "boot-0000", i + 1, T0 + i + body["duration"], body))
    return frames


def bbv_frames(hours: float) -> list[wire.Frame]:
    """bench/stream.py (d)'s phase vectors: one a second, 50 of 300 functions, counts of 1 kHz sampling."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from stream import node_hour_frames  # a sibling bench, which loads the analytics: only when asked
    rng = np.random.default_rng(5)
    return [f for h in range(int(hours)) for f in node_hour_frames(h, rng, 65, 50) if f.type == "bbv"]


def node_day(doc: dict, folder: Path, hours: float, variant: str, batch: int) -> dict:
    """One node for `hours`, each kind of frame in a store of its own, scaled to a day: stream.py (d)'s
    simulated node's samples (65 full-precision gauges at 1 Hz) and phase vectors, and tasks."""
    out = {}
    for table, frames in (("samples", synthetic_frames(1, hours)), ("bbv", bbv_frames(hours)),
                          ("tasks", task_frames(doc, hours))):
        sub = folder / table
        sub.mkdir(parents=True, exist_ok=True)
        hot = hot_store(sub / f"{table}.duckdb", iter(frames), batch)
        store = hot.pop("store")
        if table == "samples":
            lake = lake_bytes(store.con, sub, variant)
        else:
            lake_path = sub / f"{table}.parquet"
            store.con.execute(f"COPY (SELECT * FROM {table} ORDER BY {TABLE_ORDER[table]}) TO '{lake_path}' "
                              f"(FORMAT parquet, {TABLE_OPTIONS})")
            lake = lake_path.stat().st_size
        rows = store.con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        store.close()
        day = 24 / hours
        out[table] = {"rows": rows * day, "hot": hot["hot_bytes"] * day, "file": hot["file_growth"] * day,
                      "lake": lake * day}
    return out


# ---- report -------------------------------------------------------------------------------------------

def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=10, help="nodes of each set")
    p.add_argument("--hours", type=float, default=2.0, help="hours of each node")
    p.add_argument("--record", action="store_true", help="record the agent's stretches again")
    p.add_argument("--record-seconds", type=float, default=80.0, help="seconds per recorded stretch")
    p.add_argument("--exact-loop", action="store_true",
                   help="also measure the realistic set with recorded levels kept exactly (repeats)")
    p.add_argument("--sets", nargs="+", choices=["realistic", "synthetic"], default=["realistic", "synthetic"])
    p.add_argument("--variants", nargs="+", choices=list(LAKE_VARIANTS), default=list(LAKE_VARIANTS),
                   metavar="VARIANT", help="lake layouts to measure (default: all)")
    p.add_argument("--keep", metavar="FOLDER", help="work in FOLDER and keep the files")
    p.add_argument("--commit-frames", type=int, default=DaemonConfig().batch_max_frames,
                   help="frames a commit (default: the daemon's batch_max_frames; agent frames are far below "
                        "its batch_max_bytes)")
    p.add_argument("--hot-layouts", action="store_true",
                   help="also measure the rows in other DuckDB layouts (sorted rows, a list row per node and span)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--workload", nargs=2, metavar=("KIND", "SECONDS"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.workload:
        workload(args.workload[0], float(args.workload[1]))
        return
    if args.record or not RECORDING.exists():
        record(RECORDING, args.record_seconds)
    doc = read_recording(RECORDING)
    result = {"cpus": os.cpu_count(), "load_1min": os.getloadavg()[0], "nodes": args.nodes, "hours": args.hours,
              "recording": {"path": str(RECORDING), "host": doc["host"], "recorded": doc["recorded"],
                            "stretches": {s["load"]: {"seconds": s["seconds"], "frames": len(s["frames"]),
                                                      "what": s["what"]} for s in doc["stretches"]}},
              "sets": {}}
    sets = {"realistic": lambda: realistic_frames(doc, args.nodes, args.hours),
            "realistic, exact loop": lambda: realistic_frames(doc, args.nodes, args.hours, exact=True),
            "synthetic": lambda: synthetic_frames(args.nodes, args.hours)}
    chosen = [s for s in sets if s.split(",")[0] in args.sets and (args.exact_loop or s != "realistic, exact loop")]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        for name in chosen:
            folder = work / name.replace(", ", "-").replace(" ", "-")
            result["sets"][name] = measure(name, sets[name](), folder, args.variants, args.commit_frames,
                                           keep=bool(args.keep), with_layouts=args.hot_layouts)
            if not args.keep:
                shutil.rmtree(folder)
        # the lake's figure: the store's own compaction when measured, else the smallest reference layout
        # on the sum over the sets of its ratio to Prometheus's bytes
        best = COMPACTION if COMPACTION in args.variants else min(
            args.variants, key=lambda v: sum(r["lake"][v]["bytes"] / r["prometheus"]["bytes"]
                                             for r in result["sets"].values()))
        result["best_variant"] = {"name": best, "sql": lake_sql(best)}
        log("bytes per node-day")
        result["node_day"] = node_day(doc, work / "node-day", args.hours, best, args.commit_frames)
    if args.json:
        print(json.dumps(result))
        return
    report(result)


def report(r: dict) -> None:
    rec = r["recording"]
    stretches = ", ".join(f"{k} {v['seconds']:.0f} s" for k, v in rec["stretches"].items())
    print(f"{r['cpus']} CPUs, load {r['load_1min']:.1f} at start; recording {rec['path']} ({stretches}, "
          f"on {rec['host']} {time.strftime('%Y-%m-%d %H:%M', time.localtime(rec['recorded']))})")
    best = r["best_variant"]["name"]
    for name, s in r["sets"].items():
        hot, prom, lake = s["hot"], s["prometheus"], s["lake"]
        n = hot["values"]
        per = prom["bytes"] / n
        print(f"\n{name}: {hot['nodes']} nodes x {r['hours']:g} h, {hot['series']:,} series, {n:,} values "
              f"({hot['rows'] - n:,} nulls besides), {hot['frames']:,} frames")
        print(f"  {'store':<52} {'bytes':>14} {'B/value':>8} {'x Prom':>7} {'write s':>8}")

        def row(label: str, size: float, seconds: float | None = None) -> None:
            print(f"  {label:<52} {size:>14,.0f} {size / n:>8.3f} {size / n / per:>7.2f}"
                  + (f" {seconds:>8.1f}" if seconds is not None else ""))
        row("hot DuckDB, samples (used blocks)", hot["hot_bytes"], hot["ingest_seconds"])
        print(f"  {'  ingest_log apart (trimmed by retention)':<52} {hot['ingest_log_bytes']:>14,.0f} "
              f"{hot['ingest_log_bytes'] / n:>8.3f}")
        print(f"  {'  the file grew (ingest_log, free blocks in)':<52} {hot['file_growth']:>14,.0f} "
              f"{hot['file_growth'] / n:>8.3f}")
        smallest = min(lake, key=lambda v: lake[v]["bytes"])
        for v, x in lake.items():
            mark = (" *" if v == best else "") + (" <" if v == smallest else "")
            row(f"lake: {v}{mark}", x["bytes"], x["seconds"])
        columns = ", ".join(f"{c} {b / n:.3f}" for c, b in lake[best]["columns"].items())
        print(f"  {'  lake(*) by column, B/value:':<52} {columns}")
        row(f"Prometheus blocks ({prom['blocks']}: chunks {prom['chunks_bytes'] / prom['bytes']:.0%})", prom["bytes"],
            prom["seconds"])
        lk = lake[best]["bytes"]
        print(f"  hot / lake(*) = {hot['hot_bytes'] / lk:.2f} (goal <= 3); "
              f"lake(*) / Prometheus = {lk / prom['bytes']:.2f} "
              f"(goal <= {'1.2 on the worst case' if name == 'synthetic' else '1'})")
        for layout, size in s["hot_layouts"].items():
            print(f"  {'  hot as ' + layout:<52} {size:>14,.0f} {size / n:>8.3f} {size / n / per:>7.2f}"
                  f"  {size / lk:.2f} x lake(*)")
        day = 86400 / (r["hours"] * 3600) / hot["nodes"]
        print(f"  samples per node-day: hot {hot['hot_bytes'] * day / 1e6:.1f} MB, lake(*) {lk * day / 1e6:.1f} MB, "
              f"Prometheus {prom['bytes'] * day / 1e6:.1f} MB ({n * day:,.0f} values)")
    nd = r["node_day"]
    print(f"\nlake(*) = {best} (the smallest on the sum of its ratios to Prometheus; <: a set's smallest):\n"
          f"  {r['best_variant']['sql']}")
    print(f"\nbytes per node-day, one node {r['hours']:g} h x {24 / r['hours']:g}: hot = used blocks (ingest_log "
          f"apart); file = the file's growth, ingest_log and free blocks in (as stream.py (d)); lake: samples "
          f"lake(*), others Parquet ({TABLE_OPTIONS})")
    print(f"  {'':<52} {'rows':>12} {'hot MB':>8} {'file MB':>8} {'lake MB':>8}")
    for key, label in (("samples", "samples: stream.py's node, 65 gauges (today 84.9)"),
                       ("bbv", "phase vectors: stream.py's, 1/s (today 28.3)"),
                       ("tasks", "tasks: recorded records, 1/s")):
        x = nd[key]
        mb = " ".join(f"{x[k] / 1e6:>8.1f}" for k in ("hot", "file", "lake"))
        print(f"  {label:<52} {x['rows']:>12,.0f} {mb}")


if __name__ == "__main__":
    main()
