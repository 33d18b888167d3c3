"""Tests of causewatch.analytics.causal.mdl: Eq. 15, the class chosen on noisy samples of each class,
one curve per discrete value, tables for discrete targets."""

import math

import numpy as np
import pandas as pd
import pytest

from causewatch.analytics.causal import mdl

GENERATORS = {
    "poly1": lambda x: 3 + 2 * x,
    "poly2": lambda x: 10 - 6 * x + x ** 2,
    "poly3": lambda x: x ** 3 - 15 * x ** 2 + 60 * x,
    "inverse": lambda x: 2 + 5 / x,
    "power": lambda x: 1 + 2 * x ** 1.6,
    "sqrt": lambda x: 1 + 3 * np.sqrt(x),
    "log": lambda x: 2 + 4 * np.log(x),
    "step": lambda x: np.where(x < 4.2, 1.0, 3.0),
}


def test_model_bits_is_eq_15():
    # Lemeire et al. Eq. 15: #parameters·log2(n)/2 + 8·#operations.
    assert mdl.model_bits(3, 2, 1024) == pytest.approx(3 * 10 / 2 + 16)


@pytest.mark.parametrize("kind", sorted(GENERATORS))
@pytest.mark.parametrize("seed", [0, 1])
def test_mdl_picks_the_generating_class(kind, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(1, 10, 200)
    y = GENERATORS[kind](x)
    y = y + rng.normal(size=200) * 0.02 * np.ptp(y)
    assert mdl.fit_curve(x, y).kind == kind


def test_fit_reports_a_formula_that_predicts():
    x = np.linspace(1, 10, 50)
    fit = mdl.fit_curve(x, 2 + 5 / x, var="n")
    assert fit.formula.endswith("/n")
    np.testing.assert_allclose(fit.predict(x), 2 + 5 / x, rtol=1e-9)


def test_one_curve_per_discrete_parent_value():
    rng = np.random.default_rng(2)
    n = rng.uniform(1, 10, 300)
    dtype = rng.choice(["float", "double"], 300)
    y = np.where(dtype == "float", 1 + 2 * n, 5 - n) + 0.05 * rng.normal(size=300)
    sub = mdl.fit_submodel(pd.DataFrame({"n": n, "dtype": dtype, "y": y}), "y", ["n", "dtype"], discrete=["dtype"])
    assert (sub.kind, sub.groups) == ("poly1", 2)
    assert "[double] y = " in sub.formula and "[float] y = " in sub.formula


def _two_parents(seed, n=400):
    rng = np.random.default_rng(seed)
    return rng.uniform(1, 10, n), rng.uniform(1, 10, n), rng.normal(size=n)


@pytest.mark.parametrize("seed", [0, 1])
def test_several_parents_linear_data_stays_linear(seed):
    a, b, e = _two_parents(seed)
    sub = mdl.fit_submodel(pd.DataFrame({"a": a, "b": b, "y": 3 + 2 * a - b + 0.1 * e}), "y", ["a", "b"])
    assert sub.kind == "linear" and sub.parents == ("a", "b")


@pytest.mark.parametrize("seed", [0, 1])
def test_several_parents_additive_curves(seed):
    a, b, e = _two_parents(seed)
    y = 0.5 * a ** 2 + 8 * np.log(b) + 0.1 * e
    df = pd.DataFrame({"a": a, "b": b, "y": y})
    sub = mdl.fit_submodel(df, "y", ["a", "b"])
    assert sub.kind == "additive" and "log(b)" in sub.formula and "a^2" in sub.formula


@pytest.mark.parametrize("seed", [0, 1])
def test_several_parents_product_of_powers(seed):
    # seconds = c * n^3 / speed: the way performance costs compose (Lemeire et al.'s LU example, n^3 operations)
    n, speed, e = _two_parents(seed)
    seconds = 0.02 * n ** 3 / speed * np.exp(0.01 * e)
    sub = mdl.fit_submodel(pd.DataFrame({"n": n, "speed": speed, "t": seconds}), "t", ["n", "speed"])
    assert sub.kind == "product"
    exponents = [float(part.split("^")[1]) for part in sub.formula.split("*")[1:]]
    assert exponents == pytest.approx([3.0, -1.0], abs=0.02)


def test_discrete_target_gets_a_table():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 2, 400)
    df = pd.DataFrame({"a": a, "b": (a + (rng.random(400) < 0.1)) % 2})
    sub = mdl.fit_submodel(df, "b", ["a"], discrete=["a", "b"])
    assert sub.kind == "table" and sub.groups == 2
    alone = mdl.fit_submodel(df, "b", [], discrete=["a", "b"])
    assert sub.bits < alone.bits  # knowing a shortens the description of b


def test_exact_relation_has_a_finite_description():
    x = np.linspace(1, 5, 40)
    assert math.isfinite(mdl.fit_curve(x, x ** 2).bits)


def test_bad_input_is_named():
    with pytest.raises(mdl.MDLError, match="unknown function classes"):
        mdl.fit_curve([1, 2, 3], [1, 2, 3], classes=["spline"])


@pytest.mark.parametrize("seed", range(4))
def test_polynomials_from_one_qr_equal_numpys_fits(seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.5, 20, 400)
    y = 5 - x + 0.3 * x ** 2 - 0.01 * x ** 3 + rng.normal(size=400)
    fits = {f.kind: f for f in mdl.candidates(x, y, classes=("polynomial",))}
    for degree in range(4):
        reference = np.polynomial.Polynomial.fit(x, y, degree)
        assert fits[f"poly{degree}"].rss == pytest.approx(float(((y - reference(x)) ** 2).sum()), rel=1e-9)
        assert fits[f"poly{degree}"].predict(x) == pytest.approx(reference(x), rel=1e-7, abs=1e-9)
