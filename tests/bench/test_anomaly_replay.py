"""bench/anomaly_replay.py on a real stored run: tasks of app `mw` received in batches, calm, then
waiting four times as long per CPU-second; the replay learns versions, picks a baseline, and opens a
mechanism change on the wait after the change only, as the daemon's job would."""

import sys

import pytest
from support import ROOT
from task_rows import ingest_tasks, waiting_tasks

from causewatch.daemon.store import Store

sys.path.insert(0, str(ROOT / "bench"))
import anomaly_replay  # bench/ is no package: its folder goes on the path above

BATCH, CALM, CHANGED = 50, 8, 4


@pytest.fixture
def run_db(tmp_path):
    path = str(tmp_path / "cw.duckdb")
    store = Store(path)
    for i in range(CALM + CHANGED):
        rows = waiting_tasks(i, i * BATCH, BATCH, wait_per_cpu=0.4 if i < CALM else 1.6)
        ingest_tasks(store, rows, received=2000.0 + 5 * i)
    store.close()
    return path


def test_a_replay_finds_the_change_after_it_and_nothing_before(run_db, capsys):
    assert anomaly_replay.main([run_db, "--app", "mw", "--interval", "5"]) == 0
    out = capsys.readouterr().out
    assert "baseline: model" in out and "model 1:" in out
    opened = [line for line in out.splitlines() if " opened: " in line]
    # the first changed batch is received 5 * CALM s after the first
    assert opened and all(float(line.split()[0]) >= 5 * CALM for line in opened), out
    assert any("mechanism_changed (time) -> cpu_wait_seconds" in line for line in opened), out
    assert "job runs: CPU-s per run median" in out.splitlines()[-1]


def test_a_store_without_the_app_s_tasks_says_so(run_db):
    with pytest.raises(SystemExit, match="holds no tasks of app nope"):
        anomaly_replay.main([run_db, "--app", "nope"])
