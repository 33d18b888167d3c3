"""Tests of causewatch.analytics.causal.ci: caching per data version, the calibrated KDE test's false
positive rate across sample sizes and conditioning sets, the papers' thresholds, the baselines."""

import math

import networkx as nx
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from causewatch.analytics.causal import ci, entropy


def _df(seed, n, k):
    return pd.DataFrame(np.random.default_rng(seed).normal(size=(n, k)), columns=[f"v{i}" for i in range(k)])


def test_results_are_cached_per_data_version():
    test = ci.FisherZTest()
    data = ci.Dataset(_df(0, 100, 3))
    first = test.test(data, "v0", "v1", ["v2"])
    assert test.test(data, "v1", "v0", ["v2"]) is first  # x, y are unordered
    assert test.n_tests == 1
    test.test(ci.Dataset(_df(1, 100, 3)), "v0", "v1", ["v2"])
    assert test.n_tests == 2


def test_unknown_column_is_named():
    with pytest.raises(ci.CIError, match="no column 'nope'"):
        ci.FisherZTest().test(ci.Dataset(_df(0, 10, 2)), "v0", "nope")


def test_fisher_z_separates_a_chain():
    rng = np.random.default_rng(2)
    a = rng.normal(size=500)
    b = a + rng.normal(size=500)
    c = b + rng.normal(size=500)
    data = ci.Dataset(pd.DataFrame({"a": a, "b": b, "c": c}))
    test = ci.FisherZTest(alpha=0.01)
    assert not test.test(data, "a", "c").independent
    assert test.test(data, "a", "c", ["b"]).independent
    r = np.corrcoef(a, b)[0, 1]
    assert test.test(data, "a", "b").bits == pytest.approx(-0.5 * math.log2(1 - r * r))


def test_g2_is_twice_n_ln2_times_the_plug_in_mi():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 3, 400)
    y = (x + rng.integers(0, 2, 400)) % 3
    data = ci.Dataset(pd.DataFrame({"x": x, "y": y}), discrete=["x", "y"])
    res = ci.GSquareTest().test(data, "x", "y")
    bits = entropy.discrete_cmi_bits(data.values, [0], [1])
    assert res.stat == res.bits == pytest.approx(bits)
    # (3-1)(3-1) = 4 degrees of freedom: the threshold is the chi-square quantile over 2·n·ln2
    assert res.threshold == pytest.approx(stats.chi2.isf(0.01, 4) / (2 * 400 * math.log(2)))
    assert not res.independent


@pytest.mark.parametrize("n,dz", [(250, 0), (1000, 0), (250, 2), (1000, 2)])
def test_calibrated_kde_test_keeps_its_false_positive_rate(n, dz):
    # x ⊥ y | z with x and y both depending on z: the decision must not drift with n or |z|.
    test = ci.KDEMITest(alpha=0.05)
    wrong = 0
    for seed in range(12):
        rng = np.random.default_rng(100 + seed)
        z = rng.normal(size=(n, dz))
        df = pd.DataFrame({"x": z.sum(axis=1) * 0.5 + rng.normal(size=n),
                           "y": np.tanh(z.sum(axis=1)) + rng.normal(size=n),
                           **{f"z{i}": z[:, i] for i in range(dz)}})
        wrong += not test.test(ci.Dataset(df), "x", "y", [f"z{i}" for i in range(dz)]).independent
    assert wrong <= 3


def test_calibrated_kde_test_detects_a_nonlinear_dependence():
    rng = np.random.default_rng(4)
    u = rng.uniform(0, 2, 150)
    x = np.concatenate([u, -u])  # symmetric, so x and x² are uncorrelated
    df = pd.DataFrame({"x": x, "y": x ** 2 + 0.3 * rng.normal(size=300)})
    data = ci.Dataset(df)
    assert not ci.KDEMITest().test(data, "x", "y").independent
    assert ci.FisherZTest().test(data, "x", "y").independent  # what partial correlation misses


def test_lemeire_thresholds_are_the_papers():
    # Lemeire et al. §6.1: 0.4 bits between continuous variables, 0.2 bits with a discrete one.
    rng = np.random.default_rng(5)
    df = pd.DataFrame({"c1": rng.normal(size=100), "c2": rng.normal(size=100), "d": rng.integers(0, 3, 100)})
    data = ci.Dataset(df, discrete=["d"])
    test = ci.KDEMITest(estimator="lemeire")
    assert test.test(data, "c1", "c2").threshold == 0.4
    assert test.test(data, "c1", "d").threshold == 0.2


def test_d_separation_oracle():
    dag = nx.DiGraph([("a", "b"), ("d", "b"), ("b", "c")])
    data = ci.oracle_dataset(dag.nodes)
    oracle = ci.DSeparationOracle(dag)
    assert oracle.test(data, "a", "d").independent
    assert not oracle.test(data, "a", "d", ["b"]).independent
    assert oracle.test(data, "a", "c", ["b"]).independent


def test_null_moments_interpolate_between_grid_sizes():
    lo = ci.null_moments(181, ((0,), (0,), ()), n_null=10)
    hi = ci.null_moments(215, ((0,), (0,), ()), n_null=10)
    mid = ci.null_moments(197, ((0,), (0,), ()), n_null=10)
    assert min(lo[0], hi[0]) <= mid[0] <= max(lo[0], hi[0])


def test_calibrated_kde_test_sees_a_weak_linear_dependence_like_fisher_z():
    # The Gaussian-copula look: on linear data the KDE test keeps Fisher-z's power.
    rng = np.random.default_rng(7)
    x = rng.normal(size=1000)
    df = pd.DataFrame({"x": x, "y": 0.12 * x + rng.normal(size=1000), "z": rng.normal(size=1000)})
    data = ci.Dataset(df)
    assert not ci.FisherZTest().test(data, "x", "y").independent
    assert not ci.KDEMITest().test(data, "x", "y").independent
    assert not ci.KDEMITest().test(data, "x", "y", ["z"]).independent


def test_a_clear_conditional_dependence_is_settled_by_one_local_permutation(monkeypatch):
    # y = x² + z: the copula look sees no partial correlation, the KDE value is far above its
    # threshold, so the first local permutation already settles the smoothing-leak check.
    rng = np.random.default_rng(9)
    x, z = rng.normal(size=400), rng.normal(size=400)
    data = ci.Dataset(pd.DataFrame({"x": x, "y": x ** 2 + z + 0.3 * rng.normal(size=400), "z": z}))
    permuted = []
    real = entropy.cmi_bits

    def counting(*args, **kwargs):
        permuted.append(kwargs.get("permutation") is not None)
        return real(*args, **kwargs)
    monkeypatch.setattr(entropy, "cmi_bits", counting)
    res = ci.KDEMITest().test(data, "x", "y", ["z"])
    assert not res.independent
    assert sum(permuted) == 1
