"""Counting G² for discrete columns: contingency tables in one numba pass, z cells cached per set.

g2(codes, x, y, z) -> (G², df, bits) with df = Σ over observed z cells of (|X_s| - 1)(|Y_s| - 1).
"""

from __future__ import annotations

import math

import numba
import numpy as np

LN2 = math.log(2.0)


@numba.njit(cache=True)
def _g2_table(cx, cy, cz, kx, ky, kz):
    """G² and df from the codes of x, y (0..k-1) and of the z cell (0..kz-1), by dense counting."""
    nxyz = np.zeros((kz, kx, ky), dtype=np.int64)
    for i in range(cx.shape[0]):
        nxyz[cz[i], cx[i], cy[i]] += 1
    g2 = 0.0
    df = 0
    nxz = np.empty(kx, dtype=np.int64)
    nyz = np.empty(ky, dtype=np.int64)
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
        for a in range(kx):
            for b in range(ky):
                c = nxyz[s, a, b]
                if c > 0:
                    g2 += c * math.log(c * nz / (nxz[a] * nyz[b]))
    return 2.0 * g2, df


def combination_codes(values: np.ndarray) -> np.ndarray:
    """Each row's combination of values as a code 0, 1, ... in the rows' lexicographic order (each
    column coded on its own, then folded: np.unique over rows sorts them as records, 3x slower)."""
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

    def g2(self, x: tuple, y: tuple, z: tuple = ()) -> tuple[float, int, float]:
        """G², its degrees of freedom and the plug-in I(x; y | z) in bits, for tuples of column indices."""
        cx, kx = self.cells(tuple(x))
        cy, ky = self.cells(tuple(y))
        cz, kz = self.cells(tuple(sorted(z)))
        stat, df = _g2_table(cx, cy, cz, kx, ky, kz)
        return stat, int(df), stat / (2 * self.codes.shape[0] * LN2)
