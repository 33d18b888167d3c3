"""Membership functions: exact curves against their formulas and scikit-fuzzy, FuzzyJ-compatible
point lists, the set algebra (expand, and/or, height)."""

import numpy as np
import pytest

from causewatch.analytics.fuzzy.membership import Membership, MembershipError, PointSet, s_curve, z_curve

RNG = np.random.default_rng(5)


def test_s_curve_formula():
    a, b = 2.0, 6.0
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    want = [0, 0, 2 * (1 / 4) ** 2, 0.5, 1 - 2 * (1 / 4) ** 2, 1, 1]
    np.testing.assert_allclose(s_curve(x, a, b), want)
    np.testing.assert_allclose(z_curve(x, a, b), 1 - np.array(want))


def test_exact_shapes_against_formulas():
    x = np.linspace(-1, 11, 241)
    tri = Membership("triangle", (1, 4, 9)).exact(x)
    np.testing.assert_allclose(tri, np.maximum(np.minimum((x - 1) / 3, (9 - x) / 5), 0))
    trap = Membership("trapezoid", (1, 3, 5, 9)).exact(x)
    np.testing.assert_allclose(trap, np.clip(np.minimum((x - 1) / 2, (9 - x) / 4), 0, 1))
    np.testing.assert_allclose(Membership("linear", (0, 10)).exact(x), np.clip(x / 10, 0, 1))
    np.testing.assert_allclose(Membership("linear", (10, 0)).exact(x), np.clip(1 - x / 10, 0, 1))
    np.testing.assert_allclose(Membership("gaussian", (5, 2)).exact(x), np.exp(-((x - 5) ** 2) / 8))
    pi = Membership("pi", (5, 2)).exact(x)  # center, width: S on [3, 5], Z on [5, 7]
    np.testing.assert_allclose(pi, np.where(x <= 5, s_curve(x, 3, 5), z_curve(x, 5, 7)))


def test_exact_against_scikit_fuzzy_on_random_parameters():
    skfuzzy = pytest.importorskip("skfuzzy", reason="skfuzzy missing — `pip install -e '.[test]'` (scikit-fuzzy)")
    for _ in range(50):
        p = np.sort(RNG.uniform(-5, 5, 4))
        x = np.concatenate([RNG.uniform(-7, 7, 400), p])
        np.testing.assert_allclose(Membership("s", p[:2]).exact(x), skfuzzy.smf(x, *p[:2]), atol=1e-12)
        np.testing.assert_allclose(Membership("z", p[:2]).exact(x), skfuzzy.zmf(x, *p[:2]), atol=1e-12)
        np.testing.assert_allclose(Membership("pi", p).exact(x), skfuzzy.pimf(x, *p), atol=1e-12)
        np.testing.assert_allclose(Membership("triangle", p[:3]).exact(x), skfuzzy.trimf(x, p[:3]), atol=1e-12)
        np.testing.assert_allclose(Membership("trapezoid", p).exact(x), skfuzzy.trapmf(x, p), atol=1e-12)
        sigma = RNG.uniform(0.1, 3)
        np.testing.assert_allclose(Membership("gaussian", (p[0], sigma)).exact(x),
                                   skfuzzy.gaussmf(x, p[0], sigma), atol=1e-12)


def test_compatible_s_is_nine_points_joined_by_lines():
    m = Membership("s", (0.9, 1.0))
    ps = m.points()
    np.testing.assert_allclose(ps.xs, np.linspace(0.9, 1.0, 9))
    np.testing.assert_allclose(ps.ys, s_curve(ps.xs, 0.9, 1.0))
    mid = (ps.xs[:-1] + ps.xs[1:]) / 2
    np.testing.assert_allclose(m(mid, "compatible"), (ps.ys[:-1] + ps.ys[1:]) / 2)
    assert m(np.array([0.0, 5.0]), "compatible").tolist() == [0.0, 1.0]   # flat beyond the ends


def test_compatible_pi_crosses_half_at_center_plus_minus_half_width():
    m = Membership("pi", (0.85, 0.2))
    ps = m.points()
    assert len(ps.xs) == 9 and ps.xs[0] == pytest.approx(0.65) and ps.xs[-1] == pytest.approx(1.05)
    np.testing.assert_allclose(m(np.array([0.75, 0.85, 0.95]), "compatible"), [0.5, 1.0, 0.5])


def test_triangle_and_trapezoid_are_the_same_in_both_modes():
    x = RNG.uniform(-1, 6, 500)
    for m in (Membership("triangle", (0, 1, 3)), Membership("trapezoid", (0, 1, 2, 5))):
        np.testing.assert_allclose(m(x, "compatible"), m(x, "exact"))


@pytest.mark.parametrize("shape,params,word", [
    ("s", (1, 2, 3), "takes 2"), ("blob", (1,), "unknown shape"), ("triangle", (3, 2, 1), "non-decreasing"),
    ("pi", (1, -1), "positive width"), ("gaussian", (0, 0), "positive sigma")])
def test_bad_parameters_are_named(shape, params, word):
    with pytest.raises(MembershipError, match=word):
        Membership(shape, params)


def test_unknown_mode_is_refused():
    with pytest.raises(MembershipError, match="unknown mode"):
        Membership("s", (0, 1))(0.5, "fuzzyj")


def test_expand_keeps_the_curve_and_bounds_the_steps():
    ps = PointSet([0.0, 1.0, 1.0, 3.0], [0.0, 0.85, 1.0, 0.0])
    ex = ps.expand()
    x = np.linspace(-1, 4, 301)
    np.testing.assert_allclose(ex(x), ps(x), atol=1e-12)
    sloped = np.diff(ex.xs) > 0
    assert np.all(np.abs(np.diff(ex.ys))[sloped] <= 0.1 + 1e-12)
    assert len(ex.xs) == 2 + 9 + 10  # ceil(0.85/0.1)=9 pieces, the vertical step kept, 10 pieces down


def test_and_or_of_point_sets_add_the_crossings():
    a = PointSet([0.0, 1.0], [0.0, 1.0])
    b = PointSet([0.0, 1.0], [1.0, 0.0])
    x = np.linspace(0, 1, 101)
    np.testing.assert_allclose(a.and_(b)(x), np.minimum(x, 1 - x), atol=1e-12)
    np.testing.assert_allclose(a.or_(b)(x), np.maximum(x, 1 - x), atol=1e-12)
    assert a.and_(b).height() == pytest.approx(0.5)


def test_trapezoid_kernel_matches_the_plain_python_reference():
    from causewatch.analytics.fuzzy.membership import trapezoid, trapezoid_reference
    x = np.concatenate([RNG.uniform(-1, 6, 300), [0, 1, 2, 5, np.nan]])
    for p in [(0, 1, 2, 5), (0, 1, 1, 5), (1, 1, 2, 2), (0, 0, 0, 5), (0, 5, 5, 5)]:
        np.testing.assert_array_equal(trapezoid(x, *p), trapezoid_reference(x, *p))
