"""Sparse matrices of string-keyed vectors (agent BBVs, or a store's `bbv` rows in their long form) and their
row normalisation, for the phases command, the tracker, the merge of close phases and the probe builder."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

if TYPE_CHECKING:
    import pandas as pd


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


def bbv_matrix(df: pd.DataFrame) -> tuple[sp.csr_matrix, list[str], list[tuple]]:
    """Vectors in their long form (a row per vector and key: the columns that name the vector, then
    `key` and `count`, as the daemon's `bbv` rows come) as a CSR matrix: (X, keys, index) where
    index[i] holds the naming columns' values of row i (for those rows: node, boot, seq, target, kind,
    t_start, t_end)."""
    if df.empty:
        return sp.csr_matrix((0, 1)), [], []
    ident = [c for c in df.columns if c not in ("key", "count")]
    # groups are numbered in order of first appearance, the same order drop_duplicates keeps
    row_codes = df.groupby(ident, sort=False, dropna=False).ngroup().to_numpy()
    rows = list(df[ident].drop_duplicates().itertuples(index=False, name=None))
    key_codes, key_uniques = df["key"].factorize()
    X = sp.csr_matrix((df["count"].to_numpy(float), (row_codes, key_codes)), shape=(len(rows), len(key_uniques)))
    return X, list(key_uniques), rows


def normalise_rows(X) -> sp.csr_matrix:
    """Each row divided by its sum (all-zero rows stay zero), as SimPoint does before projecting."""
    X = sp.csr_matrix(X, dtype=float)
    sums = np.asarray(X.sum(axis=1)).ravel()
    inv = np.divide(1.0, sums, out=np.zeros_like(sums), where=sums > 0)
    return sp.csr_matrix(sp.diags(inv) @ X)
