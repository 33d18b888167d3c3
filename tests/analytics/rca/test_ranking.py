"""analytics.rca.rank_causes on planted networks: the origin of a mechanism change first and its echoes
below it, with and without the call graph; calm rows raise nothing; degenerate columns never crash."""

import numpy as np
import pandas as pd
import pytest

from causewatch.analytics.rca import CUT, CallGraph, RCAError, rank_causes
from causewatch.analytics.rca.deviation import deviation, with_kind_scales

UNITS = {u: [f"{u}_latency", f"{u}_requests"] for u in ("front", "mid", "back", "cache", "auth")}
EDGES = [("front", "mid"), ("mid", "back"), ("front", "auth"), ("mid", "cache")]


def _service_rows(rng, rows, slow=None, traffic=1.0):
    """front calls mid and auth, mid calls back and cache: a caller's latency is its own work plus its
    callees'; `slow` adds 40 ms to one unit's own work, which its callers inherit."""
    own = {u: 0.01 + rng.gamma(4, 0.001, rows) for u in UNITS}
    if slow:
        own[slow] = own[slow] + 0.04
    lat = {"back": own["back"], "cache": own["cache"], "auth": own["auth"]}
    lat["mid"] = own["mid"] + lat["back"] + lat["cache"]
    lat["front"] = own["front"] + lat["mid"] + lat["auth"]
    cols = {}
    for u in UNITS:
        cols[f"{u}_latency"] = lat[u]
        cols[f"{u}_requests"] = rng.poisson(500 * traffic, rows).astype(float)
    return pd.DataFrame(cols)


@pytest.mark.parametrize("with_graph", [True, False])
@pytest.mark.parametrize("slow", ["back", "cache", "auth"])
def test_a_planted_mechanism_change_is_ranked_first_and_its_echoes_below(slow, with_graph):
    rng = np.random.default_rng(7)
    baseline, incident = _service_rows(rng, 300), _service_rows(rng, 6, slow=slow, traffic=1.4)
    graph = CallGraph(EDGES) if with_graph else None
    causes = rank_causes(baseline, incident, UNITS, "front_latency", graph)
    order = [c.unit for c in causes]
    assert order[0] == slow, [(c.unit, round(c.score, 3)) for c in causes]
    assert causes[0].score >= 1 and "rose" in causes[0].evidence
    echoes = {"back": ["mid", "front"], "cache": ["mid", "front"], "auth": ["front"]}[slow]
    assert all(order.index(e) > 0 for e in echoes)
    if with_graph:
        assert all(e in causes[0].evidence for e in echoes)   # named as the callers it explains


def test_calm_rows_with_another_traffic_mix_raise_nothing():
    """The incident rows come from the same mechanisms, the requests mix moved within its normal spread:
    every score stays below 1, the documented cut."""
    rng = np.random.default_rng(3)
    baseline = _service_rows(rng, 300)
    incident = _service_rows(rng, 6)
    for u in UNITS:
        incident[f"{u}_requests"] = rng.poisson(500, 6) * rng.uniform(0.97, 1.03)
    for target, graph in (("front_latency", CallGraph(EDGES)), (None, None)):
        causes = rank_causes(baseline, incident, UNITS, target, graph)
        assert max(c.score for c in causes) < 1, [(c.unit, c.score, c.evidence) for c in causes[:2]]
        assert causes[0].evidence.startswith("no change beyond the cut")


def test_flat_empty_and_missing_columns_do_not_crash_and_rank_last():
    rng = np.random.default_rng(1)
    baseline = pd.DataFrame({"a_avail": np.full(50, 100.0), "b_lat": rng.normal(1, 0.1, 50),
                             "c_lat": np.full(50, np.nan), "d_lat": rng.normal(1, 0.1, 50)})
    incident = pd.DataFrame({"a_avail": [100, 97.0, 96.5, 100], "b_lat": [1.0, 1.1, 0.9, 1.0],
                             "c_lat": [np.nan, 5, 5, 5], "d_lat": [np.nan] * 4})
    units = {"a": ["a_avail"], "b": ["b_lat"], "c": ["c_lat"], "d": ["d_lat"], "e": ["missing"]}
    causes = rank_causes(baseline, incident, units)
    assert causes[0].unit == "a" and causes[0].score >= 1   # a flat baseline still has a scale
    assert [c.evidence for c in causes if c.unit in "cde"] == ["c has no column with data in both windows",
                                                               "d has no column with data in both windows",
                                                               "e has no column with data in both windows"]
    assert all(np.isfinite(c.score) for c in causes)


def test_inputs_the_ranking_cannot_use_are_named():
    df = pd.DataFrame({"x": [1.0, 2.0, 3.0]})
    with pytest.raises(RCAError, match="incident window is empty"):
        rank_causes(df, df.iloc[:0])
    with pytest.raises(RCAError, match="only the baseline has x"):
        rank_causes(df, pd.DataFrame({"y": [1.0]}))
    with pytest.raises(RCAError, match="'z' is in neither"):
        rank_causes(df, df, target="z")
    assert CUT > 0


def _hogged_node(rng, rows, hog=False):
    """The daemon's units on one node (daemon/culprit_units.py): the app's CPU wait, the node's other
    processes' CPU and three busy processes, and a hog that is not there before the incident (0 in every
    look) and takes 0.75 of a core in it; the wait grows with the CPU the app's neighbours take."""
    procs = {p: np.clip(rng.normal(m, 0.04, rows), 0, None) for p, m in (("agent", 0.06), ("jobs", 0.17),
                                                                         ("pytest", 0.28))}
    procs["hog"] = 0.75 + rng.normal(0, 0.03, rows) if hog else np.zeros(rows)
    other = sum(procs.values()) + rng.normal(0, 0.05, rows)
    cols = {"cpu_wait_seconds": 0.02 + 0.09 * procs["hog"] + rng.gamma(4, 0.001, rows),
            "node n1: other processes' CPU/cpu_other_cores": other}
    cols.update({f"process {p} on n1/cpu_cores": v for p, v in procs.items()})
    return pd.DataFrame(cols)


@pytest.mark.parametrize("base_rows", [5, 12, 120])
def test_a_process_new_in_the_incident_ranks_first_however_long_the_baseline(base_rows):
    """A process absent from the baseline (its column all 0) is judged against its kind's other columns'
    spread, not 1 / the baseline's rows: on 5 rows its stand-in scale of 0.2 cores had its 0.75 cores a
    robust z under 4, and the wait it caused ranked above it. Its share of the wait, a CPU it took (another
    kind of the same family), is a cross share: the wait is its echo."""
    rng = np.random.default_rng(base_rows)
    baseline, incident = _hogged_node(rng, base_rows), _hogged_node(rng, 12, hog=True)
    units = {c.split("/")[0]: [c] for c in baseline.columns}
    node = "node n1: other processes' CPU"
    procs = [u for u in units if u.startswith("process ")]
    edges = [("cpu_wait_seconds", node)] + [(a, p) for a in ("cpu_wait_seconds", node) for p in procs]
    causes = rank_causes(baseline, incident, units, "cpu_wait_seconds", CallGraph(edges))
    ranked = [(c.unit, round(c.score, 2)) for c in causes]
    assert causes[0].unit == "process hog on n1" and causes[0].score >= 1, ranked
    assert causes[0].deviation.z > 10, (causes[0].deviation, ranked)
    assert "cpu_wait_seconds" in causes[0].evidence, causes[0].evidence   # explained, as its echo


def test_a_flat_column_keeps_its_stand_in_scale_without_two_peers_that_moved():
    rng = np.random.default_rng(2)
    devs = {"new": deviation("new", np.zeros(8), np.full(4, 0.5)),
            "busy": deviation("busy", rng.normal(1, 0.1, 8), rng.normal(1, 0.1, 4)),
            "idle": deviation("idle", np.zeros(8), np.zeros(4))}
    alone = with_kind_scales(devs, {c: "cpu_cores" for c in devs})
    assert alone["new"].scale == devs["new"].scale == 1 / 8 and alone["new"].flat
    devs["busier"] = deviation("busier", rng.normal(2, 0.3, 8), rng.normal(2, 0.3, 4))
    pooled = with_kind_scales(devs, {c: "cpu_cores" for c in devs})
    spread = float(np.median([devs["busy"].scale, devs["busier"].scale]))
    assert pooled["new"].scale == pytest.approx(spread) and pooled["new"].z == pytest.approx(0.5 / spread)
    assert pooled["busy"] == devs["busy"] and pooled["idle"].z == 0
