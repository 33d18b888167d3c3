"""The null distribution of the "kde" conditional-MI estimator on independent data: simulated at
quarter octaves of n, shipped precomputed for the common shapes (kde_null.toml), cached in-process.

The estimator's mean and sd under independence depend only on n and the shape of the test (per
block x, y, z: how many columns, and each discrete column's cardinality), because continuous columns
enter as normal scores. So the null is simulated once on independent normal scores and uniform codes
and reused for every data set. `python -m causewatch.analytics.causal.kde_null` regenerates the shipped table
(all-continuous shapes, |z| 0-4, n 64..16384, 200 draws each), deterministically; shapes or sizes
outside it, and other seeds or points, are simulated at first use (n_null draws, 30 by default)
and kept for the process.
"""

from __future__ import annotations

import argparse
import math
import tomllib
from functools import lru_cache
from pathlib import Path

import numpy as np

from causewatch.analytics.causal import entropy

TABLE = Path(__file__).with_name("kde_null.toml")
# Draws per runtime simulation (KDEMITest's default n_null), and the table's parameters: its
# seed and points are KDEMITest's defaults; its draws are more, because a Gamma fitted to 30 draws
# misplaces the far tail the thresholds sit in (docs/perf-log.md, "The KDE null table's draws").
N_NULL, SEED, POINTS = 30, 0, 2000
TABLE_DRAWS = 200
TABLE_SIZES = (64, 16384)
TABLE_MAX_Z = 4

_CACHE: dict = {}


def grid(n: int) -> tuple[int, int, float]:
    """The two quarter-octave grid sizes around n and the log-interpolation weight of the upper one."""
    e = math.log2(n) * 4
    lo, hi = round(2 ** (math.floor(e) / 4)), round(2 ** (math.ceil(e) / 4))
    if hi == lo:
        return lo, hi, 0.0
    return lo, hi, (math.log(n) - math.log(lo)) / (math.log(hi) - math.log(lo))


def evaluation_rows(n: int, points: int, seed: int) -> np.ndarray | None:
    """The rows a statistic is evaluated at: all of them up to `points`, else a seeded subset (the
    sums still run over all n rows, so the estimate stays unbiased, only noisier)."""
    if n <= points:
        return None
    return np.sort(np.random.default_rng([seed, n]).permutation(n)[:points])


def simulate(n: int, shape: tuple, n_null: int, seed: int, points: int) -> tuple[float, float]:
    """Mean and sd of the estimator over `n_null` independent data sets of this size and shape."""
    rng = np.random.default_rng([seed, n] + [hash(shape) & 0xFFFFFFFF])
    scores = entropy.special.ndtri((np.arange(n) + 0.5) / n)
    kinds = list(shape[0]) + list(shape[1]) + list(shape[2])
    disc = np.array([k > 0 for k in kinds])
    blocks = np.cumsum([0, len(shape[0]), len(shape[1]), len(shape[2])])
    x, y, z = (list(range(blocks[i], blocks[i + 1])) for i in range(3))
    vals = []
    for _ in range(n_null):
        mat = np.column_stack([rng.integers(0, k, n).astype(float) if k else rng.permutation(scores)
                               for k in kinds])
        vals.append(entropy.cmi_bits(mat, disc, x, y, z, "kde", rows=evaluation_rows(n, points, seed)))
    return float(np.mean(vals)), float(np.std(vals, ddof=1))


def shape_key(shape: tuple) -> str:
    """"0|0|0,0" for ((0,), (0,), (0, 0)): the table's text key of a shape."""
    return "|".join(",".join(str(k) for k in block) for block in shape)


def _parse_key(key: str) -> tuple:
    return tuple(tuple(int(k) for k in part.split(",") if k) for part in key.split("|"))


@lru_cache(maxsize=1)
def table() -> dict:
    """The shipped table {(n, shape): (mean, sd)}; empty when missing or made for another estimator
    (a different bandwidth scale), so the runtime simulation takes over."""
    if not TABLE.exists():
        return {}
    doc = tomllib.loads(TABLE.read_text())
    if doc.get("bandwidth_scale") != entropy.KDE_BANDWIDTH_SCALE or \
            (doc.get("n_null"), doc.get("seed"), doc.get("points")) != (TABLE_DRAWS, SEED, POINTS):
        return {}
    out = {}
    for key, entry in doc["null"].items():
        shape = _parse_key(key)
        for n, m, s in zip(entry["n"], entry["mean"], entry["sd"]):
            out[(n, shape)] = (m, s)
    return out


def null_at(n: int, shape: tuple, n_null: int = N_NULL, seed: int = SEED,
            points: int = POINTS) -> tuple[float, float]:
    """The null's mean and sd at one grid size: from the shipped table (made with at least n_null
    draws), else simulated and cached."""
    if n_null <= TABLE_DRAWS and (seed, points) == (SEED, POINTS) and (n, shape) in table():
        return table()[(n, shape)]
    key = (n, shape, n_null, seed, points)
    if key not in _CACHE:
        _CACHE[key] = simulate(n, shape, n_null, seed, points)
    return _CACHE[key]


def null_moments(n: int, shape: tuple, n_null: int = N_NULL, seed: int = SEED,
                 points: int = POINTS) -> tuple[float, float]:
    """Mean and standard deviation of the "kde" estimator on independent data of this size and
    shape, interpolated in log n between quarter-octave grid sizes (so a 10 % update reuses them)."""
    lo, hi, w = grid(n)
    m_lo, s_lo = null_at(lo, shape, n_null, seed, points)
    if w == 0.0:
        return m_lo, s_lo
    m_hi, s_hi = null_at(hi, shape, n_null, seed, points)
    return (1 - w) * m_lo + w * m_hi, (1 - w) * s_lo + w * s_hi


def table_shapes(max_z: int = TABLE_MAX_Z) -> list[tuple]:
    """The shapes the shipped table covers: one continuous x and y, 0..max_z continuous z."""
    return [((0,), (0,), (0,) * k) for k in range(max_z + 1)]


def table_sizes(lo: int = TABLE_SIZES[0], hi: int = TABLE_SIZES[1]) -> list[int]:
    """The quarter-octave grid sizes from lo to hi (both on the grid)."""
    return [round(2 ** (e / 4)) for e in range(round(4 * math.log2(lo)), round(4 * math.log2(hi)) + 1)]


def render(shapes: list[tuple], sizes: list[int], progress=None) -> str:
    """The table file's text for these shapes and sizes (TABLE_DRAWS draws each)."""
    lines = ["# Null distribution (mean, sd in bits) of the kde CMI estimator on independent data,",
             "# per shape and quarter-octave n. Generated by `python -m causewatch.analytics.causal.kde_null`;",
             "# do not edit by hand.",
             f"bandwidth_scale = {entropy.KDE_BANDWIDTH_SCALE!r}",
             f"n_null = {TABLE_DRAWS}", f"seed = {SEED}", f"points = {POINTS}", ""]
    for shape in shapes:
        moments = []
        for n in sizes:
            moments.append(simulate(n, shape, TABLE_DRAWS, SEED, POINTS))
            if progress:
                progress(shape, n)
        lines += [f'[null."{shape_key(shape)}"]', f"n = {sizes}",
                  "mean = [" + ", ".join(f"{m:.9g}" for m, _ in moments) + "]",
                  "sd = [" + ", ".join(f"{s:.9g}" for _, s in moments) + "]", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Regenerate the shipped null table of the kde CI test.")
    ap.add_argument("--out", type=Path, default=TABLE)
    ap.add_argument("--max-z", type=int, default=TABLE_MAX_Z)
    ap.add_argument("--sizes", type=int, nargs=2, default=TABLE_SIZES, metavar=("LO", "HI"))
    args = ap.parse_args(argv)
    text = render(table_shapes(args.max_z), table_sizes(*args.sizes),
                  progress=lambda shape, n: print(f"  {shape_key(shape)} n={n}", flush=True))
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
