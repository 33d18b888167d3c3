"""What each phase is doing: its centroid over the original keys (blocks, or functions for the agents'
vectors), not the random projection the clustering ran on, and the keys that weigh most in it.

A phase's centroid is the weighted mean of its intervals' normalised vectors (each interval's counts
divided by their sum, as SimPoint normalises before projecting), with the interval weights the
clustering used: a key's share is then the part of the phase's time (samples, instructions) it took.
Numpy only; the rows may come as one matrix or as the chunks of a file read again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .formats import CountRows, PhaseError, count_rows, row_of_entries

_SHIFT = np.int64(32)   # (phase, column) packed into one int64 code: phase << 32 | column


def phase_centroids(X, labels, weights=None, n_phases: int | None = None) -> CountRows:
    """(phases x keys) centroids as CountRows: row p is the weighted mean of phase p's normalised rows.

    X: the (intervals x keys) counts the phases were found in, dense, scipy sparse, CountRows or an
    iterator of CountRows chunks (formats.iter_frequency_vectors); labels: each interval's phase;
    weights: each interval's weight (SimPoint's `interval_weights_`; default equal). A phase without
    intervals, or with only all-zero ones, has an empty row."""
    labels = np.asarray(labels, np.int64)
    n = len(labels)
    w = np.ones(n) if weights is None else np.asarray(weights, float)
    if w.shape != (n,):
        raise PhaseError(f"weights must hold one value per interval ({n}), got shape {w.shape}")
    k = int(n_phases if n_phases is not None else (labels.max() + 1 if n else 0))
    if n and (labels.min() < 0 or labels.max() >= k):
        raise PhaseError(f"labels must lie in 0..{k - 1}")
    codes, sums, start, width = [], [], 0, 1
    for rows in [X] if not hasattr(X, "__next__") else X:
        rows = count_rows(rows)
        m = rows.shape[0]
        if start + m > n:
            raise PhaseError(f"the vectors hold more intervals than the {n} labels")
        entry_row = row_of_entries(rows.indptr)
        totals = np.bincount(entry_row, weights=rows.data, minlength=m)
        share = rows.data / np.where(totals > 0, totals, 1.0)[entry_row]
        code = (labels[start:start + m][entry_row] << _SHIFT) | np.asarray(rows.indices, np.int64)
        codes.append(code)
        sums.append(share * w[start:start + m][entry_row])
        codes[-1], sums[-1] = _reduce(codes[-1], sums[-1])   # a chunk's entries shrink to its (phase, key) pairs
        start, width = start + m, max(width, rows.shape[1])
    if start != n:
        raise PhaseError(f"the vectors hold {start} intervals, the labels {n}")
    code, total = _reduce(np.concatenate(codes or [np.zeros(0, np.int64)]), np.concatenate(sums or [np.zeros(0)]))
    phase, column = code >> _SHIFT, code & ((np.int64(1) << _SHIFT) - 1)
    phase_weight = np.bincount(labels, weights=w, minlength=k)
    keep = total > 0
    phase, column, value = phase[keep], column[keep], total[keep] / phase_weight[phase[keep]]
    indptr = np.concatenate(([0], np.cumsum(np.bincount(phase, minlength=k))))
    return CountRows(indptr, column, value, (k, width))


def _reduce(code: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    unique, inverse = np.unique(code, return_inverse=True)
    return unique, np.bincount(inverse.ravel(), weights=value, minlength=len(unique))


def top_keys(centroids: CountRows, top: int = 3, names: Sequence | Mapping | None = None) -> list[list[tuple]]:
    """Each phase's `top` largest keys as (key, share) pairs, largest first (ties by key).

    A key is names[column] when `names` gives one (a list of keys, or a mapping such as
    formats.read_pc_functions' {column: function}) that is not empty, else the column; columns with the
    same name add up (a function's blocks)."""
    by_name = names is not None and len(names) > 0
    if by_name:   # each distinct column named once, not every entry
        columns = np.unique(centroids.indices)
        keys = [_name(names, c) for c in columns.tolist()]
        index = {k: i for i, k in enumerate(dict.fromkeys(keys))}
        distinct = list(index)
        key_id = np.array([index[k] for k in keys], np.int64)
    out = []
    for p in range(centroids.shape[0]):
        lo, hi = centroids.indptr[p], centroids.indptr[p + 1]
        ids, shares = centroids.indices[lo:hi], centroids.data[lo:hi]   # a row's columns are distinct
        if by_name:   # columns with the same name add up
            ids, inverse = np.unique(key_id[np.searchsorted(columns, ids)], return_inverse=True)
            shares = np.bincount(inverse.ravel(), weights=shares, minlength=len(ids))
        # only keys tied with or above the top-th largest share can be in the answer: sort those few
        if len(ids) > top > 0:
            keep = shares >= np.partition(shares, -top)[-top]
            ids, shares = ids[keep], shares[keep]
        ranked = sorted(((distinct[i] if by_name else i, float(v)) for i, v in zip(ids.tolist(), shares.tolist())),
                        key=lambda kv: (-kv[1], str(kv[0])))
        out.append(ranked[:max(top, 0)])
    return out


def _name(names, column: int):
    if names is None:
        return column
    name = names.get(column) if isinstance(names, Mapping) else names[column] if column < len(names) else None
    return name if name not in (None, "") else column
