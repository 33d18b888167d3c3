"""A range question's answer finished from the store's partials (daemon/readers/ranges.py): rows of
(series id, slice k, partials of the slice's rows) spread over the points whose windows hold them,
joined per series and point, finished into the function's value, then aggregated across series by
labels, in NumPy over the few rows the store gave (no Python per point or row).

Slice k holds (start + (k - 1) * grain, start + k * grain]; point j (at start + j * step) covers the
slices j * r - m < k <= j * r (r slices a step, m a window). The store's NULL is an invalid entry
here: a slice whose values are all null has a count of 0 and no sum, min or max.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from causewatch.daemon.rangeq import LABELS, NEEDS, PARTS, Question

# how each partial joins over several entries, and what an invalid entry counts as meanwhile (fmin
# skips NaN as the store's min does; max keeps a NaN value as the store's max does)
_JOIN = {"p_sum": np.add, "p_count": np.add, "p_min": np.fmin, "p_max": np.maximum}
_EMPTY = {"p_sum": 0.0, "p_count": 0.0, "p_min": np.nan, "p_max": -np.inf}
_VALUE = {"sum": "p_sum", "count": "p_count", "min": "p_min", "max": "p_max", "last": "p_last"}


class Column:
    """Float values and which of them are valid (not NULL)."""
    __slots__ = ("values", "valid")

    def __init__(self, values: np.ndarray, valid: np.ndarray):
        self.values, self.valid = values, valid

    @classmethod
    def of(cls, array: pa.ChunkedArray) -> Column:
        array = array.combine_chunks()
        valid = array.is_valid().to_numpy(zero_copy_only=False) if array.null_count else np.ones(len(array), bool)
        return cls(array.fill_null(0).to_numpy().astype(np.float64), valid)

    def take(self, index: np.ndarray) -> Column:
        return Column(self.values[index], self.valid[index])

    def arrow(self) -> pa.Array:
        return pa.array(self.values, pa.float64(), mask=~self.valid)


class Runs:
    """Integer keys grouped: `order` sorts them, `starts` is where each run of equal keys begins in
    that order, `keys` each run's key (ascending)."""

    def __init__(self, keys: np.ndarray):
        self.order = np.argsort(keys, kind="stable")
        ordered = keys[self.order]
        self.starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if len(keys) else np.zeros(0, np.intp)
        self.keys = ordered[self.starts]

    def reduce(self, name: str, col: Column) -> Column:
        """Each run's `name` partial of its entries."""
        if not len(self.starts):
            return Column(np.zeros(0), np.zeros(0, bool))
        values = np.where(col.valid, col.values, _EMPTY[name])[self.order]
        valid = np.logical_or.reduceat(col.valid[self.order], self.starts) | (name == "p_count")
        return Column(_JOIN[name].reduceat(values, self.starts), valid)

    def newest(self, t: np.ndarray, col: Column) -> tuple[np.ndarray, Column]:
        """Each run's newest time and its entry's value."""
        keys = self.keys.repeat(np.diff(np.r_[self.starts, len(self.order)]))   # the sorted keys
        order = self.order[np.lexsort((t[self.order], keys))]
        pick = order[np.r_[self.starts[1:], len(order)] - 1] if len(order) else order
        return t[pick], col.take(pick)


def _spread(q: Question, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row of each copy, the point it counts at): a slice counts at every point whose window holds it."""
    last, m, r = q.points - 1, q.spans, q.step // q.grain
    if m == 1:   # window <= step: a slice is a step, its point the same k
        keep = np.flatnonzero((k >= 0) & (k <= last))
        return keep, k[keep]
    first = np.maximum(-(-k // r), 0)
    n = np.maximum(np.minimum((k + m - 1) // r, last) - first + 1, 0)
    rows = np.repeat(np.arange(len(k)), n)
    return rows, first[rows] + np.arange(len(rows)) - np.repeat(np.cumsum(n) - n, n)


def _per_point(q: Question, parts: pa.Table) -> tuple[np.ndarray, np.ndarray, dict[str, Column]]:
    """(series id, point, {partial: Column}) of each series' points: its slices' partials joined."""
    rows, points = _spread(q, parts["k"].to_numpy().astype(np.int64))
    ids = parts["series_id"].to_numpy().astype(np.int64)[rows]
    runs = Runs(ids * q.points + points)
    needed = {*NEEDS[q.fn], "p_count"}
    out = {name: runs.reduce(name, Column.of(parts[name]).take(rows)) for name in needed if name in _JOIN}
    if "p_last" in needed:
        t, out["p_last"] = runs.newest(parts["p_last_t"].to_numpy().astype(np.int64)[rows],
                                       Column.of(parts["p_last"]).take(rows))
        out["p_last_t"] = Column(t.astype(np.float64), np.ones(len(t), bool))
    return runs.keys // q.points, runs.keys % q.points, out


def _value(fn: str, cols: dict[str, Column]) -> Column:
    """The function's value of joined partials."""
    if fn != "avg":
        return cols[_VALUE[fn]]
    total, count = cols["p_sum"], cols["p_count"]
    with np.errstate(invalid="ignore", divide="ignore"):
        return Column(total.values / count.values, count.values > 0)


def _labels(series: pa.Table, ids: np.ndarray, names: tuple[str, ...]) -> dict[str, pa.Array]:
    """The labels `names` of the series `ids`, from the `series` rows (series_id, LABELS)."""
    known = series["series_id"].to_numpy().astype(np.int64)
    by_id = np.argsort(known)
    index = pa.array(by_id[np.searchsorted(known, ids, sorter=by_id)] if len(known) else ids)
    return {c: series[c].combine_chunks().take(index) for c in names}


def _groups(labels: dict[str, pa.Array], n: int) -> np.ndarray:
    """A dense group number per entry, equal where all the labels are."""
    codes = np.zeros(n, np.int64)
    for array in labels.values():
        codes = codes * n + array.dictionary_encode().indices.to_numpy()
        codes = np.unique(codes, return_inverse=True)[1].reshape(-1)
    return codes


def _answer(labels: dict[str, pa.Array], points: np.ndarray, q: Question, value: Column | None,
            parts: dict[str, Column] | None, final: str) -> pa.Table:
    """labels, t and the value (or, given `parts`, PARTS: those `final` needs, the rest null), sorted
    by the labels then t."""
    columns = {**labels, "t": pa.array((q.start + points * q.step) / 1000, pa.float64())}
    if parts is None:
        columns["value"] = value.arrow()
    else:
        for name in PARTS:
            kind = pa.int64() if name == "p_last_t" else pa.float64()
            columns[name] = parts[name].arrow().cast(kind) if name in NEEDS[final] else pa.nulls(len(points), kind)
    return pa.table(columns).sort_by([(k, "ascending") for k in [*labels, "t"]])


def finish(q: Question, series: pa.Table, parts: pa.Table, partial: bool = False) -> pa.Table:
    """The answer to `q` from the store's `parts` (series_id, k, p_count and the partials of
    NEEDS[q.fn]) of the `series` they name (series_id, LABELS): (labels, t, value) sorted by them, or
    with `partial` the PARTS a cluster joins (rangeq.join_partials) in place of the value."""
    ids, points, joined = _per_point(q, parts)
    if q.agg is None:
        labels = _labels(series, ids, LABELS)
        return _answer(labels, points, q, None if partial else _value(q.fn, joined), joined if partial else None, q.fn)
    v = _value(q.fn, joined)
    named = _labels(series, ids, q.by)
    runs = Runs(_groups(named, len(ids)) * q.points + points)
    across = {"p_count": runs.reduce("p_count", Column(v.valid.astype(np.float64), np.ones(len(ids), bool)))}
    across.update((name, runs.reduce(name, v)) for name in NEEDS[q.agg] if name != "p_count")
    labels = {c: array.take(pa.array(runs.order[runs.starts])) for c, array in named.items()}
    return _answer(labels, runs.keys % q.points, q, None if partial else _value(q.agg, across),
                   across if partial else None, q.agg)
