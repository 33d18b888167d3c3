"""Tests of causewatch.analytics.causal.strength: one unit (bits of mutual information) for every edge
strength, bounded by the entropy of either end, and the same whichever CI test learnt the graph."""

import math

import numpy as np
import pandas as pd
import pytest

from causewatch.analytics.causal import AutoTest, FisherZTest, KDEMITest, PCLearner, RCoTTest
from causewatch.analytics.causal.strength import edge_strengths, pair_bits, plugin_entropy_bits


def _solver(n=1500, seed=0):
    """`mb` takes 3 values and nearly determines page_faults (the case that printed 19.932 bits)."""
    rng = np.random.default_rng(seed)
    mb = rng.choice([64.0, 256.0, 1024.0], n)
    faults = mb * 250 + rng.normal(0, 5, n)
    seconds = np.sqrt(faults) * 1e-3 + rng.normal(0, 0.01, n)
    kind = rng.choice(["a", "b"], n)
    return pd.DataFrame({"mb": mb, "page_faults": faults, "seconds": seconds, "kind": kind,
                         "wait": np.where(kind == "a", 1.0, 3.0) + rng.normal(0, 0.2, n)})


def test_plugin_entropy_is_log2_of_equal_levels():
    assert plugin_entropy_bits(np.repeat([1.0, 2.0, 3.0, 4.0], 25)) == pytest.approx(2.0)
    assert plugin_entropy_bits(np.ones(10)) == 0.0


@pytest.mark.parametrize("levels", [2, 3, 5])
def test_strength_never_exceeds_the_entropy_of_a_discrete_end(levels):
    rng = np.random.default_rng(levels)
    d = rng.integers(0, levels, 2000).astype(float)
    y = d * 1e6 + rng.normal(size=2000)        # y determines d: the true MI is H(d)
    bits = pair_bits(d, y)
    assert 0.5 * math.log2(levels) < bits <= plugin_entropy_bits(d) + 1e-12
    both = pair_bits(d, (d + 1) % levels, (True, True))   # a bijection of d: all of H(d), exactly
    assert both == pytest.approx(plugin_entropy_bits(d), abs=1e-9)
    assert pair_bits(d, rng.integers(0, levels, 2000).astype(float), (True, True)) < 0.01


@pytest.mark.parametrize("test", [AutoTest(), KDEMITest(), RCoTTest(), FisherZTest()], ids=lambda t: t.name)
def test_every_test_gives_the_same_strength_bounded_by_the_discrete_end(test):
    df = _solver()
    model = PCLearner(ci_test=test, discrete=["kind"]).fit(df).model_
    edges = {frozenset((e.src, e.dst)): e.strength for e in model.edges()}
    assert frozenset(("mb", "page_faults")) in edges
    for e in model.edges():
        for end in (e.src, e.dst):
            if df[end].nunique() <= 16:
                assert e.strength <= plugin_entropy_bits(df[end].to_numpy()) + 1e-12, (e, end)
    data = PCLearner(discrete=["kind"]).fit(df).data_
    again = edge_strengths(data.values, data.names, data.discrete, edges)
    assert again == pytest.approx(edges)   # a function of the rows and the pair, not of the test
