"""Streaming benchmark: the live daemon's costs as the store grows, each against its peer in the same run.

(a) one CausalJob cycle with ~1 % new task rows, partial_fit against a full fit (goal >= 5x at 1e5 rows);
(b) /metrics scrape latency of a real Daemon whose job publishes 1e4 gauge series (goal <= 100 ms);
(c) ingest rate of real senders into a daemon child process while re-learns run back to back in its
    jobs worker, against the same daemon idle (goal: within 10 %); with the worker paused while the
    writer has a backlog (the default), without (analysis_pause_max = 0), and raised to nice 10 one
    second into each re-learn (analysis_starved_seconds = 1: a starved learner's share);
(d) store bytes per node-day of a simulated node (1 Hz x 65 metrics + one phase vector a second).

    .venv/bin/python bench/stream.py                       # everything, full sizes
    .venv/bin/python bench/stream.py --rows 1000 10000 --series 2000 --hours 1   # reduced, for a loaded machine
    .venv/bin/python bench/stream.py --only scrape --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import psutil

from causewatch import wire
from causewatch.agent.sender import Sender
from causewatch.analytics.causal import PCLearner
from causewatch.config import AgentConfig, DaemonConfig
from causewatch.daemon import readers
from causewatch.daemon.exporter import Exporter, gauge_family
from causewatch.daemon.job_causal import SUBMODEL_ROWS, CausalJob
from causewatch.daemon.job_retention import RetentionJob
from causewatch.daemon.jobs import Job, JobContext
from causewatch.daemon.server import Daemon
from causewatch.daemon.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support import free_port

BIG = 10**9   # CausalJob's window: never full here, so a cycle is a partial_fit or a fit of every row
T0 = 1_699_999_980.0   # a minute boundary: the simulated node-hours start here


# ---- (a) analysis cycle: partial_fit against a full fit ------------------------------------------

def task_frames(seed: int, start: int, count: int) -> list[wire.Frame]:
    """Synthetic tasks: duration depends on instructions (~ n^2) and L2 misses (~ the dtype's size)."""
    rng = np.random.default_rng(seed)
    n = rng.integers(50, 300, count)
    dtype = rng.choice(["int", "double"], count)
    instructions = n.astype(float) ** 2 * rng.uniform(0.5, 1.5, count)
    misses = np.where(dtype == "int", 4, 8) * rng.uniform(50, 150, count)
    duration = instructions * 1e-5 + misses * 1e-3 + rng.normal(0, 0.1, count)
    return [wire.Frame("task", "node-1", "b1", start + i, 1000.0 + start + i, {
        "app": "lu", "task_id": f"t{start + i}", "start": 1000.0 + start + i, "duration": float(duration[i]),
        "cpu_seconds": float(duration[i] * 0.9), "params": {"n": int(n[i]), "dtype": str(dtype[i])},
        "counters": {"instructions": float(instructions[i]), "l2_misses": float(misses[i])}})
        for i in range(count)]


def fill(store: Store, frames: list[wire.Frame], batch: int = 5000) -> None:
    for i in range(0, len(frames), batch):
        store.commit_frames(frames[i:i + batch])


def job_ctx(store: Store) -> JobContext:
    return JobContext(read=store.cursor, write=store.run, send=lambda *a: True, exporter=Exporter())


def causal_job() -> CausalJob:
    return CausalJob(min_rows=50, max_rows=BIG, min_new=1, max_new=BIG)


def analysis_cycle(folder: Path, rows: list[int]) -> list[dict]:
    """Each size after a discarded warm-up size (numba's compiled code loaded). At each size: a fit, one
    update of 1 % new rows, then the measured cycle: another 1 % through partial_fit against a job that
    starts afresh on every row. Both jobs run in this process, on its store: in the daemon the same job
    runs whole in its jobs worker, where the learner stays and only the rows read cross (as Arrow). The
    first update after a start calibrates the KDE null of the Markov check's block shapes at the batch's
    size once (cached in the process, as in the worker): the measured cycle is the steady state."""
    out = []
    for n in [300] + rows:
        store = Store(str(folder / f"tasks-{n}.duckdb"))
        fill(store, task_frames(n, 1, n))
        ctx = job_ctx(store)
        incremental = causal_job()
        incremental.run(ctx)                      # the model as the daemon has it before the new rows
        new = max(1, n // 100)
        fill(store, task_frames(n + 1, n + 1, new))
        incremental.run(ctx)                      # one cycle in the steady state's shapes (KDE nulls calibrated)
        fill(store, task_frames(n + 2, n + 1 + new, new))
        t0 = time.perf_counter()
        incremental.run(ctx)                      # reads the new rows only, partial_fit
        inc = time.perf_counter() - t0
        t0 = time.perf_counter()
        causal_job().run(ctx)                     # a job that starts afresh: reads every row, fit
        full = time.perf_counter() - t0
        learner = incremental.scopes["app:lu"].learner
        assert learner is not None and incremental.scopes["app:lu"].n_rows == n + 2 * new
        store.close()
        out.append({"rows": n + new, "new_rows": new, "partial_fit_s": inc, "full_fit_s": full,
                    "ratio": full / inc, "ci_rows": PCLearner().max_rows, "submodel_rows": SUBMODEL_ROWS,
                    "retested": learner.n_tests_, "reused": learner.n_reused_})
    return out[1:]


# ---- (b) scrape latency --------------------------------------------------------------------------

class Publisher(Job):
    """A job publishing `n` gauge series (100 nodes x n/100 metrics) through exporter.publish. The families
    are built once: what is measured is the scrape, not the job's own work competing for the GIL."""
    name = "publisher"
    interval = 0.2

    def __init__(self, n: int):
        series = [({"node": f"node-{i % 100:03d}", "metric": f"metric_{i // 100:04d}"}, float(i)) for i in range(n)]
        self.families = [gauge_family("bench_series", "Benchmark series", ["node", "metric"], series)]

    def run(self, ctx: JobContext) -> None:
        ctx.exporter.publish(self.name, self.families)


def scrape_latency(folder: Path, n_series: int, scrapes: int) -> dict:
    out = {}
    for label, jobs in (("empty", []), ("series", [Publisher(n_series)])):
        cfg = DaemonConfig(db=str(folder / f"scrape-{label}.duckdb"), bind="tcp://127.0.0.1:0",
                           http=f"127.0.0.1:{free_port()}")
        daemon = Daemon(cfg, jobs=jobs).start()
        url = f"http://{cfg.http}/metrics"
        try:
            deadline = time.monotonic() + 30
            while jobs and b"bench_series{" not in urllib.request.urlopen(url).read():
                if time.monotonic() > deadline:
                    raise SystemExit("the publisher's series never appeared on /metrics")
                time.sleep(0.1)
            times, size = [], 0
            for _ in range(scrapes):
                t0 = time.perf_counter()
                size = len(urllib.request.urlopen(url).read())
                times.append(time.perf_counter() - t0)
        finally:
            daemon.stop()
        out[label] = {"median_ms": 1e3 * statistics.median(times),
                      "p95_ms": 1e3 * float(np.percentile(times, 95)), "bytes": size}
    out["series"]["n"] = n_series
    return out


# ---- (c) ingest while a re-learn runs ------------------------------------------------------------

class Relearn(Job):
    """A CausalJob that starts afresh every run: a full re-learn over every task row, back to back."""
    name = "relearn"
    interval = 0.0

    def __init__(self, spans: str):
        # A file each finished re-learn appends "start end" to (CLOCK_MONOTONIC, system-wide): the job
        # runs in the daemon's jobs worker, a process of its own, so a list here would stay empty.
        self.spans = spans

    def run(self, ctx: JobContext) -> None:
        t0 = time.monotonic()
        causal_job().run(ctx)
        with open(self.spans, "a") as f:
            f.write(f"{t0} {time.monotonic()}\n")


def read_spans(path: str) -> list[tuple[float, float]]:
    """(start, end) of each re-learn the worker finished."""
    try:
        return [tuple(map(float, line.split())) for line in Path(path).read_text().splitlines()]
    except FileNotFoundError:
        return []


def worker_cpu(daemon: Daemon) -> float:
    pid = daemon.jobs_worker.pid
    return sum(psutil.Process(pid).cpu_times()[:2]) if pid else 0.0


def serve(mode: str, db: str, endpoint: str) -> None:
    """The daemon child of (c): idle (no jobs) or re-learning. Ready once a re-learn is under way in its
    jobs worker. When told to stop it waits for that re-learn's end (at most 5 min) and prints the
    re-learns that overlapped the measurement (their wall seconds), the worker's CPU seconds and the
    seconds it was paused because ingest had a backlog."""
    job, relearn = Relearn(f"{db}.spans"), mode.startswith("relearn")
    cfg = DaemonConfig(db=db, bind=endpoint, http="",
                       **({"analysis_pause_max": 0.0} if mode == "relearn-unpaused" else {}),
                       **({"analysis_starved_seconds": 1.0} if mode == "relearn-raised" else {}))
    daemon = Daemon(cfg, jobs=[job] if relearn else []).start()
    started = time.monotonic()
    while relearn and worker_cpu(daemon) < 1.0:
        if time.monotonic() - started > 120:   # SCHED_IDLE gets no CPU while anything else wants it
            daemon.stop()
            raise SystemExit("the jobs worker had less than 1 CPU-s in 120 s: it runs SCHED_IDLE "
                             "(analysis_nice = 19), so on a machine whose cores other work keeps busy it waits; "
                             "measure on a quieter machine")
        time.sleep(0.1)
    began, cpu, paused = time.monotonic(), worker_cpu(daemon), daemon.jobs_worker.paused_seconds
    raised = daemon.jobs_worker.raised_seconds
    print("ready", flush=True)
    sys.stdin.read()     # the parent closes our stdin to stop us
    ended, cpu, paused = time.monotonic(), worker_cpu(daemon) - cpu, daemon.jobs_worker.paused_seconds - paused
    raised = daemon.jobs_worker.raised_seconds - raised   # counted as each re-learn ends
    while relearn and not any(b >= ended for _, b in read_spans(job.spans)) and time.monotonic() < ended + 300:
        time.sleep(0.1)
    daemon.stop()
    spans = [b - a for a, b in read_spans(job.spans) if a < ended and b > began]
    print(json.dumps({"relearn_s": spans, "relearn_cpu_s": cpu, "paused_s": paused, "raised_s": raised}), flush=True)


def ingest_rate(folder: Path, mode: str, args, task_rows: int) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / f"ingest-{mode}.duckdb"
    store = Store(str(db))
    fill(store, task_frames(0, 1, task_rows))
    store.close()
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    child = subprocess.Popen([sys.executable, __file__, "--serve", mode, str(db), endpoint], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    if child.stdout.readline().strip() != "ready":
        raise SystemExit(f"the {mode} daemon did not start")
    rng = np.random.default_rng(1)
    names = [f"metric_{i:02d}" for i in range(args.metrics)]
    payloads = [wire.samples_body(np.arange(args.timestamps, dtype=float), names,
                                  rng.random((args.timestamps, args.metrics))) for _ in range(4)]
    senders = [Sender(AgentConfig(daemon=endpoint, node=f"agent-{k:03d}", spool=str(folder / f"spool-{mode}-{k}"),
                                  window=8)).start() for k in range(args.agents)]

    def send(s: Sender) -> None:
        for i in range(args.frames):
            s.send("samples", payloads[i % len(payloads)])

    t0 = time.perf_counter()
    threads = [threading.Thread(target=send, args=(s,)) for s in senders]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flushed = all(s.flush(600) for s in senders)
    elapsed = time.perf_counter() - t0
    for s in senders:
        s.close()
    child.stdin.close()
    relearn = json.loads(child.stdout.readline())
    child.wait(300)   # a loaded machine stops a daemon slowly
    with readers.shared.open_store(str(db)) as con:
        stored = readers.report.table_counts(con)["samples"]
    expected = args.agents * args.frames * args.timestamps * args.metrics
    if not flushed or stored != expected:
        raise SystemExit(f"{mode}: stored {stored} of {expected} values (flushed: {flushed})")
    return {"values": stored, "seconds": elapsed, "values_per_s": stored / elapsed, **relearn}


def ingest_rates(folder: Path, args) -> dict:
    """Idle and re-learning daemons alternately, `repeats` times each (the machine's other load moves
    both alike); medians and their ratio."""
    runs = {"idle": [], "relearn": [], "relearn-unpaused": [], "relearn-raised": []}
    for r in range(args.repeats):
        for mode in runs:
            runs[mode].append(ingest_rate(folder / f"{mode}-{r}", mode, args, args.relearn_rows))
    out = {mode: {"values_per_s": statistics.median(x["values_per_s"] for x in rs),
                  "seconds": statistics.median(x["seconds"] for x in rs),
                  "relearn_s": [s for x in rs for s in x["relearn_s"]],
                  "relearn_cpu_s": sum(x["relearn_cpu_s"] for x in rs),
                  "paused_s": sum(x["paused_s"] for x in rs),
                  "raised_s": sum(x.get("raised_s", 0.0) for x in rs)} for mode, rs in runs.items()}
    out["ratio"] = out["relearn"]["values_per_s"] / out["idle"]["values_per_s"]
    out["ratio_unpaused"] = out["relearn-unpaused"]["values_per_s"] / out["idle"]["values_per_s"]
    out["ratio_raised"] = out["relearn-raised"]["values_per_s"] / out["idle"]["values_per_s"]
    return out


# ---- (d) store bytes per node-day ----------------------------------------------------------------

def node_hour_frames(hour: int, rng, metrics: int, keys: int) -> list[wire.Frame]:
    """One simulated node-hour: samples frames of 10 rows (1 Hz x `metrics`), one phase vector a second
    with `keys` of a program's few hundred functions (counts of 1 kHz IP sampling)."""
    t0 = T0 + 3600.0 * hour
    names = [f"metric_{i:02d}" for i in range(metrics)]
    level = rng.uniform(0, 100, metrics)
    frames, seq = [], hour * 10_000
    for start in range(0, 3600, 10):
        t = t0 + start + np.arange(10.0)
        values = level + rng.normal(0, 1, (10, metrics))   # slowly varying gauges, like psutil's
        seq += 1
        frames.append(wire.Frame("samples", "node-1", "b1", seq, t[-1], wire.samples_body(t, names, values)))
    functions = [f"module.py:function_{i}" for i in range(300)]
    for s in range(3600):
        chosen = rng.choice(300, keys, replace=False)
        counts = rng.multinomial(1000, np.full(keys, 1 / keys))
        seq += 1
        frames.append(wire.Frame("bbv", "node-1", "b1", seq, t0 + s + 1, {
            "target": "pid:4242", "kind": "ip", "start": t0 + s, "end": t0 + s + 1.0,
            "vector": {"keys": [functions[i] for i in chosen], "counts": counts.tolist()}}))
    return frames


def file_bytes(path: Path) -> int:
    return path.stat().st_size + (Path(f"{path}.wal").stat().st_size if Path(f"{path}.wal").exists() else 0)


def insert_minutes(con, df: pd.DataFrame) -> None:
    """Per-minute aggregates (the samples_minute view's columns) into the base tables under that view."""
    con.register("day_minutes", df)
    con.execute("INSERT INTO series SELECT row_number() OVER (ORDER BY node, scope, metric), * FROM "
                "(SELECT DISTINCT node, scope, metric FROM day_minutes)")
    con.execute("INSERT INTO samples_minute_agg SELECT s.series_id, round(d.minute * 1000)::BIGINT, d.count, "
                "d.mean, d.min, d.max FROM day_minutes d JOIN series s USING (node, scope, metric)")
    con.unregister("day_minutes")


def node_day_bytes(folder: Path, hours: int, metrics: int, keys: int) -> dict:
    rng = np.random.default_rng(5)
    empty = folder / "empty.duckdb"
    Store(str(empty)).close()
    base = file_bytes(empty)
    sizes, aggregates = {}, None
    for kind in ("samples", "bbv"):
        path = folder / f"day-{kind}.duckdb"
        store = Store(str(path))
        for h in range(hours):
            fill(store, [f for f in node_hour_frames(h, rng, metrics, keys) if f.type == kind], batch=256)
        if kind == "samples":
            # The per-minute aggregates of these hours, by the retention job itself (raw rows kept).
            RetentionJob(samples_days=0, bbv_days=0, minute_days=0, clock=lambda: T0 + 3600.0 * hours + 60).run(
                job_ctx(store))
            with store.cursor() as cur:
                aggregates = readers.samples.samples_minute(cur)
        store.close()
        sizes[kind] = (file_bytes(path) - base) * 24 / hours
    # A day of aggregates: the simulated hours' minutes repeated to fill 24 h (same value distribution).
    day = pd.concat([aggregates.assign(minute=aggregates.minute + 3600.0 * hours * k)
                     for k in range(-(-24 // hours))], ignore_index=True)
    df = day[day.minute < aggregates.minute.min() + 86400.0]
    path = folder / "day-minute.duckdb"
    store = Store(str(path))
    store.run(lambda con: insert_minutes(con, df))
    store.close()
    sizes["samples_minute"] = file_bytes(path) - base
    return {"hours_simulated": hours, "metrics": metrics, "phase_vector_keys": keys,
            "bytes_per_node_day": sizes, "aggregate_rows_per_day": len(df)}


# ---- report --------------------------------------------------------------------------------------

def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=["cycle", "scrape", "ingest", "bytes"], action="append",
                   help="run only these parts (repeatable)")
    p.add_argument("--rows", type=int, nargs="+", default=[1_000, 10_000, 100_000], help="task rows in the store")
    p.add_argument("--series", type=int, default=10_000, help="gauge series a job publishes")
    p.add_argument("--scrapes", type=int, default=30)
    p.add_argument("--agents", type=int, default=10)
    p.add_argument("--frames", type=int, default=300, help="samples frames per agent")
    p.add_argument("--repeats", type=int, default=3, help="idle/re-learning ingest runs, alternating")
    p.add_argument("--timestamps", type=int, default=100, help="rows per samples frame")
    p.add_argument("--metrics", type=int, default=65, help="metrics per row")
    p.add_argument("--relearn-rows", type=int, default=10_000, help="task rows the re-learn goes over")
    p.add_argument("--hours", type=int, default=2, help="node-hours simulated for bytes per node-day")
    p.add_argument("--json", action="store_true")
    p.add_argument("--serve", nargs=3, metavar=("MODE", "DB", "ENDPOINT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(*args.serve)
        return
    parts = args.only or ["cycle", "scrape", "ingest", "bytes"]
    result: dict = {"cpus": os.cpu_count(), "load_1min": os.getloadavg()[0], "repeats": args.repeats,
                    "relearn_rows": args.relearn_rows}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if "cycle" in parts:
            result["cycle"] = analysis_cycle(folder, args.rows)
        if "scrape" in parts:
            result["scrape"] = scrape_latency(folder, args.series, args.scrapes)
        if "ingest" in parts:
            result["ingest"] = ingest_rates(folder, args)
        if "bytes" in parts:
            result["bytes"] = node_day_bytes(folder, args.hours, args.metrics, 50)
    if args.json:
        print(json.dumps(result))
        return
    report(result)


def report(r: dict) -> None:
    print(f"{r['cpus']} CPUs, load {r['load_1min']:.1f} at start")
    for c in r.get("cycle", []):
        print(f"(a) {c['rows']:>7,} task rows + {c['new_rows']:,} new: partial_fit cycle {c['partial_fit_s']:7.2f} s "
              f"({c['retested']} CI tests re-run, {c['reused']} reused), full fit {c['full_fit_s']:7.2f} s, "
              f"full/partial {c['ratio']:5.1f}x  (goal >= 5x at 100,000)")
    if r.get("cycle"):
        c = r["cycle"][0]
        print(f"    the cycle reads only the new rows, the full fit every row; the CI tests of both see a seeded "
              f"sample of at most {c['ci_rows']:,} rows (PCLearner.max_rows), its submodels {c['submodel_rows']:,}; "
              f"both run in this process (the daemon runs the same job in its jobs worker)")
    if "scrape" in r:
        s, e = r["scrape"]["series"], r["scrape"]["empty"]
        print(f"(b) /metrics with {s['n']:,} job series: median {s['median_ms']:.1f} ms, p95 {s['p95_ms']:.1f} ms, "
              f"{s['bytes']:,} bytes (goal <= 100 ms); without them {e['median_ms']:.1f} ms")
    if "ingest" in r:
        i = r["ingest"]
        print(f"(c) ingest idle {i['idle']['values_per_s']:,.0f} values/s (medians of {r['repeats']} alternating "
              f"runs of {i['idle']['seconds']:.1f} s each; goal during a re-learn >= 90 % of idle)")
        for mode, ratio, how in (("relearn", i["ratio"], "worker paused while the writer has a backlog (default)"),
                                 ("relearn-unpaused", i["ratio_unpaused"], "worker never paused"),
                                 ("relearn-raised", i["ratio_raised"], "worker raised to nice 10 after 1 s, paused")):
            m = i[mode]
            spans = m["relearn_s"]
            print(f"    during re-learns, {how}: {m['values_per_s']:,.0f} values/s = {ratio:.1%} of idle; the worker "
                  f"used {m['relearn_cpu_s']:.1f} CPU s, was paused {m['paused_s']:.1f} s and raised "
                  f"{m['raised_s']:.1f} s; "
                  f"re-learns of {r['relearn_rows']:,} task rows under way took "
                  f"{', '.join(f'{s:.0f}' for s in spans)} s "
                  f"(median {statistics.median(spans or [0]):.0f} s; each run's last one ends after ingest did)")
    if "bytes" in r:
        b = r["bytes"]
        sizes = b["bytes_per_node_day"]
        print(f"(d) store bytes per node-day ({b['metrics']} metrics at 1 Hz, a {b['phase_vector_keys']}-key phase "
              f"vector a second; {b['hours_simulated']} h simulated): samples {sizes['samples'] / 1e6:.1f} MB, "
              f"phase vectors {sizes['bbv'] / 1e6:.1f} MB, "
              f"per-minute aggregates {sizes['samples_minute'] / 1e6:.2f} MB ({b['aggregate_rows_per_day']:,} rows)")


if __name__ == "__main__":
    main()
