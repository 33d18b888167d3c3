"""Agreement of two labelings of the same intervals: Hubert and Arabie's adjusted Rand index."""

from __future__ import annotations

import numpy as np


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
