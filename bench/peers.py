"""Benchmark: the same range questions asked of causewatch, VictoriaMetrics and Prometheus, each server
alone on loopback in a temporary folder, over the very same samples (goal: causewatch <= 1.5x VM's
latency, hot and cold).

The samples: --nodes nodes x --series gauges every --interval s over the last --hours, values with two
decimals. causewatch gets them in its store directly (series rows, then samples_hot, then the real
compaction moves all but the last --hot-hours to the lake), then a `causewatch daemon` on it answers
over HTTP (/api/v1/query_range: routes, API worker, the store); VictoriaMetrics through
/api/v1/import/prometheus; Prometheus through `promtool tsdb create-blocks-from openmetrics` (no
snappy/protobuf library here for remote write), then the server on those blocks. A peer whose binary
is missing is skipped, said so. Each question is PromQL, the same text for all three, timed over HTTP
(median of --repeats after one warm-up); hot asks the last hour (rows in the DuckDB file), cold an hour
--cold-hours back (rows in the lake's Parquet). Also each store's folder in bytes per value.
Usage: python bench/peers.py [--nodes 20] [--series 20] [--interval 10] [--hours 24] [--repeats 7]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from causewatch.daemon import readers, store


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def samples_sql(args, end_ms: int) -> str:
    """The samples as (node, metric, ms, value) rows, the one definition every store is loaded from."""
    step, n = int(args.interval * 1000), int(args.hours * 3600 / args.interval)
    return f"""SELECT 'node-' || lpad(a.i::VARCHAR, 5, '0') AS node, 'metric_' || b.j AS metric,
        {end_ms} - ({n} - k) * {step} AS ms,
        round(50 + 30 * sin(k / 500.0 + a.i * 7 + b.j) + (hash(a.i, b.j, k) % 1000) / 100.0, 2) AS value
        FROM range({args.nodes}) a(i), range({args.series}) b(j), range({n}) t(k)"""


def build_causewatch(folder: Path, args, end_ms: int) -> Path:
    s = store.Store(str(folder / "cw.duckdb"))
    s.con.execute("INSERT INTO series SELECT row_number() OVER (ORDER BY node, metric), node, 'node', metric "
                  f"FROM (SELECT DISTINCT node, metric FROM ({samples_sql(args, end_ms)}))")
    s.con.execute(f"INSERT INTO samples_hot SELECT s.series_id, x.ms, x.value FROM ({samples_sql(args, end_ms)}) x "
                  "JOIN series s USING (node, metric) ORDER BY x.ms")
    s.run(functools.partial(store.lake.compact, lake=str(s.lake), cutoff_ms=end_ms - int(args.hot_hours * 3600e3)))
    s.con.execute("CHECKPOINT")
    tiers = readers.samples.tiers(s.con)
    print(f"causewatch: {tiers['hot_values']:,} values hot, {tiers['cold_values']:,} in the lake")
    s.close()
    return folder / "cw.duckdb"


def exposition(args, end_ms: int, path: Path, openmetrics: bool) -> int:
    """The samples as Prometheus text (ms times) or OpenMetrics (s times, families whole, # EOF)."""
    import duckdb
    con = duckdb.connect()
    t = "ms" if not openmetrics else "ms / 1000.0"
    sql = (f"SELECT metric, metric || '{{node=\"' || node || '\",scope=\"node\"}} ' || value || ' ' || ({t}) "
           f"FROM ({samples_sql(args, end_ms)}) ORDER BY metric, node, ms")
    n, family = 0, None
    with open(path, "w") as out:
        cur = con.execute(sql)
        while rows := cur.fetchmany(200_000):
            lines = []
            for metric, line in rows:
                if openmetrics and metric != family:
                    family = metric
                    lines.append(f"# TYPE {metric} gauge")
                lines.append(line)
            out.write("\n".join(lines) + "\n")
            n += len(rows)
        if openmetrics:
            out.write("# EOF\n")
    return n


def wait_http(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except Exception:
            time.sleep(0.3)
    raise RuntimeError(f"{url}: no answer within {timeout} s")


def ask(base: str, path: str, query: str, start: float, end: float, step: float) -> dict:
    q = urllib.parse.urlencode({"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
    try:
        with urllib.request.urlopen(f"{base}{path}?{q}", timeout=120) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{base}: {query}: HTTP {e.code} {e.read()[:300]!r}") from None


def questions(end: float, args) -> list[tuple[str, str, float, float, float]]:
    """(name, PromQL, start, end, step) for the same questions on every server."""
    cold = end - args.cold_hours * 3600
    out = []
    for tier, t in (("hot", end), ("cold", cold)):
        out += [(f"one metric, all nodes, an hour ({tier})", "avg_over_time(metric_3[1m])", t - 3600, t, 60),
                (f"the hour's mean per node ({tier})", "avg by (node) (avg_over_time(metric_3[1h]))", t, t, 3600),
                (f"max per node, 5-min steps ({tier})", "max by (node) (max_over_time(metric_1[5m]))",
                 t - 3600, t, 300)]
    node = f'{{node="node-{args.nodes // 2:05d}"}}'
    out.append(("one node's metrics, the day (both)", node, end - args.hours * 3600 + 300, end, 300))
    return out


def time_questions(base: str, path: str, qs, repeats: int) -> dict[str, tuple[float, float, int, float]]:
    """{name: (median ms, load average, points answered, ms of the first ask)}: the first ask of a
    question finds no answer of it kept (causewatch's lake partials, VictoriaMetrics' rollup cache)."""
    out = {}
    for name, query, start, end, step in qs:
        t0 = time.perf_counter()
        answer = ask(base, path, query, start, end, step)   # warm-up, and what it answers
        first = (time.perf_counter() - t0) * 1000
        if answer.get("status") != "success":
            raise RuntimeError(f"{base}: {query}: {answer}")
        points = sum(len(s["values"]) for s in answer["data"]["result"])
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            ask(base, path, query, start, end, step)
            times.append((time.perf_counter() - t0) * 1000)
        out[name] = (statistics.median(times), os.getloadavg()[0], points, first)
    return out


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_causewatch(folder: Path, args, end_ms: int, qs) -> tuple[dict, float]:
    db = build_causewatch(folder, args, end_ms)
    http, bind = free_port(), free_port()
    config = folder / "daemon.toml"   # nothing moves to the lake while the questions run
    config.write_text(f"[daemon]\nstore_hot_seconds = {args.hours * 7200}\ncompaction_interval = 86400\n"
                      f"store_memory_bytes = {args.memory_mb * 2**20}\n")
    proc = subprocess.Popen([sys.executable, "-m", "causewatch.cli", "daemon", "--db", str(db), "--config",
                             str(config), "--http", f"127.0.0.1:{http}", "--bind", f"tcp://127.0.0.1:{bind}", "-q"])
    try:
        wait_http(f"http://127.0.0.1:{http}/api/stats")
        timed = time_questions(f"http://127.0.0.1:{http}", "/api/v1/query_range", qs, args.repeats)
    finally:
        stop(proc)
    return timed, folder_bytes(folder) - config.stat().st_size


def run_vm(folder: Path, args, end_ms: int, qs) -> tuple[dict, float]:
    data = folder / "import.txt"
    exposition(args, end_ms, data, openmetrics=False)
    port = free_port()
    proc = subprocess.Popen(["victoria-metrics", f"-storageDataPath={folder / 'vm'}",
                             f"-httpListenAddr=127.0.0.1:{port}", "-retentionPeriod=100y", "-search.latencyOffset=0s",
                             "-loggerLevel=ERROR"])
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/health")
        with open(data, "rb") as f:
            urllib.request.urlopen(urllib.request.Request(f"{base}/api/v1/import/prometheus", data=f,
                                                          method="POST"), timeout=600).read()
        data.unlink()
        urllib.request.urlopen(f"{base}/internal/force_flush", timeout=60).read()
        time.sleep(2)
        timed = time_questions(base, "/api/v1/query_range", qs, args.repeats)
    finally:
        stop(proc)
    return timed, folder_bytes(folder / "vm")


def run_prometheus(folder: Path, args, end_ms: int, qs) -> tuple[dict, float]:
    data = folder / "import.om"
    exposition(args, end_ms, data, openmetrics=True)
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(data), str(folder / "tsdb")],
                   check=True, capture_output=True)
    data.unlink()
    port = free_port()
    (folder / "prometheus.yml").write_text("global: {}\n")
    proc = subprocess.Popen(["prometheus", f"--config.file={folder / 'prometheus.yml'}",
                             f"--storage.tsdb.path={folder / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
                             "--storage.tsdb.retention.time=100y", "--log.level=error"])
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/-/ready")
        timed = time_questions(base, "/api/v1/query_range", qs, args.repeats)
    finally:
        stop(proc)
    return timed, folder_bytes(folder / "tsdb")


PEERS = {"causewatch": (None, run_causewatch), "VictoriaMetrics": ("victoria-metrics", run_vm),
         "Prometheus": ("prometheus", run_prometheus)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=20)
    p.add_argument("--series", type=int, default=20, help="gauges per node")
    p.add_argument("--interval", type=float, default=10.0, help="seconds between a series' samples")
    p.add_argument("--hours", type=float, default=24.0)
    p.add_argument("--hot-hours", type=float, default=2.0, help="the newest hours kept in the DuckDB file")
    p.add_argument("--cold-hours", type=float, default=20.0, help="how far back the cold questions end")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--memory-mb", type=int, default=128, help="the daemon's store_memory_bytes, in MiB (its default)")
    p.add_argument("--only", action="append", choices=list(PEERS), help="just these servers (repeatable)")
    args = p.parse_args()
    end_ms = int(time.time() // 60 * 60_000) - 60_000
    qs = questions(end_ms / 1000, args)
    values = args.nodes * args.series * int(args.hours * 3600 / args.interval)
    print(f"{values:,} values: {args.nodes} nodes x {args.series} series every {args.interval:g} s for "
          f"{args.hours:g} h ({os.cpu_count()} CPUs)")
    results, sizes = {}, {}
    for name, (binary, run) in PEERS.items():
        if args.only and name not in args.only:
            continue
        if binary and shutil.which(binary) is None:
            print(f"{name}: skipped, no `{binary}` here (Debian package {binary})")
            continue
        with tempfile.TemporaryDirectory(prefix=f"peers-{name}-") as folder:
            t0 = time.monotonic()
            results[name], sizes[name] = run(Path(folder), args, end_ms, qs)
            print(f"{name}: loaded and asked in {time.monotonic() - t0:.0f} s")
    report(qs, results, sizes, values)


def report(qs, results: dict, sizes: dict, values: int) -> None:
    names = list(results)
    head = ["question", *(f"{n} ms (load)" for n in names)]
    if {"causewatch", "VictoriaMetrics"} <= set(results):
        head.append("causewatch / VM")
    if {"causewatch", "Prometheus"} <= set(results):
        head.append("causewatch / Prometheus")
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for name, *_ in qs:
        row = [name, *(f"{results[n][name][0]:.1f} ({results[n][name][1]:.1f}), {results[n][name][2]} pts, "
                       f"first {results[n][name][3]:.1f}" for n in names)]
        for peer in ("VictoriaMetrics", "Prometheus"):
            if "causewatch" in results and peer in results:
                row.append(f"{results['causewatch'][name][0] / results[peer][name][0]:.2f}x")
        print("| " + " | ".join(row) + " |")
    print("bytes per value of each store's whole folder: " +
          ", ".join(f"{n} {sizes[n] / values:.2f}" for n in sizes))


if __name__ == "__main__":
    main()
