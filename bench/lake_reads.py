"""Benchmark: reads over hot ∪ cold through the store's `samples` view, against the same SQL written by
hand over the very same Parquet files (goal: each <= 1.25x), in CPU-seconds of this process.

One simulated day: --nodes nodes x --metrics gauges every --step s (jittered to the ms, 2 decimals),
inserted into samples_hot, then the real compaction moves all but the last hour to the lake. Queries:
(a) one metric across all nodes for an hour, (b) one node's metrics for the day, (c) every series'
hourly mean over the day. Medians of --repeats runs, view and hand alternating after a warm-up.
Usage: python bench/lake_reads.py [--nodes 1000] [--metrics 10] [--step 10] [--repeats 5]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from pathlib import Path

from causewatch.daemon import store

DAY_MS = 86_400_000


def build(folder: Path, nodes: int, metrics: int, step: float) -> tuple[store.Store, int]:
    """The store and the day's first ms: the day's rows hot, then all but the last hour moved."""
    s = store.Store(str(folder / "day.duckdb"))
    t0 = (int(time.time() * 1000) // DAY_MS - 30) * DAY_MS
    s.con.execute("""INSERT INTO series SELECT row_number() OVER (), 'node-' || lpad(n::VARCHAR, 5, '0'),
        'node', 'metric_' || m FROM range(?) a(n), range(?) b(m)""", [nodes, metrics])
    per_series = int(86400 / step)
    s.con.execute(f"""INSERT INTO samples_hot SELECT series_id,
        {t0} + k * {int(step * 1000)} + (hash(series_id, k) % 1000),
        round(50 + 30 * sin(k / 500.0 + series_id) + (hash(k, series_id) % 1000) / 100.0, 2)
        FROM series, range({per_series}) t(k) ORDER BY k""")
    s.run(functools.partial(store.lake.compact, lake=str(s.lake), cutoff_ms=t0 + DAY_MS - 3_600_000))
    s.con.execute("CHECKPOINT")
    return s, t0


def queries(t0: int, files: str) -> dict[str, tuple[str, str]]:
    """Name: (through the view, by hand over the lake's files) for the same answer."""
    hour, day = (t0 + 5 * 3_600_000) / 1000, t0 / 1000
    raw = f"read_parquet({files})"
    return {
        "one metric, all nodes, an hour": (
            f"SELECT node, ts, value FROM samples WHERE metric = 'metric_3' AND ts >= {hour} AND ts < {hour + 3600}",
            f"SELECT node, ts / 1000.0, value FROM {raw} WHERE metric = 'metric_3' "
            f"AND ts >= {int(hour * 1000)} AND ts < {int((hour + 3600) * 1000)}"),
        "one node, all metrics, the day": (
            f"SELECT metric, ts, value FROM samples WHERE node = 'node-00017' AND ts >= {day} "
            f"AND ts < {day + 82800}",
            f"SELECT metric, ts / 1000.0, value FROM {raw} WHERE node = 'node-00017'"),
        "hourly means of every series, the day": (
            f"SELECT node, metric, floor(ts / 3600) h, avg(value) FROM samples WHERE ts < {day + 82800} "
            "GROUP BY ALL",
            f"SELECT node, metric, floor(ts / 3600000) h, avg(value) FROM {raw} GROUP BY ALL"),
    }


def cpu_seconds(con, sql: str) -> float:
    """This process' CPU-seconds for the query (all of DuckDB's threads): on shared cores the wall
    time would measure how the cores are shared, not the query."""
    t = time.process_time()
    con.execute(sql).fetchall()
    return time.process_time() - t


def compare(con, view: str, hand: str, repeats: int) -> tuple[float, float, int]:
    """Median CPU-seconds of each, runs alternating after a warm-up of both; the rows answered (equal)."""
    n, m = len(con.execute(view).fetchall()), len(con.execute(hand).fetchall())
    assert n == m, f"the view answered {n} rows, by hand {m}"
    runs = [(cpu_seconds(con, view), cpu_seconds(con, hand)) for _ in range(repeats)]
    return statistics.median(v for v, _ in runs), statistics.median(h for _, h in runs), n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--metrics", type=int, default=10)
    ap.add_argument("--step", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        s, t0 = build(Path(tmp), args.nodes, args.metrics, args.step)
        with s.cursor() as cur:
            tiers = cur.execute("SELECT (SELECT count(*) FROM samples_hot), sum(rows), count(*), sum(bytes) "
                                "FROM lake_files").fetchone()
            files = "[" + ", ".join(f"'{s.lake / p}'" for (p,) in cur.execute("SELECT path FROM lake_files")
                                    .fetchall()) + "]"
            print(f"built in {time.perf_counter() - t:.0f} s: {tiers[0]:,} values hot, {tiers[1]:,} cold in "
                  f"{tiers[2]} files ({tiers[3] / tiers[1]:.2f} B/value)")
            print(f"{'query (CPU-seconds, medians)':40} {'view':>8} {'by hand':>8} {'ratio':>6} {'rows':>10}")
            for name, (view, hand) in queries(t0, files).items():
                tv, th, n = compare(cur, view, hand, args.repeats)
                print(f"{name:40} {tv:8.3f} {th:8.3f} {tv / th:6.2f} {n:10,}")
        s.close()


if __name__ == "__main__":
    main()
