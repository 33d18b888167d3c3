"""Tests of node ranking from probe_results and of kit registration in a real DuckDB store."""

import json

import duckdb
import pytest
from support import run_cli

from causewatch.daemon.store import migrate
from causewatch.errors import InputError
from causewatch.probe.rank import api_rank, predicted_times, rank_nodes
from causewatch.probe.registry import register_kit_file, registered_kits


def manifest(app="mw", kit="k1"):
    return {"format": "causewatch-probe-kit/1", "app": app, "kit": kit,
            "worker": {"callable": "causewatch.probe.workloads.masterworker:run_task"}, "reference_seconds": 10.0,
            "phases": [{"phase": 0, "weight": 1.0, "input": {"id": "t", "type": "dict", "size": 100, "seed": 1},
                        "ref_seconds": 0.01, "ref_se": 0.001}]}


def store(path, results):
    con = duckdb.connect(str(path))
    migrate(con)
    for i, (node, ts, app, pred) in enumerate(results):
        con.execute("INSERT INTO probe_results (node, boot, seq, ts, app, kit, predicted_seconds, lo, hi, "
                    "ratio, probe_seconds, phases) "
                    "VALUES (?, 'b', ?, ?, ?, 'k1', ?, ?, ?, ?, 1.0, ?)",
                    [node, i + 1, ts, app, pred, pred * 0.9, pred * 1.1, pred / 10, json.dumps([{"phase": 0}])])
    return con


def test_rank_uses_each_nodes_latest_result(tmp_path):
    con = store(tmp_path / "s.duckdb", [("a", 1.0, "mw", 30.0), ("b", 1.0, "mw", 20.0), ("a", 2.0, "mw", 10.0),
                                        ("c", 1.0, "other", 1.0)])
    ranked = rank_nodes(con, "mw")
    assert [(r["rank"], r["node"], r["predicted_seconds"]) for r in ranked] == [(1, "a", 10.0), (2, "b", 20.0)]
    assert ranked[0]["lo"] == pytest.approx(9.0) and ranked[0]["hi"] == pytest.approx(11.0)
    assert ranked[0]["phases"] == [{"phase": 0}]
    assert rank_nodes(con, "nothing") == []
    assert sorted(predicted_times(con)) == [("mw", "a", 10.0), ("mw", "b", 20.0), ("other", "c", 1.0)]
    assert api_rank({"app": "mw"}, con)["nodes"] == ranked
    with pytest.raises(InputError, match="app"):
        api_rank({}, con)


def test_rank_command_reads_a_stopped_daemons_store(tmp_path):
    store(tmp_path / "s.duckdb", [("a", 1.0, "mw", 30.0), ("b", 1.0, "mw", 20.0)]).close()
    out = run_cli("rank", "mw", "--db", str(tmp_path / "s.duckdb"), "--json")
    assert out.returncode == 0, out.stderr
    assert [n["node"] for n in json.loads(out.stdout)["nodes"]] == ["b", "a"]
    table = run_cli("rank", "mw", "--db", str(tmp_path / "s.duckdb"))
    assert table.stdout.splitlines()[1].split()[1] == "b"
    unreachable = run_cli("rank", "mw", "--http", "127.0.0.1:9")
    assert unreachable.returncode == 2 and "cannot reach the daemon" in unreachable.stderr


def test_register_kit_replaces_same_name(tmp_path):
    kit = tmp_path / "kit"
    kit.mkdir()
    (kit / "manifest.json").write_text(json.dumps(manifest()))
    db = str(tmp_path / "s.duckdb")
    register_kit_file(db, str(kit))
    (kit / "manifest.json").write_text(json.dumps(dict(manifest(), reference_seconds=5.0)))
    register_kit_file(db, str(kit))
    with duckdb.connect(db) as con:
        kits = registered_kits(con)
    assert len(kits) == 1 and kits[0]["manifest"]["reference_seconds"] == 5.0
    assert kits[0]["path"] == str(kit.resolve())
    out = run_cli("probe", "register", str(kit), "--db", db)
    assert out.returncode == 0 and "registered kit k1" in out.stdout
