"""From stored rows to a causal model's variables: task columns named, code phases added, samples
pivoted wide, then the columns and rows a model is learnt over, with the reason each one was dropped.

One preparation for the daemon's causal job and `causewatch learn`; DataFrames in, DataFrames out (no SQL).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from causewatch.analytics.phases.tracker import PhaseTracker

BOOKKEEPING = ["received", "t_start", "bbv"]   # task columns that are not variables
MIN_PRESENT = 0.8                              # a column missing from more rows than this is dropped
TASK_MEASURES = ("duration", "cpu_seconds")
COPY_R = 0.999    # a numeric column this correlated with an earlier one is the same quantity measured twice
# Columns the agent records that measure a task measure again: perf's task-clock of the task's thread is
# the CPU time the record carries as cpu_seconds (time.thread_time). Dropped by name, not left to COPY_R:
# in demo runs they correlated at r = 0.9992-0.9999, either side of its cut, so the model's variables
# changed run to run, and their difference (the instrument's own reading cost) drew false alarms.
SAME_QUANTITY = {"task_clock_seconds": "cpu_seconds"}


def name_task_columns(df: pd.DataFrame, params: dict[str, str], counters: dict[str, str]
                      ) -> tuple[pd.DataFrame, list[str]]:
    """Name the positional parameter and counter columns of a task DataFrame by their keys; a counter
    whose key is taken (by a parameter, duration or cpu_seconds) becomes `counter.<key>`. Parameters
    that are all numbers become numbers, the rest stay text (discrete). Returns (df, inputs):
    the parameter columns, which are the model's inputs."""
    names = dict(params)
    taken = set(params.values()) | set(TASK_MEASURES)
    names.update({col: (f"counter.{k}" if k in taken else k) for col, k in counters.items()})
    df = df.rename(columns=names)
    for k in params.values():
        numeric = pd.to_numeric(df[k], errors="coerce")
        if numeric.notna().sum() == df[k].notna().sum():
            df[k] = numeric
    return df, list(params.values())


def with_code_phase(df: pd.DataFrame, tracker: PhaseTracker, seen_until: float = 0.0) -> pd.DataFrame:
    """`code_phase`: the online tracker's phase of each task's code vector, a discrete variable for the
    model (absent when no task carries a vector). Rows received up to `seen_until` taught the tracker
    before (they were read and left for later), so they are only looked up: none teaches it twice."""
    if "bbv" not in df or df["bbv"].isna().all():
        return df
    ids = []
    for text, seen in zip(df["bbv"], df["received"] <= seen_until):
        if not isinstance(text, str):
            ids.append(None)
            continue
        vector = json.loads(text)
        phase = tracker.predict(vector) if seen else tracker.update(vector)
        ids.append(f"phase-{phase}" if phase >= 0 else None)
    return df.assign(code_phase=ids)


def samples_wide(long: pd.DataFrame, bucket: float = 1.0) -> pd.DataFrame:
    """Long samples (node, ts, scope, metric, value) as one row per (node, time bucket) and one column
    per `scope/metric`, each the mean of the bucket's values."""
    if not len(long):
        return pd.DataFrame(columns=["node", "t"])
    keyed = long.assign(t=np.floor(long["ts"].to_numpy() / bucket) * bucket,
                        series=long["scope"].astype(str) + "/" + long["metric"].astype(str))
    wide = keyed.pivot_table(index=["node", "t"], columns="series", values="value", aggfunc="mean")
    wide.columns.name = None
    return wide.reset_index()


@dataclass
class Variables:
    """A model's data and how it was chosen: `dropped` maps each column left out to why."""
    data: pd.DataFrame
    rows_in: int
    dropped: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        why = "; ".join(f"{c}: {r}" for c, r in self.dropped.items())
        return (f"{len(self.data)} of {self.rows_in} rows, {self.data.shape[1]} variables"
                + (f" (left out: {why})" if why else ""))


def model_variables(df: pd.DataFrame, columns: list[str] | None = None,
                    drop: tuple[str, ...] = ()) -> Variables:
    """The variables a model is learnt over. Without `columns`: every column but `drop`, less those
    missing from more than 1 − MIN_PRESENT of the rows; then only complete rows; then no column that
    never varies, and none that measures a quantity another column holds (SAME_QUANTITY by name, else
    a linear copy of an earlier column, |r| >= COPY_R; kept, the two would be joined in an arbitrary
    direction run to run). With `columns`: those (all must exist), complete rows, none constant."""
    dropped = {c: "bookkeeping, not a variable" for c in drop if c in df}
    if columns is None:
        dropped.update({c: f"the same quantity as {same}, measured again" for c, same in SAME_QUANTITY.items()
                        if c in df and same in df})
    data = df.drop(columns=list(dropped))
    if columns is not None:
        dropped.update({c: "not chosen" for c in data.columns if c not in columns})
        data = data[columns]
    else:
        present = data.notna().mean()
        for c in present.index[present < MIN_PRESENT]:
            dropped[c] = f"present in {100 * present[c]:.0f} % of rows only"
        data = data.loc[:, present >= MIN_PRESENT]
    data = data.dropna()
    for c in data.columns:
        if data[c].nunique() <= 1:
            dropped[c] = "never varies over the complete rows"
    data = data[[c for c in data.columns if c not in dropped]].reset_index(drop=True)
    if columns is None:
        dropped.update(_copies(data))
        data = data[[c for c in data.columns if c not in dropped]]
    return Variables(data, len(df), dropped)


def _copies(data: pd.DataFrame) -> dict[str, str]:
    """Numeric columns that are linear copies of an earlier one, with the reason."""
    numeric = [c for c in data.columns
               if pd.api.types.is_numeric_dtype(data[c]) and not pd.api.types.is_bool_dtype(data[c])]
    if len(numeric) < 2:
        return {}
    r = np.corrcoef(data[numeric].to_numpy(float), rowvar=False)
    out = {}
    for j, c in enumerate(numeric):
        kept = [i for i in range(j) if numeric[i] not in out and abs(r[i, j]) >= COPY_R]
        if kept:
            out[c] = f"a linear copy of {numeric[kept[0]]} (r = {r[kept[0], j]:.6f}): the same quantity measured twice"
    return out
