"""Online phase ids for a live stream of sparse vectors: nearest centroid, a new phase when none is near
(Manhattan distance of normalised vectors, after Sherwood et al.'s basic block distribution analysis)."""

from __future__ import annotations

import numpy as np


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
        x, _ = self._normalised(vector, learn=True)
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
        x, unseen = self._normalised(vector, learn=False)
        dist = np.abs(self.centers_ - x).sum(axis=1) + unseen   # mass on keys no phase has seen is distance too
        phase = int(dist.argmin())
        return phase if dist[phase] <= self.threshold else -1

    def _normalised(self, vector, learn: bool) -> tuple[np.ndarray, float]:
        """(the vector over keys_ divided by its total, the share of its total on unknown keys): keys
        it brings are added when learning, and left out (the share) when not."""
        if not hasattr(self, "keys_"):
            self.keys_, self._index = [], {}
            self.centers_, self.counts_ = np.zeros((0, 0)), np.zeros(0, np.int64)
        items = zip(vector["keys"], vector["counts"]) if "keys" in vector and "counts" in vector else vector.items()
        cols, vals, unseen = [], [], 0.0
        for key, count in items:
            col = self._index.get(key)
            if col is None and not learn:
                unseen += float(count)
                continue
            if col is None:
                col = self._index[key] = len(self.keys_)
                self.keys_.append(key)
            cols.append(col)
            vals.append(float(count))
        extra = len(self.keys_) - self.centers_.shape[1]
        if extra:
            self.centers_ = np.hstack([self.centers_, np.zeros((len(self.centers_), extra))])
        x = np.bincount(np.array(cols, np.int64), weights=vals, minlength=len(self.keys_))
        total = x.sum() + unseen
        return (x / total, unseen / total) if total > 0 else (x, 0.0)

    def _new_phase(self, x) -> int:
        self.centers_ = np.vstack([self.centers_, x[None, :]])
        self.counts_ = np.append(self.counts_, 1)
        return len(self.counts_) - 1
