"""The causal job's region variables over a real DuckDB store: each task's seconds in the app's main
regions are variables of its model, so a slow service call is an anomaly on its region's variable."""

import json

import pytest
from task_rows import ingest_regions, ingest_tasks, service_tasks

from causewatch.daemon.exporter import Exporter
from causewatch.daemon.job_causal import CausalJob
from causewatch.daemon.jobs import JobContext
from causewatch.daemon.store import Store
from causewatch.daemon.store.results import set_baseline


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "cw.duckdb"))
    yield s
    s.close()


def _ingest(store, seed, start, count, call=0.002):
    tasks, regions = service_tasks(seed, start, count, call)
    ingest_regions(store, regions)   # a task's regions end, and are sent, before the task
    ingest_tasks(store, tasks)


@pytest.mark.slow
def test_a_slow_service_call_is_a_mechanism_change_of_its_region_s_variable(store):
    """Tasks of two worker threads call a service (2 ms) and write: the model has both regions' seconds
    per task as variables. From the fourth batch on the call takes 32 ms: a mechanism change is raised on
    the call's variable, and its best ranked cause names the region; the write's is never named."""
    ctx = JobContext(read=store.cursor, write=store.run, send=lambda *a: True, exporter=Exporter())
    job = CausalJob(min_rows=50, min_new=40, max_rows=1000)
    cur = store.cursor()
    _ingest(store, 0, 0, 300)
    job.run(ctx)
    model = job.scopes["app:svc"].learner.model_
    assert {"region.catalog call", "region.write", "n", "duration"} <= set(model.nodes)
    first = cur.execute("SELECT model_id FROM models WHERE scope = 'app:svc'").fetchone()[0]
    store.run(lambda con: set_baseline(con, "app:svc", first, how="pinned", now=1.0))
    seq = 300
    for i, call in enumerate([0.002] * 3 + [0.032] * 3):
        _ingest(store, 10 + i, seq, 46, call)
        seq += 46
        job.run(ctx)
    rows = cur.execute("SELECT kind, dst, evidence FROM anomalies").fetchall()
    changed = {dst: json.loads(e) for kind, dst, e in rows if kind == "mechanism_changed"}
    assert "region.catalog call" in changed, rows
    assert not any("write" in dst for _, dst, _ in rows), rows
    evidence = changed["region.catalog call"]
    assert evidence["newest"] > 5 * evidence["before"]
    assert "catalog call" in evidence["cause"], evidence["causes"]
