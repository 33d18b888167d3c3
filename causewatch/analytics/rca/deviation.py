"""A column's robust change from the baseline window to the incident window.

Each column is scaled by its baseline's spread (the IQR, or where half the rows or more share one value
the mean absolute deviation, so a 100 % availability that never moves still has a scale; a baseline
that never moved from 0, a process that was not there, takes the typical spread of its kind's other
columns: `with_kind_scales`), and the
incident's change is the k-th largest |z| of its rows (k a third of the window's rows): a fault
lasting two rows of five counts, a single-row spike does not. Where the incident window starts before
the fault (an onset row, read off the symptom), a row after it counts by the smaller of its change
from the baseline and its change from the level before the onset (the calmest row before it), and not
at all where the two disagree in sign: a level that stood through the rows before the fault is not
the fault, and neither is one odd row before it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

CUT = 4.0   # a unit is anomalous when its weighted robust z reaches this (its score then reaches 1)
IQR_TO_SIGMA = 1.349   # the IQR of a normal distribution in standard deviations
MAD_TO_SIGMA = 1.2533   # the mean absolute deviation of a normal distribution, in standard deviations
RELATIVE_FLOOR = 1e-3   # a scale never below this share of the median: a flat baseline's tiny wiggle is not news
MIN_BASELINE = 3   # rows with a value the baseline needs before a column's change is judged
MIN_PEERS = 2   # columns of a kind that moved before their spread stands in for a flat column's


class RCAError(ValueError):
    """Input the ranking cannot use; the message names what and where."""


@dataclass(frozen=True)
class Deviation:
    """The robust change of one column: the baseline's median and scale, the incident's typical value at
    its anomalous rows, the signed robust z of that change (0 where it cannot be judged) and the same
    change in the column's own units."""
    column: str
    median: float
    scale: float
    incident: float
    z: float
    delta: float = 0.0   # the change in the column's own units at the picked row (as z counts it)
    flat: bool = False   # the baseline never moved from 0: its scale is a stand-in (`with_kind_scales`)

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
    """The baseline's spread as the module says; 1 / its rows where it never moved from 0 (a stand-in
    that `with_kind_scales` replaces where the column's kind has other columns that moved)."""
    q1, q3 = np.percentile(base, [25, 75])
    scale = (q3 - q1) / IQR_TO_SIGMA
    if scale <= 0:
        scale = MAD_TO_SIGMA * float(np.mean(np.abs(base - median)))
    floor = RELATIVE_FLOOR * abs(median)
    return max(scale, floor) or 1.0 / len(base)


def _from_onset(z: np.ndarray, onset: int) -> np.ndarray:
    """The rows from the onset on, each by its change counted as the module says."""
    before = z[:onset][np.isfinite(z[:onset])]
    after = z[onset:]
    if not len(before):
        return after
    within = after - float(before[np.argmin(np.abs(before))])
    agree = np.sign(within) == np.sign(after)
    return np.where(agree, np.sign(after) * np.minimum(np.abs(after), np.abs(within)), 0.0)


def deviation(column: str, base: np.ndarray, incident: np.ndarray, onset: int = 0) -> Deviation:
    """The robust change of one column (NaN rows left out; too few baseline values: z 0); `onset` the
    incident's first row of the fault (0: the whole window is the incident)."""
    base = base[np.isfinite(base)]
    post = incident[onset:] if 0 < onset < len(incident) else incident
    if len(base) < MIN_BASELINE or not np.isfinite(post).any():
        median = float(np.median(base)) if len(base) else math.nan
        finite = incident[np.isfinite(incident)]
        return Deviation(column, median, math.nan, float(np.median(finite)) if len(finite) else math.nan, 0.0)
    median = float(np.median(base))
    scale = _scale(base, median)
    z_rows = (incident - median) / scale
    changes = _from_onset(z_rows, onset) if post is not incident else z_rows
    keep = np.isfinite(changes)
    changes, values = changes[keep], post[keep]
    k = min(len(changes), max(1, math.ceil(len(incident) / 3)))
    pick = np.argsort(-np.abs(changes), kind="stable")[k - 1]
    return Deviation(column, median, scale, float(values[pick]), float(changes[pick]), float(changes[pick] * scale),
                     flat=not np.any(base))


def with_kind_scales(devs: dict[str, Deviation], kinds: dict[str, str]) -> dict[str, Deviation]:
    """`devs` with each flat column (`kinds`: column -> its metric kind) scaled by the median spread of
    its kind's columns that moved, where there are MIN_PEERS: how far a new process's CPU is from none
    is measured against how much the node's other processes' CPU varies, not against how many rows the
    baseline has (its stand-in's 1 / rows)."""
    spreads: dict[str, list[float]] = {}
    for column, dev in devs.items():
        if not dev.flat and dev.scale == dev.scale and column in kinds:
            spreads.setdefault(kinds[column], []).append(dev.scale)
    out = dict(devs)
    for column, dev in devs.items():
        peers = spreads.get(kinds.get(column, ""), [])
        if dev.flat and len(peers) >= MIN_PEERS:
            scale = float(np.median(peers))
            out[column] = replace(dev, scale=scale, z=dev.z * dev.scale / scale)
    return out


def numeric(df: pd.DataFrame, column: str) -> np.ndarray:
    return pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float)


def deviations(baseline: pd.DataFrame, incident: pd.DataFrame, onset: int = 0,
               kinds: dict[str, str] | None = None) -> dict[str, Deviation]:
    """Every column's robust change, the columns both windows share being numeric; with `kinds`
    (column -> its metric kind), the flat ones scaled by their kind's (`with_kind_scales`)."""
    devs = {c: deviation(c, numeric(baseline, c), numeric(incident, c), onset) for c in baseline.columns}
    return devs if kinds is None else with_kind_scales(devs, kinds)
