"""Tests of the phased master-worker workload: seeded task lists, tasks, the master with spawned workers."""

import json
import subprocess
import sys

import pytest

from causewatch.probe.workloads import masterworker as mw

pytestmark = pytest.mark.service   # the master's spawned worker processes


def test_task_list_is_seeded_and_phased():
    tasks = mw.make_tasks(60, seed=3)
    assert tasks == mw.make_tasks(60, seed=3)
    assert tasks != mw.make_tasks(60, seed=4)
    assert len(tasks) == 60 and len({t["id"] for t in tasks}) == 60
    assert {t["type"] for t in tasks} <= set(mw.TASK_TYPES)
    runs = 1 + sum(a["type"] != b["type"] for a, b in zip(tasks, tasks[1:]))
    assert runs < 40  # tasks come in runs of one type (phases), not shuffled one by one
    for t in tasks:
        base = mw.TASK_TYPES[t["type"]]
        assert 0.9 * base - 1 <= t["size"] <= 1.1 * base + 1


def test_another_mix_of_task_types_is_another_application():
    bundled = mw.make_tasks(300, seed=3)
    assert {t["type"] for t in bundled} == set(mw.DEFAULT_TYPES) and "sort" not in mw.DEFAULT_TYPES
    other = mw.make_tasks(300, seed=3, types=("integer", "stream", "dict", "sort"))
    assert {t["type"] for t in other} == {"integer", "stream", "dict", "sort"}
    with pytest.raises(ValueError, match="task types must be some of .*; not one: gpu$"):
        mw.make_tasks(3, types=("dict", "gpu"))
    out = subprocess.run([sys.executable, "-m", "causewatch.probe.workloads.masterworker", "--types", "dict,gpu"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--types: task types must be some of" in out.stderr, out.stderr


@pytest.mark.parametrize("kind", sorted(mw.TASK_TYPES))
def test_each_task_type_runs_deterministically(kind):
    task = {"id": "x", "type": kind, "size": mw.TASK_TYPES[kind] // 20, "seed": 5}
    assert mw.run_task(task) == mw.run_task(dict(task))


def test_unknown_task_type_is_named():
    with pytest.raises(ValueError, match="type must be one of"):
        mw.run_task({"id": "t1", "type": "gpu", "size": 1, "seed": 0})


def test_master_runs_tasks_on_spawned_workers():
    tasks = mw.make_tasks(6, seed=1, scale=0.05)
    result = mw.run_master(tasks, workers=2)
    assert [r["id"] for r in result["tasks"]] == [t["id"] for t in tasks]
    assert result["task_seconds"] == pytest.approx(sum(r["wall"] for r in result["tasks"]))
    assert all(r["checksum"] == mw.run_task(t) for r, t in zip(result["tasks"], tasks))


def test_an_endless_stream_stops_when_its_file_appears(tmp_path):
    """`--until FILE` (the demo's workload): tasks are handed out, in the seeded order, until the file
    exists; the ones in flight finish, and the run ends."""
    stop = tmp_path / "stop"

    def progress(done):
        if done == 5:
            stop.touch()

    result = mw.run_master(mw.iter_tasks(seed=1, scale=0.05), workers=2, progress=progress, stop=str(stop))
    ids = [r["id"] for r in result["tasks"]]
    assert 5 <= len(ids) <= 5 + 2 * 2   # at most two tasks per worker were handed out ahead
    assert ids == [t["id"] for t in mw.make_tasks(len(ids), seed=1, scale=0.05)]


def test_module_runs_as_a_command(tmp_path):
    out = subprocess.run([sys.executable, "-m", "causewatch.probe.workloads.masterworker", "--tasks", "4",
                          "--seed", "2", "--workers", "1", "--scale", "0.05", "--json"],
                         capture_output=True, text=True, timeout=120, check=True)
    assert len(json.loads(out.stdout)["tasks"]) == 4
    task = tmp_path / "task.json"
    task.write_text(json.dumps({"id": "one", "type": "dict", "size": 1000, "seed": 1}))
    one = subprocess.run([sys.executable, "-m", "causewatch.probe.workloads.masterworker", "--run-task", str(task)],
                         capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(one.stdout)["id"] == "one"
