"""Tests of node ranking from probe_results and of kit registration in a real DuckDB store."""

import json

import duckdb
import pytest
from support import run_cli

from causewatch.cli import main
from causewatch.daemon import (
    routes,  # noqa: F401 (binds the verbs' handlers)
    verbs,
)
from causewatch.daemon.readers.probes import latest_probes, registered_kits
from causewatch.daemon.store import Store, create_views, migrate
from causewatch.daemon.store.results import register_kit
from causewatch.errors import InputError, NotFoundError
from causewatch.probe.rank import rank_nodes
from causewatch.probe.registry import kit_row


def manifest(app="mw", kit="k1"):
    return {"format": "causewatch-probe-kit/1", "app": app, "kit": kit, "tasks": 40, "reference_runs": 3,
            "reference": {"node": "ref-node"},
            "quality": {"spread": 0.02, "other_cpu": 0.05, "other_cpu_before": 0.01, "cpu_bound_phases": 1,
                        "phases": 1, "retries": 0},
            "worker": {"callable": "causewatch.probe.workloads.masterworker:run_task"}, "reference_seconds": 10.0,
            "phases": [{"phase": 0, "weight": 1.0, "input": {"id": "t", "type": "dict", "size": 100, "seed": 1},
                        "ref_seconds": 0.01, "ref_se": 0.001}]}


def store(path, results):
    con = duckdb.connect(str(path))
    migrate(con)
    create_views(con)
    register_kit(con, kit_row(manifest()))
    for i, (node, ts, app, pred) in enumerate(results):
        con.execute("INSERT INTO probe_results (node, boot, seq, ts, app, kit, predicted_seconds, lo, hi, ratio, "
                    "probe_seconds, phases) VALUES (?, 'b', ?, ?, ?, 'k1', ?, ?, ?, ?, 1.0, ?)",
                    [node, i + 1, ts, app, pred, pred * 0.9, pred * 1.1, pred / 10, json.dumps([{"phase": 0}])])
    return con


def test_rank_uses_each_nodes_latest_result(tmp_path):
    con = store(tmp_path / "s.duckdb", [("a", 1.0, "mw", 30.0), ("b", 1.0, "mw", 20.0), ("a", 2.0, "mw", 10.0),
                                        ("c", 1.0, "other", 1.0)])
    ranked = rank_nodes("mw", latest_probes(con, "mw"), registered_kits(con), now=102.0)
    assert [(r["rank"], r["node"], r["run_task_seconds"]) for r in ranked] == [(1, "a", 10.0), (2, "b", 20.0)]
    assert ranked[0]["run_lo"] == pytest.approx(9.0) and ranked[0]["run_hi"] == pytest.approx(11.0)
    # per task: one run's task-seconds over the kit's 40 tasks, interval alike; age from the result's ts
    assert (ranked[0]["task_seconds"], ranked[0]["task_lo"], ranked[0]["task_hi"]) == \
        pytest.approx((0.25, 0.225, 0.275))
    assert [r["age_seconds"] for r in ranked] == [100.0, 101.0]
    assert ranked[0]["quality"].startswith("reference spread 2.0 % over 3 runs")
    assert ranked[0]["reference_node"] == "ref-node" and ranked[0]["phases"] == [{"phase": 0}]
    assert rank_nodes("nothing", latest_probes(con, "nothing"), [], now=0.0) == []
    answer = verbs.RANK.call(con, app="mw")
    assert [n["node"] for n in answer["nodes"]] == ["a", "b"] and "reference" in answer["ratio"]
    assert answer["nodes"][0]["age_seconds"] > 1e6     # from the real clock: ts 2.0 is in 1970
    with pytest.raises(InputError, match="app"):
        verbs.RANK.call(con)


@pytest.mark.slow   # four CLI processes
def test_rank_command_reads_a_stopped_daemons_store(tmp_path):
    store(tmp_path / "s.duckdb", [("a", 1.0, "mw", 30.0), ("b", 1.0, "mw", 20.0)]).close()
    out = run_cli("rank", "mw", "--db", str(tmp_path / "s.duckdb"), "--json")
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert [n["node"] for n in answer["nodes"]] == ["b", "a"] and "reference" in answer["ratio"]
    assert answer["nodes"][0]["task_seconds"] == pytest.approx(0.5)
    table = run_cli("rank", "mw", "--db", str(tmp_path / "s.duckdb"))
    lines = table.stdout.splitlines()
    assert lines[1].split()[:3] == ["1", "b", "0.5"]
    assert any(line.startswith("ratio: this node's time over") for line in lines)
    assert "kit k1 (reference node ref-node): reference spread 2.0 %" in table.stdout
    unreachable = run_cli("rank", "mw", "--daemon", "127.0.0.1:9")
    assert unreachable.returncode == 2 and "cannot reach the daemon" in unreachable.stderr


def test_register_kit_replaces_same_name(tmp_path):
    kit = tmp_path / "kit"
    kit.mkdir()
    (kit / "manifest.json").write_text(json.dumps(manifest()))
    db = str(tmp_path / "s.duckdb")
    Store(db).close()
    assert main(["probe", "register", str(kit), "--db", db]) == 0
    (kit / "manifest.json").write_text(json.dumps(dict(manifest(), reference_seconds=5.0)))
    assert main(["probe", "register", str(kit), "--db", db]) == 0
    with duckdb.connect(db) as con:
        kits = registered_kits(con)
    assert len(kits) == 1 and kits[0]["manifest"]["reference_seconds"] == 5.0
    assert kits[0]["path"] == str(kit.resolve())
    out = run_cli("probe", "register", str(kit), "--db", db)
    assert out.returncode == 0 and "registered kit k1" in out.stdout


def test_probe_status_lists_each_nodes_probe_pending_done_or_failed(tmp_path):
    con = store(tmp_path / "s.duckdb", [("a", 1.0, "mw", 30.0)])
    con.execute("UPDATE probe_results SET extra = ? WHERE node = 'a'", [json.dumps({"busy": True, "other_cpu": 0.8})])
    con.execute("INSERT INTO probe_results (node, boot, seq, ts, app, kit, probe_seconds, error) "
                "VALUES ('b', 'b', 9, 5.0, 'mw', 'k1', 0.1, 'No module named ''solver''')")
    con.execute("INSERT INTO nodes (node, first_seen, last_seen) VALUES ('a', 1, 2), ('b', 1, 6), ('c', 1, 7)")
    con.close()
    out = run_cli("probe", "status", "--db", str(tmp_path / "s.duckdb"), "--json")
    assert out.returncode == 0, out.stderr
    rows = {r["node"]: r for r in json.loads(out.stdout)}
    assert {n: (r["app"], r["kit"], r["state"]) for n, r in rows.items()} == \
        {"a": ("mw", "k1", "done"), "b": ("mw", "k1", "failed"), "c": ("mw", "k1", "pending")}
    assert rows["a"]["busy"] is True and rows["a"]["other_cpu"] == 0.8 and rows["a"]["predicted_seconds"] == 30.0
    assert rows["b"]["reason"] == "No module named 'solver'" and rows["b"]["ts"] == 5.0
    assert rows["c"]["last_seen"] == 7.0 and rows["c"]["reason"] is None
    table = run_cli("probe", "status", "mw", "--db", str(tmp_path / "s.duckdb")).stdout.splitlines()
    assert table[0].split() == ["node", "app", "kit", "state", "when", "note"]
    assert table[1].split()[:4] == ["a", "mw", "k1", "done"] and "busy: others used 80 % CPU" in table[1]
    assert table[2].endswith("No module named 'solver'") and table[3].split()[3] == "pending"
    assert run_cli("probe", "status", "other", "--db", str(tmp_path / "s.duckdb"), "--json").stdout.strip() == "[]"
    assert "pending" in run_cli("probe", "status", "--help").stdout


def test_rank_names_the_nodes_whose_probe_failed(tmp_path):
    con = store(tmp_path / "s.duckdb", [])
    con.execute("INSERT INTO probe_results (node, boot, seq, ts, app, kit, error) "
                "VALUES ('b', 'b', 9, 5.0, 'mw', 'k1', 'No module named ''solver''')")
    with pytest.raises(NotFoundError, match="the probe of kit k1 failed on b .* ago: No module named 'solver'"):
        verbs.RANK.call(con, app="mw")
    con.execute("INSERT INTO probe_results (node, boot, seq, ts, app, kit, predicted_seconds, lo, hi, ratio, "
                "probe_seconds) VALUES ('a', 'b', 10, 6.0, 'mw', 'k1', 4.0, 3.0, 5.0, 1.0, 0.2)")
    answer = verbs.RANK.call(con, app="mw")
    assert [n["node"] for n in answer["nodes"]] == ["a"] and answer["nodes"][0]["busy"] is None
    assert answer["failed"] == [{"node": "b", "kit": "k1", "ts": 5.0, "reason": "No module named 'solver'"}]
    # a node whose newest probe came back after a failure is not failed any more
    con.execute("INSERT INTO probe_results (node, boot, seq, ts, app, kit, predicted_seconds, lo, hi, ratio, "
                "probe_seconds) VALUES ('b', 'b', 11, 7.0, 'mw', 'k1', 4.0, 3.0, 5.0, 1.0, 0.2)")
    assert verbs.RANK.call(con, app="mw")["failed"] == []
    assert [(r["node"], r["predicted_seconds"]) for r in latest_probes(con, "mw")] == [("a", 4.0), ("b", 4.0)]
