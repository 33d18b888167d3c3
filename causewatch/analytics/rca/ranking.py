"""The ranking: each unit's robust change, weighted by how close its metric kind is to the symptom's,
then each anomalous unit taken as the hypothesis "the fault started here": a fault propagates to the
callers (given as a call graph, or read off the baseline as echoes), so an origin's score grows with the
anomalous units its hypothesis explains, and a caller that only echoes its callee explains less.

Scores: a calm unit scores its weighted robust z over `CUT` (below 1); an anomalous unit
1 + g(own) · (1 + Σ g(explained)) with g(a) = a / (a + CUT), halved off the symptom's call paths.
"Nothing anomalous" is a list whose scores are all below 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from causewatch.analytics.rca import echoes, evidence
from causewatch.analytics.rca.deviation import CUT, Deviation, RCAError, column_kind, deviations
from causewatch.analytics.rca.graph import CallGraph

SAME_FAMILY, OTHER_KIND = 0.8, 0.2   # weights of a kind sharing the symptom's first word, and of any other
OFF_PATH = 0.5   # a unit the symptom's unit does not reach through the graph explains it less
AGAINST = 0.25   # the weight of a change of the symptom's family against the symptom's direction
ONSET = 0.5   # a symptom whose change from its first row is this share of its change starts inside the window
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
    return SAME_FAMILY if kind.split("_")[0] == target_kind.split("_")[0] else OTHER_KIND


def _owner(column: str, units: dict[str, list[str]]) -> str | None:
    return next((u for u, cols in units.items() if column in cols), None)


@dataclass(frozen=True)
class Symptom:
    """What the target says about the other columns: its kind, the direction of its change, and whether
    the incident window starts before the change (the first row calmer), so a change already standing
    there is a difference between the periods, not the fault."""
    kind: str | None = None
    sign: float = 0.0
    onset: bool = False

    def size(self, kind: str, dev: Deviation) -> float:
        """The weighted robust change of a column of `kind`: from the incident's first row where the
        window starts before the symptom's change, else from the baseline."""
        change = dev.z - dev.first if self.onset else dev.z
        weight = _weight(kind, self.kind)
        if self.sign and weight > OTHER_KIND and change * self.sign < 0:
            weight *= AGAINST
        return weight * compressed(abs(change))


def compressed(size: float) -> float:
    """A robust z beyond LINEAR grows by its logarithm: that far out it measures how flat the baseline
    was more than how big the change is."""
    return size if size <= LINEAR else LINEAR * (1 + math.log(size / LINEAR))


def symptom(target: str | None, units, devs) -> Symptom:
    if target is None:
        return Symptom()
    unit, dev = _owner(target, units), devs[target]
    within = dev.z - dev.first
    onset = abs(within) >= max(CUT, ONSET * dev.size)
    change = within if onset else dev.z
    sign = float(change > 0) - float(change < 0) if abs(change) >= CUT else 0.0
    return Symptom(column_kind(target, unit or target), sign, onset)


def family(kind: str) -> str:
    """A kind's first word: `latency_p90` and `latency_Average` are both latency."""
    return kind.split("_")[0]


def _changes(units, devs, sym: Symptom) -> dict[str, dict[str, tuple[float, str, Deviation]]]:
    """unit -> family -> (weighted robust change, kind, deviation) of its most changed column of that
    family with a baseline to judge it by."""
    out: dict[str, dict] = {}
    for unit, cols in units.items():
        for col in cols:
            dev = devs.get(col)
            if dev is None or dev.scale != dev.scale:   # NaN scale: no baseline to judge it by
                continue
            kind = column_kind(col, unit)
            size, best = sym.size(kind, dev), out.setdefault(unit, {}).get(family(kind))
            if best is None or size > best[0]:
                out[unit][family(kind)] = (size, kind, dev)
    return out


def _g(a: float) -> float:
    return a / (a + CUT)


def _relations(baseline, strong, changes, anomalous, graph) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """For each anomalous unit: the anomalous units that would echo it, and those it may echo (on a
    graph, those anomalous in the same family: a callee's latency explains a caller's latency)."""
    if graph is not None:
        def alike(unit, others):
            fam = family(strong[unit][1])
            return {o for o in others if o in changes and changes[o].get(fam, (0.0,))[0] >= CUT}
        up = {u: alike(u, graph.ancestors(u)) for u in anomalous}
        down = {u: alike(u, graph.descendants(u)) for u in anomalous}
        return up, down
    up, down = {u: set() for u in anomalous}, {u: set() for u in anomalous}
    for echo, origin in echoes.echo_edges(baseline, {u: strong[u][2] for u in sorted(anomalous)}):
        up[origin].add(echo)
        down[echo].add(origin)
    return up, down


def rank_causes(baseline: pd.DataFrame, incident: pd.DataFrame, units: dict[str, list[str]] | None = None,
                target: str | None = None, graph: CallGraph | None = None) -> list[Cause]:
    """The units of `units` (unit -> its columns; default each column its own unit) best first."""
    check_windows(baseline, incident, target)
    units = units or {c: [c] for c in baseline.columns}
    devs = deviations(baseline, incident)
    target_unit = _owner(target, units) if target else None
    changes = _changes(units, devs, symptom(target, units, devs))
    strong = {u: max(by_family.values(), key=lambda c: c[0]) for u, by_family in changes.items()}
    anomalous = {u for u, (size, _, _) in strong.items() if size >= CUT}
    up, down = _relations(baseline, strong, changes, anomalous, graph)
    on_path = graph.descendants(target_unit) | {target_unit} if graph is not None and target_unit else None
    causes = []
    for unit in units:
        size, kind, dev = strong.get(unit, (0.0, None, None))
        off = on_path is not None and unit not in on_path
        if unit in anomalous:
            fam = family(kind)
            support = sum(_g(changes[u][fam][0]) for u in up[unit]) if graph is not None else \
                sum(_g(strong[u][0]) for u in up[unit])
            score = 1 + _g(size) * (1 + support) * (OFF_PATH if off else 1.0)
        else:
            score = size / CUT
        text = evidence.sentence(unit, kind, dev, unit in anomalous, explained=_by_size(up.get(unit, ()), strong),
                                 by_graph=graph is not None, echo_of=_by_size(down.get(unit, ()), strong),
                                 off_path=off and unit in anomalous)
        causes.append(Cause(unit, score, text, dev))
    return sorted(causes, key=lambda c: (-c.score, c.unit))


def _by_size(units, strong) -> list[str]:
    return sorted(units, key=lambda u: (-strong[u][0], u))
