"""`causewatch diagnose` on a daemon's store by time ranges, through cli.main on a real DuckDB store file
(samples of four nodes, hot rows and the lake, and an app's tasks whose duration follows their node's
load): a planted change on one node's metrics ranks that node first and the app's slower tasks, its
echo, below it; bad windows exit 2 naming them."""

import functools
import json

import numpy as np
import pandas as pd
import pytest
from task_rows import ingest_tasks

from causewatch.cli import main
from causewatch.daemon import store

T0 = 1_700_000_000
BASE, INCIDENT = (T0, T0 + 3600), (T0 + 3600, T0 + 3900)   # an hour calm, then five minutes
NODES, METRICS = ("n1", "n2", "n3", "n4"), ("cpu_busy_ratio", "load1", "mem_used_bytes")
SLOW = "n3"   # the app's tasks run on n3; from the incident on, something else takes n3's CPU
LEVEL = {"cpu_busy_ratio": 0.3, "load1": 2.0, "mem_used_bytes": 4e9}


def _busy(rng, t):
    """n3's CPU busy ratio: its own noise, and more than twice as busy from the incident on."""
    return LEVEL["cpu_busy_ratio"] * (1 + 0.1 * rng.standard_normal(len(t))) * np.where(t >= INCIDENT[0], 2.5, 1.0)


def _samples(rng, node, metric, t, busy):
    if node == SLOW and metric != "mem_used_bytes":
        return busy * LEVEL[metric] / LEVEL["cpu_busy_ratio"] * (1 + 0.02 * rng.standard_normal(len(t)))
    return LEVEL[metric] * (1 + 0.05 * rng.standard_normal(len(t)))


def _tasks(rng, t_start, t, busy):
    """A task's duration grows with how busy its node was when it started."""
    at = np.interp(t_start, t, busy) / LEVEL["cpu_busy_ratio"]
    duration = 0.2 * (1 + 0.02 * rng.standard_normal(len(t_start))) * (0.7 + 0.3 * at)
    instructions = 1e9 * rng.uniform(0.95, 1.05, len(t_start))
    return pd.DataFrame({"node": SLOW, "boot": "b1", "seq": np.arange(len(t_start)), "app": "lu",
                         "task_id": [f"t{i}" for i in range(len(t_start))], "t_start": t_start,
                         "duration": duration, "cpu_seconds": 0.9 * duration,
                         "params": json.dumps({"n": 100}),
                         "counters": [json.dumps({"instructions": x}) for x in instructions]})


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    """Samples every 10 s of 4 nodes x 3 metrics, the first half hour moved to the lake; a task every 5 s."""
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("diagnose") / "cw.duckdb"
    s = store.Store(str(path))
    series = [(i + 1, n, "node", m) for i, (n, m) in enumerate((n, m) for n in NODES for m in METRICS)]
    s.con.executemany("INSERT INTO series VALUES (?, ?, ?, ?)", series)
    t = np.arange(BASE[0], INCIDENT[1], 10.0)
    busy = _busy(rng, t)
    rows = pd.DataFrame([(sid, int(ts * 1000), v) for sid, n, _, m in series
                         for ts, v in zip(t, _samples(rng, n, m, t, busy))], columns=["series_id", "ts", "value"])
    s.con.register("rows", rows)
    s.con.execute("INSERT INTO samples_hot SELECT * FROM rows")
    s.con.unregister("rows")
    s.run(functools.partial(store.lake.compact, lake=str(s.lake), cutoff_ms=(T0 + 1800) * 1000))
    ingest_tasks(s, _tasks(rng, np.arange(BASE[0], INCIDENT[1], 5.0), t, busy))
    s.close()
    return str(path)


def _argv(db, *extra):
    return ["diagnose", "--db", db, "--baseline-window", f"{BASE[0]},{BASE[1] - 60}",
            "--incident-window", f"{INCIDENT[0]},{INCIDENT[1]}", "--step", "30", *extra]


def test_a_planted_change_on_one_nodes_metrics_ranks_that_node_first(db, capsys):
    assert main([*_argv(db, "--target", "app:lu:duration"), "--json"]) == 0
    causes = json.loads(capsys.readouterr().out)["causes"]
    order = [c["unit"] for c in causes]
    assert set(order) == {*NODES, "app:lu"}
    assert order[0] == SLOW and causes[0]["score"] >= 1, causes[:2]
    assert "cpu_busy_ratio" in causes[0]["evidence"] or "load1" in causes[0]["evidence"]
    assert all(c["score"] < 1 for c in causes if c["unit"] in set(NODES) - {SLOW})
    assert order[1] == "app:lu" and "it may echo n3" in causes[1]["evidence"]
    assert main(_argv(db, "--target", "app:lu:duration")) == 0   # the table for people
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[:2] == ["1", SLOW]


def test_a_scope_keeps_its_units_and_an_app_scope_adds_the_nodes(db, capsys):
    assert main([*_argv(db, "--scope", "node"), "--json"]) == 0
    assert {c["unit"] for c in json.loads(capsys.readouterr().out)["causes"]} == set(NODES)
    assert main([*_argv(db, "--scope", "app:lu"), "--json"]) == 0
    assert {c["unit"] for c in json.loads(capsys.readouterr().out)["causes"]} == {*NODES, "app:lu"}


@pytest.mark.parametrize("extra,message", [
    (["--baseline-window", "5,1"], "--baseline-window '5,1': START must be before END"),
    (["--incident-window", "soon"], "expected START,END in seconds since the epoch"),
    (["--incident-window", f"{T0 + 9000},{T0 + 9300}"], "the store holds no samples or tasks in that range"),
    (["--baseline", "x.csv"], "give the two windows as files"),
    (["--target", "n9:load1"], "the target column 'n9:load1' is in neither window"),
])
def test_bad_windows_exit_2_naming_them(db, capsys, extra, message):
    assert main(_argv(db, *extra)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
