"""Fuzzy bottleneck search over a region-summary DataFrame (Truong & Fahringer Fig. 4/5): per metric with
a bottleneck term set, each region's degree in every severity term, and one summary row per region."""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from causewatch.analytics.fuzzy.perfql import metric_array, metric_names, parse_metric
from causewatch.analytics.fuzzy.score import DEGREE_EPS, bottleneck_search, format_degrees
from causewatch.analytics.fuzzy.summaries import KEYS
from causewatch.analytics.fuzzy.terms import TermSet, default_terms


def find_bottlenecks(df: pd.DataFrame, termsets: Mapping[str, TermSet] | None = None,
                     metrics: list[str] | None = None, mode: str = "compatible",
                     negligible: bool = True) -> pd.DataFrame:
    """Fuzzy bottleneck search over a region-summary DataFrame for every term set with a bottleneck
    section (or the named `metrics`). Long result, one row per (region, metric, term) with degree > 0:
    node, app, region, source, metric, value, term, degree, severity (the term's level times its
    degree; 0 for 'negligible'). Rows come metric by metric, terms least severe first, negligible last.
    Without `metrics`, term sets whose inputs the DataFrame lacks are skipped; named ones must be there.
    """
    termsets = default_terms() if termsets is None else termsets
    if metrics is None:
        chosen = [ts for ts in termsets.values() if ts.bottleneck is not None and _has_inputs(ts, df)]
    else:
        chosen = [_bottleneck_set(termsets, m, df) for m in metrics]
    parts = [_termset_bottlenecks(df, ts, mode, negligible) for ts in chosen]
    columns = [*KEYS, "metric", "value", "term", "degree", "severity"]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)


def _has_inputs(ts: TermSet, df: pd.DataFrame) -> bool:
    have = {c.lower() for c in df.columns}
    names = [n for n, _ in metric_names(parse_metric(ts.expr))]
    return all(n.lower() in have for n in names) and len(df) > 0


def _bottleneck_set(termsets: Mapping[str, TermSet], metric: str, df: pd.DataFrame) -> TermSet:
    with_spec = sorted(n for n, ts in termsets.items() if ts.bottleneck is not None)
    ts = termsets.get(metric)
    if ts is None or ts.bottleneck is None:
        raise ValueError(f"metric {metric!r} has no bottleneck term set; expected one of {', '.join(with_spec)}")
    metric_array(parse_metric(ts.expr), df, ts.expr)  # raises naming a missing input
    return ts


def _termset_bottlenecks(df: pd.DataFrame, ts: TermSet, mode: str, negligible: bool) -> pd.DataFrame:
    values = metric_array(parse_metric(ts.expr), df, ts.expr)
    found = bottleneck_search(values, ts.bottleneck, mode, negligible, ts.levels)
    terms = [*ts.bottleneck.severity, *(["negligible"] if "negligible" in found else [])]
    parts = []
    for term in terms:
        deg = found[term].to_numpy()
        rows = np.flatnonzero(deg > DEGREE_EPS)
        part = df.iloc[rows][KEYS].reset_index(drop=True)
        part["metric"], part["value"], part["term"] = ts.metric, values[rows], term
        part["degree"], part["severity"] = deg[rows], deg[rows] * ts.levels.get(term, 0.0)
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def summarise_bottlenecks(long: pd.DataFrame) -> pd.DataFrame:
    """One row per (region, metric): value, severity and the degrees as text and as a dict."""
    keys = [*KEYS, "metric"]
    if not len(long):
        return pd.DataFrame(columns=[*keys, "value", "severity", "bottleneck", "degrees"])
    groups = long.groupby(keys, sort=False)
    out = groups.agg(value=("value", "first"), severity=("severity", "max")).reset_index()
    degrees = groups.apply(lambda g: dict(zip(g["term"], g["degree"].round(3))), include_groups=False)
    out["degrees"] = degrees.to_numpy()
    out["bottleneck"] = out["degrees"].map(lambda d: format_degrees(d, capitalize=True))
    order = ["severity", "value", *keys]
    return out.sort_values(order, ascending=[False, False] + [True] * len(keys), kind="stable").reset_index(drop=True)
