"""Prometheus' HTTP API answers as JSON text (docs/queries.md): a range question's answer as a matrix,
an instant one's as a vector or a scalar, lists (label names, values, series) and errors, in the shapes
Grafana's Prometheus data source reads.

An answer's points are written by Arrow's string kernels, a run of points per series joined in one
call: no Python object per point. A sample's value is the shortest decimal that reads back as the same
double (Arrow's cast, as Prometheus' own shortest form but for the exponent's digits), NaN, +Inf, -Inf.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

NAMES = {"metric": "__name__"}   # our label: Prometheus' name for it
_SPECIAL = {"nan": "NaN", "inf": "+Inf", "-inf": "-Inf"}


def value_text(values: pa.Array) -> pa.Array:
    """Each value as Prometheus writes a sample value (null as NaN)."""
    text = pc.cast(pc.fill_null(values, float("nan")), pa.string())
    for arrow, prometheus in _SPECIAL.items():
        text = pc.if_else(pc.equal(text, arrow), prometheus, text)
    return text


def time_text(t: pa.Array) -> pa.Array:
    """Unix seconds as JSON numbers: whole ones without a fraction."""
    return pc.cast(t, pa.string())


def _runs(table: pa.Table, labels: tuple[str, ...]) -> np.ndarray:
    """Where each run of equal labels starts (the table sorted by them), and its end."""
    n = table.num_rows
    change = np.zeros(n, bool)
    if n:
        change[0] = True
    for c in labels:
        col = table[c].combine_chunks()
        if n > 1:
            change[1:] |= pc.not_equal(col.slice(1), col.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    return np.r_[np.flatnonzero(change), n]


def _metrics(table: pa.Table, labels: tuple[str, ...], starts: np.ndarray) -> list[str]:
    """Each run's `metric` object: its labels by Prometheus' names."""
    firsts = table.select(list(labels)).take(pa.array(starts)).to_pylist() if labels else [{}] * len(starts)
    return [json.dumps({NAMES.get(k, k): v for k, v in row.items()}) for row in firsts]


def _document(kind: str, results: str, extra: dict) -> str:
    tail = "".join(f", {json.dumps(k)}: {json.dumps(v, default=str)}" for k, v in extra.items())
    return f'{{"status": "success", "data": {{"resultType": "{kind}", "result": [{results}]}}{tail}}}'


def matrix(table: pa.Table, labels: tuple[str, ...], **extra) -> str:
    """A range answer (labels, t, value; sorted by them) as query_range's success JSON, `metric` each
    series' labels; `extra` top-level fields after `data` (warnings, a cluster's shards)."""
    bounds = _runs(table, labels)
    points = pc.binary_join_element_wise("[", time_text(table["t"].combine_chunks()), ', "',
                                         value_text(table["value"].combine_chunks()), '"]', "")
    lists = pa.ListArray.from_arrays(pa.array(bounds, pa.int32()), points)
    joined = pc.binary_join(lists, ", ").to_pylist()
    metrics = _metrics(table, labels, bounds[:-1])
    return _document("matrix", ", ".join(f'{{"metric": {m}, "values": [{v}]}}' for m, v in zip(metrics, joined)),
                     extra)


def vector(table: pa.Table, labels: tuple[str, ...], **extra) -> str:
    """An instant answer (labels, t, value; a row per series) as query's success JSON."""
    points = pc.binary_join_element_wise("[", time_text(table["t"].combine_chunks()), ', "',
                                         value_text(table["value"].combine_chunks()), '"]', "").to_pylist()
    metrics = _metrics(table, labels, np.arange(table.num_rows))
    return _document("vector", ", ".join(f'{{"metric": {m}, "value": {p}}}' for m, p in zip(metrics, points)),
                     extra)


def scalar(t: float, value: float) -> str:
    """An instant answer of a number, as query's success JSON."""
    text = value_text(pa.array([value], pa.float64()))[0].as_py()
    stamp = time_text(pa.array([t], pa.float64()))[0].as_py()
    return f'{{"status": "success", "data": {{"resultType": "scalar", "result": [{stamp}, "{text}"]}}}}'


def listed(data: list, **extra) -> dict:
    """A list answer (label names, a label's values, series' label sets)."""
    return {"status": "success", "data": data, **extra}


def error(message: str, kind: str = "bad_data") -> dict:
    return {"status": "error", "errorType": kind, "error": message}
