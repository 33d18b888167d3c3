"""`causewatch jobs` and `causewatch job ID` over a real DuckDB store: the listing per user and state, a
job's report as lines (its phase mix among them) and as JSON, and a job no agent saw as exit 2 naming the
ones there are."""

import json

import pytest
from support import bbv_frames

from causewatch import wire
from causewatch.cli import main
from causewatch.daemon.store import Store


@pytest.fixture
def db(tmp_path):
    path = str(tmp_path / "j.duckdb")
    store = Store(path)
    job = {"unit": "job:42", "kind": "job", "start": 1000.0, "job_id": "42", "user": "ann", "job_name": "train",
           "cpus": 4.0, "memory_bytes": 8 * 2**30}
    store.commit_frames([wire.decode(wire.encode("unit", "n1", "b", i + 1, body)) for i, body in enumerate([
        {**job, "event": "start"},
        {**job, "event": "end", "end": 1100.0, "counted": {"cpu": "ok", "pressure": "no cpu.pressure: no PSI"},
         "totals": {"unit_cpu_seconds_total": 300.0, "unit_memory_peak_bytes": 2.0 * 2**30}},
        {"unit": "job:43", "kind": "job", "event": "start", "start": 2000.0, "job_id": "43", "user": "bob"}])])
    samples = (("a.out:solve", 9), ("libc.so.6:memcpy", 1))   # four like vectors: one phase
    store.commit_frames(bbv_frames([("n1", "v", seq, "job:42", "native", 1000.0 + seq, 1001.0 + seq, key, count)
                                    for seq in range(1, 5) for key, count in samples]))
    store.close()
    return path


def test_jobs_lists_them_per_user_and_state(db, capsys):
    assert main(["jobs", "--db", db, "--json"]) == 0
    assert [(j["job_id"], j["user"], j["state"]) for j in json.loads(capsys.readouterr().out)] == [
        ("43", "bob", "running"), ("42", "ann", "finished")]
    assert main(["jobs", "--db", db, "--finished", "--user", "ann"]) == 0
    head, row = capsys.readouterr().out.splitlines()
    assert head.split()[:3] == ["unit", "node", "user"]
    assert row.split()[:4] == ["job:42", "n1", "ann", "train"] and "75%" in row and "25%" in row
    assert main(["jobs", "--db", db, "--kind", "container"]) == 0
    assert capsys.readouterr().out.strip() == "no container units seen yet"


def test_job_reports_its_efficiency(db, capsys):
    assert main(["job", "42", "--db", db]) == 0
    out = capsys.readouterr().out
    assert "job 42 on n1: train of ann (finished, 100 s; counted from totals)" in out
    assert "300.00 s used, 75.0% of the allocation" in out and "2048.00 MiB, 25.0% of the request" in out
    assert "not counted    pressure: no cpu.pressure: no PSI" in out
    assert "phase 0        100.0% of the samples (4 vectors): a.out:solve 90.0%, libc.so.6:memcpy 10.0%" in out
    assert main(["job", "42", "--db", db, "--json"]) == 0
    [report] = json.loads(capsys.readouterr().out)
    assert report["cpu_efficiency"] == 0.75
    assert main(["job", "7", "--db", db]) == 2
    assert "no job '7' was seen by an agent; the newest: 43, 42" in capsys.readouterr().err
