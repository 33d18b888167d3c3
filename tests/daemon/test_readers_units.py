"""The units the agents follow, on a real DuckDB store: their records folded into one row per (node, unit,
start) in any order, the job listing with its filters and a job's efficiency report, through the routes."""

import json

import numpy as np
import pytest
from support import bbv_frames

from causewatch import wire
from causewatch.daemon import routes, verbs  # noqa: F401 (routes binds the verbs' handlers)
from causewatch.daemon.store import Store
from causewatch.errors import InputError, NotFoundError

_seq = iter(range(1, 10**9))


def unit(node="n1", **body) -> wire.Frame:
    return wire.decode(wire.encode("unit", node, "b", next(_seq), body))


JOB = {"unit": "job:42", "kind": "job", "start": 1000.0, "job_id": "42", "user": "ann", "uid": 1001,
       "job_name": "train", "cpus": 4.0, "memory_bytes": 8 * 2**30, "source": "cgroup"}
TOTALS = {"unit_perf_context_switches_total": 5e4, "unit_perf_context_switches_running_ratio": 1.0,
          "unit_cpu_seconds_total": 300.0, "unit_cpu_user_seconds_total": 280.0, "unit_memory_peak_bytes": 2.0 * 2**30,
          "unit_io_read_bytes_total": 1e9, "unit_pressure_cpu_waiting_seconds_total": 10.0}


def rows(store: Store) -> list[dict]:
    cur = store.cursor().execute("SELECT * FROM units ORDER BY node, unit")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def test_a_units_records_fold_into_one_row_in_any_order_and_a_resend_changes_nothing(tmp_path):
    store = Store(str(tmp_path / "u.duckdb"))
    without_user = {k: v for k, v in JOB.items() if k != "user"}
    ended = unit(**without_user, event="end", end=1100.0, totals=TOTALS)
    store.commit_frames([ended])                                          # the end first, in a batch of its own
    store.commit_frames([unit(**{**JOB, "event": "start"}), unit(**{**JOB, "event": "update", "gpus": 2})])
    store.commit_frames([ended])                                          # resent: a duplicate
    [row] = rows(store)
    assert (row["ended"], row["user"], row["gpus"], row["cpus"], json.loads(row["totals"])) == (
        1100.0, "ann", 2, 4.0, TOTALS)
    # start and end of a short unit in one batch; a unit of the same name started again is a row of its own
    short = {"unit": "step:42.0", "kind": "step", "start": 1001.0, "parent": "job:42"}
    store.commit_frames([unit(**short, event="start"), unit(**short, event="end", end=1002.0),
                         unit(**{**short, "start": 1003.0}, event="start")])
    steps = [r for r in rows(store) if r["unit"] == "step:42.0"]
    assert sorted((r["started"], r["ended"]) for r in steps) == [(1001.0, 1002.0), (1003.0, None)]
    store.close()


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "j.duckdb"))
    running = {"unit": "job:43", "kind": "job", "start": 2000.0, "job_id": "43", "user": "bob", "cpus": 2.0,
               "memory_bytes": 2**30}
    s.commit_frames([unit(**JOB, event="start"), unit(**JOB, event="end", end=1100.0, totals=TOTALS),
                     unit(unit="step:42.batch", kind="step", event="end", start=1000.5, end=1099.0, job_id="42",
                          step="batch", parent="job:42", totals={"unit_cpu_seconds_total": 299.0}),
                     unit(node="n2", **running, event="start"),
                     unit(unit="service:db.service", kind="service", event="start", start=10.0, user="root")])
    t = np.array([2001.0, 2002.0, 2003.0])
    s.commit_frames([wire.decode(wire.encode("samples", "n2", "b", next(_seq), wire.samples_body(
        t, ["unit_cpu_seconds_total", "unit_memory_bytes"], np.column_stack([[1.0, 2.0, 3.0], [5e8, 7e8, 6e8]]),
        "job:43")))])
    s.run(lambda con: con.execute(
        "INSERT INTO anomalies (anomaly_id, scope, kind, src, dst, opened, updated, resolved, score, threshold, "
        "evidence) VALUES (1, 'app:lu', 'edge_appeared', 'a', 'b', 1050, 1060, 1070, 0.4, 0.1, '{}'), "
        "(2, 'app:lu', 'edge_appeared', 'c', 'd', 1200, 1210, NULL, 0.4, 0.1, '{}')"))
    yield s
    s.close()


def test_the_job_listing_per_user_state_node_and_kind(store):
    with store.cursor() as cur:
        everything = verbs.JOBS.call(cur)
        assert [(j["unit"], j["node"], j["user"], j["state"]) for j in everything] == [
            ("job:43", "n2", "bob", "running"), ("job:42", "n1", "ann", "finished")]
        finished = everything[1]
        assert (finished["elapsed_seconds"], finished["cpu_seconds"], finished["cpu_efficiency"]) == (
            100.0, 300.0, 0.75)
        assert finished["memory_peak_bytes"] == 2 * 2**30 and finished["memory_efficiency"] == 0.25
        running = everything[0]
        assert running["cpu_seconds"] == 3.0 and running["memory_peak_bytes"] == 7e8   # its newest samples
        assert [j["unit"] for j in verbs.JOBS.call(cur, user=["ann"])] == ["job:42"]
        assert [j["unit"] for j in verbs.JOBS.call(cur, state="running")] == ["job:43"]
        assert [j["unit"] for j in verbs.JOBS.call(cur, node=["n1"], state="finished")] == ["job:42"]
        assert [j["unit"] for j in verbs.JOBS.call(cur, kind="service")] == ["service:db.service"]
        assert [j["unit"] for j in verbs.JOBS.call(cur, kind="step")] == ["step:42.batch"]
        assert len(verbs.JOBS.call(cur, limit=1)) == 1
        with pytest.raises(InputError, match="kind: expected one of job, step, service, container, pod, got 'vm'"):
            verbs.JOBS.call(cur, kind="vm")
        with pytest.raises(InputError, match="state: expected one of running, finished, all, got 'done'"):
            verbs.JOBS.call(cur, state="done")


def test_a_jobs_report_weighs_its_use_against_its_allocation(store):
    with store.cursor() as cur:
        [r] = verbs.JOB.call(cur, id="42")
        assert (r["user"], r["uid"], r["job_name"], r["cpus"], r["state"], r["counted_from"]) == (
            "ann", 1001, "train", 4.0, "finished", "totals")
        assert r["cpu_efficiency"] == 300.0 / (4.0 * 100.0) and r["memory_efficiency"] == 0.25
        assert (r["cpu_user_seconds"], r["io_read_bytes"]) == (280.0, 1e9)
        assert r["pressure"] == {"cpu_waiting": {"seconds": 10.0, "share": 0.1}}
        assert r["counters"] == {"context_switches": {"count": 5e4, "running_ratio": 1.0}}   # its perf events
        assert [(s["step"], s["cpu_seconds"]) for s in r["steps"]] == [("batch", 299.0)]
        assert [a["anomaly_id"] for a in r["anomalies"]] == [1]   # the one open while it ran
        [live] = verbs.JOB.call(cur, id="43")
        assert (live["state"], live["counted_from"], live["cpu_seconds"]) == ("running", "samples", 3.0)
        assert live["anomalies"][0]["anomaly_id"] == 2
        with pytest.raises(NotFoundError, match="no job '7' was seen by an agent; the newest: 43, 42"):
            verbs.JOB.call(cur, id="7")
        with pytest.raises(InputError, match="id: give a Slurm job id"):
            verbs.JOB.call(cur)


def job_vectors(node: str, first: float, seqs: range, mostly) -> list[tuple]:
    """A vector of job:42 on `node` every 3 s from `first`, as the `bbv` view's rows: 90 % of its samples in
    `mostly(i)`, 10 % in memcpy."""
    rows = []
    for i, seq in enumerate(seqs):
        t = first + 3 * i
        rows += [(node, "v", seq, "job:42", "native", t, t + 1.0, mostly(i), 90),
                 (node, "v", seq, "job:42", "native", t, t + 1.0, "libc.so.6:memcpy", 10)]
    return rows


def test_a_jobs_report_gives_its_phase_mix_from_its_vectors(store):
    """The job's native vectors of its node while it ran, clustered: two phases, heaviest first, each with its
    weight, intervals and top functions; another node's vectors and a later run's are not its; a job
    without vectors has an empty mix."""
    store.commit_frames(bbv_frames(
        job_vectors("n1", 1001.0, range(1, 31), lambda i: "a.out:io" if i % 3 == 0 else "a.out:solve")
        + job_vectors("n2", 1001.0, range(1, 11), lambda i: "a.out:elsewhere")
        + job_vectors("n1", 1200.0, range(31, 41), lambda i: "a.out:requeued")))
    with store.cursor() as cur:
        [r] = verbs.JOB.call(cur, id="42")
        [live] = verbs.JOB.call(cur, id="43")
    assert [(p["weight"], p["intervals"], [t["key"] for t in p["top"]]) for p in r["phases"]] == [
        (pytest.approx(2 / 3), 20, ["a.out:solve", "libc.so.6:memcpy"]),
        (pytest.approx(1 / 3), 10, ["a.out:io", "libc.so.6:memcpy"])]
    assert [t["share"] for t in r["phases"][0]["top"]] == [pytest.approx(0.9), pytest.approx(0.1)]
    assert live["phases"] == []
