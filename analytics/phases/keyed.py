"""Sparse matrices of string-keyed vectors (agent BBVs, the DuckDB `bbv` table) and their
row normalisation, for the tracker, the merge of close phases and the probe builder."""

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


def bbv_matrix(con, where: str = "TRUE", params=()) -> tuple[sp.csr_matrix, list[str], list[tuple]]:
    """Read vectors from the DuckDB `bbv` table (one row per (vector, key)) into a CSR matrix.

    Returns (X, keys, index) where index[i] = (node, boot, seq, target, kind, t_start, t_end) of row i.
    `where` is a SQL condition on the table's columns with `?` placeholders bound to `params`.
    """
    df = con.execute(
        f"SELECT node, boot, seq, target, kind, t_start, t_end, key, count FROM bbv WHERE {where} "
        "ORDER BY t_start, node, boot, seq", list(params)).df()
    if df.empty:
        return sp.csr_matrix((0, 1)), [], []
    ident = ["node", "boot", "seq", "target", "kind", "t_start", "t_end"]
    # groups are numbered in order of first appearance, the same order drop_duplicates keeps
    row_codes = df.groupby(ident, sort=False, dropna=False).ngroup().to_numpy()
    rows = list(df[ident].drop_duplicates().itertuples(index=False, name=None))
    key_codes, key_uniques = df["key"].factorize()
    X = sp.csr_matrix((df["count"].to_numpy(float), (row_codes, key_codes)), shape=(len(rows), len(key_uniques)))
    return X, list(key_uniques), rows


def bbv_matrix(con, where: str = "TRUE", params=()) -> tuple[sp.csr_matrix, list[str], list[tuple]]:
    """Read vectors from the DuckDB `bbv` table (one row per (vector, key)) into a CSR matrix.

    Returns (X, keys, index) where index[i] = (node, boot, seq, target, kind, t_start, t_end) of row i.
    `where` is a SQL condition on the table's columns with `?` placeholders bound to `params`.
    """
    df = con.execute(
        f"SELECT node, boot, seq, target, kind, t_start, t_end, key, count FROM bbv WHERE {where} "
        "ORDER BY t_start, node, boot, seq", list(params)).df()
    if df.empty:
        return sp.csr_matrix((0, 1)), [], []
    ident = ["node", "boot", "seq", "target", "kind", "t_start", "t_end"]
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
