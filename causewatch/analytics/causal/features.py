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

BOOKKEEPING = ["received", "node", "boot", "pid", "thread", "t_start", "bbv"]   # task columns, not variables
MIN_PRESENT = 0.8                              # a column missing from more rows than this is dropped
REGION = "region."   # a task's seconds in a named region: `region.<name>`
MAX_REGIONS = 4      # region variables a model has at most, the longest in all first (each costs its CI tests)
WHERE = ["node", "boot", "pid", "thread"]   # where a task or region record ran: a region is inside a task there
SLACK = 1e-6         # seconds a region may pass its task's ends by (the two clocks' readings, rounded)
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


def with_region_times(tasks: pd.DataFrame, spans: pd.DataFrame, keep: tuple[str, ...] = ()) -> pd.DataFrame:
    """`region.<name>`: each task's seconds in region `name` (its records inside the task's span, on
    its node, boot, process and thread; 0 where it entered none), for the regions entered by MIN_PRESENT
    of the tasks at least, the MAX_REGIONS longest in all, and those in `keep` (a model's own, so a
    batch where another one is a little longer does not change its variables). `spans`: the region
    records (readers.regions.region_spans)."""
    if tasks.empty or spans.empty or not set(WHERE) <= set(tasks.columns):
        return tasks
    left = pd.DataFrame({**_where(tasks), "t_start": tasks["t_start"].to_numpy(float),
                         "t_end": (tasks["t_start"] + tasks["duration"]).to_numpy(float), "row": np.arange(len(tasks))})
    right = pd.DataFrame({**_where(spans), "t_start": spans["t_start"].to_numpy(float) + SLACK,
                          "duration": spans["duration"].to_numpy(float), "region": spans["region"].astype(str)})
    # each region record with the task that started last before it where it ran; kept if it ended inside
    joined = pd.merge_asof(right.sort_values("t_start"), left.sort_values("t_start"), on="t_start", by=WHERE)
    inside = joined[joined["t_start"] - SLACK + joined["duration"] <= joined["t_end"] + SLACK]
    seconds = inside.pivot_table(index="row", columns="region", values="duration", aggfunc="sum")
    share = seconds.notna().sum() / len(tasks)
    total = seconds.sum().sort_values(ascending=False)
    chosen = [r for r in total.index if share[r] >= MIN_PRESENT][:MAX_REGIONS]
    chosen += [r for r in total.index if REGION + r in keep and r not in chosen]
    times = seconds[chosen].reindex(np.arange(len(tasks))).fillna(0.0)
    return tasks.assign(**{REGION + r: times[r].to_numpy() for r in sorted(chosen)})


def _where(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """The WHERE columns as text, a missing value as "" (a record without a pid or thread name)."""
    return {c: df[c].astype(object).where(df[c].notna(), "").astype(str).to_numpy() for c in WHERE}


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
