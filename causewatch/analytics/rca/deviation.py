"""A column's robust change from the baseline window to the incident window.

Each column is scaled by its baseline's spread (the IQR, or where half the rows or more share one value
the mean absolute deviation, so a 100 % availability that never moves still has a scale), and the
incident's change is the k-th largest |z| of its rows (k a third of them): a fault lasting two rows of
five counts, a single-row spike does not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

CUT = 4.0   # a unit is anomalous when its weighted robust z reaches this (its score then reaches 1)
IQR_TO_SIGMA = 1.349   # the IQR of a normal distribution in standard deviations
MAD_TO_SIGMA = 1.2533   # the mean absolute deviation of a normal distribution, in standard deviations
RELATIVE_FLOOR = 1e-3   # a scale never below this share of the median: a flat baseline's tiny wiggle is not news
MIN_BASELINE = 3   # rows with a value the baseline needs before a column's change is judged


class RCAError(ValueError):
    """Input the ranking cannot use; the message names what and where."""


@dataclass(frozen=True)
class Deviation:
    """The robust change of one column: the baseline's median and scale, the incident's typical value at
    its anomalous rows, and the signed robust z of that change (0 where it cannot be judged)."""
    column: str
    median: float
    scale: float
    incident: float
    z: float
    first: float = 0.0   # the robust z of the incident's first row (0 where it has no value)

    @property
    def size(self) -> float:
        return abs(self.z)


def column_kind(column: str, unit: str) -> str:
    """The metric kind of `column`, its name with the unit's removed (`PetSite_latency_p90` of unit
    `PetSite` is `latency_p90`); a column not named after its unit is its own kind."""
    if column.startswith(unit) and len(column) > len(unit):
        return column[len(unit):].lstrip("_.:/- ") or column
    return column


def _scale(base: np.ndarray, median: float) -> float:
    q1, q3 = np.percentile(base, [25, 75])
    scale = (q3 - q1) / IQR_TO_SIGMA
    if scale <= 0:
        scale = MAD_TO_SIGMA * float(np.mean(np.abs(base - median)))
    floor = RELATIVE_FLOOR * abs(median)
    return max(scale, floor) or 1.0 / len(base)


def deviation(column: str, base: np.ndarray, incident: np.ndarray) -> Deviation:
    """The robust change of one column (NaN rows left out; too few baseline values: z 0)."""
    raw = incident
    base, incident = base[np.isfinite(base)], incident[np.isfinite(incident)]
    if len(base) < MIN_BASELINE or not len(incident):
        median = float(np.median(base)) if len(base) else math.nan
        return Deviation(column, median, math.nan, float(np.median(incident)) if len(incident) else math.nan, 0.0)
    median = float(np.median(base))
    scale = _scale(base, median)
    z = (incident - median) / scale
    k = max(1, math.ceil(len(z) / 3))
    pick = np.argsort(-np.abs(z), kind="stable")[k - 1]
    first = (raw[0] - median) / scale if np.isfinite(raw[0]) else 0.0
    return Deviation(column, median, scale, float(incident[pick]), float(z[pick]), float(first))


def deviations(baseline: pd.DataFrame, incident: pd.DataFrame) -> dict[str, Deviation]:
    """Every column's robust change, the columns both windows share being numeric."""
    out = {}
    for column in baseline.columns:
        base = pd.to_numeric(baseline[column], errors="coerce").to_numpy(dtype=float)
        inc = pd.to_numeric(incident[column], errors="coerce").to_numpy(dtype=float)
        out[column] = deviation(column, base, inc)
    return out
