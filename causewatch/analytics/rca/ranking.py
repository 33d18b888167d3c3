"""The ranking: each unit's robust change, weighted by how close its metric kind is to the symptom's,
then each anomalous unit taken as the hypothesis "the fault started here": a fault propagates to the
callers (given as a call graph: hypotheses.py, or read off the baseline as echoes: echoes.py), so an
origin's score grows with the anomalous units its hypothesis explains, and a unit whose change another's
accounts for is discounted as a possible echo.

Scores: a calm unit scores its weighted robust z over `CUT` (below 1); a candidate
1 + g(own) · (1 + Σ g(explained) · share) · (1 - penalty) with g(a) = a / (a + CUT), halved on a graph
where it leaves the symptom's change unexplained. "Nothing anomalous" is a list whose scores are all below 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from causewatch.analytics.rca import echoes, evidence, hypotheses, levels
from causewatch.analytics.rca.deviation import CUT, Deviation, RCAError, column_kind, deviation, deviations, numeric
from causewatch.analytics.rca.graph import CallGraph
from causewatch.analytics.rca.hypotheses import Change, Units, family, g

SAME_FAMILY, OTHER_KIND = 0.8, 0.2   # weights of a kind sharing the symptom's first word, and of any other
OFF_PATH = 0.5   # a hypothesis that leaves the symptom's change unexplained
MISSED = 0.25   # ... accounting for less than this share of it
AGAINST = 0.25   # the weight of a change of the symptom's family against the symptom's direction
ONSET = 0.25   # the symptom's change starts at the first row past this share of its rise inside the window
LINEAR = 10 * CUT   # robust z up to here counts as it is


@dataclass(frozen=True)
class Cause:
    """One ranked unit."""
    unit: str
    score: float
    evidence: str
    deviation: Deviation | None = field(default=None, compare=False)

    def as_dict(self) -> dict:
        return {"unit": self.unit, "score": round(self.score, 6), "evidence": self.evidence}


def check_windows(baseline: pd.DataFrame, incident: pd.DataFrame, target: str | None) -> None:
    """Raise RCAError unless both windows have rows and the same columns, and the target is one of them."""
    for name, df in (("baseline", baseline), ("incident", incident)):
        if df.empty or not len(df.columns):
            raise RCAError(f"the {name} window is empty (no rows or no columns)")
    left, right = set(baseline.columns), set(incident.columns)
    if left != right:
        only = sorted(left - right)[:3] or sorted(right - left)[:3]
        where = "baseline" if left - right else "incident"
        raise RCAError(f"the two windows' columns disagree: only the {where} has {', '.join(only)}")
    if target is not None and target not in left:
        raise RCAError(f"the target column {target!r} is in neither window")


def _weight(kind: str, target_kind: str | None) -> float:
    if target_kind is None or kind == target_kind:
        return 1.0
    return SAME_FAMILY if family(kind) == family(target_kind) else OTHER_KIND


def _owner(column: str, units: dict[str, list[str]]) -> str | None:
    return next((u for u, cols in units.items() if column in cols), None)


@dataclass(frozen=True)
class Symptom:
    """What the target says about the other columns: its kind, the direction of its change, the
    incident's row where its change starts (0: the window is all incident), so a change already standing
    before it is a difference between the periods, not the fault, and, without a graph, how closely each
    column moves with it on the baseline (a node's load can matter to a task's duration although its
    kind differs)."""
    kind: str | None = None
    sign: float = 0.0
    onset: int = 0
    moves_with: dict[str, float] = field(default_factory=dict)

    def size(self, kind: str, dev: Deviation) -> float:
        """The weighted robust change of a column of `kind`."""
        weight = max(_weight(kind, self.kind), self.moves_with.get(dev.column, 0.0))
        if self.sign and weight > OTHER_KIND and dev.z * self.sign < 0:
            weight *= AGAINST
        return weight * compressed(abs(dev.z))


def compressed(size: float) -> float:
    """A robust z beyond LINEAR grows by its logarithm: that far out it measures how flat the baseline
    was more than how big the change is."""
    return size if size <= LINEAR else LINEAR * (1 + math.log(size / LINEAR))


def onset(base: np.ndarray, incident: np.ndarray) -> tuple[int, float]:
    """The incident row where the symptom's change starts and its direction: the first row that departs
    from the window's first by CUT and by ONSET of the largest such departure, away from the baseline,
    the first row being calm beside it (the window starting before the fault) and the fault not yet
    there before it (`_before_the_fault`: a late spike is no onset of a fault that rose early); else row
    0 and the direction of the change from the baseline."""
    dev = deviation("target", base, incident)
    if dev.scale != dev.scale:
        return 0, 0.0
    z = (incident - dev.median) / dev.scale
    finite = np.nonzero(np.isfinite(z))[0]
    if len(finite) >= 2:
        first = z[finite[0]]
        step = np.nan_to_num(z - first)
        step[: finite[0] + 1] = 0.0
        sign = float(np.sign(step[np.argmax(np.abs(step))]))
        away = np.nan_to_num(sign * z) > np.maximum(0.0, sign * first / ONSET)
        crossing = np.nonzero((sign * step >= max(CUT, ONSET * np.abs(step).max())) & away)[0]
        if len(crossing) and _before_the_fault(z, int(crossing[0]), sign):
            return int(crossing[0]), sign
    return 0, float(np.sign(dev.z)) if dev.size >= CUT else 0.0


def _before_the_fault(z: np.ndarray, row: int, sign: float) -> bool:
    """Whether the symptom's robust z by row `z` changes at `row` rather than before it: a third of the
    window's rows at least from it on (those `deviation` judges a change on), and the rows before it not
    beyond the cut on the whole."""
    return len(z) - row >= math.ceil(len(z) / 3) and sign * float(np.nanmedian(z[:row])) < CUT


def symptom(baseline, incident, target: str | None, units, graph: CallGraph | None) -> Symptom:
    if target is None:
        return Symptom()
    row, sign = onset(numeric(baseline, target), numeric(incident, target))
    owner = _owner(target, units) or target
    moves = echoes.moving_with(baseline, target, [c for u, cols in units.items() if u != owner for c in cols
                                                  if c in baseline.columns]) if graph is None else {}
    return Symptom(column_kind(target, owner), sign, row, moves)


def _units(units, devs, sym: Symptom) -> Units:
    """Each unit's most changed column of each family, and its columns by kind, those with a baseline
    to judge them by."""
    changes: dict[str, dict[str, Change]] = {}
    kinds: dict[str, dict[str, Deviation]] = {}
    for unit, cols in units.items():
        changes[unit], kinds[unit] = {}, {}
        for col in cols:
            dev = devs.get(col)
            if dev is None or dev.scale != dev.scale:   # NaN scale: no baseline to judge it by
                continue
            kind = column_kind(col, unit)
            kinds[unit][kind] = dev
            change, best = Change(sym.size(kind, dev), kind, dev), changes[unit].get(family(kind))
            if best is None or change.size > best.size:
                changes[unit][family(kind)] = change
    return Units(changes, kinds)


def _echo_hypotheses(baseline, incident, units: Units, target_unit: str | None) -> dict[str, hypotheses.Hypothesis]:
    """Without a graph: the anomalous units, each explaining the units that echo it on the baseline (the
    symptom's unit the echo where the data cannot tell which way)."""
    anomalous = sorted(u for u in units.strong if units.anomalous(u))
    up, down = {u: {} for u in anomalous}, {u: {} for u in anomalous}
    columns = {u: list(units.kinds[u].values()) for u in anomalous}
    for echo, origin in echoes.echo_edges(baseline, {u: units.strong[u].dev for u in anomalous}, incident, columns,
                                          target_unit):
        up[origin][echo] = 1.0
        down[echo][origin] = 1.0
    return {u: hypotheses.Hypothesis(u, up[u], down[u], 0.0) for u in anomalous}


def _misses(hyp, target_unit: str | None, found: Units, graph: CallGraph, sym: Symptom) -> bool:
    """Whether a hypothesis leaves an anomalous symptom's change unexplained: reaching it through changed
    units, it accounts for less than MISSED of it; not reaching it so (a quiet, noisy unit on the way),
    the symptom is not among its callers' callers or neither its change nor one it accounts for is of
    the symptom's family and way."""
    if hyp is None or target_unit is None or not found.anomalous(target_unit) or hyp.unit == target_unit:
        return False
    if target_unit in hyp.explained:
        return hyp.explained[target_unit] < MISSED

    def alike(unit):
        own = found.strong[unit]
        return family(own.kind) == family(sym.kind or "") and np.sign(own.dev.z) == sym.sign
    shown = alike(hyp.unit) or any(alike(u) for u in hyp.explained)
    return not (shown and target_unit in graph.ancestors(hyp.unit))


def rank_causes(baseline: pd.DataFrame, incident: pd.DataFrame, units: dict[str, list[str]] | None = None,
                target: str | None = None, graph: CallGraph | None = None) -> list[Cause]:
    """The units of `units` (unit -> its columns; default each column its own unit) best first."""
    check_windows(baseline, incident, target)
    units = units or {c: [c] for c in baseline.columns}
    sym = symptom(baseline, incident, target, units, graph)
    common = levels.common_levels(baseline, incident, units, sym.onset)
    devs = deviations(baseline, levels.without_levels(incident, units, common), sym.onset,
                      {c: column_kind(c, u) for u, cols in units.items() for c in cols})
    found = _units(units, devs, sym)
    target_unit = _owner(target, units) if target else None
    hyps = hypotheses.on_graph(graph, found) if graph is not None else \
        _echo_hypotheses(baseline, incident, found, target_unit)
    causes = []
    for unit in units:
        strong = found.strong.get(unit)
        size = strong.size if strong else 0.0
        hyp = hyps.get(unit)
        off = graph is not None and _misses(hyp, target_unit, found, graph, sym)
        if hyp is not None:
            support = sum(g(found.size(a)) * s for a, s in hyp.explained.items())
            score = 1 + g(size) * (1 + support) * (1 - hyp.penalty) * hyp.weight * (OFF_PATH if off else 1.0)
        else:
            score = size / CUT
        text = evidence.sentence(unit, strong, hyp, by_graph=graph is not None, off_path=off,
                                 order=found.size, level=common.get(strong.kind) if strong else None)
        causes.append(Cause(unit, score, text, strong.dev if strong else None))
    return sorted(causes, key=lambda c: (-c.score, c.unit))
