"""Entropy, mutual information and conditional MI of mixed discrete and continuous columns.

Gaussian kernel density estimates for continuous columns, counting for discrete ones (numba,
parallel over evaluation points); two estimators: the papers' "lemeire" and the calibrated "kde".

One kernel pass sums, for every evaluation point, the kernel mass of the z, xz, yz and xyz
subspaces at once, in nested whitened coordinates (|z|+|x|+2|y| per pair, see _nested_map), with
a polynomial exp so the loop over pairs vectorises; at the data points themselves (resubstitution)
each pair is computed once for both of its points. A conditional MI costs one O(m·n·d) pass.

- "lemeire" (Lemeire et al., §7.1 and Eq. 11): raw values, bandwidth 4·range/n per continuous
  column, entropy of the KDE discretised in bins of width Δ. The integral of Eq. 11 is evaluated by
  Monte Carlo: one point drawn from the KDE per data point (seeded, so results are reproducible).
- "kde" (default): continuous columns replaced by normal scores of their ranks (MI is invariant to
  monotone maps, so this loses nothing and gives every column the same scale); each subspace's
  kernel has bandwidth matrix h²·cov (the marginal of one joint kernel, h from Silverman's rule for
  the joint dimension), resubstitution at the data points. Its independence threshold comes from a
  null calibrated on independent data (causewatch.analytics.causal.ci), not from a fixed number of bits.
"""

from __future__ import annotations

import math
import os
import types

# numba's parallel loops run on OpenMP threads, which by default spin-wait after each loop and burn
# CPU that the agent and the daemon's other jobs need (docs/causal-measured.md, "What made the KDE pass cheaper").
# Set before numba loads libgomp; an explicit OMP_WAIT_POLICY in the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numba
import numpy as np
from scipy import special

ESTIMATORS = ("kde", "lemeire")
# "kde" bandwidth = this × Silverman's rule. Resubstitution counts each point's own kernel; at the
# density-optimal width that term dominates in 3-4 dimensions and swamps conditional dependences;
# 1.5× keeps it small while leaving the dependence visible (docs/causal-measured.md, "Why 1.5 × Silverman").
KDE_BANDWIDTH_SCALE = 1.5
LN2 = math.log(2.0)


class EntropyError(ValueError):
    """Bad input to an entropy or MI estimate (names the column or parameter)."""


# exp(a) below this is taken as 0: e^-40 ≈ 4e-18, against each point's own kernel mass of 1.
EXP_FLOOR = -40.0
# Added to a squared distance where discrete codes differ: that kernel term becomes exactly 0.
MISMATCH = 1e6


@numba.njit(fastmath=True, inline="always", cache=True)
def _exp(a):
    """e^a for a <= 0 without a libm call, so the loop over pairs vectorises: Taylor series of
    degree 7 at a/128, squared 7 times (relative error < 4e-7); exactly 0 below EXP_FLOOR."""
    r = max(a, EXP_FLOOR) * (1.0 / 128.0)
    p = 1.0 + r * (1.0 + r * (1 / 2 + r * (1 / 6 + r * (1 / 24 + r * (1 / 120 + r * (1 / 720 + r / 5040))))))
    for _ in range(7):
        p = p * p
    return p if a > EXP_FLOOR else 0.0


@numba.njit(fastmath=True, inline="always", cache=True)
def _add_squares(ev_t, i, data_t, k0, k1, lo, q):
    """q[j] += Σ_k (ev_t[k, i] - data_t[k, lo + j])² over rows k0..k1-1."""
    for k in range(k0, k1):
        e = ev_t[k, i]
        row = data_t[k, lo:]
        for j in range(q.size):
            t = e - row[j]
            q[j] += t * t


@numba.njit(fastmath=True, cache=True)
def _point_sums(ev_t, i, data_t, ev_codes, codes, widths, lo, q, acc, out):
    """Adds to out[i] the four kernel sums at evaluation point i over the data points lo..n-1
    (see _subspace_sums); `q` is (4, n) scratch. With a non-empty `acc` (the symmetric pass, where
    the evaluation points are the data points) each term also goes to acc[:, j], point j's sums.
    Loops run over views that start at lo: with a loop start only known at run time, LLVM does
    not vectorise a loop that stores."""
    nz, nx, ny = widths[0], widths[1], widths[2]
    qa, qb, qc, qd = q[0, lo:], q[1, lo:], q[2, lo:], q[3, lo:]
    qa[:] = 0.0
    qb[:] = 0.0
    qc[:] = 0.0
    qd[:] = 0.0
    _add_squares(ev_t, i, data_t, 0, nz, lo, qa)
    _add_squares(ev_t, i, data_t, nz, nz + nx, lo, qb)
    _add_squares(ev_t, i, data_t, nz + nx, nz + nx + ny, lo, qc)
    _add_squares(ev_t, i, data_t, nz + nx + ny, nz + nx + 2 * ny, lo, qd)
    if codes.shape[1]:
        cz, cx, cy = ev_codes[0, i], ev_codes[1, i], ev_codes[2, i]
        z_codes, x_codes, y_codes = codes[0, lo:], codes[1, lo:], codes[2, lo:]
        for j in range(qa.size):
            qa[j] += MISMATCH * (z_codes[j] != cz)
            qb[j] += MISMATCH * (x_codes[j] != cx)
            my = MISMATCH * (y_codes[j] != cy)
            qc[j] += my
            qd[j] += my
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    if acc.shape[1]:
        a0, a1, a2, a3 = acc[0, lo:], acc[1, lo:], acc[2, lo:], acc[3, lo:]
        for j in range(qa.size):
            ez = _exp(-0.5 * qa[j])
            exz = ez * _exp(-0.5 * qb[j])
            eyz = ez * _exp(-0.5 * qc[j])
            exyz = exz * _exp(-0.5 * qd[j])
            s0 += ez
            s1 += exz
            s2 += eyz
            s3 += exyz
            a0[j] += ez
            a1[j] += exz
            a2[j] += eyz
            a3[j] += exyz
    else:
        for j in range(qa.size):
            ez = _exp(-0.5 * qa[j])
            exz = ez * _exp(-0.5 * qb[j])
            s0 += ez
            s1 += exz
            s2 += ez * _exp(-0.5 * qc[j])
            s3 += exz * _exp(-0.5 * qd[j])
    out[i, 0] += s0
    out[i, 1] += s1
    out[i, 2] += s2
    out[i, 3] += s3


@numba.njit(parallel=True, fastmath=True, cache=True)
def _subspace_sums(ev_t, data_t, ev_codes, codes, widths, chunks):
    """Kernel mass at each evaluation point (a column of `ev_t`) in the subspaces z, xz, yz, xyz.

    Rows of `data_t` and `ev_t` are the nested whitened coordinates of kernel_terms: A (z given
    nothing, widths[0] rows), B (x given z, widths[1]), C (y given z, widths[2]), D (y given x and
    z, widths[2]); the squared distances are |A|², |A|²+|B|², |A|²+|C|², |A|²+|B|²+|D|².
    `codes` holds the joint codes of the discrete columns of z, x, y (3 rows, or an empty array
    when no column is discrete): indicator kernels. Pairs run innermost, branch-free (vectorised).
    """
    m, n = ev_t.shape[1], data_t.shape[1]
    out = np.zeros((m, 4))
    none = np.zeros((4, 0))
    for c in numba.prange(chunks):
        q = np.empty((4, n))
        for i in range(c, m, chunks):
            _point_sums(ev_t, i, data_t, ev_codes, codes, widths, 0, q, none, out)
    return out


def _symmetric_sums(data_t, codes, widths, chunks):
    """_subspace_sums at the data points themselves (resubstitution): the kernel is symmetric, so
    each pair i < j is computed once and counted for both points -- half the work."""
    n = data_t.shape[1]
    acc = np.zeros((chunks, 4, n))
    out = np.ones((n, 4))  # each point's own kernel, exp(0) in all four subspaces
    for c in numba.prange(chunks):
        q = np.empty((4, n))
        for i in range(c, n, chunks):
            _point_sums(data_t, i, data_t, codes, codes, widths, i + 1, q, acc[c], out)
    return out + acc.sum(axis=0).T


def _renamed(fn, name: str):
    """A copy of `fn` under another name: numba names a cache file by the function's qualname and line,
    so two flavours of one function would share one file, and either could load the other's code."""
    copy = types.FunctionType(fn.__code__.replace(co_name=name, co_qualname=name), fn.__globals__, name)
    copy.__qualname__ = name
    return copy


_subspace_sums_symmetric = numba.njit(parallel=True, fastmath=True, cache=True)(_symmetric_sums)
# The same loop without a thread pool (prange runs as range): for callers in a process that may fork
# later (the daemon's fork server warms the learner, whose edge strengths use this).
_subspace_sums_symmetric_serial = numba.njit(fastmath=True, cache=True)(_renamed(_symmetric_sums,
                                                                                 "_symmetric_sums_serial"))


def _chunks(m: int) -> int:
    """How many slices of the evaluation points the parallel loop deals out (a few per thread)."""
    return max(min(m, 4 * numba.get_num_threads()), 1)


def subspace_sums_reference(ev_t, data_t, ev_codes, codes, widths):
    """Plain numpy version of the numba kernel (the numba one is tested against it)."""
    edges = np.cumsum([0, widths[0], widths[1], widths[2], widths[2]])
    out = np.zeros((ev_t.shape[1], 4))
    for i in range(ev_t.shape[1]):
        qa, qb, qc, qd = (((ev_t[edges[b]:edges[b + 1], i, None] - data_t[edges[b]:edges[b + 1]]) ** 2).sum(axis=0)
                          for b in range(4))
        same = [codes[b] == ev_codes[b, i] if codes.size else True for b in range(3)]
        out[i] = [np.sum(np.exp(-0.5 * qa) * same[0]),
                  np.sum(np.exp(-0.5 * (qa + qb)) * (same[0] & same[1])),
                  np.sum(np.exp(-0.5 * (qa + qc)) * (same[0] & same[2])),
                  np.sum(np.exp(-0.5 * (qa + qb + qd)) * (same[0] & same[1] & same[2]))]
    return out


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties sharing their average rank (scipy.stats.rankdata's default, which would load all
    of scipy.stats into the daemon's workers)."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    first = np.r_[True, ordered[1:] != ordered[:-1]]   # the first of each run of equal values
    group = np.cumsum(first)
    bounds = np.r_[np.nonzero(first)[0], len(values)]
    ranks = np.empty(len(values))
    ranks[order] = 0.5 * (bounds[group] + bounds[group - 1] + 1)
    return ranks


def normal_scores(values: np.ndarray) -> np.ndarray:
    """Normal scores of the ranks (ties share their average rank): the copula transform."""
    n = len(values)
    return special.ndtri((average_ranks(np.asarray(values)) - 0.5) / n)


def encode_discrete(values: np.ndarray) -> np.ndarray:
    """Integer codes 0..k-1 of a column's distinct values, as float64 (the kernel compares them)."""
    _, codes = np.unique(values, return_inverse=True)
    return codes.astype(np.float64)


def prepare(data: np.ndarray, discrete: np.ndarray, estimator: str = "kde") -> np.ndarray:
    """The matrix the estimator works on: codes for discrete columns; for "kde" normal scores of
    continuous columns, for "lemeire" their raw values."""
    check_estimator(estimator)
    data = np.asarray(data, dtype=np.float64)
    if data.ndim != 2 or len(discrete) != data.shape[1]:
        raise EntropyError(f"data must be 2-D with one discrete flag per column, got shape {data.shape}")
    if not np.isfinite(data).all():
        raise EntropyError("data holds NaN or infinite values; drop or impute them first")
    out = np.empty_like(data)
    for k in range(data.shape[1]):
        if discrete[k]:
            out[:, k] = encode_discrete(data[:, k])
        elif estimator == "kde":
            out[:, k] = normal_scores(data[:, k])
        else:
            out[:, k] = data[:, k]
    return out


def check_estimator(estimator: str) -> None:
    if estimator not in ESTIMATORS:
        raise EntropyError(f"estimator {estimator!r} unknown; expected one of {', '.join(ESTIMATORS)}")


def bandwidths(prepared: np.ndarray, discrete: np.ndarray, cols: list[int], estimator: str) -> np.ndarray:
    """Per-column bandwidth for the joint estimate over `cols` (1.0 for discrete columns)."""
    n = prepared.shape[0]
    sub = prepared[:, cols]
    cont = ~np.asarray(discrete)[cols]
    bw = np.ones(len(cols))
    if estimator == "lemeire":
        rng = np.ptp(sub, axis=0)
        bw[cont] = np.where(rng[cont] > 0, 4.0 * rng[cont] / n, 1.0)
    else:
        d = int(cont.sum())
        if d:
            # Silverman's rule for a d-dimensional Gaussian on unit-variance (normal score) columns.
            bw[cont] = KDE_BANDWIDTH_SCALE * (4.0 / (d + 2.0)) ** (1.0 / (d + 4.0)) * n ** (-1.0 / (d + 4.0))
    return bw


def _whitening(cov: np.ndarray, h: float) -> np.ndarray:
    """Upper-triangular W with W·Wᵀ = (h²·cov)⁻¹ (W = L⁻ᵀ/h, L the Cholesky factor of cov): its
    leading k columns depend on the first k variables only and whiten them by their own marginal."""
    return np.linalg.inv(np.linalg.cholesky(cov)).T / h


def _nested_map(base, order, nz, nx, prepared, discrete, estimator):
    """The linear map from the continuous columns `order` (z, then x, then y) of `base` to the
    coordinates A | B | C | D of _subspace_sums, and the log|det| of the four subspaces' transforms.

    "kde": each subspace's kernel has bandwidth matrix h²·cov, the marginal of one joint kernel.
    With the Cholesky factor of the (z, x, y) covariance, the whitened z, xz and xyz coordinates are
    leading blocks of one transform, and that of (z, y) gives yz: |z|+|x|+2|y| squared differences
    per pair instead of the 4|z|+2|x|+2|y| of four separate whitenings, for the same kernels.
    "lemeire": diagonal, each column scaled by its own bandwidth.
    """
    ny = len(order) - nz - nx
    yz = list(range(nz)) + list(range(nz + nx, nz + nx + ny))
    if estimator == "lemeire":
        w1 = np.diag(1.0 / bandwidths(prepared, discrete, order, "lemeire"))
        w2 = w1[np.ix_(yz, yz)]
    else:
        h = float(bandwidths(prepared, discrete, order, "kde")[0])
        cov = np.atleast_2d(np.cov(base, rowvar=False, bias=True))
        cov += np.eye(len(cov)) * 1e-9 * max(np.trace(cov), 1e-12)
        w1, w2 = _whitening(cov, h), _whitening(cov[np.ix_(yz, yz)], h)
    m = np.zeros((len(order), nz + nx + 2 * ny))
    m[:, :nz + nx] = w1[:, :nz + nx]                                 # A, B
    m[yz, nz + nx:nz + nx + ny] = w2[:, nz:]                        # C
    m[:, nz + nx + ny:] = w1[:, nz + nx:]                           # D
    ld1, ld2 = np.log(np.diag(w1)), np.log(np.diag(w2))
    return m, np.array([ld1[:nz].sum(), ld1[:nz + nx].sum(), ld2.sum(), ld1.sum()])


def kernel_terms(prepared, discrete, x, y, z, estimator="kde", seed=0, rows=None, permutation=None, serial=False):
    """Kernel sums (m, 4) for the subspaces z, xz, yz, xyz and the log|det| of their transforms.

    "kde" whitens each subspace's continuous columns with a bandwidth matrix h²·cov (the marginal
    of the joint kernel, so the four estimates are consistent); "lemeire" scales each column by its
    own bandwidth. `permutation` reorders the rows of the x block (a null sample); `rows` evaluates
    at a subset of the data points only (resubstitution, so each point's own kernel still counts).
    """
    x, y, z = list(x), list(y), list(z)
    disc = np.asarray(discrete, dtype=bool)
    blocks = [z, x, y]
    base = prepared.copy() if permutation is not None else prepared
    if permutation is not None:
        base[:, x] = prepared[permutation][:, x]
    cont = [[c for c in b if not disc[c]] for b in blocks]
    order = cont[0] + cont[1] + cont[2]
    cont_data = base[:, order]
    ev_data = cont_data
    if estimator == "lemeire":
        # one draw from the KDE per data point: the mean of -log f then estimates the KDE's entropy
        # (drawn for the columns in x, y, z order, so a seed gives the same draw in every layout)
        cols = x + y + z
        noise = np.random.default_rng(seed).standard_normal((len(base), len(cols)))
        bw = bandwidths(prepared, discrete, order, estimator)
        ev_data = cont_data + noise[:, [cols.index(c) for c in order]] * bw
    dsc = [[c for c in b if disc[c]] for b in blocks]
    codes = np.vstack([cell_codes(base[:, d]) if d else np.zeros(len(base)) for d in dsc]) if any(dsc) \
        else np.zeros((3, 0))
    ev_codes = codes
    if rows is not None:
        ev_data = ev_data[rows]
        ev_codes = codes[:, rows] if codes.size else np.zeros((3, 0))
    widths = np.array([len(cont[0]), len(cont[1]), len(cont[2])], dtype=np.int64)
    if order:
        m, logdet = _nested_map(cont_data, order, len(cont[0]), len(cont[1]), prepared, discrete, estimator)
        data_t, ev_t = np.ascontiguousarray((cont_data @ m).T), np.ascontiguousarray((ev_data @ m).T)
    else:
        logdet = np.zeros(4)
        data_t, ev_t = np.zeros((0, len(base))), np.zeros((0, len(ev_data)))
    if ev_data is cont_data:  # resubstitution at every row
        if serial:
            return _subspace_sums_symmetric_serial(data_t, codes, widths, 1), logdet
        return _subspace_sums_symmetric(data_t, codes, widths, _chunks(len(base))), logdet
    return _subspace_sums(ev_t, data_t, np.ascontiguousarray(ev_codes), codes, widths, _chunks(len(ev_t.T))), logdet


@numba.njit(cache=True)
def _restricted_permutation(neighbours, order, pick):
    """Runge (2018) local permutation: row i takes the x of an unused one of its z-neighbours
    (the first unused in `pick` order), or of a random neighbour when all are used."""
    n, k = neighbours.shape
    used = np.zeros(n, dtype=np.bool_)
    perm = np.empty(n, dtype=np.int64)
    for i in order:
        chosen = -1
        for t in range(k):
            j = neighbours[i, pick[i, t]]
            if not used[j]:
                chosen = j
                break
        if chosen < 0:
            chosen = neighbours[i, pick[i, 0]]
        used[chosen] = True
        perm[i] = chosen
    return perm


def local_permutations(prepared, discrete, z, count, k=7, seed=0) -> list[np.ndarray]:
    """`count` permutations that shuffle rows only among near neighbours in z (discrete z columns
    dominate the distance, so rows mostly stay within their stratum)."""
    from scipy.spatial import cKDTree
    disc = np.asarray(discrete, dtype=bool)[list(z)]
    space = prepared[:, list(z)] * np.where(disc, 1e3, 1.0)
    k = min(k, prepared.shape[0])
    _, neighbours = cKDTree(space).query(space, k=k)
    neighbours = np.asarray(neighbours, dtype=np.int64).reshape(len(space), k)
    rng = np.random.default_rng(seed)
    return [_restricted_permutation(neighbours, rng.permutation(len(space)),
                                    np.argsort(rng.random(neighbours.shape), axis=1)) for _ in range(count)]


def _log_ratio_mean(sums, logdet) -> float:
    """mean log[f_xyz·f_z / (f_xz·f_yz)] in bits; the kernels' normalising constants enter through
    log|det W| (the 2π terms cancel: xyz and z have as many dimensions as xz and yz)."""
    s = np.maximum(sums, 1e-300)
    nats = np.mean(np.log(s[:, 3]) + np.log(s[:, 0]) - np.log(s[:, 1]) - np.log(s[:, 2]))
    return float(nats + logdet[3] + logdet[0] - logdet[1] - logdet[2]) / LN2


def cell_codes(codes: np.ndarray) -> np.ndarray:
    """One integer code per distinct row of `codes` (a joint code for a block of discrete columns)."""
    _, inverse = np.unique(codes, axis=0, return_inverse=True)
    return inverse.ravel().astype(np.float64)


def _cell_counts(codes: np.ndarray) -> np.ndarray:
    """For each row, how many rows share its combination of codes (columns of `codes`)."""
    if codes.shape[1] == 0:
        return np.full(codes.shape[0], codes.shape[0], dtype=np.float64)
    _, inverse, counts = np.unique(codes, axis=0, return_inverse=True, return_counts=True)
    return counts[inverse.ravel()].astype(np.float64)


def discrete_cmi_bits(codes: np.ndarray, x, y, z=()) -> float:
    """Plug-in I(x; y | z) in bits by counting: what the kernel pass gives when every column is discrete."""
    x, y, z = list(x), list(y), list(z)
    nz, nxz = _cell_counts(codes[:, z]), _cell_counts(codes[:, x + z])
    nyz, nxyz = _cell_counts(codes[:, y + z]), _cell_counts(codes[:, x + y + z])
    return float(np.mean(np.log(nxyz * nz / (nxz * nyz))) / LN2)


def _drop_copies(prepared, cols, z) -> list:
    """`cols` without those equal to a z column. After the rank transform a monotone deterministic
    relation makes two columns identical; such a column carries nothing beyond z, and dropping it
    gives the exact 0 the product kernel would only approach (k·k is a narrower kernel than k)."""
    return [c for c in cols if not any(np.array_equal(prepared[:, c], prepared[:, w]) for w in z)]


def cmi_bits(prepared, discrete, x, y, z=(), estimator="kde", seed=0, rows=None, permutation=None,
             serial=False) -> float:
    """I(x; y | z) in bits for lists of column indices of a prepared matrix (I(x;y) if z is empty).

    The bandwidth and bin-width constants cancel between the four entropy terms, so they drop out.
    """
    x, y = _drop_copies(prepared, x, z), _drop_copies(prepared, y, z)
    if not x or not y:
        return 0.0
    if np.asarray(discrete, dtype=bool)[list(x) + list(y) + list(z)].all():
        codes = prepared if permutation is None else permuted(prepared, x, permutation)
        return discrete_cmi_bits(codes, x, y, z)
    return _log_ratio_mean(*kernel_terms(prepared, discrete, x, y, z, estimator, seed, rows, permutation, serial))


def gaussian_cmi_bits(prepared, x, y, z=()) -> float:
    """I(x; y | z) of a Gaussian with the columns' covariance, in bits: on normal scores, the
    Gaussian-copula part of the "kde" estimate (its log|det W| terms), i.e. the partial correlation."""
    x, y, z = _drop_copies(prepared, x, z), _drop_copies(prepared, y, z), list(z)
    if not x or not y:
        return 0.0

    def logdet(cols):
        if not cols:
            return 0.0
        cov = np.atleast_2d(np.cov(prepared[:, cols], rowvar=False, bias=True))
        return np.linalg.slogdet(cov + np.eye(len(cov)) * 1e-12)[1]
    nats = 0.5 * (logdet(x + z) + logdet(y + z) - logdet(x + y + z) - logdet(z))
    return float(max(nats, 0.0) / LN2)


def permuted(prepared, x, permutation):
    """A copy of the prepared matrix with the x columns' rows permuted (a local-permutation null draw)."""
    out = prepared.copy()
    out[:, list(x)] = prepared[permutation][:, list(x)]
    return out


def entropy_bits(prepared, discrete, cols, estimator="lemeire", delta=None, seed=0) -> float:
    """H of the columns `cols`, discretised in bins of width `delta` per continuous column (Eq. 11).

    `delta` defaults to range/100 per column. For "kde" the continuous columns are normal scores,
    so the value is the entropy of the copula-transformed variable.
    """
    cols = list(cols)
    n = prepared.shape[0]
    disc = np.asarray(discrete, dtype=bool)[cols]
    sums, logdet = kernel_terms(prepared, discrete, [], [], cols, estimator, seed)
    # f = S/n · |det W| / (2π)^(d/2) over the continuous columns; discrete ones give frequencies.
    d = int((~disc).sum())
    log_f = np.log(np.maximum(sums[:, 0], 1e-300)) - math.log(n) + logdet[0] - d / 2 * math.log(2 * math.pi)
    if delta is None:
        rng = np.ptp(prepared[:, cols], axis=0)[~disc]
        delta = np.where(rng > 0, rng / 100.0, 1.0)
    log_delta = np.sum(np.log(np.broadcast_to(np.asarray(delta, dtype=float), (d,))))
    return float(-(np.mean(log_f) + log_delta) / LN2)


def _as_matrix(*columns):
    return np.column_stack([np.asarray(c, dtype=np.float64).reshape(len(c), -1) for c in columns])


def entropy(values, discrete: bool = False, estimator: str = "lemeire", delta=None) -> float:
    """Entropy in bits of one column (or of the columns of a 2-D array, all of one kind)."""
    mat = _as_matrix(values)
    disc = np.full(mat.shape[1], bool(discrete))
    return entropy_bits(prepare(mat, disc, estimator), disc, range(mat.shape[1]), estimator, delta)


def mutual_information(x, y, z=None, discrete=(False, False, False), estimator: str = "kde") -> float:
    """I(x; y) or I(x; y | z) in bits for 1-D arrays (z may be 2-D); `discrete` flags x, y, z."""
    parts = [x, y] + ([] if z is None else [z])
    mat = _as_matrix(*parts)
    widths = [_as_matrix(p).shape[1] for p in parts]
    disc = np.concatenate([np.full(w, bool(discrete[i])) for i, w in enumerate(widths)])
    idx = np.cumsum([0] + widths)
    blocks = [list(range(idx[i], idx[i + 1])) for i in range(len(parts))]
    prepared = prepare(mat, disc, estimator)
    return cmi_bits(prepared, disc, blocks[0], blocks[1], blocks[2] if z is not None else [], estimator)
