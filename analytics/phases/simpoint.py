"""Program phases: SimPoint 3 compatible clustering of basic block vectors, and an online phase tracker.

Reads SimPoint frequency-vector files (`T:id:count :id:count ...`), clusters them as SimPoint 3.2 does
(normalise, random projection, weighted k-means, BIC, binary search over k) and writes its formats.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np
import scipy.sparse as sp


class PhaseError(ValueError):
    """Bad input to phase analysis: a malformed vector file, an empty matrix, a bad parameter."""


# ---- SimPoint file formats ----------------------------------------------------------------------

def read_frequency_vectors(path) -> sp.csr_matrix:
    """Parse a SimPoint .bb file into an (intervals x blocks) CSR matrix of counts (block id i -> column i-1).

    Lines that do not start with 'T' (comments, valgrind's '# Thread' trailers, blanks) are skipped.
    """
    indptr, cols, vals = [0], [], []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.startswith("T"):
                continue
            for token in line[1:].split():
                parts = token.split(":")
                if len(parts) != 3 or parts[0]:
                    raise PhaseError(f"{path}:{lineno}: token {token!r} is not ':id:count'")
                try:
                    block, count = int(parts[1]), float(parts[2])
                except ValueError:
                    raise PhaseError(f"{path}:{lineno}: token {token!r} has a non-numeric id or count") from None
                if block < 1 or count < 0:
                    raise PhaseError(f"{path}:{lineno}: token {token!r}: ids start at 1 and counts are >= 0")
                cols.append(block - 1)
                vals.append(count)
            indptr.append(len(cols))
    if len(indptr) == 1:
        raise PhaseError(f"{path}: no frequency vectors (expected lines 'T:id:count :id:count ...')")
    width = max(cols) + 1 if cols else 1
    return sp.csr_matrix((np.array(vals), np.array(cols, np.int64), np.array(indptr)),
                         shape=(len(indptr) - 1, width))


def write_frequency_vectors(path, X) -> None:
    """Write a counts matrix (dense or sparse) as a SimPoint .bb file; zero entries are left out."""
    X = sp.csr_matrix(X)
    with open(path, "w") as f:
        for r in range(X.shape[0]):
            lo, hi = X.indptr[r], X.indptr[r + 1]
            tokens = "".join(f":{c + 1}:{_num(v)} " for c, v in zip(X.indices[lo:hi], X.data[lo:hi]) if v)
            f.write(f"T{tokens}\n")


def _num(v) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def write_simpoints(path, simpoints) -> None:
    """`<interval> <phase>` per non-empty phase (simpoints[p] == -1 marks an empty one)."""
    Path(path).write_text("".join(f"{i} {p}\n" for p, i in enumerate(simpoints) if i >= 0))


def write_weights(path, weights) -> None:
    """`<weight> <phase>` per non-empty phase, weights renormalised over the non-empty phases."""
    weights = np.asarray(weights, float)
    total = weights[weights > 0].sum()
    Path(path).write_text("".join(f"{float(w / total)!r} {p}\n" for p, w in enumerate(weights) if w > 0))


def write_labels(path, labels, distances) -> None:
    """`<phase> <distance to its centre>` per interval, in interval order."""
    Path(path).write_text("".join(f"{int(l)} {float(d)!r}\n" for l, d in zip(labels, distances)))


def _read_pairs(path, first, second):
    rows = []
    for lineno, line in enumerate(Path(path).read_text().splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        try:
            rows.append((first(parts[0]), second(parts[1])))
        except (ValueError, IndexError):
            raise PhaseError(f"{path}:{lineno}: expected two fields, got {line!r}") from None
    return rows


def read_simpoints(path) -> dict[int, int]:
    """{phase: interval} from a .simpoints file."""
    return {p: i for i, p in _read_pairs(path, int, int)}


def read_weights(path) -> dict[int, float]:
    """{phase: weight} from a .weights file."""
    return {p: w for w, p in _read_pairs(path, float, int)}


def read_labels(path) -> tuple[np.ndarray, np.ndarray]:
    """(labels, distances) from a labels file."""
    rows = _read_pairs(path, int, float)
    return np.array([r[0] for r in rows], np.int64), np.array([r[1] for r in rows])


# ---- sparse string-keyed vectors (agent BBVs) -----------------------------------------------------

def vectors_to_matrix(vectors, keys: list[str] | None = None) -> tuple[sp.csr_matrix, list[str]]:
    """Stack sparse vectors given as {key: count} or {"keys": [...], "counts": [...]} into CSR.

    New keys are appended to `keys` (a copy), so a matrix can be built against an existing key table.
    """
    keys = list(keys or [])
    index = {k: i for i, k in enumerate(keys)}
    indptr, cols, vals = [0], [], []
    for vec in vectors:
        items = zip(vec["keys"], vec["counts"]) if "keys" in vec and "counts" in vec else vec.items()
        for key, count in items:
            col = index.setdefault(key, len(index))
            if col == len(keys):
                keys.append(key)
            cols.append(col)
            vals.append(float(count))
        indptr.append(len(cols))
    X = sp.csr_matrix((np.array(vals), np.array(cols, np.int64), np.array(indptr)),
                      shape=(len(indptr) - 1, max(len(keys), 1)))
    X.sum_duplicates()
    return X, keys


# ---- projection and the k-means kernels ----------------------------------------------------------

def normalise_rows(X) -> sp.csr_matrix:
    """Each row divided by its sum (all-zero rows stay zero), as SimPoint does before projecting."""
    X = sp.csr_matrix(X, dtype=float)
    sums = np.asarray(X.sum(axis=1)).ravel()
    inv = np.divide(1.0, sums, out=np.zeros_like(sums), where=sums > 0)
    return sp.csr_matrix(sp.diags(inv) @ X)


def projection_matrix(n_features: int, dim: int, seed: int) -> np.ndarray:
    """SimPoint's random projection: entries uniform in [-1, 1], fixed by the seed."""
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=(n_features, dim))


@numba.njit(cache=True)
def _kmeans_numba(data, weights, centers, max_iter):
    n, d = data.shape
    k = centers.shape[0]
    old = centers.copy()
    new = np.empty_like(old)
    sizes = np.zeros(k)
    iterations = 0
    for _ in range(max_iter):
        iterations += 1
        new[:, :] = 0.0
        sizes[:] = 0.0
        for i in range(n):
            best, best_d = 0, np.inf
            for c in range(k):
                s = 0.0
                for j in range(d):
                    t = data[i, j] - old[c, j]
                    s += t * t
                if s < best_d:
                    best, best_d = c, s
            w = weights[i]
            for j in range(d):
                new[best, j] += data[i, j] * w
            sizes[best] += w
        same = True
        for c in range(k):
            for j in range(d):
                # an empty cluster keeps its centre rather than collapsing to the origin
                v = new[c, j] / sizes[c] if sizes[c] > 0 else old[c, j]
                new[c, j] = v
                if v != old[c, j]:
                    same = False
        old, new = new, old
        if same:
            break
    return old, iterations


def _kmeans_python(data, weights, centers, max_iter):
    """Reference for `_kmeans_numba`: the same Lloyd iterations written with numpy."""
    old = centers.copy()
    iterations = 0
    for _ in range(max_iter):
        iterations += 1
        labels = _nearest(data, old)[0]
        sizes = np.bincount(labels, weights=weights, minlength=len(old))
        sums = np.zeros_like(old)
        np.add.at(sums, labels, data * weights[:, None])
        new = np.where(sizes[:, None] > 0, sums / np.where(sizes > 0, sizes, 1.0)[:, None], old)
        if np.array_equal(new, old):
            break
        old = new
    return old, iterations


def _nearest(data, centers, block: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """(label, squared distance) of each row's nearest centre; ties go to the lower index.

    Rows go in blocks so the (rows x k x dim) differences stay small for 10^5-interval files.
    """
    labels = np.empty(len(data), np.int64)
    dist = np.empty(len(data))
    for lo in range(0, len(data), block):
        d2 = ((data[lo:lo + block, None, :] - centers[None, :, :]) ** 2).sum(axis=2)
        labels[lo:lo + block] = d2.argmin(axis=1)
        dist[lo:lo + block] = d2[np.arange(len(d2)), labels[lo:lo + block]]
    return labels, dist


def bic_score(data, weights, centers) -> float:
    """SimPoint 3.2's BIC of a weighted clustering (spherical Gaussians sharing one variance)."""
    n, dim = data.shape
    labels, d2 = _nearest(data, centers)
    total = weights.sum()
    distortion = (d2 * weights).sum() / (total / n)
    sigma2 = max(distortion / (dim * n), 1e-300)  # zero distortion (k = n) would give log(0)
    sizes = np.bincount(labels, weights=weights, minlength=len(centers)) / total
    likelihood = -dim * (math.log(2.0 * math.pi * sigma2) + 1) / 2.0 - math.log(total)
    likelihood += (np.log(sizes[labels]) * weights / total).sum()
    likelihood *= n
    n_params = (len(centers) - 1) + len(centers) * dim + 1
    return float(likelihood - n_params / 2.0 * math.log(n))


# ---- the estimator -------------------------------------------------------------------------------

class SimPoint:
    """SimPoint 3.2 phase clustering as a scikit-learn style estimator.

    fit(X, weights=None): X is (intervals x blocks) counts, dense or sparse. With `fixed_length`
    every interval weighs the same; otherwise an interval weighs `weights[i]` or, by default, its
    size (row sum). k is chosen by SimPoint's binary search up to `max_k` (or fixed with `k`).
    Learned: labels_, distances_, cluster_centers_, simpoints_ (interval nearest each centre, -1 when
    a phase is empty), weights_ (phase weights summing to 1), k_, bic_ ({k: BIC} of the runs made),
    projection_.
    """

    def __init__(self, max_k: int = 30, dim: int = 15, n_init: int = 5, max_iter: int = 100,
                 bic_threshold: float = 0.9, fixed_length: bool = True, k: int | None = None,
                 seed: int = 493575226, use_numba: bool = True):
        self.max_k, self.dim, self.n_init, self.max_iter = max_k, dim, n_init, max_iter
        self.bic_threshold, self.fixed_length, self.k = bic_threshold, fixed_length, k
        self.seed, self.use_numba = seed, use_numba

    def fit(self, X, weights=None) -> "SimPoint":
        data, w = self._prepare(X, weights, fitting=True)
        n = len(data)
        kernel = _kmeans_numba if self.use_numba else _kmeans_python
        runs: dict[int, tuple[float, np.ndarray]] = {}

        def run(k: int) -> float:
            if k not in runs:
                runs[k] = self._best_of_seeds(kernel, data, w, k)
            return runs[k][0]

        if not 0 <= self.bic_threshold <= 1:
            raise PhaseError(f"bic_threshold must lie in [0, 1], got {self.bic_threshold}")
        if self.k is not None:
            if not 1 <= self.k <= n:
                raise PhaseError(f"k={self.k} must be between 1 and the number of intervals ({n})")
            run(self.k)
        else:
            self._binary_search(run, min(self.max_k, n))
        self.bic_ = {k: runs[k][0] for k in sorted(runs)}
        self.k_ = self._choose(self.bic_)
        self.cluster_centers_ = runs[self.k_][1]
        self._finish(data, w)
        return self

    def predict(self, X) -> np.ndarray:
        """Phase of each row of new counts X (same block columns as in fit)."""
        data, _ = self._prepare(X, None, fitting=False)
        return _nearest(data, self.cluster_centers_)[0]

    def _prepare(self, X, weights, fitting: bool):
        X = sp.csr_matrix(X, dtype=float)
        if X.shape[0] == 0:
            raise PhaseError("no intervals to cluster (the matrix has 0 rows)")
        if not np.isfinite(X.data).all() or (X.data < 0).any():
            raise PhaseError("counts must be finite and >= 0")
        if fitting:
            if self.dim < 1 or self.max_k < 1 or self.n_init < 1 or self.max_iter < 1:
                raise PhaseError("dim, max_k, n_init and max_iter must all be >= 1")
            self.n_features_in_ = X.shape[1]
            self.projection_ = projection_matrix(X.shape[1], self.dim, self.seed)
        unit = normalise_rows(X)
        if unit.shape[1] > self.n_features_in_:   # blocks unseen in fit project to nothing
            unit = unit[:, :self.n_features_in_]
        elif unit.shape[1] < self.n_features_in_:
            unit = sp.hstack([unit, sp.csr_matrix((unit.shape[0], self.n_features_in_ - unit.shape[1]))]).tocsr()
        data = np.ascontiguousarray(unit @ self.projection_)
        if not fitting:
            return data, None
        if self.fixed_length:
            w = np.ones(len(data))
        else:
            w = np.asarray(X.sum(axis=1)).ravel() if weights is None else np.asarray(weights, float)
            if w.shape != (len(data),) or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
                raise PhaseError(f"weights must be {len(data)} finite values >= 0 with a positive sum")
        return data, w / w.sum()

    def _best_of_seeds(self, kernel, data, w, k):
        """SimPoint's n_init restarts from k randomly sampled intervals; the best BIC wins."""
        best = None
        for trial in range(self.n_init):
            rng = np.random.default_rng([self.seed, k, trial])
            start = data[rng.choice(len(data), size=k, replace=False)]
            centers, _ = kernel(data, w, np.ascontiguousarray(start), self.max_iter)
            score = bic_score(data, w, centers)
            if best is None or score > best[0]:
                best = (score, centers)
        return best

    def _binary_search(self, run, max_k):
        """SimPoint 3.2's search: k = 1, max_k, then halve the window toward the BIC threshold."""
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

    def _finish(self, data, w):
        labels, d2 = _nearest(data, self.cluster_centers_)
        self.labels_ = labels
        self.distances_ = np.sqrt(d2)
        self.weights_ = np.bincount(labels, weights=w, minlength=self.k_)
        simpoints = np.full(self.k_, -1, np.int64)
        for phase in np.unique(labels):
            members = np.flatnonzero(labels == phase)
            simpoints[phase] = members[np.argmin(d2[members])]
        self.simpoints_ = simpoints


@dataclass
class MergedPhases:
    """Phases after merging: labels_ (0..k_-1), simpoints_ (the member nearest each merged centroid),
    weights_ (shares of the rows' sizes), distances_ (Manhattan, to the merged centroid), k_."""
    labels_: np.ndarray
    simpoints_: np.ndarray
    weights_: np.ndarray
    distances_: np.ndarray
    k_: int


def merge_close_phases(X, labels, threshold: float = 0.5) -> MergedPhases:
    """Join phases whose centroids lie within `threshold` of each other (single linkage), with the
    distance PhaseTracker uses: Manhattan between normalised vectors (0 = same mix of code, 2 = none
    in common). SimPoint's BIC rewards splitting a very tight cluster, so intervals running the same
    code can land in several phases when their vectors are nearly noise-free."""
    if not 0 <= threshold <= 2:
        raise PhaseError(f"merge threshold must lie in [0, 2] (Manhattan distance of normalised vectors), got {threshold}")
    labels = np.asarray(labels)
    Xn = normalise_rows(X).toarray()
    ids = np.unique(labels)
    centroids = np.array([Xn[labels == p].mean(axis=0) for p in ids])
    close = np.abs(centroids[:, None, :] - centroids[None, :, :]).sum(axis=2) <= threshold
    group = np.arange(len(ids))
    for a, b in zip(*np.nonzero(np.triu(close, 1))):
        group[group == group[b]] = group[a]
    _, merged = np.unique(group, return_inverse=True)
    new_labels = merged[np.searchsorted(ids, labels)]
    k = int(new_labels.max()) + 1
    centres = np.array([Xn[new_labels == p].mean(axis=0) for p in range(k)])
    distances = np.abs(Xn - centres[new_labels]).sum(axis=1)
    simpoints = np.array([np.flatnonzero(new_labels == p)[np.argmin(distances[new_labels == p])] for p in range(k)])
    sizes = np.asarray(sp.csr_matrix(X).sum(axis=1)).ravel()
    weights = np.bincount(new_labels, weights=sizes, minlength=k) / max(sizes.sum(), 1e-300)
    return MergedPhases(new_labels, simpoints, weights, distances, k)


def adjusted_rand_index(a, b) -> float:
    """Hubert & Arabie's adjusted Rand index of two labelings (1 = identical partitions)."""
    a, b = np.asarray(a), np.asarray(b)
    _, ai = np.unique(a, return_inverse=True)
    _, bi = np.unique(b, return_inverse=True)
    table = np.zeros((ai.max() + 1, bi.max() + 1))
    np.add.at(table, (ai, bi), 1)

    def pairs(x):
        return (x * (x - 1) / 2).sum()

    index, rows, cols, total = pairs(table), pairs(table.sum(1)), pairs(table.sum(0)), pairs(np.array([len(a)]))
    expected = rows * cols / total if total else 0.0
    maximum = (rows + cols) / 2
    return 1.0 if maximum == expected else float((index - expected) / (maximum - expected))


# ---- online tracking -----------------------------------------------------------------------------

class PhaseTracker:
    """Online phase ids for a live stream of sparse vectors: nearest centroid, a new phase when none is near.

    Distance is the Manhattan distance between normalised vectors (0 = same mix of code, 2 = no code
    in common), as in Sherwood et al.'s basic block distribution analysis. A vector farther than
    `threshold` from every centroid starts a new phase (up to `max_phases`; past that it joins the
    nearest). Centroids are running means of their members. The phase id is a small integer, usable
    as a discrete variable by the causal models. Learned: centers_ (phases x keys_), counts_, keys_.
    """

    def __init__(self, threshold: float = 0.5, max_phases: int = 64):
        self.threshold, self.max_phases = threshold, max_phases

    def partial_fit(self, vectors) -> "PhaseTracker":
        self.update_many(vectors)
        return self

    def update_many(self, vectors) -> np.ndarray:
        """Phase id of each vector ({key: count} or {"keys", "counts"}), learning as it goes."""
        return np.array([self.update(v) for v in vectors], np.int64)

    def update(self, vector) -> int:
        X, keys = vectors_to_matrix([vector], getattr(self, "keys_", []))
        self._grow(keys)
        x = normalise_rows(X).toarray().ravel()
        if not self.counts_.size:
            return self._new_phase(x)
        dist = np.abs(self.centers_ - x).sum(axis=1)
        phase = int(dist.argmin())
        if dist[phase] > self.threshold and len(self.counts_) < self.max_phases:
            return self._new_phase(x)
        self.counts_[phase] += 1
        self.centers_[phase] += (x - self.centers_[phase]) / self.counts_[phase]
        return phase

    def predict(self, vector) -> int:
        """Phase id of a vector without learning from it (-1 when no phase is within the threshold)."""
        if not getattr(self, "keys_", None):
            return -1
        X, _ = vectors_to_matrix([vector], self.keys_)
        x = normalise_rows(X).toarray().ravel()
        known = len(self.keys_)
        # mass on keys no phase has seen is distance too
        dist = np.abs(self.centers_ - x[:known]).sum(axis=1) + x[known:].sum()
        phase = int(dist.argmin())
        return phase if dist[phase] <= self.threshold else -1

    def _grow(self, keys):
        if not hasattr(self, "keys_"):
            self.keys_, self.centers_, self.counts_ = [], np.zeros((0, 0)), np.zeros(0, np.int64)
        extra = len(keys) - self.centers_.shape[1]
        if extra:
            self.centers_ = np.hstack([self.centers_, np.zeros((len(self.centers_), extra))])
        self.keys_ = keys

    def _new_phase(self, x) -> int:
        self.centers_ = np.vstack([self.centers_, x[None, :]])
        self.counts_ = np.append(self.counts_, 1)
        return len(self.counts_) - 1
