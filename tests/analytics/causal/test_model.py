"""Tests of causewatch.analytics.causal.model.CausalModel: exports, diff, submodels and Markov violations."""

import json

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from causewatch.analytics.causal import mdl
from causewatch.analytics.causal.ci import Dataset, DSeparationOracle, FisherZTest, KDEMITest, oracle_dataset
from causewatch.analytics.causal.model import CausalModel, ModelError
from causewatch.analytics.causal.pc import PCLearner


def _model():
    return CausalModel.from_search(
        nodes=["A", "B", "C", "D"], arcs=[("A", "B"), ("D", "B")], undirected=[frozenset(("B", "C"))],
        strengths={frozenset(("A", "B")): 0.5, frozenset(("D", "B")): 0.25, frozenset(("B", "C")): 1.0},
        sepsets={frozenset(("A", "D")): ()}, equivalences=[{"target": "C", "variables": ["A", "B"], "kept": "B"}])


def test_json_round_trip_keeps_everything():
    m = _model()
    again = CausalModel.from_json(m.to_json())
    assert again.to_dict() == m.to_dict()
    d = json.loads(m.to_json())
    assert d["edges"][0] == {"src": "A", "dst": "B", "directed": True, "strength": 0.5}
    assert d["equivalences"][0]["kept"] == "B"


def test_bad_json_is_named():
    with pytest.raises(ModelError, match="lacks 'edges'"):
        CausalModel.from_json({"nodes": ["a"]})


def test_tetrad_text_format():
    assert _model().to_tetrad() == ("Graph Nodes:\nA;B;C;D\n\nGraph Edges:\n"
                                    "1. A --> B\n2. B --- C\n3. D --> B\n")


def test_dot_marks_undirected_edges():
    dot = _model().to_dot()
    assert '"B" -> "C" [label="1.00", dir=none];' in dot
    assert '"A" -> "B" [label="0.50"];' in dot


def test_diff_lists_added_removed_and_reoriented_edges():
    other = CausalModel.from_search(["A", "B", "C", "D"], arcs=[("B", "A"), ("B", "C")], undirected=[],
                                    strengths={}, sepsets={}, equivalences=[])
    d = _model().diff(other)
    assert d["removed"] == [{"src": "D", "dst": "B", "directed": True}]
    assert d["added"] == []
    assert [(r["before"]["src"], r["after"]["src"]) for r in d["reoriented"]] == [("A", "B"), ("B", "B")]


def test_dag_extension_is_a_member_of_the_class():
    dag = nx.DiGraph([("a", "b"), ("b", "c"), ("c", "d"), ("a", "e")])
    model = PCLearner(ci_test=DSeparationOracle(dag)).fit(oracle_dataset(sorted(dag))).model_
    ext = model.dag_extension()
    assert nx.is_directed_acyclic_graph(ext)
    assert {frozenset(e) for e in ext.edges} == {frozenset(e) for e in dag.edges}
    assert all(len(list(ext.predecessors(v))) <= 1 for v in ext)  # a tree: no v-structure added


def _perf_df(seed, n=400, broken=False):
    rng = np.random.default_rng(seed)
    size = rng.uniform(10, 100, n)
    ops = size ** 2 * rng.uniform(0.5, 1.5, n)
    # broken: time suddenly depends on size directly, not only through ops
    time = ops * 0.01 + (0.5 * size if broken else 0) + rng.normal(size=n)
    return pd.DataFrame({"size": size, "ops": ops, "time": time})


def test_submodels_give_formulas_per_node():
    df = _perf_df(0)
    model = CausalModel.from_search(["size", "ops", "time"], arcs=[("size", "ops"), ("ops", "time")],
                                    undirected=[], strengths={}, sepsets={}, equivalences=[], data=df)
    subs = model.fit_submodels()
    assert subs["ops"].kind in ("poly2", "power")
    assert subs["ops"].bits < mdl.fit_submodel(df, "ops", []).bits
    assert subs["time"].kind == "poly1" and subs["time"].formula.startswith("time = ")
    assert subs["size"].parents == ()


def test_markov_violations_flag_a_new_direct_dependence():
    model = CausalModel.from_search(["size", "ops", "time"], arcs=[("size", "ops"), ("ops", "time")],
                                    undirected=[], strengths={}, sepsets={}, equivalences=[])
    ok = model.markov_violations(_perf_df(1))
    bad = model.markov_violations(_perf_df(2, broken=True))
    assert not ok.violated.any()
    assert bad.set_index("variable").loc["time", "violated"]
    assert bad.set_index("variable").loc["time", "bits"] > ok.set_index("variable").loc["time", "bits"]


def test_markov_violations_decide_by_each_tests_own_statistic_and_threshold():
    """Fisher-z's threshold is a normal quantile, not bits; counts on sparse tables decide by a
    permutation p, which plug-in bits against the chi-square threshold would overrule."""
    model = CausalModel.from_search(["size", "ops", "time"], arcs=[("size", "ops"), ("ops", "time")],
                                    undirected=[], strengths={}, sepsets={}, equivalences=[])
    bad = model.markov_violations(_perf_df(2, broken=True), ci_test=FisherZTest()).set_index("variable")
    assert bad.loc["time", "violated"] and bad.loc["time", "threshold"] == pytest.approx(2.5758, abs=1e-4)
    chain = CausalModel.from_search(["x", "z", "y"], arcs=[("z", "x"), ("z", "y")], undirected=[], strengths={},
                                    sepsets={}, equivalences=[], discrete=["x", "z", "y"])
    test = KDEMITest(alpha=0.05)
    for seed in range(40):   # x ⊥ y | z on 60 rows: a sparse table
        rng = np.random.default_rng(seed)
        z = rng.integers(0, 4, 60)
        df = pd.DataFrame({"x": (z + rng.integers(0, 2, 60)) % 4, "z": z, "y": (z * 3 + rng.integers(0, 3, 60)) % 4})
        row = chain.markov_violations(df, ci_test=test).set_index("variable").loc["y"]
        assert row.violated == (not test.block(Dataset(df, ["x", "z", "y"]), ["y"], ["x"], ["z"]).independent)
