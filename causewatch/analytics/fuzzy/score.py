"""Soft performance analysis after Truong & Fahringer: score (Eq. 1), OWA (Eq. 2), classification,
bottleneck search (Fig. 4/5), similarity (Eq. 3)."""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from causewatch.analytics.fuzzy.membership import Membership
from causewatch.analytics.fuzzy.terms import Bottleneck

BASES = ("parent", "program", "cluster", "max")
UNIT_LINEAR = Membership("linear", (0.0, 1.0))
# Degrees below this are rounding dust of the curves (a set's foot computed in floating point).
DEGREE_EPS = 1e-9


def base_values(df: pd.DataFrame, metric: str, base: str) -> np.ndarray:
    """V of Eq. 1 for every row of a region-summary DataFrame (columns node, app, region, source, metric).

    parent: the value of the row named in the row's `parent` column (same node, app, source), the
    program total where there is none; program: the sum over the program's regions (node, app,
    source) — meant for additive metrics such as time and counts; cluster: the maximum over the
    nodes for the same (app, region, source); max: the maximum observed anywhere in the DataFrame.
    """
    v = df[metric].astype(float)
    if base == "max":
        return np.full(len(df), np.nanmax(v.to_numpy()) if len(df) else np.nan)
    if base == "cluster":
        return v.groupby([df["app"], df["region"], df["source"]]).transform("max").to_numpy()
    program = v.groupby([df["node"], df["app"], df["source"]]).transform("sum").to_numpy()
    if base == "program":
        return program
    if base == "parent":
        if "parent" not in df:
            return program
        keys = ["node", "app", "source"]
        own = df[keys + ["region"]].assign(_v=v.to_numpy())
        wanted = df[keys + ["parent"]].rename(columns={"parent": "region"})
        parent = wanted.merge(own.drop_duplicates(keys + ["region"]), on=keys + ["region"], how="left")["_v"]
        return np.where(parent.notna(), parent.to_numpy(float), program)
    raise ValueError(f"unknown base {base!r}; expected one of {', '.join(BASES)}")


def performance_score(values, base, mf: Membership = UNIT_LINEAR, mode: str = "compatible") -> np.ndarray:
    """Eq. 1: s = mu(v) with mu mapping [0, V] onto [0, 1]; `mf` is given on the unit interval and
    stretched over [0, V] (v / V is fed to it). Rows with V <= 0 or no value score 0."""
    v, V = np.asarray(values, float), np.asarray(base, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(V > 0, v / V, np.nan)
    return np.nan_to_num(mf(ratio, mode), nan=0.0)


def owa(scores, weights=None, order: str = "metric") -> np.ndarray:
    """Eq. 2, sum(s_i w_i) / sum(w_i) over the last axis of `scores`.

    order="metric" (the paper's Eq. 2): w_i belongs to metric m_i, the i-th column. order="descending"
    (Yager's ordered weighted averaging): w_1 applies to the largest score of each row, w_2 to the next.
    No weights means equal weights.
    """
    s = np.asarray(scores, float)
    w = np.ones(s.shape[-1]) if weights is None else np.asarray(weights, float)
    if w.shape != (s.shape[-1],) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"need {s.shape[-1]} non-negative weights with a positive sum, got {w.tolist()}")
    if order == "descending":
        s = -np.sort(-s, axis=-1)
    elif order != "metric":
        raise ValueError(f"unknown weight order {order!r}; expected 'metric' or 'descending'")
    return s @ w / w.sum()


def classify(values, terms: Mapping[str, Membership], mode: str = "compatible") -> pd.DataFrame:
    """Degree of every value in every term (one column per term), 0 where the value is missing."""
    v = np.asarray(values, float)
    return pd.DataFrame({name: np.nan_to_num(mf(v, mode), nan=0.0) for name, mf in terms.items()})


def format_degrees(row: Mapping[str, float], capitalize: bool = False) -> str:
    """'medium(degree=0.502)/high(degree=0.495)/' as in the paper's figures; zero degrees left out."""
    parts = []
    for name, d in row.items():
        if d > DEGREE_EPS:
            label = f"{name.capitalize()} " if capitalize else name
            parts.append(f"{label}(degree={round(float(d), 3):g})/")
    return "".join(parts)


def bottleneck_search(values, spec: Bottleneck, mode: str = "compatible", negligible: bool = True,
                      levels: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Fuzzy bottleneck search (Fig. 4): a value above the threshold is a bottleneck and gets a degree
    in every severity term; every value gets a degree in the negligible band (if asked for).

    Columns: bottleneck (bool), one per severity term, 'negligible' (if asked), severity. severity is
    max over terms of level_k * degree_k with level_k = k/K for the k-th of K terms (least severe
    first): the degree of the most severe term, scaled so that low < medium < high.
    """
    v = np.asarray(values, float)
    above = np.nan_to_num(v, nan=-np.inf) > spec.threshold
    out = {"bottleneck": above}
    for name, mf in spec.severity.items():
        out[name] = np.where(above, np.nan_to_num(mf(v, mode), nan=0.0), 0.0)
    if levels is None:
        levels = {n: (k + 1) / len(spec.severity) for k, n in enumerate(spec.severity)}
    weighted = np.stack([out[n] * levels[n] for n in spec.severity])
    out["severity"] = weighted.max(axis=0)
    if negligible and spec.negligible is not None:
        out["negligible"] = np.nan_to_num(spec.negligible(v, mode), nan=0.0)
    return pd.DataFrame(out)


def similarity(a, b, weights=None) -> np.ndarray:
    """Eq. 3 over the last axis: 1 - d, d = the Euclidean distance of two score vectors divided by
    sqrt(n) (sqrt(sum w) with weights), so that scores in [0, 1] give a similarity in [0, 1]."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    w = np.ones(a.shape[-1]) if weights is None else np.asarray(weights, float)
    d = np.sqrt(((a - b) ** 2 * w).sum(axis=-1) / w.sum())
    return 1.0 - d


def similarity_to_base(scores, base_row: int = 0, weights=None) -> np.ndarray:
    """Similarity of every row of a score matrix to one base row (the paper's base experiment)."""
    s = np.asarray(scores, float)
    return similarity(s, s[base_row], weights)
