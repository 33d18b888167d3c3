"""The ranking in a scheduler's terms (probe/broker.py): Slurm's plan and scontrol updates, the parse of
`scontrol show node --oneliner`, extender scores, and the CLI's dry run where no Slurm is installed."""

import json
import time

import duckdb
import pytest

from causewatch.cli import main
from causewatch.config import ConfigError, SlurmConfig, load
from causewatch.daemon.store import create_views, migrate
from causewatch.daemon.store.results import register_kit
from causewatch.probe.broker import (
    attr_app,
    condor_attributes,
    extender_scores,
    parse_scontrol_nodes,
    slurm_plan,
    slurm_updates,
)
from causewatch.probe.registry import kit_row


def row(node, rank, seconds, age=60.0):
    return {"node": node, "rank": rank, "task_seconds": seconds, "task_hi": seconds and seconds * 1.1,
            "age_seconds": age, "probed_at": 1_790_000_000.5}


ROWS = [row("a", 1, 0.5), row("old", 2, 0.6, age=3 * 86400), row("b", 3, 2.0), row("no-kit", 4, None)]


def test_the_plan_puts_ranked_nodes_first_and_everything_unknown_after_them():
    plan = slurm_plan("mw", ROWS, ["n-a", "b", "old", "no-kit", "spare"], {"a": "n-a"})
    assert [(p["slurm_node"], p["state"], p["weight"], p["best"]) for p in plan] == [
        ("n-a", "ranked", 1, True), ("b", "ranked", 2, False), ("no-kit", "stale", 3, False),
        ("old", "stale", 3, False), ("spare", "unprobed", 3, False)]
    assert [p["slurm_node"] for p in slurm_plan("mw", ROWS, ["n-a", "b"], {"a": "n-a"}, best=2) if p["best"]] == \
        ["n-a", "b"]
    assert [p["weight"] for p in slurm_plan("mw", [], ["x", "y"], {})] == [1, 1]   # nothing ranked: all equal
    # Slurm not asked: the ranked nodes alone
    assert [p["slurm_node"] for p in slurm_plan("mw", ROWS, None, {})] == ["a", "b", "no-kit", "old"]
    # a longer max_age lets the old result rank again
    assert slurm_plan("mw", ROWS, ["a", "old", "b"], {}, max_age=4 * 86400)[1]["slurm_node"] == "old"


def test_updates_change_only_what_differs_and_keep_other_features():
    plan = slurm_plan("mw", ROWS, ["a", "b"], {})
    current = parse_scontrol_nodes(
        "NodeName=a Arch=x86_64 AvailableFeatures=gpu,cw_mw_best ActiveFeatures=gpu,cw_mw_best Weight=1 State=IDLE\n"
        "NodeName=b AvailableFeatures=cw_mw_best,ib ActiveFeatures=(null) Weight=7 State=MIXED+DRAIN\n")
    assert current["b"] == {"weight": 7, "available": ["cw_mw_best", "ib"], "active": [], "state": "MIXED+DRAIN"}
    assert slurm_updates("mw", plan, current) == [
        ["scontrol", "update", "NodeName=b", "Weight=2", "AvailableFeatures=ib", "ActiveFeatures="]]
    assert slurm_updates("mw", plan, {"a": current["a"], "b": dict(current["b"], weight=2, available=["ib"])}) == []
    # Slurm not asked (a dry run where it is not installed): every node, only our feature
    assert slurm_updates("mw", plan, None) == [
        ["scontrol", "update", "NodeName=a", "Weight=1", "AvailableFeatures=cw_mw_best", "ActiveFeatures=cw_mw_best"],
        ["scontrol", "update", "NodeName=b", "Weight=2"]]


def test_extender_scores_and_condor_attributes_leave_the_unknown_out():
    assert extender_scores(ROWS, ["b", "a", "old", "no-kit", "zz"]) == [
        {"Host": "b", "Score": 2}, {"Host": "a", "Score": 10}, {"Host": "old", "Score": 0},
        {"Host": "no-kit", "Score": 0}, {"Host": "zz", "Score": 0}]
    assert extender_scores(ROWS, ["b"]) == [{"Host": "b", "Score": 10}]     # the best among the candidates
    assert extender_scores([row("slowest", 1, 1000.0), row("fast", 2, 1.0)], ["slowest", "fast"])[0]["Score"] == 1
    assert condor_attributes("m-w.2", row("a", 1, 0.5)) == {
        "causewatch_m_w_2_seconds": 0.5, "causewatch_m_w_2_seconds_hi": pytest.approx(0.55),
        "causewatch_m_w_2_tasks_per_hour": 7200.0, "causewatch_m_w_2_probe_time": 1_790_000_000}
    assert condor_attributes("mw", None) == {} == condor_attributes("mw", row("x", 1, None))
    assert attr_app("lu-3d.x") == "lu_3d_x"


def test_the_slurm_config_names_a_bad_map(tmp_path):
    good = tmp_path / "b.toml"
    good.write_text('[slurm]\nnodes = {"agent-1" = "cn001"}\nbest = 2\n')
    assert load(SlurmConfig, good, section="slurm") == SlurmConfig(nodes={"agent-1": "cn001"}, best=2)
    bad = tmp_path / "bad.toml"
    bad.write_text("[slurm]\nnodes = {a = 3}\n")
    with pytest.raises(ConfigError, match="nodes"):
        load(SlurmConfig, bad, section="slurm")


def test_a_dry_run_without_slurm_prints_the_commands(tmp_path, monkeypatch, capsys):
    with duckdb.connect(str(tmp_path / "s.duckdb")) as con:
        migrate(con)
        create_views(con)
        register_kit(con, kit_row({"format": "causewatch-probe-kit/1", "app": "mw", "kit": "k1", "tasks": 10,
                                   "worker": {"callable": "m:f"}, "reference_seconds": 1.0,
                                   "phases": [{"phase": 0, "weight": 1.0, "input": 1, "ref_seconds": 0.1}]}))
        for i, (node, seconds) in enumerate((("a", 30.0), ("b", 20.0))):
            con.execute("INSERT INTO probe_results (node, boot, seq, ts, app, kit, predicted_seconds, lo, hi, ratio, "
                        "probe_seconds) VALUES (?, 'b', ?, ?, 'mw', 'k1', ?, ?, ?, 1.0, 1.0)",
                        [node, i, time.time(), seconds, seconds, seconds])
    db = str(tmp_path / "s.duckdb")
    monkeypatch.setenv("PATH", "/nonexistent")                # no scontrol here
    assert main(["broker", "slurm", "mw", "--dry-run", "--db", db, "--nodes", "a,b,c", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert not answer["applied"] and not answer["slurm_state_known"]
    assert [" ".join(c) for c in answer["commands"]] == [
        "scontrol update NodeName=b Weight=1 AvailableFeatures=cw_mw_best ActiveFeatures=cw_mw_best",
        "scontrol update NodeName=a Weight=2", "scontrol update NodeName=c Weight=3"]
    assert main(["broker", "slurm", "mw", "--dry-run", "--db", db]) == 0
    table = capsys.readouterr().out
    assert "would run: scontrol update NodeName=b Weight=1" in table and "Slurm not asked" in table
    assert main(["broker", "slurm", "mw", "--db", db]) == 2
    assert "scontrol not found" in capsys.readouterr().err
    assert main(["broker", "slurm", "mw", "--map", "nonsense", "--dry-run", "--db", db]) == 2
    assert "--map 'nonsense'" in capsys.readouterr().err
