"""Dependency anomalies against a baseline model: a new dependency found on the newest rows (named by
the non-descendant it comes from), edges that appear or disappear, strengths beyond their band."""

import numpy as np
import pandas as pd

from causewatch.analytics.causal.anomalies import edge_changes, new_dependencies
from causewatch.analytics.causal.model import CausalModel


def chain(strengths: dict) -> CausalModel:
    return CausalModel.from_json({"nodes": ["a", "b", "c", "d"], "edges": [
        {"src": s, "dst": d, "directed": True, "strength": v} for (s, d), v in strengths.items()]})


def rows(seed: int, n: int, c_on_a: float) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    a, d = rng.normal(size=n), rng.normal(size=n)
    b = a + 0.3 * rng.normal(size=n)
    c = b + c_on_a * np.sin(2 * a) + 0.3 * rng.normal(size=n)
    return pd.DataFrame({"a": a, "b": b, "c": c, "d": d})


def test_a_markov_violation_is_found_and_named_by_its_source():
    baseline = chain({("a", "b"): 1.0, ("b", "c"): 1.0})
    assert new_dependencies(baseline, rows(0, 600, 0.0)) == []        # the baseline still holds
    found = new_dependencies(baseline, rows(1, 600, 1.5))              # c now depends on a beyond b
    assert [(f.kind, f.src, f.dst) for f in found] == [("markov_violation", "a", "c")]
    f = found[0]
    assert f.score > f.threshold > 0 and f.evidence["rows"] == 600 and f.evidence["parents"] == ["b"]
    assert f.evidence["bits_by_non_descendant"]["a"] > f.evidence["bits_by_non_descendant"]["d"]
    # one check, Bonferroni over its tests: b, c and d have non-descendants beyond their parents, a has d
    assert f.evidence["tests"] == 4 and f.evidence["alpha_per_test"] == 0.01 / 4
    assert new_dependencies(baseline, rows(1, 600, 1.5), variables=["a", "b", "d"]) == []   # c not judged


def test_edges_that_appear_disappear_or_move_beyond_the_band():
    base = chain({("a", "b"): 1.0, ("b", "c"): 0.5, ("c", "d"): 0.02})
    newer = chain({("a", "b"): 1.04, ("b", "c"): 0.1, ("a", "d"): 0.3, ("c", "d"): 0.06, ("b", "d"): 0.05})
    got = {(f.kind, f.src, f.dst) for f in edge_changes(base, newer)}
    # a-b moved by 0.04 bits (inside the band); c-d tripled but by 0.04 bits only (noise on a weak edge);
    # b-d appeared too weak to be more than noise
    assert got == {("edge_appeared", "a", "d"), ("strength_changed", "b", "c")}
    assert {(f.kind, f.src, f.dst) for f in edge_changes(newer, base)} == {
        ("edge_disappeared", "a", "d"), ("strength_changed", "b", "c")}
    flipped = CausalModel.from_json({"nodes": ["a", "b", "c", "d"], "edges": [
        {"src": "b", "dst": "a", "directed": True, "strength": 1.0}, {"src": "b", "dst": "c", "directed": False,
                                                                    "strength": 0.5}]})
    assert {(f.kind, f.src, f.dst) for f in edge_changes(flipped, base)} == set()   # direction is no anomaly
    assert edge_changes(base, base) == []
