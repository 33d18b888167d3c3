"""The one preparation of model variables: columns named, sparse and constant columns left out with
their reason, complete rows kept, samples pivoted wide (`causewatch learn` on a store:
tests/commands/test_learn.py)."""

import numpy as np
import pandas as pd
import pytest

from causewatch.analytics.causal import features


def test_sparse_column_is_dropped_before_rows_are_and_each_drop_has_its_reason():
    n = 100
    df = pd.DataFrame({"a": np.arange(n, dtype=float), "b": np.arange(n) % 7, "const": 1.0,
                       "sparse": [1.0 if i % 10 == 0 else None for i in range(n)],
                       "t_start": np.arange(n, dtype=float)})
    df.loc[3, "a"] = None
    chosen = features.model_variables(df, drop=("t_start",))
    assert list(chosen.data.columns) == ["a", "b"] and len(chosen.data) == n - 1 and chosen.rows_in == n
    assert chosen.dropped == {"t_start": "bookkeeping, not a variable", "sparse": "present in 10 % of rows only",
                              "const": "never varies over the complete rows"}
    assert chosen.summary().startswith("99 of 100 rows, 2 variables (left out: t_start: bookkeeping")
    named = features.model_variables(df, columns=["a", "sparse"])
    assert len(named.data) == 10 and named.dropped["b"] == "not chosen"   # chosen columns are kept


def test_a_quantity_measured_twice_is_kept_once_and_a_merely_strong_relation_is_kept():
    rng = np.random.default_rng(2)
    cpu = rng.uniform(0.05, 0.2, 500)
    df = pd.DataFrame({"cpu_seconds": cpu, "cycles": 3e9 * cpu + rng.normal(0, 3e4, 500),
                       "duration": cpu + rng.uniform(0, 0.05, 500), "ops": cpu ** 3})
    chosen = features.model_variables(df)
    assert list(chosen.data.columns) == ["cpu_seconds", "duration", "ops"]   # r(duration) ~0.96, r(ops) ~0.97
    assert chosen.dropped["cycles"].startswith("a linear copy of cpu_seconds (r = ")
    assert list(features.model_variables(df, columns=list(df.columns)).data.columns) == list(df.columns)


def test_the_task_clock_is_dropped_as_cpu_seconds_measured_again_at_any_correlation():
    rng = np.random.default_rng(3)
    cpu = rng.uniform(0.05, 0.2, 500)
    # the instrument's own reading cost, varying with the code: r ~0.99, below COPY_R
    clock = cpu + rng.exponential(0.01, 500)
    df = pd.DataFrame({"duration": cpu + rng.uniform(0, 0.05, 500), "cpu_seconds": cpu, "task_clock_seconds": clock})
    assert abs(np.corrcoef(cpu, clock)[0, 1]) < features.COPY_R
    chosen = features.model_variables(df)
    assert list(chosen.data.columns) == ["duration", "cpu_seconds"]
    assert chosen.dropped["task_clock_seconds"] == "the same quantity as cpu_seconds, measured again"
    alone = features.model_variables(df.drop(columns=["cpu_seconds"]))   # the only CPU time: kept
    assert "task_clock_seconds" in alone.data.columns


def test_task_columns_named_by_key_and_a_counter_never_hides_a_parameter():
    df = pd.DataFrame({"duration": [1.0, 2.0], "p0": ["4", "8"], "p1": ["int", "x"], "c0": [5.0, 6.0],
                       "c1": [7.0, 8.0], "c2": [0.1, 0.2]})
    out, inputs = features.name_task_columns(df, {"p0": "n", "p1": "dtype"},
                                             {"c0": "n", "c1": "duration", "c2": "misses"})
    assert inputs == ["n", "dtype"] and out["n"].tolist() == [4, 8] and out["dtype"].tolist() == ["int", "x"]
    assert out["counter.n"].tolist() == [5.0, 6.0] and out["counter.duration"].tolist() == [7.0, 8.0]
    assert out["misses"].tolist() == [0.1, 0.2] and out["duration"].tolist() == [1.0, 2.0]


def test_samples_pivot_one_column_per_scope_metric_per_node_and_bucket():
    long = pd.DataFrame({"node": ["a", "a", "a", "b"], "ts": [10.2, 10.7, 11.1, 10.5],
                         "scope": ["node", "node", "pid:7", "node"], "metric": ["cpu", "cpu", "cpu", "cpu"],
                         "value": [1.0, 3.0, 5.0, 7.0]})
    wide = features.samples_wide(long, bucket=1.0)
    assert list(wide.columns) == ["node", "t", "node/cpu", "pid:7/cpu"]
    assert wide.loc[(wide.node == "a") & (wide.t == 10.0), "node/cpu"].item() == 2.0
    assert wide.loc[(wide.node == "a") & (wide.t == 11.0), "pid:7/cpu"].item() == 5.0
    assert len(wide) == 3


def test_region_times_are_summed_per_task_where_and_while_it_ran():
    """Two tasks at once on two threads of one process, a third on another node: each region record counts
    for the task whose span holds it on its node, process and thread (nested ones under their own name), a
    region entered by fewer than MIN_PRESENT of the tasks is no variable unless kept, and a task that
    entered none of a region has 0 s in it."""
    tasks = pd.DataFrame({"node": ["a", "a", "b"], "boot": "x", "pid": ["7", "7", "7"], "thread": ["t1", "t2", "t1"],
                          "t_start": [10.0, 10.5, 10.0], "duration": [2.0, 2.0, 1.0]})
    spans = pd.DataFrame({  # node, thread, region, start, seconds
        "node": ["a", "a", "a", "a", "a", "b", "a"], "thread": ["t1", "t1", "t1", "t2", "t2", "t1", "t1"],
        "region": ["call", "call", "parse", "call", "rare", "call", "call"],
        "t_start": [10.1, 11.0, 11.05, 10.6, 11.0, 10.2, 12.5], "duration": [0.2, 0.5, 0.1, 0.3, 0.1, 0.4, 0.1]})
    spans = spans.assign(boot="x", pid="7")
    out = features.with_region_times(tasks, spans)
    assert out["region.call"].tolist() == pytest.approx([0.7, 0.3, 0.4])   # the one after its task's end: none's
    assert "region.rare" not in out and "region.parse" not in out           # one task of three entered each
    kept = features.with_region_times(tasks, spans, keep=("region.rare",))
    assert kept["region.rare"].tolist() == pytest.approx([0.0, 0.1, 0.0])
    elsewhere = features.with_region_times(tasks, spans.assign(pid="8"))
    assert "region.call" not in elsewhere                                   # another process's regions
