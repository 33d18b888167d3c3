"""Tests of the daemon's causal job over a real DuckDB store: models and edges stored, partial_fit
on new tasks, Markov violations stored as anomalies, gauges exported, tasks unpacked by learn."""

import json
import time

import numpy as np
import pandas as pd
import pytest
from causewatch.daemon.job_causal import Job, task_frame
from causewatch.daemon.metrics import LatestState
from causewatch.daemon.scheduler import JobContext
from causewatch.daemon.store import Store

from causewatch.cli import main


def _tasks(seed, start, count, broken=False):
    rng = np.random.default_rng(seed)
    n = rng.integers(50, 300, count)
    dtype = rng.choice(["int", "double"], count)
    size = np.where(dtype == "int", 4, 8)
    instructions = n.astype(float) ** 2 * rng.uniform(0.5, 1.5, count)
    misses = size * rng.uniform(50, 150, count)
    # broken: the duration starts to depend on n directly (say, a new cache effect)
    duration = instructions * 1e-5 + misses * 1e-3 + (0.03 * n if broken else 0) + rng.normal(0, 0.1, count)
    return pd.DataFrame({
        "node": "node-1", "boot": "b1", "seq": np.arange(start, start + count), "app": "lu",
        "task_id": [f"t{i}" for i in range(start, start + count)], "t_start": 1000.0 + np.arange(start, start + count),
        "duration": duration, "cpu_seconds": duration * rng.uniform(0.85, 0.95, count),
        "params": [json.dumps({"n": int(a), "dtype": b}) for a, b in zip(n, dtype)],
        "counters": [json.dumps({"instructions": a, "l2_misses": b}) for a, b in zip(instructions, misses)],
    })


def _ingest(store, frame):
    if "bbv" not in frame:
        frame = frame.assign(bbv=None)

    def write(con):
        con.register("t", frame)
        con.execute("INSERT INTO tasks (node, boot, seq, app, task_id, t_start, duration, cpu_seconds, params, "
                    "counters, bbv) SELECT node, boot, seq, app, task_id, t_start, duration, cpu_seconds, params, "
                    "counters, bbv FROM t")
        con.execute("INSERT INTO ingest_log SELECT node, boot, seq, 'task', t_start, ? FROM t", [time.time()])
        con.unregister("t")
    store.run(write)


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "cw.duckdb"))
    yield s
    s.close()


def _ctx(store):
    return JobContext(read=store.cursor, write=store.run, send=lambda *a: True, metrics=LatestState())


def test_task_frame_unpacks_params_and_counters(store):
    _ingest(store, _tasks(0, 0, 10))
    frame, inputs = task_frame(store.cursor(), "lu")
    assert inputs == ["dtype", "n"]
    assert {"duration", "cpu_seconds", "instructions", "l2_misses"} <= set(frame.columns)
    assert pd.api.types.is_numeric_dtype(frame["n"]) and not pd.api.types.is_numeric_dtype(frame["dtype"])


def test_task_frame_quotes_keys_from_agents(store):
    frame = _tasks(0, 0, 3)
    frame["params"] = [json.dumps({'it\'s "odd"': i, "x') OR (1=1": 2}) for i in range(3)]
    _ingest(store, frame)
    out, inputs = task_frame(store.cursor(), "lu")
    assert sorted(inputs) == sorted(['it\'s "odd"', "x') OR (1=1"])
    assert out['it\'s "odd"'].tolist() == [0, 1, 2]


def test_job_learns_stores_updates_and_flags_violations(store):
    ctx = _ctx(store)
    job = Job(min_rows=50, min_new=20)
    _ingest(store, _tasks(0, 0, 300))
    job.run(ctx)
    cur = store.cursor()
    assert cur.execute("SELECT count(*), max(n_rows) FROM models WHERE scope = 'app:lu'").fetchone() == (1, 300)
    edges = cur.execute("SELECT src, dst, directed FROM edges").fetchall()
    assert edges and all(dst not in ("n", "dtype") for _, dst, directed in edges if directed)
    assert not any({s, d} == {"n", "dtype"} for s, d, _ in edges)  # inputs never connect
    assert b"causewatch_edge_strength_bits{" in ctx.metrics.exposition()
    graph = json.loads(cur.execute("SELECT graph FROM models").fetchone()[0])
    # every variable with parents is stored as an MDL-fitted function of them
    assert graph["submodels"] and {d for _, d, directed in edges if directed} <= set(graph["submodels"])
    instructions = graph["submodels"].get("instructions")
    assert instructions is None or "n" in instructions["formula"]

    learner = job.scopes["app:lu"].learner
    _ingest(store, _tasks(1, 300, 30))
    job.run(ctx)
    assert job.scopes["app:lu"].learner is learner and learner.n_reused_ > 0  # partial_fit, not a refit
    assert cur.execute("SELECT max(n_rows) FROM models").fetchone() == (330,)

    _ingest(store, _tasks(2, 330, 120, broken=True))
    job.run(ctx)
    flagged = {r[0] for r in cur.execute("SELECT variable FROM anomalies WHERE scope = 'app:lu'").fetchall()}
    assert "duration" in flagged
    assert b'causewatch_markov_violation_bits{scope="app:lu",variable="duration"}' in ctx.metrics.exposition()


def _phased_tasks(seed, start, count):
    """Tasks running one of two code mixes; the second kind takes twice as long."""
    frame = _tasks(seed, start, count)
    rng = np.random.default_rng(seed + 100)
    second = rng.random(count) < 0.5
    frame["duration"] = np.where(second, 2.0, 1.0) + rng.normal(0, 0.05, count)
    frame["bbv"] = [json.dumps({"keys": ["b.py:sort"], "counts": [100]}) if s else
                    json.dumps({"keys": ["a.py:solve", "a.py:read"], "counts": [90, 10]}) for s in second]
    return frame


def test_code_phase_from_task_vectors_is_a_discrete_variable(store):
    ctx = _ctx(store)
    job = Job(min_rows=50, min_new=20)
    _ingest(store, _phased_tasks(0, 0, 150))
    job.run(ctx)
    _ingest(store, _phased_tasks(1, 150, 10))   # too few to refit: read again next time
    job.run(ctx)
    _ingest(store, _phased_tasks(2, 160, 30))
    job.run(ctx)
    st = job.scopes["app:lu"]
    assert st.tracker.counts_.tolist() and sum(st.tracker.counts_) == 190   # each task taught it once
    assert len(st.tracker.counts_) == 2
    model = st.learner.model_
    assert "code_phase" in model.nodes and "code_phase" in model.discrete
    assert any({e.src, e.dst} == {"code_phase", "duration"} for e in model.edges())


def test_learn_command_reads_the_tasks_table(store, tmp_path, capsys):
    _ingest(store, _tasks(0, 0, 200))
    _ingest(store, _phased_tasks(1, 200, 100))
    store.close()
    assert main(["learn", f"duckdb:{tmp_path / 'cw.duckdb'}:tasks", "--app", "lu", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # the same variables as the daemon's model: no bookkeeping columns, the code phase of the vectors
    assert {"n", "dtype", "duration", "instructions"} <= set(out["nodes"])
    assert not {"t_start", "received", "bbv"} & set(out["nodes"]) and "code_phase" in out["nodes"]
    assert all(e["src"] in ("n", "dtype") for e in out["edges"] if {e["src"], e["dst"]} & {"n", "dtype"})
