"""A range question over the stored samples (docs/queries.md): which series (label matchers), the
evaluation times start, start + step, ... <= end, each point's window (t - window, t], the function
over each series' window (`fn`) and the aggregation across series (`agg`, grouped `by` labels).

Here too: the partial columns a shard answers in a cluster, joined and finished with pyarrow (the
daemon process merges shards' answers and loads no pandas). A store's own answer is finished from its
partials by daemon/rangefinish.py, and written as Prometheus' JSON by daemon/promjson.py.
"""

from __future__ import annotations

import math
from collections import namedtuple

import pyarrow as pa
import pyarrow.compute as pc

from causewatch.errors import InputError

LABELS = ("node", "scope", "metric")      # what every series carries
FUNCTIONS = ("avg", "min", "max", "sum", "count", "last")   # over a series' window
AGGREGATIONS = ("avg", "min", "max", "sum", "count")        # across series
OPS = ("=", "!=", "=~", "!~")
MAX_POINTS = 11_000          # a series' points at most, as Prometheus refuses more
MAX_WINDOW_SLICES = 1_000    # a window of more slices than this would copy each slice's partials as often
# The partial columns of an answer a cluster joins; a function needs some of them, the rest are null.
PARTS = ("p_sum", "p_count", "p_min", "p_max", "p_last_t", "p_last")
NEEDS = {"avg": ("p_sum", "p_count"), "sum": ("p_sum",), "count": ("p_count",), "min": ("p_min",),
         "max": ("p_max",), "last": ("p_last_t", "p_last")}


class Question(namedtuple("Question", "matchers start end step window fn agg by")):
    """Times in integer ms; `matchers` [(label, op, value)]; `agg` None keeps each series."""
    __slots__ = ()

    @property
    def points(self) -> int:
        return (self.end - self.start) // self.step + 1

    @property
    def grain(self) -> int:
        """The ms of the slices rows are reduced in: a step, or for a longer window the largest slice
        both the step and the window are whole numbers of."""
        return self.step if self.window <= self.step else math.gcd(self.step, self.window)

    @property
    def spans(self) -> int:
        """How many slices a window spans."""
        return max(1, self.window // self.grain)

    @property
    def labels(self) -> tuple[str, ...]:
        """The answer's label columns: each series', or the grouping's."""
        return LABELS if self.agg is None else tuple(self.by)

    @property
    def final(self) -> str:
        """What the answer's value is: the aggregation across series, else the function over time."""
        return self.agg or self.fn


def ms(seconds: float, name: str) -> int:
    if not math.isfinite(seconds):
        raise InputError(f"{name}: expected a finite time, got {seconds!r}")
    return round(seconds * 1000)


def question(matchers, start: float, end: float, step: float, window: float | None, fn: str,
             agg: str | None, by) -> Question:
    """A checked Question (times in seconds here); an InputError names what is wrong."""
    start_ms, end_ms = ms(start, "start"), ms(end, "end")
    if start_ms > end_ms:
        raise InputError(f"end: {end!r} is before start {start!r}")
    step_ms = ms(step, "step")
    if step_ms <= 0:
        raise InputError(f"step: expected a positive duration in seconds, got {step!r}")
    window_ms = step_ms if window is None else ms(window, "window")
    if window_ms <= 0:
        raise InputError(f"window: expected a positive duration in seconds, got {window!r}")
    if fn not in FUNCTIONS:
        raise InputError(f"fn: expected one of {', '.join(FUNCTIONS)}, got {fn!r}")
    if agg is not None and agg not in AGGREGATIONS:
        raise InputError(f"agg: expected one of {', '.join(AGGREGATIONS)}, got {agg!r}")
    by = tuple(dict.fromkeys(by or ()))
    if by and agg is None:
        raise InputError("by: groups an aggregation across series; give agg too")
    for label in by:
        _label(label, "by")
    for label, op, _ in matchers:
        _label(label, "matcher")
        if op not in OPS:
            raise InputError(f"matcher on {label}: expected one of {' '.join(OPS)}, got {op!r}")
    q = Question(tuple(matchers), start_ms, end_ms, step_ms, window_ms, fn, agg, by)
    if q.points > MAX_POINTS:
        raise InputError(f"exceeded maximum resolution of {MAX_POINTS:,} points per timeseries "
                         f"({q.points:,}): try a longer step")
    if q.spans > MAX_WINDOW_SLICES:
        raise InputError(f"window: {q.spans:,} slices of {q.grain} ms (the step's and the window's greatest common "
                         f"divisor), at most {MAX_WINDOW_SLICES:,}: make the window a multiple of the step")
    return q


def _label(label: str, what: str) -> None:
    if label not in LABELS:
        raise InputError(f"{what}: no label {label!r} (series carry {', '.join(LABELS)})")


# ---- a cluster's join of its shards' partial answers (pyarrow: the daemon process merges) ---------

_JOIN = {"p_sum": "sum", "p_count": "sum", "p_min": "min", "p_max": "max"}


def join_partials(tables: list[pa.Table], labels: tuple[str, ...], final: str) -> pa.Table:
    """Shards' partial answers (labels, t and PARTS) as one answer (labels, t, value), sorted."""
    table = pa.concat_tables(tables, promote_options="permissive")
    keys = [*labels, "t"]
    if final == "last":   # each group's value at its newest time: sorted so, the group's last row
        table = table.sort_by([("p_last_t", "ascending")])
        joined = table.group_by(keys, use_threads=False).aggregate([("p_last", "last")])
        value = joined["p_last_last"]
    else:
        joined = table.group_by(keys).aggregate([(c, _JOIN[c]) for c in NEEDS[final]])
        cols = {c: joined[f"{c}_{_JOIN[c]}"] for c in NEEDS[final]}
        value = pc.divide(cols["p_sum"], cols["p_count"]) if final == "avg" else cols[NEEDS[final][0]]
    out = pa.table({**{k: joined[k] for k in keys}, "value": pc.cast(value, pa.float64())})
    return out.sort_by([(k, "ascending") for k in keys])
