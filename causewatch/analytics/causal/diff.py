"""A causal diff of two windows: what changed between one window's model (the baseline's) and another's.

Edges added and removed, edges re-oriented (not counted as new), strengths moved beyond their band, and
mechanisms (a variable's distribution given its baseline causes) that changed between the windows' rows:
the causal counterpart of a diff flame graph. Each change is judged as the daemon judges its anomalies
(anomalies.edge_changes, anomalies.changed_mechanisms), so a diff and an anomaly agree on what changed.

Given the rows, an edge added or removed must also show in the data, not only in the two learnt graphs:
an added edge's ends, separated in the baseline's model by some set, are no longer separated by it on the
newer rows; a removed one's, separated in the newer model, were not separated by that set on the
baseline's rows. Otherwise it is a learner's flicker (where two near-copies, a task's duration and its
CPU time, take an edge in turn), kept apart as `unconfirmed`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from causewatch.analytics.causal import anomalies, mdl
from causewatch.analytics.causal.background import Background
from causewatch.analytics.causal.ci import CITest, KDEMITest
from causewatch.analytics.causal.model import CausalModel, Edge
from causewatch.analytics.causal.pc import PCLearner

EDGE_KINDS = ("added", "removed", "reoriented", "strength_changed")
MIN_ROWS = 20   # fewer complete rows than this make a model of noise: PC finds no edge, or chance ones
_FROM_FINDING = {"edge_appeared": "added", "edge_disappeared": "removed", "strength_changed": "strength_changed"}


class DiffError(ValueError):
    """Two windows that cannot be compared: columns that disagree, too few rows."""


@dataclass(frozen=True)
class EdgeChange:
    """One edge's change: `before` and `after` are its edge in each model (None where it has none);
    src and dst are its direction in the model that has it (the baseline's where both do)."""
    kind: str
    src: str
    dst: str
    before: Edge | None
    after: Edge | None

    def to_dict(self) -> dict:
        return {"kind": self.kind, "src": self.src, "dst": self.dst,
                "before": _edge_dict(self.before), "after": _edge_dict(self.after)}


@dataclass(frozen=True)
class MechanismChange:
    """A variable whose distribution given its baseline causes (`given`) differs between the windows:
    the test's bits and threshold, each window's typical value, and the fit on its causes in each."""
    variable: str
    given: tuple[str, ...]
    bits: float
    threshold: float
    before: object
    after: object
    formula_before: str
    formula_after: str

    def to_dict(self) -> dict:
        return {"variable": self.variable, "given": list(self.given), "bits": round(self.bits, 4),
                "threshold": round(self.threshold, 4), "before": self.before, "after": self.after,
                "formula_before": self.formula_before, "formula_after": self.formula_after}


@dataclass
class CausalDiff:
    """What changed from `before` (the baseline window's model) to `after`; `mechanisms_judged` is False
    when no rows were given to judge them; `weak` counts edges added or removed under MIN_BITS;
    `unconfirmed`: edges added or removed in the graphs whose separation the rows do not contradict."""
    before: CausalModel = field(repr=False)
    after: CausalModel = field(repr=False)
    edges: list[EdgeChange]
    mechanisms: list[MechanismChange]
    mechanisms_judged: bool
    weak: int
    rows: tuple[int, int] = (0, 0)
    unconfirmed: list[EdgeChange] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """An edge added, removed or moved beyond its band, or a mechanism changed; a re-orientation
        alone is listed but is no change, as it opens no anomaly (anomalies.edge_changes)."""
        return any(c.kind != "reoriented" for c in self.edges) or bool(self.mechanisms)

    def to_dict(self) -> dict:
        after = {frozenset((e.src, e.dst)) for e in self.after.edges()}
        touched = {frozenset((c.src, c.dst)) for c in self.edges}
        return {"changed": self.changed,
                "variables": {"before": self.before.nodes, "after": self.after.nodes},
                "rows": {"before": self.rows[0], "after": self.rows[1]},
                "edges": [c.to_dict() for c in self.edges],
                "mechanisms": [m.to_dict() for m in self.mechanisms],
                "mechanisms_judged": self.mechanisms_judged,
                "unchanged_edges": len(after - touched), "weak_edges_left_out": self.weak,
                "unconfirmed_edges": [c.to_dict() for c in self.unconfirmed],
                "min_bits": anomalies.MIN_BITS}


def _edge_dict(e: Edge | None) -> dict | None:
    return None if e is None else {"src": e.src, "dst": e.dst, "directed": e.directed,
                                   "strength": round(e.strength, 4)}


def diff_models(before: CausalModel, after: CausalModel, rows_before: pd.DataFrame | None = None,
                rows_after: pd.DataFrame | None = None, given: list[str] = (),
                ci_test: CITest | None = None) -> CausalDiff:
    """The diff of two models; with both windows' rows, the mechanisms of `before`'s variables (all but
    those in `given`, the inputs) are judged too, on the rows of both."""
    edges = edge_diff(before, after)
    judged = rows_before is not None and rows_after is not None
    mechanisms = mechanism_diff(before, rows_before, rows_after, given, ci_test) if judged else []
    pairs_before = {frozenset((e.src, e.dst)) for e in before.edges()}
    pairs_after = {frozenset((e.src, e.dst)) for e in after.edges()}
    weak = len(pairs_before ^ pairs_after) - sum(c.kind in ("added", "removed") for c in edges)
    if not judged:
        return CausalDiff(before, after, edges, mechanisms, judged, weak)
    test = ci_test or KDEMITest()
    sure = [c for c in edges if _shows(c, before, after, rows_before, rows_after, test)]
    return CausalDiff(before, after, sure, mechanisms, judged, weak, (len(rows_before), len(rows_after)),
                      [c for c in edges if c not in sure])


def _shows(change: EdgeChange, before: CausalModel, after: CausalModel, rows_before: pd.DataFrame,
           rows_after: pd.DataFrame, test: CITest) -> bool:
    """Whether the rows show an added or removed edge: the other model's separating set of its ends
    does not separate them on these rows (an edge without a recorded set, as background knowledge
    leaves one, is taken as shown)."""
    if change.kind not in ("added", "removed"):
        return True
    model, rows = (before, rows_after) if change.kind == "added" else (after, rows_before)
    return anomalies.separated(model, rows, change.src, change.dst, test) is not True


def edge_diff(before: CausalModel, after: CausalModel) -> list[EdgeChange]:
    """Edges added, removed or moved beyond their band (anomalies.edge_changes), and those whose
    orientation changed (CausalModel.diff), each pair once per kind."""
    old = {frozenset((e.src, e.dst)): e for e in before.edges()}
    new = {frozenset((e.src, e.dst)): e for e in after.edges()}
    out = []
    for f in anomalies.edge_changes(before, after):
        pair = frozenset((f.src, f.dst))
        b, a = old.get(pair), new.get(pair)
        src, dst = (b or a).src, (b or a).dst
        out.append(EdgeChange(_FROM_FINDING[f.kind], src, dst, b, a))
    for r in before.diff(after)["reoriented"]:
        pair = frozenset((r["before"]["src"], r["before"]["dst"]))
        out.append(EdgeChange("reoriented", old[pair].src, old[pair].dst, old[pair], new[pair]))
    return sorted(out, key=lambda c: (EDGE_KINDS.index(c.kind), c.src, c.dst))


def mechanism_diff(before: CausalModel, rows_before: pd.DataFrame, rows_after: pd.DataFrame,
                   given: list[str] = (), ci_test: CITest | None = None) -> list[MechanismChange]:
    """`before`'s variables whose mechanism changed from `rows_before` to `rows_after`
    (anomalies.changed_mechanisms, with no effect floor: a diff lists every change its tests find, a
    page only one worth acting on), each with its fit on its causes in either window (MDL)."""
    for name, rows in (("before", rows_before), ("after", rows_after)):
        missing = [v for v in before.nodes if v not in rows.columns]
        if missing:
            raise DiffError(f"the {name} window lacks the baseline model's variables {missing}")
    out = []
    for f in anomalies.changed_mechanisms(before, rows_before, rows_after, ci_test, list(given), min_effect=0.0):
        causes = tuple(f.evidence["given"])
        out.append(MechanismChange(f.dst, causes, f.score, f.threshold, f.evidence["before"], f.evidence["newest"],
                                   _formula(rows_before, f.dst, causes, before.discrete),
                                   _formula(rows_after, f.dst, causes, before.discrete)))
    return out


def _formula(rows: pd.DataFrame, v: str, causes: tuple[str, ...], discrete) -> str:
    """The variable's MDL fit on its causes in these rows, as text."""
    return mdl.fit_submodel(rows, v, list(causes), discrete).formula


def diff_windows(rows_before: pd.DataFrame, rows_after: pd.DataFrame, given: list[str] = (),
                 discrete: list[str] = (), max_depth: int = 2, ci_test: CITest | None = None) -> CausalDiff:
    """Learn a model of each window as the daemon's causal job does (PC-stable, the KDE test, `given`
    as inputs: causes only) and diff them, mechanisms judged on both windows' rows."""
    if list(rows_before.columns) != list(rows_after.columns):
        only = sorted(set(rows_before.columns) ^ set(rows_after.columns))
        raise DiffError("the windows' columns disagree" + (f": {', '.join(map(str, only))} in one only" if only
                                                           else " in order"))
    short = [f"{name} {len(rows)}" for name, rows in (("before", rows_before), ("after", rows_after))
             if len(rows) < MIN_ROWS]
    if short:
        raise DiffError(f"too few complete rows to learn a model from ({', '.join(short)}; at least {MIN_ROWS})")
    inputs = [c for c in given if c in rows_before.columns]
    learners = [PCLearner(ci_test=ci_test or KDEMITest(), max_depth=max_depth, discrete=discrete,
                          background=Background(tiers={"inputs": inputs})).fit(rows)
                for rows in (rows_before, rows_after)]
    return diff_models(learners[0].model_, learners[1].model_, rows_before, rows_after, inputs,
                       learners[0].ci_test)
