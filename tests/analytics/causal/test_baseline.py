"""The baseline rule on model-version sequences like those a live site learnt: a flickering edge (the
issue's 7, 7, 7, 8, 7 edges, no two versions equal), two equal in a row, too few rows, the forced bound."""

from causewatch.analytics.causal import baseline
from causewatch.analytics.causal.baseline import Version, choose

# the demo's task variables; CORE the six edges every version of a steady workload learnt
CORE = [("size", "cpu_seconds"), ("cpu_seconds", "duration"), ("cpu_wait_seconds", "duration"),
        ("size", "code_phase"), ("task_clock_seconds", "cpu_seconds"), ("instructions", "task_clock_seconds")]
WEAK = [("code_phase", "cpu_wait_seconds"), ("size", "cpu_wait_seconds"), ("instructions", "duration"),
        ("code_phase", "duration")]


def _v(model_id, extra, n_rows=400, core=CORE):
    return Version(model_id, n_rows, baseline.pairs(list(core) + list(extra)))


def _flicker():
    """The issue's five versions: 7, 7, 7, 8, 7 edges, each set differing from the one before."""
    return [_v(1, [WEAK[0]]), _v(2, [WEAK[1]]), _v(3, [WEAK[0]]), _v(4, [WEAK[1], WEAK[2]]), _v(5, [WEAK[3]])]


def test_the_issue_s_flicker_forms_a_baseline_at_the_third_version():
    versions = _flicker()
    assert [len(v.edges) for v in versions] == [7, 7, 7, 8, 7]
    assert all(a.edges != b.edges for a, b in zip(versions, versions[1:]))   # the old rule never chose
    first = choose(versions[:2], min_rows=200)
    assert not first.chosen and "3 versions" in first.waiting_for
    third = choose(versions[:3], min_rows=200)
    # majority of 1..3: CORE + WEAK[0] (in two of three); version 3 is exactly it
    assert third.chosen and third.model_id == 3 and third.how == "stable majority" and third.distance == 0
    assert sorted(third.majority) == sorted(" --- ".join(sorted(p)) for p in CORE + [WEAK[0]])
    five = choose(versions, min_rows=200)
    assert five.chosen and five.distance <= baseline.TOLERANCE and five.model_id in (3, 5)


def test_two_equal_versions_in_a_row_are_chosen_at_once_and_reorientation_is_equal():
    flipped = [(b, a) for a, b in CORE]
    decision = choose([_v(1, []), _v(2, [], core=flipped)], min_rows=200)
    assert decision.chosen and decision.model_id == 2 and decision.how == "first stable"


def test_versions_learnt_from_too_few_rows_do_not_count_and_the_wait_says_so():
    decision = choose([_v(1, [], n_rows=120), _v(2, [], n_rows=180)], min_rows=200)
    assert not decision.chosen
    assert decision.waiting_for == "a version learnt from 200 task rows at least (the newest has 180)"
    decision = choose([_v(1, [], n_rows=120), _v(2, [], n_rows=180), _v(3, [WEAK[0]]), _v(4, [])], min_rows=200)
    assert not decision.chosen and decision.eligible == 2


def test_two_flickering_edges_wait_and_say_which_then_the_bound_forces_the_closest():
    # every version drops a different core edge and adds a weak one: each differs from the majority by 2
    versions = [_v(i + 1, [WEAK[i % 4]], core=CORE[:i % 6] + CORE[i % 6 + 1:]) for i in range(12)]
    waited = choose(versions[:5], min_rows=200)
    assert not waited.chosen and waited.distance == 2 and "differs by 2" in waited.waiting_for
    assert f"the {baseline.FORCE_AFTER}th version (has 5)" in waited.waiting_for
    forced = choose(versions[5:10], min_rows=200, total_eligible=10)
    assert forced.chosen and forced.how == "closest after 10 versions" and forced.model_id in range(6, 11)


def test_the_decision_as_stored_names_the_rule():
    stored = choose(_flicker()[:2], min_rows=200).to_dict()
    assert stored["chosen"] is False and stored["rule"] == baseline.RULE and stored["eligible_versions"] == 2


# A `make demo` run's stored versions (model_id: rows, edges), loaded 16-44 on 2 cores (2026-11-27).
_DEMO_COMMON = [("code_phase", "type"), ("context_switches", "cpu_seconds"), ("cpu_wait_seconds", "duration")]
DEMO_RUN = {
    1: (58, _DEMO_COMMON + [("cpu_seconds", "duration"), ("cpu_seconds", "page_faults")]),
    3: (141, _DEMO_COMMON + [("context_switches", "page_faults"), ("cpu_migrations", "cpu_wait_seconds"),
                             ("cpu_seconds", "duration"), ("cpu_seconds", "type"), ("page_faults", "type")]),
    4: (189, _DEMO_COMMON + [("code_phase", "cpu_seconds"), ("cpu_migrations", "cpu_wait_seconds"),
                             ("cpu_seconds", "duration"), ("page_faults", "type")]),
    5: (234, _DEMO_COMMON + [("code_phase", "cpu_seconds"), ("cpu_migrations", "cpu_wait_seconds"),
                             ("cpu_seconds", "duration"), ("page_faults", "type")]),
    7: (326, _DEMO_COMMON + [("code_phase", "cpu_seconds"), ("context_switches", "type"),
                             ("cpu_migrations", "cpu_wait_seconds"), ("cpu_seconds", "duration"),
                             ("page_faults", "type")]),
    9: (451, _DEMO_COMMON + [("code_phase", "cpu_seconds"), ("context_switches", "type"),
                             ("cpu_migrations", "duration"), ("cpu_seconds", "duration"), ("page_faults", "type")]),
    10: (494, _DEMO_COMMON + [("code_phase", "cpu_seconds"), ("context_switches", "type"),
                              ("cpu_migrations", "duration"), ("page_faults", "type")]),
}


def _demo(*ids):
    return [Version(i, DEMO_RUN[i][0], baseline.pairs(DEMO_RUN[i][1])) for i in ids]


def test_a_demo_run_s_versions_choose_as_they_did_and_without_the_equal_pair_by_majority():
    assert choose(_demo(1, 3, 4), min_rows=200).waiting_for.startswith("a version learnt from 200 task rows")
    first = choose(_demo(1, 3, 4, 5), min_rows=200)   # 4 and 5 equal, 5 from 234 rows: what the demo chose
    assert (first.chosen, first.model_id, first.how) == (True, 5, "first stable")
    # no two equal in a row (8, 8, 7 edges, each set differing): the majority is version 9's edges
    later = choose(_demo(7, 9, 10), min_rows=200)
    assert [len(v.edges) for v in _demo(7, 9, 10)] == [8, 8, 7]
    assert (later.chosen, later.model_id, later.how, later.distance) == (True, 9, "stable majority", 0)
