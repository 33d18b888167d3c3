"""Online phase ids for a live stream of sparse vectors: nearest centroid, a new phase when none is near
(Manhattan distance of normalised vectors, after Sherwood et al.'s basic block distribution analysis)."""

from __future__ import annotations

import numpy as np

from .keyed import normalise_rows, vectors_to_matrix


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
