"""Calibration of the CI tests AutoTest picks, shown rather than assumed: under conditional independence
(x ⊥ y | z, x and y both depending on z) each test's p-values are uniform (Kolmogorov–Smirnov over many
seeded null draws per data kind), so a gain in recall is not bought with false edges."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import special, stats

from causewatch.analytics.causal import AutoTest, Dataset

pytestmark = pytest.mark.slow   # p-values over hundreds of draws per test

DRAWS = 120
ROWS = 300


def _pvalue(test, res) -> float:
    """The p-value behind a CIResult of the test AutoTest chose (each keeps its own statistic)."""
    if test.name == "rcot":
        return 1.0 - res.stat                                   # the statistic is 1 - p
    if test.name == "fisher-z":
        return float(2 * special.ndtr(-res.stat))               # |z| of Fisher's transform
    return float(special.ndtr(special.ndtri(test.alpha) - res.margin))   # G²: margin on the normal scale


def _levels(v, k, rng):
    """A k-level code of v cut at random quantiles, its level labels shuffled (non-monotone)."""
    cut = np.digitize(v, np.quantile(v, np.sort(rng.uniform(0.15, 0.85, k - 1))))
    return rng.permutation(k)[cut].astype(float)


MECHANISMS = [np.tanh, np.sin, lambda v: v ** 2 / 2, lambda v: np.exp(-v ** 2), np.abs]


def _index(z, rng):
    """A nonlinear function of a random projection of z (the benchmark's mechanisms), standardised."""
    if z.shape[1] == 0:
        return np.zeros(len(z))
    u = z @ rng.normal(size=z.shape[1]) / math.sqrt(z.shape[1])
    v = MECHANISMS[rng.integers(len(MECHANISMS))](u / (u.std() or 1))
    return (v - v.mean()) / (v.std() or 1)


def _null(kind: str, seed: int, rows: int = ROWS) -> tuple[pd.DataFrame, list[str]]:
    """x ⊥ y | z with x and y both depending on z (|z| = 0, 1, 2 by turns); discrete columns where the
    kind has them: x of 3-5 levels with shuffled labels, and z0 when z is not empty."""
    rng = np.random.default_rng([seed, ["gaussian", "nonlinear", "mixed", "discrete"].index(kind)])
    dz = seed % 3
    if kind == "discrete":
        z = {f"z{i}": rng.integers(0, 3, rows).astype(float) for i in range(dz)}
        s = sum(z.values(), np.zeros(rows))
        x = np.where(rng.random(rows) < 0.5, s % 3, rng.integers(0, 3, rows)).astype(float)
        y = np.where(rng.random(rows) < 0.5, (s + 1) % 3, rng.integers(0, 3, rows)).astype(float)
        return pd.DataFrame({"x": x, "y": y, **z}), ["x", "y", *z]
    z = rng.normal(size=(rows, dz))
    if kind == "gaussian":
        w = rng.normal(size=(2, dz))
        x, y = z @ w[0] + rng.normal(size=rows), z @ w[1] + rng.normal(size=rows)
        return pd.DataFrame({"x": x, "y": y, **{f"z{i}": z[:, i] for i in range(dz)}}), []
    discrete = []
    if kind == "mixed" and dz:
        z[:, 0] = _levels(z[:, 0], 3, rng)
        discrete.append("z0")
        z[:, 0] = rng.normal(size=3)[z[:, 0].astype(int)]   # a non-monotone embedding of its levels
    x = _index(z, rng) + rng.uniform(-1, 1, rows) * 0.6
    y = _index(z, rng) + rng.exponential(size=rows) * 0.6
    cols = {"x": x, "y": y, **{f"z{i}": z[:, i] for i in range(dz)}}
    if kind == "mixed":
        cols["x"] = _levels(x, 3 + seed % 3, rng)
        discrete.append("x")
    return pd.DataFrame(cols), discrete


@pytest.mark.parametrize("kind,chosen,sizes,rows", [
    ("gaussian", "fisher-z", (0, 1, 2), ROWS), ("nonlinear", "rcot", (0, 1, 2), ROWS),
    # at 1000 rows z's leak outgrows the null's spread: 27 % and 14 % below 0.05 with z at one width
    pytest.param("nonlinear", "rcot", (1, 2), 1000, id="nonlinear-1000-rows"),
    ("mixed", "rcot", (0, 1), ROWS),
    pytest.param("mixed", "rcot", (2,), ROWS, id="mixed-discrete-in-z"),
    ("discrete", "kde-mi", (0,), ROWS), pytest.param("discrete", "kde-mi", (1, 2), ROWS, id="discrete-sparse")])
def test_pvalues_of_each_test_autotest_uses_are_uniform_under_independence(kind, chosen, sizes, rows):
    pvalues = []
    draws = DRAWS * (4 if kind == "discrete" else 1)   # counting is cheap: more draws, a sharper check
    for seed in range(draws):
        if seed % 3 not in sizes:
            continue
        df, discrete = _null(kind, seed, rows)
        data = Dataset(df, discrete)
        auto = AutoTest()
        test = auto.chosen(data)
        if kind == "gaussian" and test.name != "fisher-z":
            continue   # refused as Gaussian (about 1 in 100): not this kind's test
        assert test.name == chosen, (kind, seed, test.name)
        z = tuple(c for c in df.columns if c.startswith("z"))
        pvalues.append(_pvalue(test, auto.test(data, "x", "y", z)))
    p = np.clip(np.array(pvalues), 0.0, 1.0)
    assert len(p) >= 0.3 * draws * len(sizes)
    ks = stats.kstest(p, "uniform")
    assert ks.pvalue > 1e-3, (kind, ks)
    # and the level holds where decisions are made: rejections at 0.05 within 3 standard errors
    assert np.mean(p <= 0.05) <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / len(p)), (kind, np.mean(p <= 0.05))
