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
Ingest mode (the servers' CPU per value, RSS and bytes after compaction, fed live): python bench/peers.py
ingest [--nodes 100] [--command-metrics 10] [--seconds 90] (its --help; the section "ingest" below).
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


def start_vm(folder: Path) -> tuple[subprocess.Popen, int, str]:
    """VictoriaMetrics on a free loopback port with its data under folder/vm: the process, port and URL."""
    port = free_port()
    proc = subprocess.Popen(["victoria-metrics", f"-storageDataPath={folder / 'vm'}",
                             f"-httpListenAddr=127.0.0.1:{port}", "-retentionPeriod=100y", "-search.latencyOffset=0s",
                             "-loggerLevel=ERROR"])
    return proc, port, f"http://127.0.0.1:{port}"


def run_vm(folder: Path, args, end_ms: int, qs) -> tuple[dict, float]:
    data = folder / "import.txt"
    exposition(args, end_ms, data, openmetrics=False)
    proc, _, base = start_vm(folder)
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
    if sys.argv[1:2] == ["ingest"]:   # the ingest mode (below): its own arguments
        return ingest_main(sys.argv[2:])
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



# ---- ingest: the same samples fed to each server, its CPU per value, RSS and bytes after compaction ----
# `python bench/peers.py ingest --help`. causewatch is fed by bench/ingest.py's sender processes (the
# agent's DEALER, handshake, credit, window and frame bytes; one connection per node), the peers as a
# forwarding agent feeds them: every --forward-every seconds one request per --forward-nodes nodes.
# VictoriaMetrics gets Prometheus text on /api/v1/import/prometheus; Prometheus gets remote write
# (/api/v1/write with --web.enable-remote-write-receiver): a protobuf WriteRequest encoded here by hand,
# framed as a snappy block of literals only (`snappy_literals`), since no library here does either.

NODE_SCOPE, COMMAND_SCOPE = "node", "cmd:work"
COMMAND_HZ = 10            # a command-watching agent samples its command's counters 10 times a second


def grid_values(node: int, columns, ks):
    """The value of series `columns` (node series 0.., command series 1000..) of `node` at steps `ks`, as a
    len(ks) x len(columns) array: two decimals, a slow wave and noise, the same for every server."""
    import numpy as np
    k = np.asarray(ks, np.int64)[:, None]
    j = np.asarray(columns, np.int64)[None, :]
    noise = (node * 7919 + j * 104729 + k * 31 + (k * k) % 977) % 1000 / 100.0
    return np.round(50 + 30 * np.sin(k / 500.0 + node * 7 + j) + noise, 2)


class Grid:
    """The samples every server gets: --nodes nodes named as bench/ingest.py's agents, each with --series
    node gauges at 1 Hz (the agent frames them 5 rows every 5 s) and, with --command-metrics C, C command
    counters at COMMAND_HZ (a frame of 10 rows a second), from t0 (unix seconds) for --seconds."""

    def __init__(self, nodes: int, series: int, command: int, seconds: int, t0: float):
        self.nodes, self.series, self.command, self.seconds, self.t0 = nodes, series, command, seconds, t0
        self.names = [f"metric_{j:03d}" for j in range(series)]
        self.command_names = [f"cmd_metric_{c:02d}" for c in range(command)]

    @staticmethod
    def node_name(k: int) -> str:
        return f"agent-{k:04d}"

    def values(self) -> int:
        return self.nodes * self.seconds * (self.series + COMMAND_HZ * self.command)

    def node_rows(self, node: int, lo: int, hi: int):
        """(times, values) of the node series over seconds [lo, hi)."""
        import numpy as np
        ks = np.arange(lo, hi)
        return self.t0 + ks.astype(float), grid_values(node, range(self.series), ks)

    def command_rows(self, node: int, lo: int, hi: int):
        """(times, values) of the command series over seconds [lo, hi), COMMAND_HZ rows a second."""
        import numpy as np
        ks = np.arange(lo * COMMAND_HZ, hi * COMMAND_HZ)
        return self.t0 + ks / COMMAND_HZ, grid_values(node, range(1000, 1000 + self.command), ks)


class GridFeed:
    """bench/ingest.py's feed of the grid: one tick a second with a command frame (every fifth also the
    node frame of the last 5 s), or one tick of the node frame every 5 s without one."""

    def __init__(self, grid: Grid):
        self.grid = grid
        self.interval = 1.0 if grid.command else 5.0
        self.ticks = grid.seconds if grid.command else grid.seconds // 5

    def frames(self, agents: int) -> int:
        return agents * (self.ticks + self.grid.seconds // 5 if self.grid.command else self.ticks)

    def values(self, agents: int) -> int:
        return agents * self.grid.seconds * (self.grid.series + COMMAND_HZ * self.grid.command)

    def payloads(self, number: int):
        import msgpack

        from causewatch import wire
        g = self.grid

        def pack(scope, names, rows) -> bytes:
            return msgpack.packb(wire.samples_body(rows[0], names, rows[1], scope=scope), use_bin_type=True)

        def payloads(i: int) -> list[bytes]:
            if not g.command:
                return [pack(NODE_SCOPE, g.names, g.node_rows(number, 5 * i, 5 * i + 5))]
            out = [pack(COMMAND_SCOPE, g.command_names, g.command_rows(number, i, i + 1))]
            if i % 5 == 4:
                out.append(pack(NODE_SCOPE, g.names, g.node_rows(number, i - 4, i + 1)))
            return out
        return payloads


def _series_of(grid: Grid, node: int, lo: int, hi: int):
    """[(metric, node, scope, times, values)] of one node's series over seconds [lo, hi)."""
    t, v = grid.node_rows(node, lo, hi)
    out = [(name, grid.node_name(node), NODE_SCOPE, t, v[:, j]) for j, name in enumerate(grid.names)]
    if grid.command:
        t, v = grid.command_rows(node, lo, hi)
        out += [(name, grid.node_name(node), COMMAND_SCOPE, t, v[:, c]) for c, name in enumerate(grid.command_names)]
    return out


def vm_text(series) -> bytes:
    """Prometheus text with ms times, what /api/v1/import/prometheus takes."""
    lines = []
    for metric, node, scope, t, v in series:
        head = f'{metric}{{node="{node}",scope="{scope}"}} '
        lines += [f"{head}{x} {ms}\n" for x, ms in zip(v.tolist(), (t * 1000).round().astype("int64").tolist())]
    return "".join(lines).encode()


def varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def write_request(series) -> bytes:
    """prometheus.WriteRequest{repeated TimeSeries timeseries = 1}: TimeSeries{repeated Label labels = 1,
    repeated Sample samples = 2}, Label{string name = 1, string value = 2} sorted by name, Sample{double
    value = 1 (wire type 1, 8 bytes little-endian), int64 timestamp = 2 (ms, a varint)}."""
    import struct
    out = []
    for metric, node, scope, t, v in series:
        labels = b"".join(_field(1, _field(1, k.encode()) + _field(2, val.encode()))
                          for k, val in (("__name__", metric), ("node", node), ("scope", scope)))
        samples = b"".join(_field(2, b"\x09" + struct.pack("<d", x) + b"\x10" + varint(ms))
                           for x, ms in zip(v.tolist(), (t * 1000).round().astype("int64").tolist()))
        out.append(_field(1, labels + samples))
    return b"".join(out)


def snappy_literals(data: bytes, chunk: int = 65536) -> bytes:
    """A valid snappy block (the format, not the framing one) holding `data` uncompressed: the preamble
    (the length as a varint), then literal elements of at most `chunk` bytes, each a tag byte (low 2 bits
    00; upper 6 bits length-1 when below 60, else 60-63 saying that 1-4 little-endian bytes of length-1
    follow) and the bytes themselves. Any snappy decoder reads it; it costs no compression."""
    out = [varint(len(data))]
    for i in range(0, len(data), chunk):
        n = len(data[i:i + chunk]) - 1
        if n < 60:
            out.append(bytes([n << 2]))
        else:
            width = (n.bit_length() + 7) // 8
            out.append(bytes([(59 + width) << 2]) + n.to_bytes(width, "little"))
        out.append(data[i:i + chunk])
    return b"".join(out)


def forwarder_process(grid: Grid, args, host: str, port: int, path: str, headers: dict, encode,
                      groups: list[range], start: float, done) -> None:
    """One forwarding agent's share: every --forward-every s, for each group of nodes, one POST of what its
    nodes sampled in those seconds; late ticks are sent at once. Puts (requests, errors, bytes sent)."""
    import http.client
    con = http.client.HTTPConnection(host, port, timeout=60)
    sent = errors = size = 0
    every = args.forward_every
    for tick in range(0, grid.seconds, every):
        for g, nodes in enumerate(groups):
            wait = start + tick + every + every * g / max(len(groups), 1) - time.time()
            if wait > 0 and not args.backfill_hours:
                time.sleep(wait)
            body = encode([s for n in nodes for s in _series_of(grid, n, tick, tick + every)])
            con.request("POST", path, body=body, headers=headers)
            r = con.getresponse()
            r.read()
            sent, size = sent + 1, size + len(body)
            if r.status >= 300:
                errors += 1
                if errors == 1:
                    print(f"{path}: HTTP {r.status}", file=sys.stderr)
    con.close()
    done.put((sent, errors, size))


def forward(grid: Grid, args, port: int, path: str, headers: dict, encode) -> dict:
    """The forwarding agents (--procs processes) feeding one server; returns what they sent."""
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    done = ctx.Queue()
    groups = [range(i, min(i + args.forward_nodes, grid.nodes)) for i in range(0, grid.nodes, args.forward_nodes)]
    shares = [groups[p::args.procs] for p in range(args.procs) if groups[p::args.procs]]
    start = time.time()
    procs = [ctx.Process(target=forwarder_process, args=(grid, args, "127.0.0.1", port, path, headers, encode, s,
                                                         start, done)) for s in shares]
    for p in procs:
        p.start()
    results = [done.get() for _ in procs]
    for p in procs:
        p.join()
    return {"requests": sum(r[0] for r in results), "errors": sum(r[1] for r in results),
            "bytes": sum(r[2] for r in results)}


class Sampled:
    """A server's process tree while it ingests: CPU-seconds from /proc (utime + stime, every thread, its
    children too), peak RSS (MB, sampled each second on a thread), the load average at both ends."""

    def __init__(self, pid: int):
        import threading
        self.pid, self.peak_mb, self._stop = pid, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _rss_mb(self) -> float:
        import psutil
        try:
            root = psutil.Process(self.pid)
            return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 2**20
        except psutil.Error:
            return 0.0

    def _watch(self) -> None:
        while not self._stop.wait(1.0):
            self.peak_mb = max(self.peak_mb, self._rss_mb())

    def __enter__(self) -> Sampled:
        from cputime import tree_cpu_seconds
        self.load, self.cpu0, self.t0 = [os.getloadavg()[0]], tree_cpu_seconds(self.pid), time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        from cputime import tree_cpu_seconds
        self.cpu, self.wall = tree_cpu_seconds(self.pid) - self.cpu0, time.monotonic() - self.t0
        self._stop.set()
        self._thread.join()
        self.load.append(os.getloadavg()[0])


def _instant(base: str, query: str) -> float:
    q = urllib.parse.urlencode({"query": query, "time": f"{time.time():.3f}"})
    try:
        with urllib.request.urlopen(f"{base}/api/v1/query?{q}", timeout=120) as r:
            result = json.load(r)["data"]["result"]
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{base}: {query}: HTTP {e.code} {e.read()[:300]!r}") from None
    return float(result[0]["value"][1]) if result else 0.0


def _stored_in(base: str, grid: Grid) -> int:
    """Samples the server holds of the grid, counted by its own PromQL (a metric at a time: count_over_time
    drops the name, and Prometheus refuses two series of one label set)."""
    window = f"{int(time.time() - grid.t0) + 60}s"
    return int(sum(_instant(base, f"sum(count_over_time({name}[{window}]))")
                   for name in grid.names + grid.command_names))


def ingest_causewatch(grid: Grid, args, folder: Path) -> dict:
    """The daemon as bench/ingest.py runs it (a child process), fed by its sender processes; afterwards
    the store compacted as the daemon's own job would once the rows are old (everything to the lake,
    then the file checkpointed), and the folder's bytes (DuckDB file, WAL, lake) counted."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import ingest as ingest_bench
    feed = GridFeed(grid)
    ns = argparse.Namespace(agents=grid.nodes, procs=args.procs, seconds=grid.seconds, interval=feed.interval,
                            frames=feed.ticks, window=8, resend_after=120.0, batch_frames=0, queue_mb=0, store_mb=0,
                            in_flight_mb=0, hot_seconds=None, compaction_interval=None,
                            commit_delay=args.commit_delay, timestamps=5, metrics=grid.series)
    checkout = Path(args.checkout).resolve() if args.checkout else None
    if args.backfill_hours:   # as fast as the window lets; then the daemon's own compaction, waited for
        ns.interval, ns.compaction_interval = 0.0, args.compaction_interval
    e2e = ingest_bench.end_to_end(ns, folder, checkout, feed=feed,
                                  settle=_compacted if args.backfill_hours else None)
    db = folder / "e2e.duckdb"
    ran = sum(folder_bytes(p) if p.is_dir() else p.stat().st_size for p in folder.glob("e2e.*"))
    if not args.backfill_hours:   # the rows are new: all to the lake as the job will once they are old
        s = store.Store(str(db))
        s.run(functools.partial(store.lake.compact, lake=str(s.lake), cutoff_ms=int(time.time() * 1000) + 3_600_000))
        s.run(store.space.pack)
        s.run(store.space.checkpoint)
        s.close()
    parts = {p.name.removeprefix("e2e."): folder_bytes(p) if p.is_dir() else p.stat().st_size
             for p in folder.glob("e2e.*")}
    compacted = sum(parts.values())
    rss = max(x[1] + x[3] for x in e2e["samples"])
    return {"values": e2e["values"], "cpu": e2e["cpu"]["tree"], "daemon_cpu": e2e["cpu"]["daemon"],
            "wall": e2e["elapsed"], "rss_mb": rss, "daemon_rss_mb": e2e["watch"]["peak"]["rss_mb"],
            "load": e2e["load"], "bytes_ran": ran, "bytes": compacted,
            "sent": f"{e2e['frames']:,} frames; the daemon alone {e2e['cpu']['daemon']:.2f} CPU-s; compacted "
                    + ", ".join(
                f"{k} {v / e2e['values']:.2f}" for k, v in sorted(parts.items())) + " B/value"}


def _compacted(daemon, most: float = 900.0) -> None:
    """Wait until the daemon's compaction job says no value is hot (its /metrics), then one run more."""
    deadline = time.monotonic() + most
    while time.monotonic() < deadline:
        text = urllib.request.urlopen(f"http://{daemon.http}/metrics", timeout=30).read().decode()
        hot = [line for line in text.splitlines() if line.startswith('causewatch_store_values{tier="hot"}')]
        if hot and float(hot[0].split()[-1]) == 0:
            time.sleep(5)
            return
        time.sleep(2)
    raise SystemExit(f"the daemon's compaction left values hot after {most:.0f} s")


def ingest_vm(grid: Grid, args, folder: Path) -> dict:
    proc, port, base = start_vm(folder)
    try:
        wait_http(f"{base}/health")
        with Sampled(proc.pid) as sampled:
            sent = forward(grid, args, port, "/api/v1/import/prometheus", {"Content-Type": "text/plain"}, vm_text)
        urllib.request.urlopen(f"{base}/internal/force_flush", timeout=60).read()
        ran = folder_bytes(folder / "vm")
        month = time.strftime("%Y_%m", time.gmtime(grid.t0))
        urllib.request.urlopen(f"{base}/internal/force_merge?partition_prefix={month}", timeout=600).read()
        compacted = _settled_bytes(folder / "vm")
        stored = _stored_in(base, grid)
    finally:
        stop(proc)
    return _peer_result(grid, sampled, sent, stored, ran, compacted)


def grid_openmetrics(grid: Grid, path: Path) -> int:
    """The grid as OpenMetrics (families whole, s times, # EOF), what promtool's backfill reads."""
    n = 0
    with open(path, "w") as out:
        for name in grid.names + grid.command_names:
            out.write(f"# TYPE {name} gauge\n")
            for node in range(grid.nodes):
                for metric, node_name, scope, t, v in _series_of(grid, node, 0, grid.seconds):
                    if metric == name:
                        head = f'{metric}{{node="{node_name}",scope="{scope}"}} '
                        out.write("".join(f"{head}{x} {ts:.3f}\n" for x, ts in zip(v.tolist(), t.tolist())))
                        n += len(v)
        out.write("# EOF\n")
    return n


def backfill_prometheus(grid: Grid, args, folder: Path) -> dict:
    """Remote write refuses samples this old (out of bounds): promtool's backfill makes the blocks, and
    its CPU is promtool's (no server runs, no RSS)."""
    import resource
    data = folder / "import.om"
    grid_openmetrics(grid, data)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = [os.getloadavg()[0]]
    t0 = time.monotonic()
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(data), str(folder / "tsdb")],
                   check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    data.unlink()
    size = folder_bytes(folder / "tsdb")
    return {"values": grid.values(), "cpu": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
            "wall": time.monotonic() - t0, "rss_mb": 0.0, "load": load + [os.getloadavg()[0]], "bytes_ran": size,
            "bytes": size, "sent": "promtool tsdb create-blocks-from openmetrics"}


def ingest_prometheus(grid: Grid, args, folder: Path) -> dict:
    if args.backfill_hours:
        return backfill_prometheus(grid, args, folder)
    port = free_port()
    (folder / "prometheus.yml").write_text("global: {}\n")
    proc = subprocess.Popen(["prometheus", f"--config.file={folder / 'prometheus.yml'}",
                             f"--storage.tsdb.path={folder / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
                             "--web.enable-remote-write-receiver", "--web.enable-admin-api",
                             "--storage.tsdb.retention.time=100y", "--log.level=error"])
    base = f"http://127.0.0.1:{port}"
    headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy",
               "X-Prometheus-Remote-Write-Version": "0.1.0"}
    try:
        wait_http(f"{base}/-/ready")
        with Sampled(proc.pid) as sampled:
            sent = forward(grid, args, port, "/api/v1/write", headers, lambda s: snappy_literals(write_request(s)))
        ran = folder_bytes(folder / "tsdb")
        # the head as a persisted block: what Prometheus' compaction makes of it, without waiting 2 h
        with urllib.request.urlopen(urllib.request.Request(f"{base}/api/v1/admin/tsdb/snapshot", method="POST"),
                                    timeout=600) as r:
            snapshot = folder / "tsdb" / "snapshots" / json.load(r)["data"]["name"]
        compacted = folder_bytes(snapshot)
        stored = _stored_in(base, grid)
    finally:
        stop(proc)
    return _peer_result(grid, sampled, sent, stored, ran, compacted)


def _settled_bytes(folder: Path, quiet: float = 3.0, most: float = 120.0) -> int:
    """The folder's bytes once they stopped changing for `quiet` seconds (a peer's merges run in the back)."""
    deadline, last, since = time.monotonic() + most, -1, time.monotonic()
    while time.monotonic() < deadline:
        now = folder_bytes(folder)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
        time.sleep(0.5)
    return last


def _peer_result(grid: Grid, sampled: Sampled, sent: dict, stored: int, ran: int, compacted: int) -> dict:
    if sent["errors"] or stored != grid.values():
        raise SystemExit(f"a peer lost data: {sent['errors']} requests refused, {stored:,} of {grid.values():,} "
                         "values stored")
    return {"values": stored, "cpu": sampled.cpu, "wall": sampled.wall, "rss_mb": sampled.peak_mb,
            "load": sampled.load, "bytes_ran": ran, "bytes": compacted,
            "sent": f"{sent['requests']:,} requests, {sent['bytes'] / sent['requests'] / 1024:.0f} KiB each"}


INGESTERS = {"causewatch": (None, ingest_causewatch), "VictoriaMetrics": ("victoria-metrics", ingest_vm),
             "Prometheus": ("prometheus", ingest_prometheus)}


def ingest_main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="bench/peers.py ingest", description="The peers' ingest cost: the same "
                                "samples into causewatch (the agent's frames), VictoriaMetrics and Prometheus "
                                "(batched as a forwarding agent sends them), each server alone.")
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--series", type=int, default=50, help="node gauges, 1 Hz, framed 5 rows every 5 s")
    p.add_argument("--command-metrics", type=int, default=0, help="a watched command's counters at 10 Hz, a "
                   "frame of 10 rows a second beside the node frame (0: none)")
    p.add_argument("--seconds", type=int, default=90, help="the window each server ingests (a multiple of 5)")
    p.add_argument("--forward-nodes", type=int, default=50, help="nodes per request to a peer")
    p.add_argument("--forward-every", type=int, default=1, help="seconds between a peer's requests per group")
    p.add_argument("--procs", type=int, default=2, help="sender (and forwarder) processes")
    p.add_argument("--commit-delay", type=float, default=None, help="the daemon's commit_delay (default its own)")
    p.add_argument("--checkout", metavar="DIR", help="run this checkout's daemon (DIR/.venv) instead of this one's")
    p.add_argument("--rounds", type=int, default=1, help="each server this many times, in turn")
    p.add_argument("--only", action="append", choices=list(INGESTERS), help="just these servers (repeatable)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--backfill-hours", type=float, default=0, help="instead: this many hours of rows two days "
                   "old, sent as fast as each server takes them; causewatch's compaction job (every "
                   "--compaction-interval s) moves them, and its folder is measured as the daemon left it")
    p.add_argument("--compaction-interval", type=float, default=20.0, help="the daemon's, with --backfill-hours")
    args = p.parse_args(argv)
    if args.backfill_hours:
        args.seconds = int(args.backfill_hours * 3600)
    if args.seconds % 5 or args.seconds % args.forward_every:
        p.error("--seconds must be a multiple of 5 and of --forward-every")
    rows = []
    for r in range(args.rounds):
        for name, (binary, run) in INGESTERS.items():
            if args.only and name not in args.only:
                continue
            if binary and shutil.which(binary) is None:
                print(f"{name}: skipped, no `{binary}` here (Debian package {binary})")
                continue
            t0 = float(int(time.time() - 2 * 86400)) if args.backfill_hours else float(int(time.time()))
            grid = Grid(args.nodes, args.series, args.command_metrics, args.seconds, t0)
            with tempfile.TemporaryDirectory(prefix=f"peers-ingest-{name}-") as folder:
                row = {"server": name, "round": r + 1, **run(grid, args, Path(folder))}
            rows.append(row)
            if not args.json:
                print(ingest_line(row), flush=True)
    if args.json:
        print(json.dumps(rows))
    else:
        ingest_table(rows)


def ingest_line(row: dict) -> str:
    return (f"{row['server']} round {row['round']}: {row['values']:,} values in {row['wall']:.0f} s ({row['sent']}); "
            f"{row['cpu']:.2f} CPU-s, {row['cpu'] / row['values'] * 1e6:.2f} per million values, load "
            f"{row['load'][0]:.1f}-{row['load'][1]:.1f}; peak RSS {row['rss_mb']:.0f} MB; bytes per value "
            f"{row['bytes_ran'] / row['values']:.2f} as it ran, {row['bytes'] / row['values']:.2f} compacted")


def ingest_table(rows: list[dict]) -> None:
    print("| server | round | CPU-s per million values (load) | peak RSS MB | B/value as run | B/value compacted |")
    print("|---|---|---|---|---|---|")
    for x in rows:
        print(f"| {x['server']} | {x['round']} | {x['cpu'] / x['values'] * 1e6:.2f} ({x['load'][0]:.1f}-"
              f"{x['load'][1]:.1f}) | {x['rss_mb']:.0f} | {x['bytes_ran'] / x['values']:.2f} | "
              f"{x['bytes'] / x['values']:.2f} |")


if __name__ == "__main__":
    main()
