"""RCoT, the randomized conditional correlation test (Strobl, Zhang & Visweswaran 2019), and the
Lindsay–Pilla–Basak approximation of its null, a weighted sum of chi-squares.

Fourier features of x and y (few, at Gauss–Hermite nodes) and random ones of z (many), x's and y's
residualised on z's by least squares; the statistic is n·‖cross-covariance of the residuals‖². Per
conditioning set O(n·F²), per (column, set) O(n·F·k), per test O(F·k² + m·k⁴) (k = 7 features of x
and y, m the null's rows).
"""

from __future__ import annotations

import functools
import math
from collections import OrderedDict
from typing import NamedTuple

import numba
import numpy as np
from scipy import linalg, special

from causewatch.analytics.causal.gsquare import combination_codes

# Features of z: the paper's default (100); more only slowly shrink the leak of z's nonlinear effect
# into the residuals, at O(F²) per test. But at most 35 per continuous column of z: a kernel on one or
# two columns has few eigenvalues above the noise, so 35 per column keep the accuracy of 100 at less
# cost (docs/causal-measured.md, "z's features, and the LU model's c_op → t_comp").
Z_FEATURES = 100
Z_FEATURES_PER_COLUMN = 35
# z's features take three kernel widths in turn: the median distance, a half and a quarter of it.
# x's and y's features are cosines of x and y, so what they keep of z is cos(w·f(z)): it oscillates
# where f is steep, and the median width alone left it in the residuals (docs/causal-measured.md,
# "Three kernel widths for z").
Z_WIDTHS = (1.0, 0.5, 0.25)
# x's and y's features: the normal score itself, and cos and sin at the positive nodes of the 6-point
# Gauss–Hermite rule (Dao et al. 2017, quadrature Fourier features), not 5 random frequencies as in the
# paper: a 1-D Gaussian kernel needs few frequencies, and random ones made the p-value a lottery
# (docs/causal-measured.md, "RCoT's x and y features").
_GH = np.polynomial.hermite_e.hermegauss(6)
XY_NODES = tuple(float(w) for w in _GH[0] if w > 0)
# Each node's cos and sin are scaled by (2a)^(1/8), a the rule's weight of the node in the Gaussian
# kernel: at equal scales the top frequency, mostly noise for smooth mechanisms, weighed too much
# (docs/perf-log.md, "Figures once in the causal code's comments").
XY_WEIGHTS = tuple(float((2 * a / math.sqrt(2 * math.pi)) ** 0.125) for w, a in zip(*_GH) if w > 0)
# The median distance (the kernel width) is taken over the first rows only, as in the paper (500
# there; 200 rows give 19,900 distances, enough for a median, at a sixth of the cost).
WIDTH_ROWS = 200
# The null's weights (eigenvalues of the covariance of the residual products) are estimated on at most
# this many rows, a seeded subset: that product's cost is linear in n and the weights only shape the
# p-value's tail (docs/perf-log.md, "Figures once in the causal code's comments").
NULL_ROWS = 1000


def chi2_mixture_sf(weights: np.ndarray, x: float, p: int = 4, near: tuple[float, float] = (0.0, 1.0)) -> float:
    """P(Σ w_i χ²_1 > x) by Lindsay, Pilla & Basak (2000): a mixture of p gammas with a common shape
    matching the first 2p moments. With fewer than p positive weights, or when the moment system
    is degenerate, the two-moment gamma (Satterthwaite–Welch); also when that gamma's value lies
    outside `near` (a test only needs LPB's accuracy where its decision could change)."""
    w = np.asarray(weights, dtype=np.float64)
    w = w[w > 0]
    return _mixture_sf(float(w.sum()), float((w ** 2).sum()), x, lambda: w, p, near)


def covariance_sf(cov: np.ndarray, x: float, p: int = 4, near: tuple[float, float] = (0.0, 1.0)) -> float:
    """chi2_mixture_sf with the eigenvalues of the covariance matrix `cov` as weights. The gamma
    needs only their sum (the trace) and sum of squares (the squared Frobenius norm); the
    eigenvalues themselves are computed only when LPB is."""
    return _mixture_sf(float(np.trace(cov)), float((cov ** 2).sum()), x, lambda: np.linalg.eigvalsh(cov), p, near)


def _mixture_sf(total: float, squares: float, x: float, weights, p: int, near: tuple[float, float]) -> float:
    """The two-moment gamma from Σw and Σw², then LPB on `weights()` where the gamma lies in `near`."""
    if total <= 0:
        return 1.0 if x >= 0 else 0.0
    shape = total * total / (2 * squares)   # mean² / variance
    gamma = float(special.gammaincc(shape, shape * x / total))
    if near[0] <= gamma <= near[1]:
        w = weights()
        w = w[w > 0]
        if w.size >= p:
            try:   # moments of order 8 overflow unless scaled; the answer is scale-free
                return _lpb(w / w.sum(), x / w.sum(), p)
            except (np.linalg.LinAlgError, ValueError, ZeroDivisionError):
                pass
    return gamma


def _moments(w: np.ndarray, count: int) -> np.ndarray:
    """Raw moments 0..count of Σ w_i χ²_1 from its cumulants κ_r = 2^(r-1)(r-1)! Σ w_i^r."""
    kappa = [0.0] + [2 ** (r - 1) * math.factorial(r - 1) * float((w ** r).sum()) for r in range(1, count + 1)]
    m = [1.0]
    for n in range(1, count + 1):
        m.append(sum(math.comb(n - 1, k - 1) * kappa[k] * m[n - k] for k in range(1, n + 1)))
    return np.array(m)


def _lpb(w: np.ndarray, x: float, p: int) -> float:
    ok, lam, mu, weights = _lpb_mixture(_moments(w, 2 * p), p)
    if not ok:
        raise ValueError("the moments are those of fewer atoms, or an atom lies at or below 0")
    cdf = special.gammainc(1 / lam, x / (lam * mu))
    return float(min(max(1 - weights @ cdf, 0.0), 1.0))


@numba.njit(cache=True)
def _hankel(m: np.ndarray, lam: float, size: int) -> np.ndarray:
    """Hankel matrix of the moments divided by Π_{k<r}(1 + kλ): the moments of the gammas' means."""
    div = np.ones(2 * size - 1)
    for r in range(1, 2 * size - 1):
        div[r] = div[r - 1] * (1 + lam * (r - 1))
    h = np.empty((size, size))
    for i in range(size):
        for j in range(size):
            h[i, j] = m[i + j] / div[i + j]
    return h


@numba.njit(cache=True)
def _lpb_mixture(m: np.ndarray, p: int):
    """LPB's p gammas of common shape 1/λ and means λ·μ_i, mixed by weights, from the raw moments m
    (in numba: in Python it was a good share of an RCoT fit; docs/perf-log.md, "RCoT's p-values"). Returns
    (ok, λ, μ, weights); not ok when the moment system has no such solution."""
    lam = m[2] / m[1] ** 2 - 1  # a single gamma's shape parameter 1/λ from mean and variance
    none = np.zeros(p)
    for k in range(2, p + 1):
        # A λ below the previous one at which the (k+1)-moment Hankel matrix is singular (bisection).
        lo, hi = 0.0, lam
        f_lo = np.linalg.det(_hankel(m, lo, k + 1))
        if f_lo * np.linalg.det(_hankel(m, hi, k + 1)) > 0:
            return False, lam, none, none
        while hi - lo > 1e-9 * lam:
            mid = 0.5 * (lo + hi)
            f_mid = np.linalg.det(_hankel(m, mid, k + 1))
            if f_lo * f_mid <= 0:
                hi = mid
            else:
                lo, f_lo = mid, f_mid
        lam = 0.5 * (lo + hi)
    hank = _hankel(m, lam, p + 1)
    # Atoms: roots of the polynomial det([H[:p]; 1 μ μ² … μ^p]) (cofactors along the last row).
    coef = np.empty(p + 1)
    minor = np.empty((p, p))
    for i in range(p + 1):
        for r in range(p):
            c = 0
            for j in range(p + 1):
                if j != i:
                    minor[r, c] = hank[r, j]
                    c += 1
        coef[p - i] = (-1) ** (p + i) * np.linalg.det(minor)
    mu = np.roots(coef).real
    if (mu <= 0).any():
        return False, lam, none, none
    vander = np.empty((p, p))
    for r in range(p):
        vander[r] = mu ** r
    return True, lam, mu, np.linalg.solve(vander, hank[0, :p].copy())


# What an RCoT keeps, in bytes, in each of its two caches: z's features for the most recent
# conditioning sets (n x ~110 floats each: 0.9 MB at 1000 rows, 14 MB at 16,384), and the fits of
# recent (column, set) pairs (0.17 MB each at m = 1000 null rows).
CACHE_BYTES = 256 * 2 ** 20
# Added to C_zz's diagonal: z's features are collinear (a column's own features next to random ones of it).
RIDGE = 1e-10
# A discrete column of at most this many levels enters by indicators of its levels (exact), not by
# Fourier features of its codes; so do the level combinations of a conditioning set's discrete part
# up to this many cells (beyond, each column's levels on their own). Codes in one random-feature
# kernel with continuous columns left the discrete part's effect half removed: on the LU model
# c_op – t_comp given (datatype, ops) had margin -0.3 to 2.2 by RCoT and 16-26 by the KDE test.
MAX_LEVELS = 16
MAX_CELLS = 64


class RCoT:
    """RCoT (Strobl et al. 2019) on the standardised columns of one table (`discrete`: a flag per
    column). Each column's features are drawn once from a generator seeded by the column's place
    and `seed`, and z's projection is kept per conditioning set, so PC's many tests with one z share
    it. `pvalue(x, y, z)` takes column indices."""

    def __init__(self, values: np.ndarray, discrete: np.ndarray | None = None, z_features: int = Z_FEATURES,
                 seed: int = 0):
        sd = values.std(axis=0)
        n = len(values)
        # The null's rows go first (a seeded subset beyond NULL_ROWS), so that they are a view of every
        # feature matrix; the statistic is a sum over rows, so their order is not an input.
        self.null_rows = n if NULL_ROWS is None or n <= NULL_ROWS else NULL_ROWS
        order = np.arange(n)
        if self.null_rows < n:
            first = np.sort(np.random.default_rng([seed, n]).choice(n, self.null_rows, replace=False))
            order = np.concatenate([first, np.setdiff1d(order, first)])
        self.values = ((values - values.mean(axis=0)) / np.where(sd > 0, sd, 1.0))[order]
        self._first = self.values[np.argsort(order)[:WIDTH_ROWS]]   # the first rows, for kernel widths
        self.discrete = np.zeros(values.shape[1], bool) if discrete is None else np.asarray(discrete, bool)
        self.z_features, self.seed = z_features, seed
        self._xy: dict = {}
        self._weights: dict = {}
        self._z: OrderedDict = OrderedDict()
        self._res: OrderedDict = OrderedDict()
        self._covs: dict = {}

    def _features(self, cols: tuple, count: int) -> np.ndarray:
        """Centred random Fourier features sqrt(2)·cos(v·W/σ + b) of the columns, W ~ N(0, 1),
        b ~ U(0, 2π), σ the median distance between the first WIDTH_ROWS rows times each of Z_WIDTHS
        in turn, in float32 (the features are random, so its error is far below their noise, and its
        cosine is much faster; docs/perf-log.md, "RCoT in float32"). The columns are not scaled: a
        least-squares fit on them does not
        depend on it."""
        v = self.values[:, list(cols)]
        rng = np.random.default_rng([self.seed, count, *cols])
        widths = _width(np.ascontiguousarray(self._first[:, list(cols)])) * np.resize(Z_WIDTHS, count)
        arg = v @ (rng.normal(size=(len(cols), count)) / widths)
        arg += rng.uniform(0, 2 * math.pi, count)
        f = np.cos(arg.astype(np.float32))
        f -= f.mean(axis=0, dtype=np.float64).astype(np.float32)
        f *= np.float32(math.sqrt(2))
        return f

    def _xy_features(self, col: int) -> np.ndarray:
        """A discrete column's level indicators (of at most MAX_LEVELS levels); else its normal score
        v, cos(w·v/σ) and sin(w·v/σ) at the Gauss–Hermite nodes w (standardised). Their weights in
        the statistic go to `_weights`."""
        if col not in self._xy:
            v = self.values[:, col:col + 1]
            codes = combination_codes(v) if self.discrete[col] else None
            if codes is not None and codes.max() < MAX_LEVELS:
                self._xy[col] = _orthonormal(_indicators(codes))
                self._weights[col] = np.ones(self._xy[col].shape[1])
            else:
                arg = v * (np.array(XY_NODES) / _width(np.ascontiguousarray(self._first[:, col:col + 1])))
                self._xy[col] = _standardised(np.hstack([v, np.cos(arg), np.sin(arg)]))
                self._weights[col] = np.array([1.0, *XY_WEIGHTS, *XY_WEIGHTS])
        return self._xy[col]

    def _z_features(self, z: tuple) -> np.ndarray:
        """Random Fourier features of z's continuous columns and each one's own x/y features, next
        to indicators of its discrete columns' level combinations (of each column's levels past
        MAX_CELLS combinations), and each continuous column's own features times each discrete
        column's level indicators (of at most MAX_LEVELS levels). The columns' own
        features remove what x's or y's features share with one z column exactly: with random ones
        only, n ⊥ t_comp | ops (ops a function of n, equal normal scores) was rejected on the LU
        model, and n – t_comp stayed. The products let a level's effect change with a continuous
        column (c_op = instr_op·cpi(datatype) + …): without them that part of it stayed in the
        residuals, the null was not calibrated (test_calibration.py) and the LU model kept false
        edges. Per column, not per level combination, so that many levels do not multiply the features
        past what the rows can fit (docs/causal-measured.md, "Level interactions in z")."""
        cont = tuple(c for c in z if not self.discrete[c])
        disc = [c for c in z if self.discrete[c]]
        count = min(self.z_features, Z_FEATURES_PER_COLUMN * len(cont))
        parts = [self._features(cont, count), *(self._xy_features(c) for c in cont)] if cont else []
        if disc:
            cells = combination_codes(self.values[:, disc])
            many = cells.max() >= MAX_CELLS
            own = [_indicators(combination_codes(self.values[:, [c]])) for c in disc] if cont or many else []
            parts += own if many else [_indicators(cells)]
            parts += [(self._xy_features(c)[:, :, None] * ind[:, None, :]).reshape(len(ind), -1)
                      for c in cont for ind in own if ind.shape[1] < MAX_LEVELS]
        return np.hstack(parts)

    def _projection(self, z: tuple):
        """z's features F_z and the Cholesky factor of C_zz + RIDGE·I, kept for recent sets."""
        if z not in self._z:
            fz = self._z_features(z)
            czz = fz.T @ fz / (len(fz) - 1) + RIDGE * np.eye(fz.shape[1])
            _bounded_put(self._z, z, (fz, linalg.cho_factor(czz)))
        self._z.move_to_end(z)
        return self._z[z]

    def _fit(self, col: int, z: tuple) -> _Fit:
        """The column's x/y features f regressed on z's by least squares (C_zf, B = C_zz⁻¹·C_zf), and
        the residuals f − F_z·B on the null's rows with their pairwise products. Kept for recent
        (column, set) pairs: PC tests one column against many given one set."""
        key = (col, z)
        if key not in self._res:
            f = self._xy_features(col)
            null = f[:self.null_rows]
            czf = coef = None
            if z:
                fz, chol = self._projection(z)
                czf = (f.T @ fz).T / (len(f) - 1)   # f' F_z, not F_z' f: BLAS is twice as fast on this shape
                coef = linalg.cho_solve(chol, czf, check_finite=False)
                null = null - (coef.T @ fz[:self.null_rows].T).T
            _bounded_put(self._res, key, _Fit(czf, coef, null, _pair_products(null)))
        self._res.move_to_end(key)
        return self._res[key]

    def _cov(self, x: int, y: int) -> np.ndarray:
        """C_xy of the two columns' x/y features (all rows), kept per pair."""
        if (x, y) not in self._covs:
            self._covs[(x, y)] = self._xy_features(x).T @ self._xy_features(y) / (self.values.shape[0] - 1)
        return self._covs[(x, y)]

    def pvalue(self, x: int, y: int, z: tuple = (),
               near: tuple[float, float] = (0.0, 1.0)) -> tuple[float, float, float]:
        """(statistic n·‖W∘C_xy|z‖², its p-value, the largest squared canonical correlation of the
        residuals); the p-value is LPB's where the two-moment gamma's lies in `near`, else the gamma's.
        C_xy|z, the residuals' cross-covariance, is C_xy − C_xz·B_y − ε·B_x'·B_y (ε the ridge; the
        residuals themselves are only formed on the null's rows): O(F·k²) per test once fits are kept.
        W weighs each pair of features by the product of their XY_WEIGHTS, in the null's too."""
        z = tuple(sorted(z))
        fx, fy = self._fit(x, z), self._fit(y, z)
        cxy = self._cov(x, y) if not z else self._cov(x, y) - fx.czf.T @ fy.coef - RIDGE * fx.coef.T @ fy.coef
        w = np.outer(self._weights[x], self._weights[y])
        stat = self.values.shape[0] * float(((w * cxy) ** 2).sum())
        pval = covariance_sf(_product_covariance(fx, fy) * np.outer(w, w), stat, near=near)
        return stat, pval, min(_top_eigenvalue(cxy.T @ cxy), 1 - 1e-12)


class _Fit(NamedTuple):
    czf: np.ndarray | None    # C_zf, z's features against the column's (None without z)
    coef: np.ndarray | None   # C_zz⁻¹·C_zf
    null: np.ndarray          # the residuals on the null's rows (m x k)
    # Their products r_i·r_j, i <= j (m x k(k+1)/2), in float32: the null's covariance needs 6 digits,
    # and at half the bytes more fits stay in the cache (docs/perf-log.md, "RCoT in float32").
    pairs: np.ndarray


def _product_covariance(fx: _Fit, fy: _Fit) -> np.ndarray:
    """Covariance of the residual products r_x,i·r_y,j over the null's rows, (kx·ky)²: its
    eigenvalues are the null's weights. Assembled from the 28 x 28 products of the kept pairwise
    products, a third of the products' own (49-column) Gram matrix."""
    m, kx, ky = len(fx.null), fx.null.shape[1], fy.null.shape[1]
    mean = (fx.null.T @ fy.null / m).ravel()
    cross = (fx.pairs.T @ fy.pairs).astype(np.float64) / m
    return cross.ravel()[_gather(kx, ky)] - np.outer(mean, mean)


@numba.njit(cache=True)
def _pair_products(r: np.ndarray) -> np.ndarray:
    """r_i·r_j for i <= j in np.triu_indices order, per row, in float32 (one pass: numpy's fancy
    indexing took as long as the column's whole least-squares fit)."""
    m, k = r.shape
    out = np.empty((m, k * (k + 1) // 2), dtype=np.float32)
    for row in range(m):
        c = 0
        for i in range(k):
            for j in range(i, k):
                out[row, c] = r[row, i] * r[row, j]
                c += 1
    return out


@numba.njit(cache=True)
def _top_eigenvalue(a: np.ndarray) -> float:
    """The largest eigenvalue of a small symmetric matrix (numba: numpy.linalg's checks cost more than LAPACK)."""
    return np.linalg.eigvalsh(a)[-1]


@functools.lru_cache(maxsize=64)
def _upper(k: int) -> tuple[np.ndarray, np.ndarray]:
    return np.triu_indices(k)


@functools.lru_cache(maxsize=64)
def _gather(kx: int, ky: int) -> np.ndarray:
    """Where E[r_x,i r_x,k r_y,j r_y,l] sits in the pairs' cross products, for rows (i, j) and
    columns (k, l) of the product covariance."""
    def pair(k):
        tri = np.zeros((k, k), dtype=np.intp)
        tri[_upper(k)] = np.arange(k * (k + 1) // 2)
        return np.maximum(tri, tri.T)
    px, py = pair(kx), pair(ky)
    i, j = np.divmod(np.arange(kx * ky), ky)
    return px[i[:, None], i[None, :]] * (ky * (ky + 1) // 2) + py[j[:, None], j[None, :]]


def _bounded_put(cache: OrderedDict, key, value) -> None:
    """Store, then drop the least recently used entries past CACHE_BYTES."""
    cache[key] = value
    size = _nbytes(value)
    while len(cache) > 1 and size * len(cache) > CACHE_BYTES:
        cache.popitem(last=False)


def _nbytes(value) -> int:
    if isinstance(value, np.ndarray):
        return value.nbytes
    return sum(_nbytes(v) for v in value) if isinstance(value, tuple) else 0


@numba.njit(cache=True)
def _width(v: np.ndarray) -> float:
    """The kernel width σ: the median distance between the rows, ties at 0 left out (1 if all
    equal). One numba pass instead of pdist, a mask and its copy, once per conditioning set. Callers
    pass C order: each memory layout is a compile of its own."""
    n, d = v.shape
    dist = np.empty(n * (n - 1) // 2)
    k = 0
    for i in range(n):
        for j in range(i + 1, n):
            s = 0.0
            for c in range(d):
                s += (v[i, c] - v[j, c]) ** 2
            if s > 0:
                dist[k] = math.sqrt(s)
                k += 1
    return np.median(dist[:k]) if k else 1.0


def _indicators(codes: np.ndarray) -> np.ndarray:
    """Standardised indicators of the codes, all but code 0."""
    return _standardised((codes[:, None] == np.arange(1, codes.max() + 1)).astype(np.float64))


def _orthonormal(f: np.ndarray) -> np.ndarray:
    """Uncorrelated unit-variance combinations of centred columns spanning the same space (QR). For a
    discrete x or y the statistic is then the share of each y feature's variance between x's levels,
    whichever level the indicators leave out; the standardised indicators themselves are correlated and
    weigh the contrasts against that level more (docs/causal-measured.md, "Orthonormal level contrasts")."""
    return np.linalg.qr(f)[0] * math.sqrt(len(f))


def _standardised(f: np.ndarray) -> np.ndarray:
    f = f - f.mean(axis=0)
    sd = f.std(axis=0)
    return f / np.where(sd > 0, sd, 1.0)
