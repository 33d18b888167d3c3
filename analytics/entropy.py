"""Entropy, mutual information and conditional MI of mixed discrete and continuous columns.

Gaussian kernel density estimates for continuous columns, counting for discrete ones (numba,
parallel over evaluation points); two estimators: the papers' "lemeire" and the calibrated "kde".

One kernel pass sums, for every evaluation point, the kernel mass of the z, xz, yz and xyz
subspaces at once (each subspace with its own copy of its columns), so a conditional MI costs one
O(m·n·d) pass.

- "lemeire" (Lemeire et al., §7.1 and Eq. 11): raw values, bandwidth 4·range/n per continuous
  column, entropy of the KDE discretised in bins of width Δ. The integral of Eq. 11 is evaluated by
  Monte Carlo: one point drawn from the KDE per data point (seeded, so results are reproducible).
- "kde" (default): continuous columns replaced by normal scores of their ranks (MI is invariant to
  monotone maps, so this loses nothing and gives every column the same scale); each subspace's
  kernel has bandwidth matrix h²·cov (the marginal of one joint kernel, h from Silverman's rule for
  the joint dimension), resubstitution at the data points. Its independence threshold comes from a
  null calibrated on independent data (causewatch.analytics.ci), not from a fixed number of bits.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from scipy import special

ESTIMATORS = ("kde", "lemeire")
# "kde" bandwidth = this × Silverman's rule. Resubstitution counts each point's own kernel; at the
# density-optimal width that term dominates in 3-4 dimensions and swamps conditional dependences
# (docs/causal.md has the measurements); 1.5× keeps it small while leaving the dependence visible.
KDE_BANDWIDTH_SCALE = 1.5
LN2 = math.log(2.0)


class EntropyError(ValueError):
    """Bad input to an entropy or MI estimate (names the column or parameter)."""


@numba.njit(parallel=True, cache=True)
def _subspace_sums(ev, data, block, discrete):
    """Kernel mass at each row of `ev` for the four subspaces z, xz, yz, xyz (result columns).

    `block[k]` (0-3) names the subspace column k belongs to: every subspace has its own copy of its
    columns, already whitened (or scaled) by that subspace's bandwidth matrix, so each sum is a plain
    Gaussian of squared distances; discrete columns hold integer codes (kernel = indicator).
    """
    m, d = ev.shape
    n = data.shape[0]
    out = np.zeros((m, 4))
    for i in numba.prange(m):
        s0 = 0.0
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        for j in range(n):
            q0 = 0.0
            q1 = 0.0
            q2 = 0.0
            q3 = 0.0
            miss = 0  # bit b set: subspace b has a discrete mismatch
            for k in range(d):
                b = block[k]
                t = ev[i, k] - data[j, k]
                if discrete[k]:
                    if t != 0.0:
                        miss |= 1 << b
                elif b == 0:
                    q0 += t * t
                elif b == 1:
                    q1 += t * t
                elif b == 2:
                    q2 += t * t
                else:
                    q3 += t * t
            if not miss & 1:
                s0 += math.exp(-0.5 * q0)
            if not miss & 2:
                s1 += math.exp(-0.5 * q1)
            if not miss & 4:
                s2 += math.exp(-0.5 * q2)
            if not miss & 8:
                s3 += math.exp(-0.5 * q3)
        out[i, 0] = s0
        out[i, 1] = s1
        out[i, 2] = s2
        out[i, 3] = s3
    return out


def subspace_sums_reference(ev, data, block, discrete):
    """Plain numpy version of the numba kernel (the numba one is tested against it)."""
    out = np.zeros((ev.shape[0], 4))
    for i in range(ev.shape[0]):
        diff = ev[i] - data
        q = np.where(discrete, 0.0, diff * diff)
        miss = discrete & (diff != 0)
        for b in range(4):
            cols = block == b
            kb = np.exp(-0.5 * q[:, cols].sum(axis=1))
            kb[miss[:, cols].any(axis=1)] = 0.0
            out[i, b] = kb.sum()
    return out


def normal_scores(values: np.ndarray) -> np.ndarray:
    """Normal scores of the ranks (ties share their average rank): the copula transform."""
    from scipy.stats import rankdata
    n = len(values)
    return special.ndtri((rankdata(values) - 0.5) / n)


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


def _whitening(sub: np.ndarray, h: float) -> np.ndarray:
    """W with W·Wᵀ = (h²·cov)⁻¹: the kernel follows the correlation of the columns, so strongly
    related conditioning variables do not smear the conditional density across their ridge."""
    cov = np.atleast_2d(np.cov(sub, rowvar=False, bias=True))
    cov += np.eye(len(cov)) * 1e-9 * max(np.trace(cov), 1e-12)
    return np.linalg.inv(np.linalg.cholesky(cov)).T / h


def kernel_terms(prepared, discrete, x, y, z, estimator="kde", seed=0, rows=None, permutation=None):
    """Kernel sums (m, 4) for the subspaces z, xz, yz, xyz and the log|det| of their transforms.

    "kde" whitens each subspace's continuous columns with a bandwidth matrix h²·cov (the marginal
    of the joint kernel, so the four estimates are consistent); "lemeire" scales each column by its
    own bandwidth. `permutation` reorders the rows of the x block (a null sample); `rows` evaluates
    at a subset of the data points only (resubstitution, so each point's own kernel still counts).
    """
    x, y, z = list(x), list(y), list(z)
    cols = x + y + z
    disc = np.asarray(discrete, dtype=bool)
    base = prepared[:, cols].copy()
    if permutation is not None:
        base[:, :len(x)] = base[permutation, :len(x)]
    ev_base = base
    if estimator == "lemeire":
        # one draw from the KDE per data point: the mean of -log f then estimates the KDE's entropy
        bw = bandwidths(prepared, discrete, cols, estimator)
        noise = np.random.default_rng(seed).standard_normal(base.shape) * bw
        ev_base = base + np.where(disc[cols], 0.0, noise)
    if rows is not None:
        ev_base = ev_base[rows]
    pos = {c: i for i, c in enumerate(cols)}
    h = bandwidths(prepared, discrete, cols, "kde")[~disc[cols]][:1]
    data_parts, ev_parts, block, flags, logdet = [], [], [], [], np.zeros(4)
    for b, members in enumerate((z, x + z, y + z, x + y + z)):
        idx = [pos[c] for c in members]
        cont = [i for i in idx if not disc[cols[i]]]
        dsc = [i for i in idx if disc[cols[i]]]
        if cont:
            if estimator == "lemeire":
                w = np.diag(1.0 / bandwidths(prepared, discrete, [cols[i] for i in cont], "lemeire"))
            else:
                w = _whitening(base[:, cont], float(h[0]))
            logdet[b] = np.linalg.slogdet(w)[1]
            data_parts.append(base[:, cont] @ w)
            ev_parts.append(ev_base[:, cont] @ w)
        data_parts.append(base[:, dsc])
        ev_parts.append(ev_base[:, dsc])
        block += [b] * (len(cont) + len(dsc))
        flags += [False] * len(cont) + [True] * len(dsc)
    data = np.ascontiguousarray(np.hstack(data_parts)) if block else np.zeros((len(base), 0))
    ev = np.ascontiguousarray(np.hstack(ev_parts)) if block else np.zeros((len(ev_base), 0))
    sums = _subspace_sums(ev, data, np.array(block, dtype=np.int64), np.array(flags, dtype=np.bool_))
    return sums, logdet


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


def cmi_bits(prepared, discrete, x, y, z=(), estimator="kde", seed=0, rows=None, permutation=None) -> float:
    """I(x; y | z) in bits for lists of column indices of a prepared matrix (I(x;y) if z is empty).

    The bandwidth and bin-width constants cancel between the four entropy terms, so they drop out.
    """
    x, y = _drop_copies(prepared, x, z), _drop_copies(prepared, y, z)
    if not x or not y:
        return 0.0
    if np.asarray(discrete, dtype=bool)[list(x) + list(y) + list(z)].all():
        codes = prepared if permutation is None else _permuted(prepared, x, permutation)
        return discrete_cmi_bits(codes, x, y, z)
    return _log_ratio_mean(*kernel_terms(prepared, discrete, x, y, z, estimator, seed, rows, permutation))


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


def _permuted(prepared, x, permutation):
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
