"""Each candidate unit taken as the hypothesis "the fault started here", on a call graph: a fault
propagates from a callee to its callers, so the hypothesis explains the anomalous callers it reaches
through changed units, each by the share of the caller's change the candidate's own change accounts
for (the same kind in the column's own units: 2 ms more at a callee explains at most 2 ms of a
caller's rise), or, for a change of another family than the caller's (a callee failing, its caller
slowing on retries), a fixed share.

A unit whose strongest change a callee's accounts for is discounted by it: it may be an echo. Load
flows the other way, from callers to callees, so a unit whose load changed under an anomalous caller
explains nothing and is discounted: its changes may be that caller's doing. A unit below the cut that
accounts for most of an anomalous direct caller's change is a candidate too: a noisy unit shows a
real fault less clearly than its steadier callers.
"""

from __future__ import annotations

from dataclasses import dataclass

from causewatch.analytics.rca.deviation import CUT, Deviation
from causewatch.analytics.rca.graph import CallGraph

CROSS = 0.5   # the share of a caller's change in another family that a callee's change accounts for
SOFT = CUT / 2   # a unit this changed that accounts for an anomalous caller's change is a candidate
CARRIES = 0.5   # ... when it accounts for at least this share of it
LOAD = ("requests", "calls", "throughput", "traffic", "rps", "qps")   # families a callee's callers set
NAMED = 0.25   # a callee accounting for less of a unit's change is not named as what it may echo
DRIVEN = 0.5   # the weight of a unit whose load changed under an anomalous caller: it may be that caller's echo


@dataclass(frozen=True)
class Change:
    """A unit's most changed column of one family: its weighted robust change, kind and deviation."""
    size: float
    kind: str
    dev: Deviation


@dataclass(frozen=True)
class Hypothesis:
    """What "the fault started at `unit`" explains: caller -> the share of its change, the callees
    accounting for NAMED or more of the unit's change, the penalty of all that account for some of it
    (0 none, 1 wholly), and its weight (below 1 where
    its load changed under an anomalous caller: load flows from callers to callees)."""
    unit: str
    explained: dict[str, float]
    echo_of: dict[str, float]
    penalty: float
    weight: float = 1.0


def g(a: float) -> float:
    return a / (a + CUT)


class Units:
    """The units' changes: unit -> family -> Change, and unit -> kind -> Deviation."""

    def __init__(self, changes: dict[str, dict[str, Change]], kinds: dict[str, dict[str, Deviation]]):
        self.changes, self.kinds = changes, kinds
        self.strong = {u: max(f.values(), key=lambda c: c.size) for u, f in changes.items() if f}

    def size(self, unit: str) -> float:
        c = self.strong.get(unit)
        return c.size if c else 0.0

    def anomalous(self, unit: str) -> bool:
        return self.size(unit) >= CUT

    def share(self, cause: str, effect: str, cross: float = CROSS, strict: bool = False) -> float:
        """The largest share of one of `effect`'s anomalous families that `cause`'s change accounts for:
        in a family both have, the largest of cause's change over effect's in a kind where effect's is
        beyond the cut (the same measure at two places; `strict`: only the family's most changed
        kind); in another family, or one where cause measures none of effect's kinds (a process's CPU
        cores, the tasks' CPU wait), `cross`."""
        best, mine = 0.0, self.strong.get(cause)
        for fam, change in self.changes.get(effect, {}).items():
            if change.size < CUT or mine is None:
                continue
            if family(mine.kind) != fam or not set(self.kinds[cause]) & {
                    k for k in self.kinds[effect] if family(k) == fam}:
                best = max(best, cross)
                continue
            for kind, dev in self.kinds[effect].items():
                other = self.kinds[cause].get(kind)
                if family(kind) != fam or other is None or dev.size < CUT or (strict and kind != change.kind):
                    continue
                if other.delta * dev.delta > 0:
                    best = max(best, min(1.0, other.delta / dev.delta))
        return best


def family(kind: str) -> str:
    """A kind's first word: `latency_p90` and `latency_Average` are both latency."""
    return kind.split("_")[0]


def _reached(graph: CallGraph, units: Units, start: str) -> set[str]:
    """The anomalous callers `start`'s fault reaches through units changed at least SOFT (a noisy
    caller on the way shows the fault less clearly than its own callers)."""
    callers = graph.callers()
    seen, todo = set(), [start]
    while todo:
        for caller in callers.get(todo.pop(), ()):
            if caller not in seen and caller != start and units.size(caller) >= SOFT:
                seen.add(caller)
                todo.append(caller)
    return {u for u in seen if units.anomalous(u)}


def on_graph(graph: CallGraph, units: Units) -> dict[str, Hypothesis]:
    """The hypotheses of the anomalous units and of the units below the cut that carry a caller's
    change; a unit is discounted as an echo by the callees that account for its strongest change."""
    reached = {u: _reached(graph, units, u) for u in units.strong if units.size(u) >= SOFT}
    explained = {u: {a: units.share(u, a) for a in r} for u, r in reached.items()}
    callers = graph.callers()
    candidates = {u for u in reached if units.anomalous(u) or
                  any(explained[u].get(a, 0.0) >= CARRIES for a in callers.get(u, ()))}
    weight = {u: DRIVEN if _driven(units, u, callers) else 1.0 for u in candidates}
    explained = {u: ({} if weight.get(u, 1.0) < 1 else e) for u, e in explained.items()}
    echo_of: dict[str, dict[str, float]] = {u: {} for u in candidates}
    for cause in candidates:
        for effect in explained[cause]:
            s = units.share(cause, effect, strict=True)
            if effect in echo_of and s > 0:
                echo_of[effect][cause] = s
    out = {}
    for u in candidates:
        penalty = max((g(units.size(c)) * s * weight[c] for c, s in echo_of[u].items()), default=0.0)
        named = {c: s for c, s in echo_of[u].items() if s >= NAMED}
        out[u] = Hypothesis(u, {a: s for a, s in explained[u].items() if s > 0}, named, penalty, weight[u])
    return out


def _driven(units: Units, unit: str, callers: dict[str, set[str]]) -> bool:
    """Whether `unit`'s load changed while a caller of it is anomalous."""
    loaded = any(c.size >= CUT for fam, c in units.changes.get(unit, {}).items() if fam.lower() in LOAD)
    return loaded and any(units.anomalous(c) for c in callers.get(unit, ()))

