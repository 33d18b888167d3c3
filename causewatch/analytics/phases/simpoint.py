"""SimPoint 3.2's phase clustering of basic block vectors as a scikit-learn style estimator.

Normalise, random projection, weighted k-means from k-means++ starts (or SimPoint's sampled ones), BIC with a
variance floor, binary search over k; numpy only.
"""

from __future__ import annotations

import math

import numpy as np

from .formats import CountRows, PhaseError, count_rows, row_of_entries


class _Projection:
    """SimPoint's random projection: entries uniform in [-1, 1] drawn row by row from the seed, grown
    as higher block ids appear (a file read in chunks), equal to drawing all its rows at once. Its
    storage doubles when it grows: copying it whole for every chunk with new ids was a large share of
    reading a recording (docs/perf-log.md, "SimPoint's projection")."""

    def __init__(self, dim: int, seed: int):
        self.rng, self._rows, self._n = np.random.default_rng(seed), np.zeros((0, dim)), 0

    @property
    def matrix(self) -> np.ndarray:
        return self._rows[:self._n]

    def cover(self, n_blocks: int) -> np.ndarray:
        extra = n_blocks - self._n
        if extra > 0:
            if n_blocks > len(self._rows):
                grown = np.empty((max(n_blocks, 2 * len(self._rows)), self._rows.shape[1]))
                grown[:self._n] = self._rows[:self._n]
                self._rows = grown
            self._rows[self._n:n_blocks] = self.rng.uniform(-1.0, 1.0, size=(extra, self._rows.shape[1]))
            self._n = n_blocks
        return self.matrix


_PROJECT_ENTRIES = 1 << 16   # entries projected at once: their gathered projection rows stay ~8 MB


def project(rows: CountRows, projection: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(projected rows, row sums): each row divided by its sum (all-zero rows stay zero), times the
    projection; blocks past the projection's rows (unseen in fit) count in the sum only.

    Each entry's projection row is gathered, scaled and summed per interval (np.add.reduceat over the
    rows' runs of entries), in slices of whole rows: one pass, where a bincount per dimension made
    `dim` passes over the entries with a strided gather each, slower (docs/perf-log.md, "SimPoint's projection")."""
    entry_row = row_of_entries(rows.indptr)
    n, dim = rows.shape[0], projection.shape[1]
    sums = np.bincount(entry_row, weights=rows.data, minlength=n)
    known = rows.indices < len(projection)
    entry_row, cols = entry_row[known], rows.indices[known]
    unit = rows.data[known] / np.where(sums > 0, sums, 1.0)[entry_row]   # an all-zero row stays zero
    out = np.zeros((n, dim))
    if not len(cols):
        return out, sums
    starts = np.flatnonzero(np.r_[True, entry_row[1:] != entry_row[:-1]])   # each row's first entry
    bounds = np.append(starts, len(cols))
    first = 0
    while first < len(starts):
        # the rows whose entries end within _PROJECT_ENTRIES of this slice's start (at least one row)
        last = max(first + 1, int(np.searchsorted(bounds, bounds[first] + _PROJECT_ENTRIES, "right")) - 1)
        lo, hi = bounds[first], bounds[last]
        gathered = projection[cols[lo:hi]]
        gathered *= unit[lo:hi, None]
        out[entry_row[starts[first:last]]] = np.add.reduceat(gathered, starts[first:last] - lo, axis=0)
        first = last
    return out, sums


def nearest(data, centers, block: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """(label, squared distance) of each row's nearest centre, from exact differences (so a row at
    its centre is at 0); ties go to the lower index, as in SimPoint."""
    labels = np.empty(len(data), np.int64)
    dist = np.empty(len(data))
    step = max(1, block // max(len(centers), 1))
    for lo in range(0, len(data), step):
        d2 = ((data[lo:lo + step, None, :] - centers[None, :, :]) ** 2).sum(axis=2)
        labels[lo:lo + step] = d2.argmin(axis=1)
        dist[lo:lo + step] = d2[np.arange(len(d2)), labels[lo:lo + step]]
    return labels, dist


_ONE_THREAD_GEMM = 1 << 17   # m*n*k below OpenBLAS's threshold for threading a product (2^18)


def kmeans(data, weights, centers, max_iter: int) -> tuple[np.ndarray, np.ndarray, int]:
    """SimPoint 3.2's weighted Lloyd iterations: until no centre moves or `max_iter` passes.

    A centre left without members is reset to the origin, as SimPoint's does (it is zeroed and not
    divided); from there it can take over a group of far-off rows in the next pass, and on the
    nearly noise-free vectors of compiled loops that is what keeps the search out of bad optima.
    Returns (centres, labels, passes); labels are the last pass's assignment.
    """
    k = len(centers)
    weighted_t = np.ascontiguousarray((data * weights[:, None]).T)
    rows = np.arange(len(data))
    block = max(1, _ONE_THREAD_GEMM // (k * data.shape[1]))
    # reused across passes: fresh arrays this size cost page faults every pass
    scores, members = np.empty((len(data), k)), np.zeros((len(data), k))
    for passes in range(1, max_iter + 1):
        # argmin over c of |x - c|^2 is argmin of |c|^2 - 2 x.c; products in row blocks small enough
        # that OpenBLAS runs them on one thread (its threads cost more than the work on a busy machine)
        cross, norms = -2.0 * centers.T, (centers * centers).sum(axis=1)
        for lo in range(0, len(data), block):
            np.matmul(data[lo:lo + block], cross, out=scores[lo:lo + block])
        scores += norms
        labels = scores.argmin(axis=1)
        sizes = np.bincount(labels, weights=weights, minlength=k)
        members[rows, labels] = 1.0
        sums = (weighted_t @ members).T     # per-centre weighted sums as one small product
        members[rows, labels] = 0.0
        new = np.divide(sums, sizes[:, None], out=np.zeros_like(sums), where=sizes[:, None] > 0)
        if np.array_equal(new, centers):
            break
        centers = new
    return centers, labels, passes


def kmeans_pp(data, weights, k: int, rng) -> np.ndarray:
    """k starting centres by greedy k-means++ (Arthur & Vassilvitskii 2007; 2 + ln k candidates a step,
    as scikit-learn): each next centre drawn with probability weight x squared distance to the nearest
    centre so far, the candidate leaving the least weighted distortion kept.

    On loop kernels SimPoint's uniform draws often put two starts in one kernel, whose intervals then
    stay split at a loop boundary while far-off start-up intervals share a centre (a worse optimum that
    the BIC threshold can still accept); drawing by distance starts every far group first. Once every
    distinct row is a centre, the rest are drawn by weight: duplicates, emptied in the first pass."""
    trials = 2 + int(math.log(k))
    norms = (data * data).sum(axis=1)
    centers = np.empty((k, data.shape[1]))
    centers[0] = data[rng.choice(len(data), p=weights / weights.sum())]
    d2 = ((data - centers[0]) ** 2).sum(axis=1)
    for c in range(1, k):
        cumulative = np.cumsum(weights * d2)
        if cumulative[-1] <= 0:
            cumulative = np.cumsum(weights)
        # inverse-CDF draws (rng.choice with p checks and normalises p on every call: most of the cost)
        candidates = np.minimum(np.searchsorted(cumulative, rng.random(trials) * cumulative[-1], side="right"),
                                len(data) - 1)
        # |x - y|^2 = |x|^2 - 2 x.y + |y|^2 as one product (differences would cost trials x rows x dim)
        to_candidates = np.maximum(norms[:, None] - 2.0 * data @ data[candidates].T + norms[candidates], 0.0)
        near = np.minimum(d2[:, None], to_candidates)
        best = int(np.argmin(weights @ near))
        centers[c], d2 = data[candidates[best]], near[:, best]
    return centers


def total_variance(data, weights) -> float:
    """Weighted variance per dimension of the rows around their mean: the BIC's variance at k = 1."""
    mean = weights @ data / weights.sum()
    return float(weights @ ((data - mean) ** 2).sum(axis=1) / (weights.sum() * data.shape[1]))


def bic_score(labels, d2, weights, k: int, n: int, dim: int, floor: float = 0.0) -> float:
    """SimPoint 3.2's BIC of a weighted clustering (spherical Gaussians sharing one variance), the
    variance held at `floor` or above.

    `labels`, `d2` and `weights` may describe distinct rows standing for `n` intervals (a row's weight
    is the sum of its copies'); with floor 0 the score is the one SimPoint computes over all n."""
    total = weights.sum()
    distortion = (d2 * weights).sum() / (total / n)
    sigma2 = max(distortion / (dim * n), floor, 1e-300)  # zero distortion (k = n) would give log(0)
    sizes = np.bincount(labels, weights=weights, minlength=k) / total
    likelihood = -dim * (math.log(2.0 * math.pi * sigma2) + 1) / 2.0 - math.log(total)
    likelihood += (np.log(sizes[labels]) * weights / total).sum()
    likelihood *= n
    n_params = (k - 1) + k * dim + 1
    return float(likelihood - n_params / 2.0 * math.log(n))


class SimPoint:
    """SimPoint 3.2 phase clustering as a scikit-learn style estimator.

    fit(X, weights=None): X is (intervals x blocks) counts, dense, scipy sparse or CountRows, or an
    iterator of CountRows (formats.iter_frequency_vectors: a file projected chunk by chunk). With
    `fixed_length` every interval weighs the same; otherwise an interval weighs `weights[i]` or, by
    default, its size (row sum). k is chosen by SimPoint's binary search up to `max_k` (or fixed with
    `k`). Intervals with the same projected vector are clustered once, weighted by their number, which
    changes nothing in the result and makes loop-heavy recordings (few distinct vectors) fast.
    Two departures from SimPoint 3.2, both for compiled loops' nearly noise-free vectors, where the
    only spread inside a kernel is where an interval boundary cuts its loop: k-means starts are drawn
    by k-means++ (`init="samp"` draws them uniformly, as SimPoint), and the BIC's variance never falls
    below `variance_floor` times the variance at k = 1, so splitting a kernel at its loop boundary,
    or giving each of a few distinct vectors its own centre (zero distortion, an unbounded BIC), earns
    nothing (`variance_floor=0` and `init="samp"` give SimPoint 3.2's clustering). The default, 1e-3,
    sits between what splits one planted phase and what joins two on every conformance input: an
    interpreter's first pass over a kernel (its allocator warming) differs from its later passes by at
    most ~1e-4 of the k = 1 variance, and joining the two closest planted phases costs at least ~4e-3
    (docs/phases.md, "Short interpreter recordings").
    Learned: labels_, distances_, cluster_centers_, simpoints_ (interval nearest each centre, -1 when
    a phase is empty), weights_ (phase weights summing to 1), interval_weights_ (each interval's, summing
    to 1: what centroids.phase_centroids takes), k_, bic_ ({k: BIC} of the runs made), projection_,
    n_features_in_.
    """

    def __init__(self, max_k: int = 30, dim: int = 15, n_init: int = 5, max_iter: int = 100,
                 bic_threshold: float = 0.9, fixed_length: bool = True, k: int | None = None,
                 seed: int = 493575226, init: str = "k-means++", variance_floor: float = 1e-3):
        self.max_k, self.dim, self.n_init, self.max_iter = max_k, dim, n_init, max_iter
        self.bic_threshold, self.fixed_length, self.k = bic_threshold, fixed_length, k
        self.seed, self.init, self.variance_floor = seed, init, variance_floor

    def fit(self, X, weights=None) -> "SimPoint":
        if self.dim < 1 or self.max_k < 1 or self.n_init < 1 or self.max_iter < 1:
            raise PhaseError("dim, max_k, n_init and max_iter must all be >= 1")
        if not 0 <= self.bic_threshold <= 1:
            raise PhaseError(f"bic_threshold must lie in [0, 1], got {self.bic_threshold}")
        if self.init not in ("k-means++", "samp"):
            raise PhaseError(f"init must be 'k-means++' or 'samp', got {self.init!r}")
        if not 0 <= self.variance_floor < 1:
            raise PhaseError("variance_floor must lie in [0, 1) (a fraction of the variance at k = 1), "
                             f"got {self.variance_floor}")
        projection, parts, sizes = _Projection(self.dim, self.seed), [], []
        for rows in [X] if not hasattr(X, "__next__") else X:   # a matrix, or chunks of a file
            rows = self._check(rows)
            data, row_sums = project(rows, projection.cover(rows.shape[1]))
            parts.append(data)
            sizes.append(row_sums)
        data, sizes = np.concatenate(parts), np.concatenate(sizes)
        n = len(data)
        if self.k is not None and not 1 <= self.k <= n:
            raise PhaseError(f"k={self.k} must be between 1 and the number of intervals ({n})")
        self.projection_ = projection.matrix
        self.n_features_in_ = len(self.projection_)
        w = self.interval_weights_ = self._interval_weights(sizes, weights)
        distinct, inverse = np.unique(np.ascontiguousarray(data).view(np.dtype((np.void, data.itemsize * self.dim))),
                                      return_inverse=True)
        inverse = inverse.ravel()
        unique = distinct.view(data.dtype).reshape(-1, self.dim)
        uw = np.bincount(inverse, weights=w, minlength=len(unique))
        runs: dict[int, tuple[float, np.ndarray]] = {}
        floor = self.variance_floor * total_variance(unique, uw)

        def run(k: int) -> float:
            if k not in runs:
                runs[k] = self._best_of_seeds(unique, uw, inverse, k, n, floor)
            return runs[k][0]

        if self.k is not None:
            run(self.k)
        else:
            self._binary_search(run, min(self.max_k, n))
        self.bic_ = {k: runs[k][0] for k in sorted(runs)}
        self.k_ = self._choose(self.bic_)
        self.cluster_centers_ = runs[self.k_][1]
        labels, d2 = nearest(unique, self.cluster_centers_)
        self._finish(labels[inverse], d2[inverse], w)
        return self

    def predict(self, X) -> np.ndarray:
        """Phase of each row of new counts X (blocks numbered as in fit; new blocks count for nothing)."""
        return nearest(project(self._check(X), self.projection_)[0], self.cluster_centers_)[0]

    @staticmethod
    def _check(X) -> CountRows:
        rows = count_rows(X)
        if rows.shape[0] == 0:
            raise PhaseError("no intervals to cluster (the matrix has 0 rows)")
        if not np.isfinite(rows.data).all() or (rows.data < 0).any():
            raise PhaseError("counts must be finite and >= 0")
        return rows

    def _interval_weights(self, sizes: np.ndarray, weights) -> np.ndarray:
        n = len(sizes)
        if self.fixed_length:
            return np.full(n, 1.0 / n)
        w = sizes if weights is None else np.asarray(weights, float)
        if w.shape != (n,) or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
            raise PhaseError(f"weights must be {n} finite values >= 0 with a positive sum")
        return w / w.sum()

    def _best_of_seeds(self, unique, uw, inverse, k: int, n: int, floor: float):
        """SimPoint's n_init restarts, each from k-means++ starts or (`init="samp"`) from k intervals
        drawn at random (with replacement, as SimPoint's `rand() % n`); the best BIC wins."""
        best = None
        for trial in range(self.n_init):
            rng = np.random.default_rng([self.seed, k, trial])
            if self.init == "samp":
                start = unique[inverse[rng.integers(0, n, size=k)]]
            else:
                start = kmeans_pp(unique, uw, k, rng)
            centers, labels, _ = kmeans(unique, uw, start, self.max_iter)
            d2 = ((unique - centers[labels]) ** 2).sum(axis=1)
            score = bic_score(labels, d2, uw, k, n, self.dim, floor)
            if best is None or score > best[0]:
                best = (score, centers)
        return best

    def _binary_search(self, run, max_k):
        """SimPoint 3.2's search: k = 1, max_k, (1 + max_k) / 2, then halve the window: upward while
        the latest BIC is below the threshold (and the best k lies above the worst), else downward."""
        lo, hi = 1, max_k
        scores = []
        for k in dict.fromkeys([1, max_k, (1 + max_k) // 2]):
            scores.append((k, run(k)))
        last = scores[-1][0]
        while len(scores) >= 3 and hi - lo > 1:
            values = [s for _, s in scores]
            threshold = min(values) + self.bic_threshold * (max(values) - min(values))
            i_max, i_min = int(np.argmax(values)), int(np.argmin(values))
            if i_max > i_min and values[-1] < threshold:
                nxt, lo = (last + hi) // 2, last
            else:
                nxt, hi = (last + lo) // 2, last
            if hi - lo <= 1:
                break
            scores.append((nxt, run(nxt)))
            last = nxt

    def _choose(self, bic: dict[int, float]) -> int:
        values = list(bic.values())
        threshold = min(values) + self.bic_threshold * (max(values) - min(values))
        return min(k for k, s in bic.items() if s >= threshold)

    def _finish(self, labels, d2, w):
        self.labels_ = labels
        self.distances_ = np.sqrt(d2)
        self.weights_ = np.bincount(labels, weights=w, minlength=self.k_)
        simpoints = np.full(self.k_, -1, np.int64)
        order = np.lexsort((np.arange(len(labels)), d2, labels))   # by phase, then distance, then interval
        firsts = order[np.r_[True, labels[order][1:] != labels[order][:-1]]]
        simpoints[labels[firsts]] = firsts
        self.simpoints_ = simpoints
