"""Echoes the data shows where no call graph is given, between anomalous units whose columns move
together on the baseline (in the same row or one row apart): unit v echoes unit w when v's change
started in a later incident row than w's, or, both starting together, when the regression of v on w
predicts v's incident change from w's while the reverse regression does not predict w's (the
origin's change is the larger, unexplained one)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from causewatch.analytics.rca.deviation import CUT, Deviation

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


def _lagged(a: np.ndarray, b: np.ndarray) -> float:
    """The stronger of the two correlations one baseline row apart."""
    return max(correlation(a[1:], b[:-1]), correlation(a[:-1], b[1:]), key=abs)


def _explains(r: float, cause: Deviation, effect: Deviation) -> bool:
    predicted = r * cause.z
    return predicted * effect.z > 0 and abs(predicted) >= EXPLAINED * effect.size


def first_row(incident: pd.DataFrame, dev: Deviation) -> int:
    """The first incident row where the column is beyond the cut in its change's direction."""
    values = pd.to_numeric(incident[dev.column], errors="coerce").to_numpy(dtype=float)
    beyond = np.nonzero(np.nan_to_num(np.sign(dev.z) * (values - dev.median) / dev.scale) >= CUT)[0]
    return int(beyond[0]) if len(beyond) else len(values)


def _related(baseline, a: list[Deviation], b: list[Deviation]) -> bool:
    """Whether some column of one unit moves with some column of the other on the baseline, in the same
    row or one row apart."""
    for x in a:
        sx = _standardised(baseline, x)
        for y in b:
            sy = _standardised(baseline, y)
            if max(abs(correlation(sx, sy)), abs(_lagged(sx, sy))) >= MIN_CORRELATION:
                return True
    return False


def moving_with(baseline: pd.DataFrame, target: str, columns: list[str]) -> dict[str, float]:
    """column -> |its correlation with `target`| on the baseline (robust z, clipped), where reliable."""
    def standardised(column):
        values = pd.to_numeric(baseline[column], errors="coerce").to_numpy(dtype=float)
        finite = values[np.isfinite(values)]
        if len(finite) < MIN_ROWS:
            return None
        median, spread = np.median(finite), np.subtract(*np.percentile(finite, [75, 25]))
        return np.clip((values - median) / (spread or np.std(finite) or 1.0), -CLIP, CLIP)
    y = standardised(target)
    if y is None:
        return {}
    out = {}
    for column in columns:
        x = standardised(column)
        r = abs(correlation(x, y)) if x is not None else 0.0
        if r >= MIN_CORRELATION:
            out[column] = r
    return out


def echo_edges(baseline: pd.DataFrame, strongest: dict[str, Deviation], incident=None,
               columns: dict[str, list[Deviation]] | None = None, symptom: str | None = None) -> list[tuple[str, str]]:
    """(echo, origin) pairs among the anomalous units, each unit given by its strongest column: the one
    whose change started later, where their columns move together on the baseline; where both started
    together, the one whose change the other's predicts (the module's rule); where each predicts the
    other's, the symptom's unit, whose change is what was seen."""
    units = list(strongest)
    series = {u: _standardised(baseline, strongest[u]) for u in units}
    first = {u: first_row(incident, strongest[u]) for u in units} if incident is not None else {}
    edges = []
    for i, v in enumerate(units):
        for w in units[i + 1:]:
            if first and first[v] != first[w] and _related(baseline, columns[v], columns[w]):
                edges.append((v, w) if first[v] > first[w] else (w, v))
                continue
            r = correlation(series[v], series[w])
            if abs(r) < MIN_CORRELATION:
                continue
            v_of_w, w_of_v = _explains(r, strongest[w], strongest[v]), _explains(r, strongest[v], strongest[w])
            if v_of_w != w_of_v:
                edges.append((v, w) if v_of_w else (w, v))
            elif v_of_w and symptom in (v, w):
                edges.append((v, w) if v == symptom else (w, v))
    return edges
