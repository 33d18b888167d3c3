"""Performance score, OWA, classification, bottleneck search, similarity and term sets; the numbers of
Truong & Fahringer, "Soft Computing Approach to Performance Analysis of Parallel and Distributed
Programs" (Fig. 5, Table 2) reproduced in FuzzyJ-compatible mode."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from causewatch.analytics.fuzzy import (
    Bottleneck,
    Membership,
    TermLearner,
    TermsError,
    bottleneck_search,
    classify,
    default_terms,
    dump_terms,
    format_degrees,
    owa,
    parse_terms,
    performance_score,
    similarity,
    similarity_to_base,
)
from causewatch.analytics.fuzzy import score as fuzzy

# Fig. 5: L2 cache miss ratio bottleneck search on 3DPIC, 4 processes, threshold 0.7.
PAPER_BOTTLENECK = Bottleneck(0.7, {"low": Membership("z", (0.7, 0.8)), "medium": Membership("pi", (0.85, 0.2)),
                                    "high": Membership("s", (0.9, 1.0))},
                              Membership("triangle", (0.65, 0.7, 0.75)))
PARTICLE_LOAD, MPI_SEND = 0.9497242344418835, 0.6550124668722567


def _fig5_text(values, negligible):
    found = bottleneck_search(values, PAPER_BOTTLENECK, "compatible", negligible)
    terms = [*PAPER_BOTTLENECK.severity] + (["negligible"] if negligible else [])
    return [format_degrees(row, capitalize=True) for row in found[terms].to_dict(orient="records")]


def test_paper_fig5a_without_negligible_search():
    assert _fig5_text([PARTICLE_LOAD, MPI_SEND], negligible=False) == [
        "Medium (degree=0.502)/High (degree=0.495)/", ""]


def test_paper_fig5b_with_negligible_search():
    assert _fig5_text([PARTICLE_LOAD, MPI_SEND], negligible=True) == [
        "Medium (degree=0.502)/High (degree=0.495)/", "Negligible (degree=0.1)/"]


def test_fig5_medium_differs_in_exact_mode():
    # The paper's figures come from FuzzyJ's point lists; the exact curves give 0.503 and 0.494.
    found = bottleneck_search([PARTICLE_LOAD], PAPER_BOTTLENECK, "exact")
    assert round(found["medium"][0], 3) == 0.503 and round(found["high"][0], 3) == 0.494


def test_shipped_l2_terms_are_the_papers():
    shipped = default_terms()["l2_miss_ratio"]
    assert shipped.bottleneck == PAPER_BOTTLENECK and shipped.expr == "L2_TCM / L2_TCA"


def test_paper_table2_factor_similarities():
    # atoms: linear on [0, 72], 36 vs 72 atoms; CPU: S-function on [0, 64], 8 vs 12 CPUs.
    atoms = performance_score([36, 72], [72, 72], Membership("linear", (0, 1)))
    assert similarity(atoms[:1, None], atoms[1:, None])[0] == pytest.approx(0.5)
    cpu = performance_score([8, 12], [64, 64], Membership("s", (0, 1)), "compatible")
    assert round(similarity(cpu[:1, None], cpu[1:, None])[0], 4) == 0.9531


def test_performance_score_linear_and_degenerate_base():
    s = performance_score([0, 5, 10, 20, 3], [10, 10, 10, 10, 0])
    np.testing.assert_allclose(s, [0, 0.5, 1, 1, 0])


def _df():
    return pd.DataFrame({"node": ["n1", "n1", "n1", "n2", "n2"], "app": "a", "source": "region",
                         "region": ["main", "solve", "io", "main", "solve"],
                         "parent": [None, "main", "main", None, "main"],
                         "duration": [10.0, 6.0, 2.0, 20.0, 3.0]})


@pytest.mark.parametrize("base,want", [
    ("program", [18, 18, 18, 23, 23]), ("cluster", [20, 6, 2, 20, 6]), ("max", [20] * 5),
    ("parent", [18, 10, 10, 23, 20])])
def test_base_values(base, want):
    np.testing.assert_allclose(fuzzy.base_values(_df(), "duration", base), want)


def test_unknown_base_is_refused():
    with pytest.raises(ValueError, match="unknown base"):
        fuzzy.base_values(_df(), "duration", "grandparent")


def test_owa_metric_order_and_descending_order():
    s = np.array([[0.2, 0.9, 0.5]])
    assert owa(s, [0.5, 0.3, 0.2])[0] == pytest.approx(0.2 * 0.5 + 0.9 * 0.3 + 0.5 * 0.2)
    assert owa(s, [0.5, 0.3, 0.2], order="descending")[0] == pytest.approx(0.9 * 0.5 + 0.5 * 0.3 + 0.2 * 0.2)
    assert owa(s, [2, 2, 2])[0] == pytest.approx(s.mean())  # Eq. 2 divides by the sum of weights
    with pytest.raises(ValueError, match="weights"):
        owa(s, [1, 1])


scores = arrays(float, (4, 5), elements=st.floats(0, 1))
weights = arrays(float, 5, elements=st.floats(0.01, 1))


@settings(max_examples=60, deadline=None)
@given(scores, scores, weights)
def test_owa_and_similarity_properties(a, b, w):
    for order in ("metric", "descending"):
        o = owa(a, w, order)
        assert np.all((o >= a.min(axis=1) - 1e-12) & (o <= a.max(axis=1) + 1e-12))
    np.testing.assert_allclose(similarity(a, a, w), 1.0)
    np.testing.assert_allclose(similarity(a, b, w), similarity(b, a, w))
    sim = similarity(a, b)
    assert np.all((sim >= -1e-12) & (sim <= 1 + 1e-12))


def test_similarity_is_zero_only_for_opposite_corners():
    assert similarity(np.zeros(4), np.ones(4)) == pytest.approx(0.0)
    np.testing.assert_allclose(similarity_to_base(np.array([[1, 1], [1, 0.5], [0, 0]]), 0),
                               [1, 1 - 0.5 / np.sqrt(2), 0])


def test_classify_gives_every_term_a_degree():
    terms = default_terms()["l2_miss_ratio"].terms
    got = classify([0.2, 0.55, np.nan, 0.95], terms)
    assert list(got.columns) == ["low", "medium", "high"]
    assert got.loc[0].tolist() == [1.0, 0.0, 0.0] and got.loc[2].tolist() == [0.0, 0.0, 0.0]
    assert got.loc[1, "medium"] == 1.0 and got.loc[3, "high"] == 1.0
    assert format_degrees(got.loc[1]) == "medium(degree=1)/"


def test_severity_orders_terms_by_level():
    found = bottleneck_search([0.72, PARTICLE_LOAD, 1.0, 0.5], PAPER_BOTTLENECK, "compatible")
    assert found["bottleneck"].tolist() == [True, True, True, False]
    assert found["severity"][0] == pytest.approx(found["low"][0] / 3)
    assert found["severity"][1] == pytest.approx(found["high"][1])
    assert found["severity"][2] == 1.0 and found["severity"][3] == 0.0


def test_term_learner_partitions_the_observed_range():
    x = np.random.default_rng(3).gamma(2.0, 1.0, 2000)
    learner = TermLearner(n_terms=3, quantiles=(0.05, 0.95))
    assert learner.fit(x) is learner
    np.testing.assert_allclose(learner.centers_["x"], np.quantile(x, [0.05, 0.5, 0.95]))
    deg = classify(np.linspace(-1, 20, 500), learner.terms_["x"].terms)
    np.testing.assert_allclose(deg.sum(axis=1), 1.0)        # Ruspini partition
    for name, c in zip(["low", "medium", "high"], learner.centers_["x"]):
        assert learner.terms_["x"].terms[name].exact(c) == pytest.approx(1.0)


def test_term_learner_per_column_and_constant_column():
    df = pd.DataFrame({"cpi": np.linspace(0.5, 3, 100), "flat": np.full(100, 2.0)})
    learned = TermLearner(n_terms=5).fit(df).terms_
    assert list(learned["cpi"].terms) == ["lowest", "low", "medium", "high", "highest"]
    assert np.all(np.diff(TermLearner(n_terms=5).fit(df).centers_["flat"]) > 0)
    with pytest.raises(TermsError, match="one name per term"):
        TermLearner(n_terms=4, names=["a", "b"]).fit(df)


def test_default_terms_round_trip_through_toml():
    sets = default_terms()
    assert {"time_share", "cache_miss_ratio", "cpi", "comm_share", "page_fault_rate"} <= set(sets)
    assert parse_terms(dump_terms(sets)) == sets
    assert all(list(ts.levels.values())[-1] == 1.0 for ts in sets.values() if ts.bottleneck)


@pytest.mark.parametrize("text,message", [
    ("[metrics.x]\nterms.very = {shape = 's', params = [0, 1]}", "metrics.x.terms.very: a term may not"),
    ("[metrics.x]\nterms.low = {shape = 's', params = [0]}", "metrics.x.terms.low: shape 's' takes 2"),
    ("[metrics.x]\nterms.low = 3", "metrics.x.terms.low: expected a table"),
    ("[metrics.x]\nbottleneck.threshold = 1\nterms.low = {shape = 's', params = [0, 1]}",
     "metrics.x.bottleneck: expected keys threshold and severity"),
    ("x = [", "<terms>"), ("[other]\na = 1", "expected [metrics.<name>] tables")])
def test_bad_term_sets_name_the_key(text, message):
    with pytest.raises(TermsError, match=message.replace("[", r"\[").replace(".", r"\.")):
        parse_terms(text)
