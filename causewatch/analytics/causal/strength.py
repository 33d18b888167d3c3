"""Edge strength: the mutual information between an edge's two ends, in bits, the one quantity every
strength the project shows (CLI, API, SVG, Prometheus) is, whichever CI test learnt the graph.

I(a; b) is estimated by the KDE estimator (counting when both ends take few values), on a fixed sample
of at most STRENGTH_ROWS rows, and bounded by the plug-in entropy of either end: no variable can tell
more about another than its own entropy (a 3-valued column: at most log2 3 = 1.58 bits).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from causewatch.analytics.causal import entropy

# Rows the estimate sees (a seeded sample past that, the same rows for the same table): MI of a pair
# settles to ~0.01 bits at a thousand rows, and the pass over pairs of rows costs O(n²).
STRENGTH_ROWS = 1000
# A column with at most this many distinct values is counted as discrete here whatever the learner was
# told: the same rows then give the same strength in `learn` (--discrete flags) and in the daemon (none).
FEW_LEVELS = 16


def plugin_entropy_bits(values: np.ndarray) -> float:
    """The entropy of a column's empirical distribution, in bits (log2 n when all values differ)."""
    _, counts = np.unique(np.asarray(values), return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum())


def _sample_rows(n: int, seed: int = 0) -> np.ndarray:
    if n <= STRENGTH_ROWS:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, STRENGTH_ROWS, replace=False))


def pair_bits(a: np.ndarray, b: np.ndarray, discrete: tuple[bool, bool] = (False, False)) -> float:
    """I(a; b) in bits on these two columns (rows already chosen), in [0, min(H(a), H(b))]."""
    cols = np.column_stack([np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)])
    flags = np.array([d or np.unique(cols[:, k]).size <= FEW_LEVELS for k, d in enumerate(discrete)])
    bound = min(plugin_entropy_bits(cols[:, 0]), plugin_entropy_bits(cols[:, 1]))
    if bound <= 0.0:
        return 0.0
    # serial: the daemon's fork server fits a model while warming up, and must not start a thread pool
    bits = entropy.cmi_bits(entropy.prepare(cols, flags), flags, [0], [1], serial=True)
    return float(min(max(bits, 0.0), bound)) if math.isfinite(bits) else bound


def edge_strengths(values: np.ndarray, names: list[str], discrete: Iterable[bool],
                   pairs: Iterable[frozenset]) -> dict[frozenset, float]:
    """The strength of each pair of named columns of `values`, on the same sample of rows for all."""
    index = {n: i for i, n in enumerate(names)}
    flags = list(discrete)
    rows = _sample_rows(values.shape[0])
    out = {}
    for p in pairs:
        a, b = sorted(p)
        i, j = index[a], index[b]
        out[p] = pair_bits(values[rows, i], values[rows, j], (bool(flags[i]), bool(flags[j])))
    return out
