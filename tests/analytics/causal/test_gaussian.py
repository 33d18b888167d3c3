"""Tests of causewatch.analytics.causal.gaussian (Mardia's tests) and of AutoTest's choice of
Fisher-z on jointly Gaussian data only."""

import numpy as np
import pandas as pd
import pytest
from scipy import special

from causewatch.analytics.causal import ci, gaussian


def _gaussian(n, d, seed):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)) @ rng.normal(size=(d, d))   # correlated, collinear columns


def test_skewness_is_mardias_mean_over_row_pairs():
    # The slice-wise sum equals Mardia's (1970) definition b1 = mean_ij (x_i' S^-1 x_j)^3.
    x = _gaussian(300, 4, 0) ** 2
    c = x - x.mean(axis=0)
    g = c @ np.linalg.inv(np.cov(c, rowvar=False, bias=True)) @ c.T
    d = x.shape[1]
    expected = special.chdtrc(d * (d + 1) * (d + 2) / 6, len(x) * (g ** 3).mean() / 6)
    assert gaussian.mardia_pvalues(x)[0] == pytest.approx(expected, rel=1e-9, abs=1e-300)


def test_gaussian_tables_pass_at_about_the_level():
    tables = [(_gaussian(n, d, seed)) for seed in range(40) for n, d in ((2000, 15), (400, 8))]
    refused = sum(not gaussian.looks_gaussian(t) for t in tables)
    assert refused <= 4   # alpha 0.01: about 0.8 expected of 80


@pytest.mark.parametrize("seed", range(5))
def test_nonlinear_or_heavy_tailed_tables_fail(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(1000, 3))
    quadratic = np.column_stack([x, x[:, 0] ** 2 + 0.5 * rng.normal(size=1000)])
    heavy = np.column_stack([x[:, :2], rng.standard_t(3, size=1000)])
    assert not gaussian.looks_gaussian(quadratic)
    assert not gaussian.looks_gaussian(heavy)


def test_too_few_rows_per_column_are_not_called_gaussian():
    assert not gaussian.looks_gaussian(_gaussian(50, 10, 0))
    assert not gaussian.looks_gaussian(_gaussian(1000, 1, 0))


def test_auto_test_uses_fisher_z_only_on_gaussian_continuous_data():
    rng = np.random.default_rng(3)
    g = _gaussian(1500, 5, 3)
    auto = ci.AutoTest()
    assert auto.chosen(ci.Dataset(pd.DataFrame(g, columns=list("abcde")))) is auto.fisher_z
    sine = g.copy()
    sine[:, 4] = np.sin(3 * g[:, 0]) + 0.3 * rng.normal(size=1500)
    assert auto.chosen(ci.Dataset(pd.DataFrame(sine, columns=list("abcde")))) is auto.rcot
    coded = pd.DataFrame(g, columns=list("abcde")).assign(e=(g[:, 4] > 0).astype(float))
    assert auto.chosen(ci.Dataset(coded, discrete=["e"])) is auto.rcot
