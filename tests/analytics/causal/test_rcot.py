"""Tests of causewatch.analytics.causal.rcot: the Lindsay–Pilla–Basak tail against Monte Carlo, and
RCoT's level and power on small conditional problems (Strobl, Zhang & Visweswaran 2019)."""

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import linalg, spatial, stats

from causewatch.analytics.causal import ci, rcot


@pytest.mark.parametrize("weights", [[3, 1, 0.5, 0.2, 0.1, 0.05], list(np.random.default_rng(0).exponential(size=25)),
                                     [1.0, 1.0, 1.0, 1.0, 1.0]])
def test_lpb_tail_matches_monte_carlo(weights):
    w = np.array(weights)
    draws = (np.random.default_rng(1).chisquare(1, size=(200_000, len(w))) * w).sum(axis=1)
    for q in (0.1, 0.01, 0.001):
        x = np.quantile(draws, 1 - q)
        # Monte Carlo sd at 0.001 with 200k draws is 7 %; LPB itself is accurate to a few %.
        assert rcot.chi2_mixture_sf(w, x) == pytest.approx(q, rel=0.2)


def test_five_equal_weights_are_a_chi_square_with_five_degrees():
    assert rcot.chi2_mixture_sf(np.ones(5), 11.07) == pytest.approx(stats.chi2.sf(11.07, 5), rel=0.01)


def test_far_from_the_decision_the_gamma_is_used():
    w = np.random.default_rng(2).exponential(size=25)
    x = 10 * w.sum()
    gamma = rcot.chi2_mixture_sf(w, x, near=(0.0, 0.0))   # outside `near`: the two-moment gamma
    assert gamma != rcot.chi2_mixture_sf(w, x) and gamma < 1e-6


def _problem(seed, n=500, dependent=False):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=n)
    x = np.tanh(2 * z) + 0.3 * rng.normal(size=n)
    y = z ** 2 + 0.3 * rng.normal(size=n) + (0.4 * np.sin(3 * x) if dependent else 0)
    return ci.Dataset(pd.DataFrame({"x": x, "y": y, "z": z}))


def test_rcot_level_and_power_on_a_nonlinear_conditional_problem():
    test = ci.RCoTTest(alpha=0.01)
    false = sum(not test.test(_problem(s), "x", "y", ["z"]).independent for s in range(30))
    found = sum(not test.test(_problem(s, dependent=True), "x", "y", ["z"]).independent for s in range(30))
    assert false <= 5          # RCoT's known leak under strong nonlinear confounding: ~0.1 at n = 500
    assert found >= 27


@pytest.mark.parametrize("columns,levels", [(3, 4), (1, 60)], ids=["64-combinations", "60-levels"])
@pytest.mark.slow   # the power over many draws
def test_many_levels_in_z_keep_the_power(columns, levels):
    # z: discrete columns and two continuous ones, 500 rows, y = 0.25·x + …. Level interactions per
    # combination of three 4-level columns made 1,029 features and found this on 3 of these 10 draws,
    # per column 273 and 10; products with a 60-level column made 969 features and found it on 2,
    # none (past MAX_LEVELS levels) 143 and 10.
    found = 0
    for seed in range(10):
        r = np.random.default_rng(seed)
        d, c = r.integers(0, levels, (500, columns)).astype(float), r.normal(size=(500, 2))
        x = np.sin(c[:, 0]) + 1.2 / levels * d[:, 0] + r.normal(size=500)
        y = 0.25 * x + np.cos(c[:, 1]) + 1.2 / levels * d[:, -1] + r.normal(size=500)
        test = rcot.RCoT(np.column_stack([x, y, c, d]), discrete=[False] * 4 + [True] * columns)
        found += test.pvalue(0, 1, tuple(range(2, 4 + columns)))[1] < 0.03
    assert found >= 8


@pytest.mark.parametrize("levels,indicators", [(16, 15), (17, 0)])
def test_a_discrete_column_of_at_most_max_levels_enters_by_its_indicators(levels, indicators):
    r = np.random.default_rng(levels)
    d = np.concatenate([np.arange(levels), r.integers(0, levels, 300 - levels)]).astype(float)
    test = rcot.RCoT(np.column_stack([d, r.normal(size=300)]), discrete=[True, False])
    own = 1 + 2 * len(rcot.XY_NODES)   # a continuous column's normal score, cosines and sines
    assert test._xy_features(0).shape[1] == (indicators or own)
    # In z: the continuous column's random and own features, the levels' indicators, and their
    # products with its own features up to MAX_LEVELS levels.
    z = test._z_features((0, 1)).shape[1]
    assert z == rcot.Z_FEATURES_PER_COLUMN + own + (levels - 1) + own * indicators


def test_a_discrete_columns_p_value_does_not_depend_on_which_level_is_which():
    # The indicators leave one level out; made orthonormal, the statistic and its null no longer
    # depend on which level that is (p 0.024 for each coding; standardised ones gave 0.007-0.18).
    r = np.random.default_rng(7)
    z = r.normal(size=500)
    x = np.digitize(z + r.normal(size=500), [-1.0, 0.0, 1.0]).astype(float)
    y = np.sin(2 * z) + 0.15 * np.array([0.0, 1.0, -1.0, 0.5])[x.astype(int)] + r.normal(size=500)
    p = [rcot.RCoT(np.column_stack([np.array(perm, float)[x.astype(int)], y, z]),
                   discrete=[True, False, False]).pvalue(0, 1, (2,))[1]
         for perm in itertools.permutations(range(4))]
    assert np.ptp(p) <= 1e-5 * max(p)   # the null's products are float32


def test_rcot_margin_and_bits_follow_the_dependence():
    weak, strong = (ci.RCoTTest().test(_problem(3, dependent=d), "x", "y", ["z"]) for d in (False, True))
    assert strong.margin > weak.margin and strong.bits > weak.bits
    assert strong.stat > strong.threshold and not strong.independent


def test_the_null_weights_from_a_subset_of_rows_give_the_p_values_of_all_rows(monkeypatch):
    """Above NULL_ROWS rows the null's weights come from a seeded subset: on 3,000 rows of a nonlinear
    conditional problem the p-values of independent and weakly dependent pairs move by under 0.15 in
    log10 (a weak dependence at p ~ 0.004 stays there)."""
    rng = np.random.default_rng(5)
    n = 3000
    z = rng.normal(size=n)
    x, w = np.sin(2 * z) + 0.5 * rng.normal(size=n), np.cos(z) + 0.5 * rng.normal(size=n)
    y = z ** 2 + 0.08 * x + 0.5 * rng.normal(size=n)   # weakly dependent on x given z
    values = np.column_stack([x, y, z, w])
    subset = rcot.RCoT(values)
    assert rcot.NULL_ROWS < n and subset.null_rows == rcot.NULL_ROWS
    got = [subset.pvalue(a, b, (2,))[1] for a, b in ((0, 3), (1, 3), (0, 1))]
    monkeypatch.setattr(rcot, "NULL_ROWS", None)
    every = [rcot.RCoT(values).pvalue(a, b, (2,))[1] for a, b in ((0, 3), (1, 3), (0, 1))]
    assert np.allclose(np.log10(got), np.log10(every), atol=0.15), (got, every)
    assert every[0] > 0.05 and 1e-3 < every[2] < 0.05   # the problem has both kinds


def test_the_statistic_and_null_from_kept_fits_equal_those_of_explicit_residuals():
    """pvalue forms C_xy|z from covariance blocks and the null's covariance from kept pairwise products;
    both must equal what the residuals f − F_z·C_zz⁻¹·C_zf themselves give (the ridge included), for
    continuous and discrete (level indicator) columns, on a null subset of the rows; the statistic and
    the null weigh a continuous column's features by XY_WEIGHTS, a discrete column's levels by 1."""
    rng = np.random.default_rng(7)
    n = 1500
    z = rng.normal(size=(n, 2))
    x = np.sin(2 * z[:, 0]) + z[:, 1] ** 2 + 0.3 * rng.normal(size=n)
    y = np.tanh(z[:, 0] * z[:, 1]) + 0.3 * x + 0.3 * rng.normal(size=n)
    level = np.digitize(z[:, 0] + 0.5 * rng.normal(size=n), [-1.0, 0.0, 1.0]).astype(float)
    test = rcot.RCoT(np.column_stack([x, y, z, level]), discrete=[False] * 4 + [True])
    assert test.null_rows < n
    for a, b, given in [(0, 1, (2,)), (0, 1, (2, 3)), (4, 1, (2,)), (0, 1, (2, 4))]:
        fz, chol = test._projection(given)
        res = [f - fz @ linalg.cho_solve(chol, fz.T @ f / (n - 1)) for f in map(test._xy_features, (a, b))]
        stat, p, _ = test.pvalue(a, b, given)
        w = np.outer(*[np.ones(3) if c == 4 else np.array([1.0, *rcot.XY_WEIGHTS, *rcot.XY_WEIGHTS]) for c in (a, b)])
        assert stat == pytest.approx(n * ((w * (res[0].T @ res[1]) / (n - 1)) ** 2).sum(), rel=1e-6)
        m = test.null_rows
        prods = (res[0][:m, :, None] * res[1][:m, None, :]).reshape(m, -1)
        prods -= prods.mean(axis=0)
        got = rcot._product_covariance(test._fit(a, given), test._fit(b, given))
        assert np.abs(got - prods.T @ prods / m).max() < 1e-5 * np.abs(got).max()   # float32 products
        assert p == pytest.approx(rcot.covariance_sf(prods.T @ prods / m * np.outer(w, w), stat), rel=1e-3)


def test_the_kernel_width_is_the_median_of_the_nonzero_pairwise_distances():
    def median_distance(v):
        dist = spatial.distance.pdist(v)
        return np.median(dist[dist > 0])

    rng = np.random.default_rng(3)
    v = rng.normal(size=(60, 3))
    v[10:20] = v[0]                      # tied rows: their zero distances are left out
    assert rcot._width(v) == pytest.approx(median_distance(v))
    assert rcot._width(np.asfortranarray(v[:, :2])) == pytest.approx(median_distance(v[:, :2]))
    assert rcot._width(np.ones((5, 2))) == 1.0 and rcot._width(np.ones((1, 1))) == 1.0
