"""Dependency anomalies: where newest data or a newer model departs from a baseline causal model.

A `markov_violation` is a variable (`dst`) whose Markov condition fails on the newest rows: it depends
on a non-descendant (`src`) beyond its parents, so the baseline's independence no longer holds;
`edge_appeared`, `edge_disappeared` and `strength_changed` compare the baseline's edges with a newer one's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import networkx as nx
import pandas as pd

from causewatch.analytics.causal.ci import AutoTest, CITest, Dataset, KDEMITest
from causewatch.analytics.causal.model import CausalModel

KINDS = ("markov_violation", "edge_appeared", "edge_disappeared", "strength_changed")
MIN_BITS = 0.1   # an edge weaker than this appearing or disappearing is noise near the test's threshold


@dataclass(frozen=True)
class Finding:
    """One departure. `score` and `threshold` are the test's own (bits); `evidence` says on what."""
    kind: str
    src: str
    dst: str
    score: float
    threshold: float
    evidence: dict = field(default_factory=dict, compare=False)

    @property
    def key(self) -> tuple[str, str, str]:
        return self.kind, self.src, self.dst


def new_dependencies(baseline: CausalModel, newest: pd.DataFrame, ci_test: CITest | None = None,
                     variables: list[str] | None = None) -> list[Finding]:
    """Variables of `baseline` (or those of them in `variables`) whose Markov condition fails on
    `newest`, each with the non-descendant it now depends on most (given its baseline parents) as `src`.

    One check makes a test per judged variable, each at the test's alpha divided by their number
    (Bonferroni, for the KDE test): a check on calm rows raises a false alarm with probability about
    alpha however many variables it judges (at alpha per variable, a check every few seconds would
    page someone every 100/(number of variables) checks)."""
    test = ci_test or KDEMITest()
    test = test.kde if isinstance(test, AutoTest) else test   # evidence in bits, as markov_violations judges
    dag = baseline.dag_extension()
    sets = {v: _markov_sets(dag, v) for v in baseline.nodes if variables is None or v in variables}
    tested = [v for v, (_, others) in sets.items() if others]
    if isinstance(test, KDEMITest) and test.threshold is None and len(tested) > 1:
        test = KDEMITest(estimator=test.estimator, alpha=test.alpha / len(tested), n_null=test.n_null,
                         seed=test.seed, local_null=test.local_null, points=test.points)
    violations = baseline.markov_violations(newest, ci_test=test)
    violations = violations[violations.violated & violations.variable.isin(tested)]
    found = []
    if violations.empty:
        return found
    ds = Dataset(newest[baseline.nodes].reset_index(drop=True), [v for v in baseline.nodes if v in baseline.discrete])
    for row in violations.itertuples():
        v = row.variable
        parents, others = sets[v]
        bits = {o: test.test(ds, v, o, parents).bits for o in others}
        src = max(bits, key=bits.get)
        found.append(Finding("markov_violation", src, v, float(row.bits), float(row.threshold), {
            "rows": len(newest), "parents": parents, "tests": len(tested), "alpha_per_test": getattr(test, "alpha", None),
            "bits_by_non_descendant": {o: round(b, 4) for o, b in bits.items()}}))
    return found


def _markov_sets(dag: nx.DiGraph, v: str) -> tuple[list[str], list[str]]:
    """`v`'s parents, and the non-descendants the Markov condition says it is independent of given them."""
    parents = set(dag.predecessors(v))
    return sorted(parents), sorted(set(dag.nodes) - nx.descendants(dag, v) - parents - {v})


def edge_changes(baseline: CausalModel, newer: CausalModel, min_bits: float = MIN_BITS, band_bits: float = 0.05,
                 band_ratio: float = 1.0) -> list[Finding]:
    """Edges of at least `min_bits` that appeared or disappeared between `baseline` and `newer`, and
    strengths that moved by more than `band_bits` and by more than a factor 2**band_ratio (both, so
    that neither noise on a weak edge nor a small change of a strong one is an anomaly). An edge is
    named in the baseline's direction where it has one, so a re-orientation is not a new anomaly."""
    base = {frozenset((e.src, e.dst)): e for e in baseline.edges()}
    new = {frozenset((e.src, e.dst)): e for e in newer.edges()}
    found = [Finding("edge_appeared", *_ends(e), e.strength, min_bits, {"strength_bits": e.strength})
             for p, e in new.items() if p not in base and e.strength >= min_bits]
    found += [Finding("edge_disappeared", *_ends(e), e.strength, min_bits, {"baseline_strength_bits": e.strength})
              for p, e in base.items() if p not in new and e.strength >= min_bits]
    for p in base.keys() & new.keys():
        b, n = base[p].strength, new[p].strength
        ratio = abs(math.log2(max(n, 1e-9) / max(b, 1e-9)))
        if abs(n - b) > band_bits and ratio > band_ratio:
            found.append(Finding("strength_changed", *_ends(base[p]), abs(n - b), band_bits,
                                 {"baseline_strength_bits": b, "strength_bits": n, "log2_ratio": round(ratio, 3)}))
    return sorted(found, key=lambda f: f.key)


def _ends(e) -> tuple[str, str]:
    """An edge's (src, dst): its direction, or name order when it has none."""
    return (e.src, e.dst) if e.directed else tuple(sorted((e.src, e.dst)))
