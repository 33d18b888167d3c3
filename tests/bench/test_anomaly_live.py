"""bench/anomaly_live.py's scoring (bench/live/score.py) on synthetic anomaly lists, as /api/anomalies
gives them: a quiet run passes with none, a fault's with one anomaly, timely, naming its culprit and
resolved after; a burst, a late one, a wrong first cause or an unresolved one fails, each said why.
And the bench names a fault's process the way the agent names its neighbours."""

import os
import sys

import pytest
from support import ROOT

from causewatch.agent.neighbours import command

sys.path.insert(0, str(ROOT / "bench"))
import anomaly_live  # bench/ is no package: its folder goes on the path above
from live import score as live_score
from live.score import Plan

T0 = 1_800_000_000.0
HOG = "process python faults.py hog on live-node"
FAULT = Plan("hog", start=T0 + 150, end=T0 + 210, run_end=T0 + 300, culprits=(HOG,))
BASE = T0 + 40   # the baseline model first seen


def anomaly(opened, resolved=None, unit=HOG, score=2.5, kind="mechanism_changed", dst="cpu_wait_seconds"):
    causes = [] if unit is None else [{"unit": unit, "score": score, "evidence": "rose"},
                                      {"unit": "region compute", "score": 0.4, "evidence": "flat"}]
    return {"kind": kind, "src": "(time)", "dst": dst, "opened": T0 + opened,
            "resolved": None if resolved is None else T0 + resolved, "evidence": {"causes": causes}}


def test_one_timely_anomaly_naming_the_culprit_and_resolved_after_passes():
    got = live_score.score(FAULT, [anomaly(170, resolved=250)], BASE)
    assert got["passed"], got["why"]
    assert (got["latency_s"], got["resolved_after_end_s"], got["cause"]) == (20.0, 40.0, HOG)
    assert not got["burst"] and got["after"] == 1


def test_latency_is_from_the_faults_start_and_a_late_one_fails():
    got = live_score.score(FAULT, [anomaly(150 + 61, resolved=260)], BASE)
    assert got["latency_s"] == 61.0 and not got["passed"]
    assert "61.0 s after its start" in got["why"]


def test_a_burst_counts_as_a_burst_though_the_first_is_right():
    got = live_score.score(FAULT, [anomaly(175, resolved=230, kind="edge_appeared"), anomaly(160, resolved=220)], BASE)
    assert got["burst"] and got["after"] == 2 and not got["passed"]
    assert got["latency_s"] == 10.0   # the earliest opened, whatever order the API gave
    assert "a burst of 2" in got["why"]


def test_an_anomaly_before_the_fault_fails_the_run():
    got = live_score.score(FAULT, [anomaly(60, resolved=80), anomaly(170, resolved=250)], BASE)
    assert got["before"] == 1 and got["after"] == 1 and not got["passed"]
    assert "1 opened before the fault" in got["why"]


@pytest.mark.parametrize("resolved", [None, 301.0])   # never, or only after the run's end (the app stopped)
def test_unresolved_is_counted_as_never(resolved):
    got = live_score.score(FAULT, [anomaly(170, resolved=resolved)], BASE)
    assert got["resolved_after_end_s"] is None and not got["passed"]
    assert "never resolved" in got["why"]


def test_resolved_later_than_the_allowance_fails():
    longer = Plan("hog", start=FAULT.start, end=FAULT.end, run_end=FAULT.end + 200, culprits=(HOG,))
    got = live_score.score(longer, [anomaly(170, resolved=210 + 91)], BASE)
    assert got["resolved_after_end_s"] == 91.0 and not got["passed"]


@pytest.mark.parametrize("unit,value", [("node live-node: other processes' CPU", 3.0), (HOG, 0.9), (None, None)])
def test_the_first_cause_must_be_the_culprit_beyond_the_cut(unit, value):
    got = live_score.score(FAULT, [anomaly(170, resolved=250, unit=unit, score=value)], BASE)
    assert not got["named"] and not got["passed"]
    assert "not the culprit" in got["why"]


def test_a_line_says_the_rows_an_anomaly_was_raised_on_from_the_change():
    a = dict(anomaly(175, resolved=230, kind="edge_appeared"))
    a["evidence"] = dict(a["evidence"], raised_on={"rows": 900, "first_start": T0 + 20, "last_start": T0 + 140})
    (line,) = live_score.score(FAULT, [a], BASE)["said"]
    assert line.startswith("edge_appeared (time)->cpu_wait_seconds +25 s on rows -130..-10 s, resolved +20 s from "
                           "the fault's end; first cause " + HOG)


def test_a_quiet_run_passes_with_none_and_fails_with_any():
    calm = Plan("calm", start=T0 + 150, end=None, run_end=T0 + 300)
    assert live_score.score(calm, [], BASE)["passed"]
    got = live_score.score(calm, [anomaly(40, resolved=60, unit=None)], BASE)
    assert not got["passed"] and got["opened"] == 1
    assert got["said"] == ["mechanism_changed (time)->cpu_wait_seconds -110 s, resolved -90 s from the change; "
                           "first cause not ranked"]
    late = live_score.score(calm, [anomaly(301)], BASE)   # opened after the run's end: not this run's
    assert late["passed"] and late["opened"] == 0


@pytest.mark.parametrize("baseline", [None, T0 + 151])   # never, or only after the change
def test_a_run_without_a_baseline_by_the_change_fails_however_quiet(baseline):
    calm = Plan("calm", start=T0 + 150, end=None, run_end=T0 + 300)
    got = live_score.score(calm, [], baseline)
    assert not got["passed"] and got["why"] == "no baseline model by the change"
    assert not live_score.score(FAULT, [anomaly(170, resolved=250)], baseline)["passed"]


def test_the_table_counts_passes_by_scenario_and_load():
    runs = [{"scenario": "calm", "load": 0, "passed": True}, {"scenario": "calm", "load": 0, "passed": False},
            {"scenario": "hog", "load": 4, "passed": True}]
    text = live_score.table(runs, [0, 4], ["calm", "hog"])
    assert "| calm | nothing | 1/2 | - |" in text and "| hog | busy loops for 60 s | - | 1/1 |" in text


def test_a_faults_culprit_is_its_process_as_the_agent_names_it(tmp_path):
    fault = anomaly_live.Fault("io", tmp_path, at=0.0)
    (unit,) = fault.culprits()
    assert unit == f"process {command(fault.argv(), os.path.basename(sys.executable)[:15])} on {anomaly_live.NODE}"
    assert "faults.py io" in unit
    assert anomaly_live.Fault("service", tmp_path, 0.0).culprits() == ("region service",)
    assert anomaly_live.Fault("calm", tmp_path, 0.0).culprits() == ()
