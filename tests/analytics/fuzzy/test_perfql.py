"""PERFQL: grammar and precedence, metric expressions, division by zero, errors with columns,
ranking, and the bottleneck search over region-summary DataFrames."""

import warnings

import numpy as np
import pandas as pd
import pytest

from causewatch.analytics.fuzzy import Membership, TermSet, find_bottlenecks, perfql
from causewatch.analytics.fuzzy.perfql import PerfQLError, Query, parse_metric

TERMS = {"ratio": TermSet("ratio", {"low": Membership("z", (0.2, 0.4)), "high": Membership("s", (0.5, 0.9))},
                          expr="a / b"),
         "t": TermSet("t", {"short": Membership("linear", (10, 0)), "long": Membership("linear", (0, 10))}),
         "u": TermSet("u", {"poor_cache_miss": Membership("s", (0.0, 1.0))})}


def df():
    return pd.DataFrame({"node": list("pqrst"), "app": "x", "region": ["r1", "r2", "r3", "r4", "r5"],
                         "source": "region", "a": [1.0, 0.3, 9.0, 5.0, 0.0], "b": [1.0, 1.0, 10.0, 0.0, 0.0],
                         "t": [10.0, 5.0, 0.0, 2.0, 8.0]})


def degrees(text, f=None):
    return Query(text, TERMS).degrees(df() if f is None else f)


def test_single_term_and_metric_expression():
    np.testing.assert_allclose(degrees("(t is long)"), [1.0, 0.5, 0.0, 0.2, 0.8])
    ratio = np.array([1.0, 0.3, 0.9, np.nan, np.nan])
    want = np.nan_to_num(TERMS["ratio"].terms["high"](ratio, "compatible"))
    np.testing.assert_allclose(degrees("(a/b is high)"), want)
    np.testing.assert_allclose(degrees("(ratio is high)"), want)   # a term set's name stands for its expr


def test_and_binds_tighter_than_or():
    long, short, high = degrees("(t is long)"), degrees("(t is short)"), degrees("(a / b is high)")
    np.testing.assert_allclose(degrees("(t is long) OR (t is short) AND (a/b is high)"),
                               np.maximum(long, np.minimum(short, high)))
    np.testing.assert_allclose(degrees("(t is long) and (t is short) or (a/b is high)"),
                               np.maximum(np.minimum(long, short), high))


def test_linguistic_expression_inside_a_term():
    long, short = degrees("(t is long)"), degrees("(t is short)")
    np.testing.assert_allclose(degrees("(t is not long or short)"), np.maximum(1 - long, short))
    np.testing.assert_allclose(degrees("(T IS Very LONG)"), Query("(t is very long)", TERMS).degrees(df()))


def test_arithmetic_precedence_and_numbers():
    q = Query("(a + b * 2 - -t / 2 is long)", TERMS)
    cond = perfql.conditions(q.tree)[0]
    f = df()
    np.testing.assert_allclose(q.metric_values(cond, f), f.a + f.b * 2 - (-f.t) / 2)
    assert perfql.canonical(parse_metric("(a+b)*c")) == "((a+b)*c)"
    assert perfql.canonical(parse_metric("a+b*c")) == "(a+(b*c))"


def test_division_by_zero_gives_no_value_and_degree_zero():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q = Query("(a / b is high) OR (b / a is high)", TERMS)
        got = q.evaluate(df())
    # r4 is 5/0 and 0/5, r5 is 0/0 both ways: no value, no degree.
    assert "r5" not in set(got.region)
    values = q.metric_values(perfql.conditions(q.tree)[0], df())
    assert np.isnan(values[3]) and np.isnan(values[4])


def test_global_term_name_resolves_when_unique():
    np.testing.assert_allclose(degrees("(a - 0.5 is poor_cache_miss)"),
                               TERMS["u"].terms["poor_cache_miss"](df().a - 0.5, "compatible"))


def test_ranking_min_degree_and_top():
    q = Query("(t is long)", TERMS)
    got = q.evaluate(df())
    assert got.region.tolist() == ["r1", "r5", "r2", "r4"] and got.degree.is_monotonic_decreasing
    assert q.evaluate(df(), min_degree=0.5).region.tolist() == ["r1", "r5", "r2"]
    assert q.evaluate(df(), top=2).region.tolist() == ["r1", "r5"]
    assert list(got.columns) == ["node", "app", "region", "source", "t", "degree"]


@pytest.mark.parametrize("text,column,expected", [
    ("t is long", 1, "'(' to start a term"),
    ("(t long)", 4, "'is' or an arithmetic operator"),
    ("(t is long", 11, "')' or AND/OR"),
    ("(t is long) (t is short)", 13, "AND, OR or end of input"),
    ("(t is long) AND", 16, "'(' to start a term"),
    ("(a/ is high)", 5, "a metric name, a number or '('"),
    ("((a+b is high)", 7, "')' or an arithmetic operator"),
    ("(t is lng)", 7, "a term of long, short"),
    ("(t is and)", 7, "a term, a hedge or '('"),
    ("(t is long) or (a % b is high)", 19, "a name, a number, an operator")])
def test_parse_errors_point_at_the_column(text, column, expected):
    with pytest.raises(PerfQLError) as e:
        Query(text, TERMS)
    assert e.value.column == column and expected in e.value.expected, str(e.value)


def test_unknown_metric_is_reported_at_its_column():
    with pytest.raises(PerfQLError) as e:
        Query("(t is long) and (nope / b is high)", {**TERMS, "x": TermSet("x", {"high": Membership("s", (0, 1))},
                                                                            expr="nope / b")}).degrees(df())
    assert e.value.column == 18 and "a metric of the region summaries (a, b, t)" in str(e.value)


def test_term_defined_by_several_sets_needs_the_metric_named():
    sets = {**TERMS, "v": TermSet("v", {"long": Membership("s", (0, 1))})}
    with pytest.raises(PerfQLError, match="several define 'long'"):
        Query("(a * 2 is long)", sets)


def test_find_bottlenecks_long_rows():
    f = pd.DataFrame({"node": ["n", "n"], "app": "a", "region": ["PARTICLE_LOAD", "MPI_SEND"], "source": "region",
                      "L2_TCM": [0.9497242344418835, 0.6550124668722567], "L2_TCA": [1.0, 1.0]})
    got = find_bottlenecks(f)
    assert got[["region", "term"]].values.tolist() == [
        ["PARTICLE_LOAD", "medium"], ["PARTICLE_LOAD", "high"], ["MPI_SEND", "negligible"]]
    assert got.degree.round(3).tolist() == [0.502, 0.495, 0.1] and set(got.metric) == {"l2_miss_ratio"}
    assert len(find_bottlenecks(f, negligible=False)) == 2
    with pytest.raises(ValueError, match="has no bottleneck term set"):
        find_bottlenecks(f, metrics=["nonsense"])
    with pytest.raises(PerfQLError, match="found 'cycles'"):
        find_bottlenecks(f, metrics=["cpi"])


def test_term_set_name_falls_back_to_a_recorded_column():
    f = df().assign(ratio=[0.1, 0.2, 0.3, 0.4, 0.95]).drop(columns=["a"])
    got = Query("(ratio is high)", TERMS).evaluate(f)
    assert got.region.tolist() == ["r5"] and got.ratio.tolist() == [0.95]
