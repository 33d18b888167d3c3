"""Benchmark: membership + hedge + OWA over 10^6 x 5 values against scikit-fuzzy, and a PERFQL query
over 10^6 regions in DuckDB. Run: .venv/bin/python bench/fuzzy.py [--rows N]"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np

from causewatch.analytics.fuzzy import Membership, hedges, owa, perfql
from causewatch.daemon.readers.regions import perfql_matches, region_summaries
from causewatch.daemon.store import create_views, migrate


def best(fn, repeat: int = 3) -> float:
    """Best wall time of `repeat` runs (the machine is shared; the best run is the least disturbed)."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def pipeline(X: np.ndarray, fns: list) -> np.ndarray:
    """Membership of each metric column, the hedge 'very', then OWA (Eq. 2) over the 5 scores."""
    scores = np.column_stack([hedges.POINTWISE["very"][0](fn(X[:, j])) for j, fn in enumerate(fns)])
    return owa(scores, [0.3, 0.25, 0.2, 0.15, 0.1])


def bench_membership(n: int) -> None:
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 1, (n, 5))
    sets = [Membership("s", (0.2, 0.8)), Membership("z", (0.1, 0.6)), Membership("pi", (0.2, 0.4, 0.6, 0.9)),
            Membership("triangle", (0.1, 0.5, 0.9)), Membership("trapezoid", (0.1, 0.3, 0.6, 0.9))]
    ours = {mode: [lambda x, m=m, mode=mode: m(x, mode) for m in sets] for mode in ("exact", "compatible")}
    for mode, fns in ours.items():
        t = best(lambda: pipeline(X, fns))
        print(f"membership+very+OWA, {mode:10s}: {t:.3f} s for {n} x 5  ({n * 5 / t / 1e6:.1f} M values/s)")
    try:
        import skfuzzy
    except ImportError:
        print("scikit-fuzzy not installed (bench extra): no comparison")
        return
    sk = [lambda x: skfuzzy.smf(x, 0.2, 0.8), lambda x: skfuzzy.zmf(x, 0.1, 0.6),
          lambda x: skfuzzy.pimf(x, 0.2, 0.4, 0.6, 0.9), lambda x: skfuzzy.trimf(x, [0.1, 0.5, 0.9]),
          lambda x: skfuzzy.trapmf(x, [0.1, 0.3, 0.6, 0.9])]
    for j, m in enumerate(sets):
        x = X[:, j].copy()
        t_sk = best(lambda: sk[j](x))
        t_ex, t_co = best(lambda: m(x, "exact")), best(lambda: m(x, "compatible"))
        print(f"  {m.shape:9s} skfuzzy {t_sk * 1e3:7.1f} ms | exact {t_ex * 1e3:7.1f} ms ({t_sk / t_ex:4.1f}x) | "
              f"compatible {t_co * 1e3:7.1f} ms ({t_sk / t_co:4.1f}x)")
    t_sk = best(lambda: pipeline(X, sk))
    for mode, fns in ours.items():
        print(f"same pipeline with skfuzzy membership: {t_sk:.3f} s; ours ({mode}) is "
              f"{t_sk / best(lambda: pipeline(X, fns)):.2f}x as fast")


def bench_perfql(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "bench.duckdb")
        con = duckdb.connect(path)
        migrate(con)
        create_views(con)
        t = time.perf_counter()
        con.execute(f"""
            INSERT INTO regions SELECT 'node' || (i % 100), 'b', i, 'app', 'region' || (i // 100), 1000.0 + i % 50,
                   1.0 + (i * 7919 % 1000) / 100.0, 1, 1.0, json_object('cache_misses', (i * 31) % 1000,
                   'cache_references', 1000, 'cycles', 1000 + (i * 17) % 3000, 'instructions', 1000), NULL, NULL
            FROM range({n}) t(i)""")
        print(f"built {n} regions in {time.perf_counter() - t:.1f} s")
        text = "(time_share is high) OR (cache_miss_ratio is very high) AND (cpi is not low)"
        result = []
        cpu = time.process_time()
        t = best(lambda: result.append(perfql_matches(con, perfql.Query(text), top=10)), repeat=2)
        cpu = (time.process_time() - cpu) / 2
        print(f"PERFQL over {n} regions (summaries in DuckDB + evaluation): {t:.3f} s wall, {cpu:.3f} s CPU "
              f"(all threads), {len(result[-1])} shown; query {text!r}")
        df = region_summaries(con, metrics=perfql.Query(text).required_metrics())
        t_eval = best(lambda: perfql.Query(text).evaluate(df, top=10))
        print(f"  of which evaluation on the DataFrame: {t_eval:.3f} s ({n / t_eval / 1e6:.1f} M regions/s)")
        con.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    bench_membership(args.rows)
    bench_perfql(args.rows)


if __name__ == "__main__":
    main()
