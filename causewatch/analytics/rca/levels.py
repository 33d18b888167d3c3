"""A change that (nearly) every unit of one metric kind shares by one factor, such as another traffic
level between the windows, is a change of the whole system's load, not a unit's fault: it is taken out
of the incident before the units are compared. A fault that reaches many units moves them by factors
that differ hop by hop, so it is not mistaken for one."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from causewatch.analytics.rca.deviation import column_kind, numeric

MIN_UNITS = 5   # units sharing a kind before their common change can be told from a fault's
SHARED = 0.8   # the share of them that must have moved by about the same factor
CLOSE = 0.5   # about the same: within this share of the common factor's logarithm
MIN_FACTOR = 1.1   # a smaller common factor is left alone


@dataclass(frozen=True)
class Level:
    """One kind's common factor: incident over baseline, the same for `units` of the kind's units."""
    kind: str
    factor: float
    units: int
    of: int


def _ratios(baseline, incident, units, onset) -> dict[str, dict[str, float]]:
    """kind -> column -> log(incident median / baseline median), for positive columns with data."""
    out: dict[str, dict[str, float]] = {}
    for unit, cols in units.items():
        for col in cols:
            if col not in baseline.columns:
                continue
            base, inc = numeric(baseline, col), numeric(incident, col)[onset:]
            base, inc = base[np.isfinite(base)], inc[np.isfinite(inc)]
            if len(base) < 3 or not len(inc):
                continue
            b, i = float(np.median(base)), float(np.median(inc))
            if b > 0 and i > 0:
                out.setdefault(column_kind(col, unit), {})[col] = math.log(i / b)
    return out


def common_levels(baseline: pd.DataFrame, incident: pd.DataFrame, units: dict[str, list[str]],
                  onset: int = 0) -> dict[str, Level]:
    """kind -> its common change, for the kinds whose units moved together."""
    levels = {}
    for kind, logs in _ratios(baseline, incident, units, onset).items():
        if len(logs) < MIN_UNITS:
            continue
        m = float(np.median(list(logs.values())))
        close = sum(abs(v - m) <= CLOSE * abs(m) for v in logs.values())
        if abs(m) >= math.log(MIN_FACTOR) and close >= SHARED * len(logs):
            levels[kind] = Level(kind, math.exp(m), close, len(logs))
    return levels


def without_levels(incident: pd.DataFrame, units: dict[str, list[str]], levels: dict[str, Level]) -> pd.DataFrame:
    """The incident with each common factor divided out of its kind's columns."""
    if not levels:
        return incident
    out = incident.copy()
    for unit, cols in units.items():
        for col in cols:
            level = levels.get(column_kind(col, unit))
            if level is not None and col in out.columns:
                out[col] = numeric(out, col) / level.factor
    return out
