"""Counting G² for discrete columns: contingency tables in one numba pass, z cells cached per set.

Counter.p_value -> (p, G², df, permuted) with df = Σ over observed z cells of (|X_s| - 1)(|Y_s| - 1);
p is G²'s chi-square p, or on sparse tables an exact permutation p.
"""

from __future__ import annotations

import functools
import math

import numba
import numpy as np
from scipy import special

# Cochran's rule: the chi-square fits when at most a fifth of the cells expect fewer than 5 rows
SPARSE_COUNT, SPARSE_SHARE = 5, 0.2
PERMUTATIONS, PERMUTATION_HITS = 99, 10  # p resolved to 0.01; a clear null stops after ~20 draws
# G² runs above its chi-square on sparse tables, so a chi-square p above this is one the exact p
# only exceeds: no level up to it changes its decision, and the draws are saved (a third of child's)
CLEARLY_INDEPENDENT = 0.5


@numba.njit(cache=True)
def _g2_table(cx, cy, cz, kx, ky, kz):
    """G², df, the number of (z, x, y) cells whose margins were observed, how many of them expect
    fewer than SPARSE_COUNT rows, and per z cell whether x and y both take two values or more in it
    (elsewhere no permutation changes the counts), from the codes of x, y (0..k-1) and of the z
    cell (0..kz-1), by dense counting."""
    nxyz = np.zeros((kz, kx, ky), dtype=np.int64)
    for i in range(cx.shape[0]):
        nxyz[cz[i], cx[i], cy[i]] += 1
    g2 = 0.0
    df = 0
    cells = 0
    small = 0
    nxz = np.empty(kx, dtype=np.int64)
    nyz = np.empty(ky, dtype=np.int64)
    informative = np.zeros(kz, dtype=np.bool_)
    for s in range(kz):
        nxz[:] = 0
        nyz[:] = 0
        nz = 0
        for a in range(kx):
            for b in range(ky):
                c = nxyz[s, a, b]
                nxz[a] += c
                nyz[b] += c
                nz += c
        if nz == 0:
            continue
        lx = 0
        ly = 0
        for a in range(kx):
            lx += nxz[a] > 0
        for b in range(ky):
            ly += nyz[b] > 0
        df += max(lx - 1, 0) * max(ly - 1, 0)
        cells += lx * ly
        informative[s] = lx > 1 and ly > 1
        for a in range(kx):
            for b in range(ky):
                c = nxyz[s, a, b]
                if nxz[a] * nyz[b] > 0 and nxz[a] * nyz[b] < SPARSE_COUNT * nz:
                    small += 1
                if c > 0:
                    g2 += c * math.log(c * nz / (nxz[a] * nyz[b]))
    return 2.0 * g2, df, cells, small, informative


@numba.njit(cache=True)
def _permutation_p(cx, cy, cz, kx, ky, kz, keep, step, hits_wanted, most, seed):
    """P(G² >= observed) with x permuted within the z cells, by Besag and Clifford's (1991)
    sequential Monte Carlo: stop at `hits_wanted` exceedances (p = hits / draws) or after `most`
    draws (p = (hits + 1) / (most + 1)). The permutations keep every margin (the exact conditional
    null), so G² moves only with Σ c·log c over the (z, x, y) cells: one pass over the rows a draw,
    adding step[c] = (c + 1)·log(c + 1) − c·log c as each cell's count c grows. Only the rows of the
    z cells flagged in `keep` are drawn: the others' counts never change."""
    starts = np.zeros(kz + 1, dtype=np.int64)
    for i in range(cz.shape[0]):
        if keep[cz[i]]:
            starts[cz[i] + 1] += 1
    for s in range(kz):
        starts[s + 1] += starts[s]
    fill = starts[:-1].copy()
    xs = np.empty(starts[kz], dtype=np.int64)   # the kept rows grouped by z cell (a counting sort)
    ys = np.empty_like(xs)
    for i in range(cz.shape[0]):
        if keep[cz[i]]:
            xs[fill[cz[i]]], ys[fill[cz[i]]] = cx[i], cy[i]
            fill[cz[i]] += 1
    counts = np.zeros(kx * ky, dtype=np.int64)
    observed = _cell_entropy_sum(xs, ys, starts, ky, counts, step)
    state = np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(1)
    hits = 0
    for draw in range(1, most + 1):
        for s in range(kz):
            for i in range(starts[s + 1] - 1, starts[s], -1):   # Fisher-Yates within the cell
                state ^= state >> np.uint64(12)                 # xorshift64*, cheaper than numba's randint
                state ^= state << np.uint64(25)
                state ^= state >> np.uint64(27)
                r = (state * np.uint64(0x2545F4914F6CDD1D)) >> np.uint64(32)
                j = starts[s] + np.int64((r * np.uint64(i - starts[s] + 1)) >> np.uint64(32))
                xs[i], xs[j] = xs[j], xs[i]
        if _cell_entropy_sum(xs, ys, starts, ky, counts, step) >= observed - 1e-9 * max(1.0, observed):
            hits += 1
            if hits == hits_wanted:
                return hits / draw
    return (hits + 1) / (most + 1)


@numba.njit(cache=True)
def _cell_entropy_sum(xs, ys, starts, ky, counts, step):
    """Σ over the (z, x, y) cells of c·log c, the rows grouped by z cell (`starts`), counting each z
    cell's x-y table into `counts` (kx·ky, small enough to stay in cache; left at zero)."""
    total = 0.0
    for s in range(starts.shape[0] - 1):
        for i in range(starts[s], starts[s + 1]):
            cell = xs[i] * ky + ys[i]
            total += step[counts[cell]]
            counts[cell] += 1
        for i in range(starts[s], starts[s + 1]):
            counts[xs[i] * ky + ys[i]] = 0
    return total


def combination_codes(values: np.ndarray) -> np.ndarray:
    """Each row's combination of values as a code 0, 1, ... in the rows' lexicographic order (each
    column coded on its own, then folded: np.unique over rows sorts them as records, which is slower;
    docs/perf-log.md, "G²'s excess")."""
    columns = [np.unique(col, return_inverse=True)[1].ravel() for col in np.asarray(values).T]
    return _folded(columns, [int(c.max()) + 1 if c.size else 1 for c in columns])


def _folded(columns: list[np.ndarray], levels: list[int]) -> np.ndarray:
    """The joint code of integer columns (codes 0..levels-1), the observed cells numbered 0..k-1."""
    n = len(columns[0]) if columns else 0
    code = np.zeros(n, dtype=np.int64)
    size = 1
    for col, k in zip(columns, levels):
        code = code * k + col
        size *= k
        if size > 4 * n:  # keep the radix small: renumber the observed cells
            code = np.unique(code, return_inverse=True)[1].ravel()
            size = int(code.max()) + 1
    return np.ascontiguousarray(np.unique(code, return_inverse=True)[1].ravel(), dtype=np.int64)


class Counter:
    """Integer codes of a table's discrete columns and the z-cell codes of conditioning sets seen
    (PC asks for the same z with many pairs, so a z set is encoded once)."""

    def __init__(self, codes: np.ndarray):
        self.codes = np.ascontiguousarray(codes, dtype=np.int64)
        self.levels = self.codes.max(axis=0) + 1 if self.codes.size else np.zeros(self.codes.shape[1], np.int64)
        self._cells: dict[tuple, tuple[np.ndarray, int]] = {}

    @classmethod
    def from_codes(cls, values: np.ndarray) -> Counter:
        """From arbitrary discrete values per column (each column re-coded 0..k-1)."""
        values = np.asarray(values)
        codes = np.empty(values.shape, dtype=np.int64)
        for k in range(values.shape[1]):
            codes[:, k] = np.unique(values[:, k], return_inverse=True)[1].ravel()
        return cls(codes)

    def cells(self, cols: tuple) -> tuple[np.ndarray, int]:
        """The joint code of columns `cols` (observed cells numbered 0..k-1) and k."""
        hit = self._cells.get(cols)
        if hit is None:
            n = self.codes.shape[0]
            if not cols:
                hit = (np.zeros(n, dtype=np.int64), 1)
            elif len(cols) == 1:
                hit = (self.codes[:, cols[0]], int(self.levels[cols[0]]))
            else:
                code = _folded([self.codes[:, c] for c in cols], [int(self.levels[c]) for c in cols])
                hit = (code, int(code.max()) + 1)
            self._cells[cols] = hit
        return hit

    def p_value(self, x: tuple, y: tuple, z: tuple = (), floor: float = 0.0,
                ceiling: float = CLEARLY_INDEPENDENT) -> tuple[float, float, int, bool]:
        """(p, G², df, permuted) for tuples of column indices. Sparse tables (Cochran's rule fails) get
        the permutation p unless the chi-square p is below `floor` or above `ceiling`: there G² runs
        above its chi-square (docs/causal-measured.md, "Calibration, shown"), and far below
        the level no permutation would reach it."""
        tables = self._tables(x, y, z)
        stat, df, cells, small, informative = _g2_table(*tables)
        df = max(int(df), 1)
        p = float(special.chdtrc(df, stat))
        if p < floor or p > ceiling or small <= SPARSE_SHARE * cells:
            return p, stat, df, False
        return _permutation_p(*tables, informative, self._steps, PERMUTATION_HITS, PERMUTATIONS, 0), stat, df, True

    @functools.cached_property
    def _steps(self) -> np.ndarray:
        """c -> (c + 1)·log(c + 1) − c·log c for every count a cell can reach, for the permutations."""
        c = np.arange(self.codes.shape[0] + 1, dtype=np.float64)
        return (c + 1) * np.log(c + 1) - c * np.log(np.maximum(c, 1))

    def _tables(self, x, y, z) -> tuple:
        cx, kx = self.cells(tuple(x))
        cy, ky = self.cells(tuple(y))
        cz, kz = self.cells(tuple(sorted(z)))
        return cx, cy, cz, kx, ky, kz
