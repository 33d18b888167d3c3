"""Join phases whose centroids are close (single linkage on the Manhattan distance of normalised
vectors), on sparse matrices: the probe builder's step after SimPoint."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .formats import PhaseError
from .keyed import normalise_rows


@dataclass
class MergedPhases:
    """Phases after merging: labels_ (0..k_-1), simpoints_ (the member nearest each merged centroid),
    weights_ (shares of the rows' sizes), distances_ (Manhattan, to the merged centroid), k_."""
    labels_: np.ndarray
    simpoints_: np.ndarray
    weights_: np.ndarray
    distances_: np.ndarray
    k_: int


def _centroids(Xn: sp.csr_matrix, labels: np.ndarray, k: int) -> sp.csr_matrix:
    """Mean normalised row of each label 0..k-1, as a sparse (k x blocks) matrix."""
    members = sp.csr_matrix((np.ones(len(labels)), (labels, np.arange(len(labels)))), shape=(k, len(labels)))
    counts = np.bincount(labels, minlength=k).astype(float)
    return sp.csr_matrix(sp.diags(1.0 / counts) @ members @ Xn)


def _manhattan(A: sp.csr_matrix, B: sp.csr_matrix) -> np.ndarray:
    """Row-wise |a - b|_1 of two sparse matrices of equal shape (nonnegative entries), without
    densifying: |a - b|_1 = sum a + sum b - 2 sum min(a, b)."""
    return (np.asarray(A.sum(axis=1)).ravel() + np.asarray(B.sum(axis=1)).ravel()
            - 2 * np.asarray(A.minimum(B).sum(axis=1)).ravel())


def _distance_to_centroid(Xn: sp.csr_matrix, C: sp.csr_matrix, labels: np.ndarray) -> np.ndarray:
    """|x_i - C[labels[i]]|_1 per row; min(x, c) is nonzero only where x is, so only X's entries are read."""
    entry_row = np.repeat(np.arange(Xn.shape[0]), np.diff(Xn.indptr))
    shared = np.minimum(Xn.data, np.asarray(C[labels[entry_row], Xn.indices]).ravel())
    row_sums = np.asarray(Xn.sum(axis=1)).ravel()
    centre_sums = np.asarray(C.sum(axis=1)).ravel()[labels]
    return row_sums + centre_sums - 2 * np.bincount(entry_row, weights=shared, minlength=Xn.shape[0])


def merge_close_phases(X, labels, threshold: float = 0.5) -> MergedPhases:
    """Join phases whose centroids lie within `threshold` of each other (single linkage), with the
    distance PhaseTracker uses: Manhattan between normalised vectors (0 = same mix of code, 2 = none
    in common). SimPoint's BIC rewards splitting a very tight cluster, so intervals running the same
    code can land in several phases when their vectors are nearly noise-free. X stays sparse."""
    if not 0 <= threshold <= 2:
        raise PhaseError("merge threshold must lie in [0, 2] (Manhattan distance of normalised vectors), "
                         f"got {threshold}")
    X = sp.csr_matrix(X, dtype=float)
    ids, inverse = np.unique(np.asarray(labels), return_inverse=True)
    inverse = inverse.ravel()
    Xn = normalise_rows(X)
    centroids = _centroids(Xn, inverse, len(ids))
    group = np.arange(len(ids))
    for a in range(len(ids)):
        rest = np.arange(a + 1, len(ids))
        if not len(rest):
            break
        near = rest[_manhattan(centroids[np.full(len(rest), a)], centroids[rest]) <= threshold + 1e-12]
        for b in near:
            group[group == group[b]] = group[a]
    _, new_labels = np.unique(group[inverse], return_inverse=True)
    new_labels = new_labels.ravel()
    k = int(new_labels.max()) + 1
    distances = _distance_to_centroid(Xn, _centroids(Xn, new_labels, k), new_labels)
    order = np.lexsort((np.arange(len(new_labels)), distances, new_labels))
    simpoints = order[np.r_[True, new_labels[order][1:] != new_labels[order][:-1]]]
    sizes = np.asarray(X.sum(axis=1)).ravel()
    weights = np.bincount(new_labels, weights=sizes, minlength=k) / max(sizes.sum(), 1e-300)
    return MergedPhases(new_labels, simpoints, weights, distances, k)
