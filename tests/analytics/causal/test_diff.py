"""The causal diff of two windows on a known network, x1 -> y <- x2, y -> z, and w alone (linear-Gaussian):
a planted change of z's coefficient on y is reported as z's mechanism and nothing else of substance; a
new edge w -> z as that edge and z's mechanism; two windows of one process as no change; a re-oriented
edge as re-oriented, never as added and removed."""

import json

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from causewatch.analytics.causal import CausalModel, DiffError, diff_models, diff_windows


def network(seed, n=400, z_on_y=1.0, z_on_w=0.0, x1_mean=0.0):
    rng = np.random.default_rng(seed)
    x1, x2, w = rng.normal(x1_mean, size=n), rng.normal(size=n), rng.normal(size=n)
    y = x1 + x2 + 0.5 * rng.normal(size=n)
    z = z_on_y * y + z_on_w * w + 0.5 * rng.normal(size=n)
    return pd.DataFrame({"x1": x1, "x2": x2, "y": y, "z": z, "w": w})


def _touches(change, v):
    return v in (change.src, change.dst)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_changed_coefficient_is_that_mechanism_and_nothing_else(seed):
    found = diff_windows(network(seed), network(seed + 100, z_on_y=0.5))
    assert [m.variable for m in found.mechanisms] == ["z"]
    z = found.mechanisms[0]
    assert z.given == ("y",) and z.bits > z.threshold
    # the fit on its causes in each window names the planted coefficient, 1 then 0.5
    assert "0.9" in z.formula_before or "1.0" in z.formula_before, z.formula_before
    assert "0.4" in z.formula_after or "0.5" in z.formula_after, z.formula_after
    # the only edge that may move is y -> z's strength (its mutual information falls with the coefficient)
    assert all(c.kind == "strength_changed" and {c.src, c.dst} == {"y", "z"} for c in found.edges), found.edges


def test_a_new_edge_is_that_edge_and_its_ends_mechanism():
    found = diff_windows(network(2), network(102, z_on_w=1.0))
    added = [c for c in found.edges if c.kind == "added"]
    assert [(c.src, c.dst) for c in added] == [("w", "z")] and added[0].after.directed
    assert all(_touches(c, "z") for c in found.edges), found.edges
    assert [m.variable for m in found.mechanisms] == ["z"]


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_two_windows_of_one_process_report_no_change(seed):
    found = diff_windows(network(seed), network(seed + 100))
    assert not found.changed, found.to_dict()
    assert found.to_dict()["unchanged_edges"] == 3 and found.mechanisms_judged


def _model(arcs, undirected=(), strength=0.5, nodes=("a", "b", "c")):
    return CausalModel.from_search(list(nodes), arcs, [frozenset(p) for p in undirected],
                                   {frozenset(p): strength for p in [*arcs, *undirected]}, {}, [])


def test_a_reoriented_edge_is_reoriented_not_added_and_removed():
    found = diff_models(_model([("a", "b"), ("c", "b")]), _model([("b", "a"), ("c", "b")]))
    assert [(c.kind, c.src, c.dst) for c in found.edges] == [("reoriented", "a", "b")]
    change = found.edges[0]
    assert (change.before.src, change.after.src) == ("a", "b")
    # an edge that lost its direction is re-oriented too
    found = diff_models(_model([("a", "b")]), _model([], [("a", "b")]))
    assert [c.kind for c in found.edges] == ["reoriented"]
    assert not found.changed   # as an anomaly: a re-orientation opens none


def test_an_edge_only_the_graphs_disagree_on_is_unconfirmed():
    rows_before, rows_after = network(8), network(108, z_on_w=1.0)
    nodes = list(rows_before.columns)
    spurious = CausalModel.from_search(nodes, [("x1", "w")], [], {frozenset(("x1", "w")): 0.5}, {}, [])
    apart = CausalModel.from_search(nodes, [], [], {}, {frozenset(("x1", "w")): (), frozenset(("w", "z")): ()}, [])
    # x1 and w are independent on the baseline's rows too: the removal is the learner's, not the data's
    found = diff_models(spurious, apart, rows_before, rows_after)
    assert [(c.kind, c.src, c.dst) for c in found.unconfirmed] == [("removed", "x1", "w")] and not found.edges
    # w and z, apart in the baseline's model, depend on each other on the newer rows: a shown edge
    joined = CausalModel.from_search(nodes, [("w", "z")], [], {frozenset(("w", "z")): 0.5}, {}, [])
    found = diff_models(apart, joined, rows_before, rows_after)
    assert [(c.kind, c.src, c.dst) for c in found.edges] == [("added", "w", "z")] and not found.unconfirmed


def test_edges_are_judged_by_the_anomaly_bands():
    # appearing under MIN_BITS is left out (and counted); a strength within its band is no change
    weak = diff_models(_model([("a", "b")]), _model([("a", "b"), ("b", "c")], strength=0.05))
    assert [c.kind for c in weak.edges] == ["strength_changed"] and weak.weak == 1
    within = diff_models(_model([("a", "b")], strength=0.5), _model([("a", "b")], strength=0.8))
    assert not within.changed and not within.mechanisms_judged
    beyond = diff_models(_model([("a", "b")], strength=0.3), _model([("a", "b")], strength=0.9))
    assert [(c.kind, c.before.strength, c.after.strength) for c in beyond.edges] == [("strength_changed", 0.3, 0.9)]
    removed = diff_models(_model([("a", "b"), ("b", "c")]), _model([("a", "b")]))
    assert [(c.kind, c.src, c.dst, c.after) for c in removed.edges] == [("removed", "b", "c", None)]


def test_to_dict_is_json_and_says_what_was_judged():
    found = diff_windows(network(6), network(106, z_on_w=1.0))
    d = json.loads(json.dumps(found.to_dict()))
    assert d["changed"] and d["rows"] == {"before": 400, "after": 400}
    assert {e["kind"] for e in d["edges"]} <= {"added", "strength_changed", "reoriented"}
    assert d["mechanisms"][0]["variable"] == "z" and d["mechanisms"][0]["formula_after"].startswith("z = ")
    assert nx.is_directed_acyclic_graph(found.after.dag_extension())


def test_inputs_are_causes_whose_own_mechanism_is_not_judged():
    before, after = network(7), network(107, x1_mean=2.0)   # the workload's mix moved, not the system
    assert "x1" in [m.variable for m in diff_windows(before, after).mechanisms]
    found = diff_windows(before, after, given=["x1", "x2"])
    assert not found.changed, found.to_dict()


def test_windows_that_cannot_be_compared_are_refused():
    with pytest.raises(DiffError, match="columns disagree: w in one only"):
        diff_windows(network(0), network(1).drop(columns="w"))
    with pytest.raises(DiffError, match="too few complete rows"):
        diff_windows(network(0), network(1, n=10))
    with pytest.raises(DiffError, match=r"after window lacks the baseline model's variables \['w'\]"):
        model = _model([("x1", "y")], nodes=("x1", "y", "w"))
        diff_models(model, model, network(0), network(1).drop(columns="w"))
