"""Sparse matrices of string-keyed vectors (agent BBVs; the store's `bbv` rows come from daemon.tables) and
their row normalisation, for the tracker, the merge of close phases and the probe builder."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


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


def normalise_rows(X) -> sp.csr_matrix:
    """Each row divided by its sum (all-zero rows stay zero), as SimPoint does before projecting."""
    X = sp.csr_matrix(X, dtype=float)
    sums = np.asarray(X.sum(axis=1)).ravel()
    inv = np.divide(1.0, sums, out=np.zeros_like(sums), where=sums > 0)
    return sp.csr_matrix(sp.diags(inv) @ X)
