"""analytics.rca.rank_causes on the kinds of case its earlier form ranked wrong, one test each: an odd row
before the fault's onset, a callee's tiny change under a caller's large one, a traffic level every unit
shares, a callee failing while its callers slow down, an echo that follows its origin a row later, and
a single spike in a mostly empty column."""

import re

import numpy as np
import pandas as pd

from causewatch.analytics.rca import CallGraph, rank_causes
from causewatch.analytics.rca.ranking import onset

# front calls mid, mid calls back, back calls db; front calls cache
EDGES = [("front", "mid"), ("mid", "back"), ("back", "db"), ("front", "cache")]
OWN = {"front": 0.02, "mid": 0.02, "back": 0.03, "db": 0.004, "cache": 0.002}
ROWS, WINDOW, ONSET = 400, 5, 2


def _services(rng, rows):
    """Each unit's own latency (s), its availability (%) and requests; a caller's latency adds its callees'."""
    own = {u: base * (1 + 0.05 * rng.standard_normal(rows)) for u, base in OWN.items()}
    avail = {u: np.clip(100 - np.abs(rng.normal(0, 0.05, rows)), 0, 100) for u in OWN}
    return own, avail, {u: rng.poisson(500, rows).astype(float) for u in OWN}


def _frame(own, avail, requests):
    lat = {"db": own["db"], "cache": own["cache"]}
    lat["back"] = own["back"] + lat["db"]
    lat["mid"] = own["mid"] + lat["back"]
    lat["front"] = own["front"] + lat["mid"] + lat["cache"]
    cols = {}
    for u in OWN:
        cols |= {f"{u}_latency_Average": lat[u], f"{u}_latency_p99": 3 * lat[u], f"{u}_availability_Average": avail[u],
                 f"{u}_requests_Sum": requests[u]}
    return pd.DataFrame(cols)


def _units(df):
    return {u: [c for c in df.columns if c.startswith(u + "_")] for u in OWN}


def _rank(baseline, incident, target="front_latency_Average", graph=True):
    causes = rank_causes(baseline, incident, _units(baseline), target, CallGraph(EDGES) if graph else None)
    return [c.unit for c in causes], causes


def _windows(seed, fault):
    """A calm baseline and a 5-row incident whose rows from ONSET on go through `fault(own, avail, req)`."""
    rng = np.random.default_rng(seed)
    baseline = _frame(*_services(rng, ROWS))
    own, avail, req = _services(rng, WINDOW)
    fault(own, avail, req, slice(ONSET, None))
    return baseline, _frame(own, avail, req)


def test_an_odd_row_before_the_onset_is_not_a_change():
    """back slows from the onset; db's first row is far below its normal (one odd aggregate). Measured
    from that first row db seemed to rise, and db, the deepest unit, explained everything above it."""
    def fault(own, avail, req, rows):
        own["back"][rows] += 0.2
    baseline, incident = _windows(1, fault)
    incident.loc[0, [c for c in incident.columns if c.startswith("db_latency")]] *= 0.05
    order, causes = _rank(baseline, incident)
    assert order[0] == "back", [(c.unit, round(c.score, 2), c.evidence) for c in causes[:3]]
    assert order.index("db") > order.index("front")


def test_a_callee_accounts_for_no_more_of_a_callers_rise_than_its_own():
    """db's latency rises by a millisecond (beyond its steady normal), back's by 200 ms: db cannot
    account for back's rise, so it is not the origin."""
    def fault(own, avail, req, rows):
        own["back"][rows] += 0.2
        own["db"][rows] += 0.001
    baseline, incident = _windows(2, fault)
    order, causes = _rank(baseline, incident)
    assert order[0] == "back", [(c.unit, round(c.score, 2), c.evidence) for c in causes[:3]]
    assert "db" not in causes[0].evidence   # back does not echo db
    nearly_all = r"\((9\d|100)%\)"
    text = causes[0].evidence
    assert re.search(rf"accounts for the changes at its callers mid {nearly_all}, front {nearly_all}", text)


def test_a_traffic_level_every_unit_shares_is_not_a_units_fault():
    """Without a graph or a target: every unit's requests run 60 % higher in the incident, and cache's own
    latency doubled: the shared level is taken out and cache ranks first."""
    def fault(own, avail, req, rows):
        own["cache"][:] += 0.002
        for u in req:
            req[u] *= 1.6
    baseline, incident = _windows(3, fault)
    order, causes = _rank(baseline, incident, target=None, graph=False)
    assert order[0] == "cache", [(c.unit, c.evidence) for c in causes[:3]]
    assert "requests" not in causes[0].evidence
    assert any(re.search(r"once the ×1\.[56]\d* that 5 of 5 units' requests_Sum share is taken out", c.evidence)
               for c in causes)   # said where a kind's change was shared


def test_a_failing_callee_whose_callers_slow_down_is_the_origin():
    """back's availability falls (callers retry): mid and front slow down, back's own latency holds.
    The symptom is front's latency; the origin is in another kind."""
    def fault(own, avail, req, rows):
        avail["back"][rows] -= 20
        own["mid"][rows] += 0.15
        own["front"][rows] += 0.12
    baseline, incident = _windows(4, fault)
    order, causes = _rank(baseline, incident)
    assert order[0] == "back", [(c.unit, round(c.score, 2), c.evidence) for c in causes[:3]]
    assert order.index("mid") < order.index("cache")


def test_an_echo_that_follows_its_origin_a_row_later_ranks_below_it():
    """No graph, no target: u1's load follows u0's of the row before, and u1's latency shows its load
    more steeply than u0's, so its change is the larger one; it started a row later."""
    rng = np.random.default_rng(5)
    rows = ROWS + 10
    x0 = rng.standard_normal(rows)
    x0[ROWS:] += 6
    x1 = 0.9 * np.concatenate([[0.0], x0[:-1]]) + 0.4 * rng.standard_normal(rows)
    x2 = rng.standard_normal(rows)
    df = pd.DataFrame({"u0_latency": 0.1 * np.exp(0.05 * x0), "u1_latency": 0.1 * np.exp(0.2 * x1),
                       "u2_latency": 0.1 * np.exp(0.1 * x2)})
    units = {u: [f"{u}_latency"] for u in ("u0", "u1", "u2")}
    causes = rank_causes(df.iloc[:ROWS], df.iloc[ROWS:].reset_index(drop=True), units)
    assert [c.unit for c in causes][:2] == ["u0", "u1"], [(c.unit, round(c.score, 2), c.evidence) for c in causes]
    assert "u1" in causes[0].evidence


def test_one_spike_in_a_mostly_empty_column_is_not_a_change():
    """cache reports only in the last three rows and spikes in one of them; back's fault lasts the window
    from the onset. A third of the window's rows (two) must be beyond the cut, not a third of cache's."""
    def fault(own, avail, req, rows):
        own["back"][rows] += 0.05
    baseline, incident = _windows(6, fault)
    cache = [c for c in incident.columns if c.startswith("cache_")]
    incident.loc[:1, cache] = np.nan
    incident.loc[2, "cache_latency_Average"] *= 40
    order, causes = _rank(baseline, incident)
    assert order[0] == "back", [(c.unit, round(c.score, 2), c.evidence) for c in causes[:3]]
    assert causes[order.index("cache")].score < 1


def test_a_late_spike_is_no_onset_for_a_fault_that_rose_early():
    """The tasks' CPU wait by row in two live runs (tests/integration/test_live_path.py): a hog from about
    row 3, the window's first row above the baseline's median, and the first row to depart from it by the
    cut the 17th of 20 (a late spike), or the 14th (the rows before it at the fault's level already).
    From there the hog's processes, reported before it, had no rows left to show their change."""
    runs = [([0.0045, 0.0125, 0.0325, 0.0067, 0.0032, 0.0324, 0.0354, 0.0023, 0.0029, 0.0448],
             [0.0257, 0.0065, 0.0412, 0.0561, 0.1057, 0.054, 0.0983, 0.0979, 0.1047, 0.1001, 0.0576, 0.0698,
              0.0929, 0.0513, 0.0879, 0.0804, 0.1178, 0.0734, 0.0957, 0.0249]),
            ([0.0051, 0.0126, 0.0517, 0.0051, 0.018, 0.0295, 0.0229, 0.0205, 0.0022, 0.0119],
             [0.0426, 0.0039, 0.0363, 0.0361, 0.1179, 0.0665, 0.0767, 0.0899, 0.0632, 0.0762, 0.0921, 0.0919,
              0.0828, 0.1497, 0.0866, 0.0621, 0.0947, 0.057, 0.0664, 0.024])]
    for base, incident in runs:
        base, incident = np.array(base), np.array(incident)
        assert onset(base, incident) == (0, 1.0)
        calm_start = np.concatenate([np.full(6, np.median(base)), incident[4:]])
        assert onset(base, calm_start) == (6, 1.0)   # a fault after calm rows still has its onset
