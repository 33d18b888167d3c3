"""Hedges against their definitions (FuzzyJ's for intensify, norm, slightly) and linguistic
expressions: grammar, precedence, case, errors with columns."""

import numpy as np
import pytest

from causewatch.analytics.fuzzy import hedges
from causewatch.analytics.fuzzy.linguistic import ExpressionError, degrees, parse
from causewatch.analytics.fuzzy.membership import Membership, PointSet

TERMS = {"low": Membership("z", (0.7, 0.8)), "medium": Membership("pi", (0.85, 0.2)),
         "high": Membership("s", (0.9, 1.0))}
X = np.linspace(0.5, 1.1, 601)


def mu(name, mode="exact"):
    return TERMS[name](X, mode)


@pytest.mark.parametrize("hedge,fn", [
    ("not", lambda m: 1 - m), ("very", lambda m: m ** 2), ("extremely", lambda m: m ** 3),
    ("somewhat", np.sqrt), ("more_or_less", np.cbrt), ("plus", lambda m: m ** 1.25),
    ("intensify", lambda m: np.where(m <= 0.5, 2 * m ** 2, 1 - 2 * (1 - m) ** 2))])
def test_pointwise_hedges_match_their_definitions(hedge, fn):
    np.testing.assert_allclose(degrees(f"{hedge} medium", X, TERMS, "exact"), fn(mu("medium")), atol=1e-12)


def test_norm_scales_the_highest_point_to_one():
    half = PointSet([0.0, 1.0, 2.0], [0.0, 0.4, 0.0])
    np.testing.assert_allclose(hedges.norm(half).ys, [0.0, 1.0, 0.0])
    empty = PointSet([0.0, 1.0], [0.0, 0.0])
    assert hedges.norm(empty).height() == 0.0


def test_slightly_is_intensify_norm_plus_and_not_very():
    m = mu("medium")
    inner = np.minimum(m ** 1.25, 1 - m ** 2)
    # The height of plus A AND not very A over the whole set: where mu^1.25 = 1 - mu^2.
    grid = np.linspace(0, 1, 200001)
    height = np.minimum(grid ** 1.25, 1 - grid ** 2).max()
    want = hedges.intensify(inner / height)
    np.testing.assert_allclose(degrees("slightly medium", X, TERMS, "exact"), want, atol=1e-6)


def test_compatible_hedges_act_on_the_expanded_point_list():
    got = degrees("very high", X, TERMS, "compatible")
    expanded = TERMS["high"].points().expand()
    np.testing.assert_allclose(got, np.interp(X, expanded.xs, expanded.ys ** 2), atol=1e-12)
    # Between expanded points the hedged set is a straight line, not mu(x)^2.
    assert not np.allclose(got, mu("high", "compatible") ** 2)


def test_hedge_binds_tighter_than_or():
    got = degrees("very low or medium", X, TERMS, "exact")
    np.testing.assert_allclose(got, np.maximum(mu("low") ** 2, mu("medium")))
    assert parse("very low or medium") == ("or", ("hedge", "very", ("term", "low", 6)), ("term", "medium", 13))


def test_and_binds_tighter_than_or_and_parentheses_group():
    got = degrees("not low and medium or high", X, TERMS, "exact")
    np.testing.assert_allclose(got, np.maximum(np.minimum(1 - mu("low"), mu("medium")), mu("high")))
    grouped = degrees("very (low or medium)", X, TERMS, "exact")
    np.testing.assert_allclose(grouped, np.maximum(mu("low"), mu("medium")) ** 2)
    chained = degrees("not very high", X, TERMS, "exact")
    np.testing.assert_allclose(chained, 1 - mu("high") ** 2)


def test_case_insensitive():
    np.testing.assert_allclose(degrees("VERY Low OR Medium", X, TERMS), degrees("very low or medium", X, TERMS))


@pytest.mark.parametrize("text,column,expected", [
    ("very", 5, "a term, a hedge or '('"),
    ("low or or medium", 8, "a term, a hedge or '('"),
    ("(low or medium", 15, "')' or AND/OR"),
    ("low medium", 5, "AND, OR or end of input"),
    ("low & high", 5, "a name, a number"),
    ("very lo", 6, "a term of high, low, medium")])
def test_errors_point_at_the_column(text, column, expected):
    with pytest.raises(ExpressionError) as e:
        degrees(text, X, TERMS)
    assert e.value.column == column and expected in e.value.expected
    assert f"column {column}:" in str(e.value)
    assert str(e.value).splitlines()[-1] == "  " + " " * (column - 1) + "^"


def test_missing_values_have_degree_zero():
    assert degrees("low", np.array([np.nan, 0.6]), TERMS).tolist() == [0.0, 1.0]
