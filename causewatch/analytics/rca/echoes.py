"""Echoes the data shows where no call graph is given: unit v echoes unit w when, on the baseline, v's
column moves with w's, and the regression of v on w predicts v's incident change from w's while the
reverse regression does not predict w's (the origin's change is the larger, unexplained one)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from causewatch.analytics.rca.deviation import Deviation

MIN_ROWS = 10   # baseline rows with both values before a correlation is trusted
MIN_CORRELATION = 0.3   # weaker co-movement on the baseline explains nothing
EXPLAINED = 0.5   # the share of a change a prediction must reach to explain it
CLIP = 5.0   # robust z beyond this is clipped, so a few outlying baseline rows do not make a correlation


def _standardised(baseline: pd.DataFrame, dev: Deviation) -> np.ndarray:
    values = pd.to_numeric(baseline[dev.column], errors="coerce").to_numpy(dtype=float)
    return np.clip((values - dev.median) / dev.scale, -CLIP, CLIP)


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    both = np.isfinite(a) & np.isfinite(b)
    if both.sum() < MIN_ROWS:
        return 0.0
    a, b = a[both], b[both]
    if a.std() == 0 or b.std() == 0:
        return 0.0
    return float(np.corrcoef(a, b)[0, 1])


def _explains(r: float, cause: Deviation, effect: Deviation) -> bool:
    predicted = r * cause.z
    return predicted * effect.z > 0 and abs(predicted) >= EXPLAINED * effect.size


def echo_edges(baseline: pd.DataFrame, strongest: dict[str, Deviation]) -> list[tuple[str, str]]:
    """(echo, origin) pairs among the anomalous units, each unit given by its strongest column."""
    units = list(strongest)
    series = {u: _standardised(baseline, strongest[u]) for u in units}
    edges = []
    for i, v in enumerate(units):
        for w in units[i + 1:]:
            r = correlation(series[v], series[w])
            if abs(r) < MIN_CORRELATION:
                continue
            v_of_w, w_of_v = _explains(r, strongest[w], strongest[v]), _explains(r, strongest[v], strongest[w])
            if v_of_w != w_of_v:
                edges.append((v, w) if v_of_w else (w, v))
    return edges
