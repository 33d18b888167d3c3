"""Dependency anomalies: where newest data or a newer model departs from a baseline causal model.

A `markov_violation` is a variable (`dst`) whose Markov condition fails on the newest rows: it depends
on a non-descendant (`src`) beyond its parents, so the baseline's independence no longer holds; a
`mechanism_changed` is a variable whose distribution given its causes moved between the baseline's rows
and the newest (`src` is TIME); `edge_appeared`, `edge_disappeared` and `strength_changed` compare the
baseline's edges with a newer one's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import pandas as pd
from scipy import stats

from causewatch.analytics.causal.ci import AutoTest, CIResult, CITest, Dataset, KDEMITest
from causewatch.analytics.causal.model import CausalModel

KINDS = ("markov_violation", "mechanism_changed", "edge_appeared", "edge_disappeared", "strength_changed")
ROW_KINDS = ("markov_violation", "mechanism_changed")   # judged on a model update's newest rows
MIN_BITS = 0.1   # an edge weaker than this appearing or disappearing is noise near the test's threshold
# A Markov violation's bits must pass the null's threshold by this factor: a dependence barely past it
# is one the baseline's rows held too weakly to be learnt (a latent cause, as the machine's speed
# shared by two regions), seen in calm runs check after check at 1.01-1.08 times the threshold.
MIN_RATIO = 1.25
# A continuous variable's mechanism change must move its mean given its causes by this many standard
# deviations of its baseline residuals (the typical task moved by more than its usual spread): a smaller
# shift, however sure on a few hundred autocorrelated rows, was the machine's own wander in live runs.
MIN_EFFECT = 1.0
TIME = "(time)"  # a mechanism change's source: the window a row comes from (CD-NOD's surrogate variable)
SUPPORT_MARGIN = 0.1   # a cause's baseline range widened by this share of it on each side: still its support
MIN_WITHIN = 10   # fewer newest rows than this in the support, beside rows beyond it: the window test is skipped


@dataclass(frozen=True)
class Finding:
    """One departure. `score` and `threshold` are the test's own (bits); `evidence` says on what."""
    kind: str
    src: str
    dst: str
    score: float
    threshold: float
    evidence: dict = field(default_factory=dict, compare=False)
    sure: bool = field(default=False, compare=False)   # found at alpha**k too (changed_mechanisms' `looks`)

    @property
    def key(self) -> tuple[str, str, str]:
        return self.kind, self.src, self.dst


def new_dependencies(baseline: CausalModel, newest: pd.DataFrame, ci_test: CITest | None = None,
                     variables: list[str] | None = None, before: pd.DataFrame | None = None) -> list[Finding]:
    """Variables of `baseline` (or those of them in `variables`) whose Markov condition fails on
    `newest`, each with the non-descendant it now depends on surest (given its baseline parents) as `src`.
    One test per judged variable, Bonferroni over them (_per_test: at alpha per variable, a check
    every few seconds would page someone every 100/(number of variables) checks). With `before` (rows
    of the baseline's window), a variable whose condition fails there too, at alpha itself, is left
    out: the dependency is not new, the baseline's graph missed it (near-deterministic relations, as a
    task's CPU time and its main region's time, hide an input's edges from PC)."""
    dag = baseline.dag_extension()
    sets = {v: _markov_sets(dag, v) for v in baseline.nodes if variables is None or v in variables}
    tested = [v for v, (_, others) in sets.items() if others]
    test = _per_test(ci_test, len(tested))
    violations = baseline.markov_violations(newest, ci_test=test)
    violations = violations[violations.violated & (violations.stat >= MIN_RATIO * violations.threshold)
                            & violations.variable.isin(tested)]
    if not violations.empty and before is not None and len(before):
        already = baseline.markov_violations(before, ci_test=_per_test(ci_test, 1))
        violations = violations[~violations.variable.isin(already.variable[already.violated])]
    found = []
    if violations.empty:
        return found
    ds = Dataset(newest[baseline.nodes].reset_index(drop=True), [v for v in baseline.nodes if v in baseline.discrete])
    for row in violations.itertuples():
        v = row.variable
        parents, others = sets[v]
        # named by the surest dependence, not the most bits: on a few dozen rows a many-level
        # code_phase has the largest estimate under independence, and was named in most demo alarms
        tests = {o: test.test(ds, v, o, parents) for o in others}
        src = max(tests, key=lambda o: tests[o].margin)
        found.append(Finding("markov_violation", src, v, float(row.bits), float(row.threshold), {
            "rows": len(newest), "parents": parents, "tests": len(tested),
            "alpha_per_test": getattr(test, "alpha", None),
            "bits_by_non_descendant": {o: round(r.bits, 4) for o, r in tests.items()},
            "margin_by_non_descendant": {o: round(r.margin, 2) for o, r in tests.items()}}))
    return found


def changed_mechanisms(baseline: CausalModel, before: pd.DataFrame, newest: pd.DataFrame,
                       ci_test: CITest | None = None, given: list[str] = (), looks: int = 1,
                       min_effect: float = MIN_EFFECT) -> list[Finding]:
    """Variables of `baseline` (all but those in `given`) whose mechanism changed between
    `before` (rows of the baseline's window) and `newest`: each dependent on the window a row comes
    from (a binary surrogate, as CD-NOD tests a time index: Huang et al. 2020, JMLR 21) given its
    directed baseline parents and the variables in `given` (the task parameters: a change of the
    workload's mix is not a change of the system). Undirected neighbours are left out of the
    conditioning set, as one of them may be the variable's child, and a child hides the change: in
    the demo, task time given its CPU wait held under a CPU hog (hog tasks wait longer and last
    longer, so the two windows barely overlap given the wait), while the wait itself had quadrupled.
    Newest rows whose continuous causes lie outside the baseline rows' support are judged apart, by
    _beyond (there the window test sees a change wherever the causes moved). Bonferroni over the
    variables tested, as new_dependencies, and over the two parts where a variable has both. With
    `looks` k > 1, each finding is tested again at alpha**k (per test): one such test is as rare on
    calm rows as k checks in a row at alpha, so a finding that passes it (`sure`) needs no further
    look to be raised. A continuous variable's finding needs its mean given its causes moved by
    `min_effect` baseline residual sds (_effect): a change of its noise alone, as a new cause
    independent of the old ones adds, is left to the Markov and edge kinds."""
    judged = [v for v in baseline.nodes if v not in given]
    test = _per_test(ci_test, len(judged))
    cols = list(baseline.nodes)
    discrete = [v for v in cols if v in baseline.discrete]
    found = []
    for v in judged:
        causes = sorted({e.src for e in baseline.edges() if e.directed and e.dst == v} | set(given) & set(cols))
        out = _outside(before, newest, v, causes, discrete)
        inside, beyond = newest[~out], newest[out]
        fit = _fit(before, beyond, v, causes, discrete) if out.any() else None   # v is continuous there
        parts = ([(_within(before, inside, v, causes, discrete), inside, None)]
                 if len(inside) >= (MIN_WITHIN if out.any() else 1) else []) \
            + ([(_beyond(fit), beyond, fit)] if out.any() else [])
        part_test = test if len(parts) < 2 else _with_alpha(test, getattr(test, "alpha", 0.01) / 2)
        for judge, rows, fitted in parts:
            seen = judge(part_test, looks)
            effect = None if seen is None or v in discrete else \
                _effect(fitted or _fit(before, rows, v, causes, discrete))
            if seen is not None and (effect is None or effect >= min_effect):
                score, threshold, evidence = seen
                found.append(Finding("mechanism_changed", TIME, v, score, threshold, {
                    "rows_before": len(before), "rows": len(newest), "given": causes, "tests": len(judged),
                    "alpha_per_test": getattr(test, "alpha", None),
                    "before": _typical(before[v], v in baseline.discrete),
                    "newest": _typical(newest[v], v in baseline.discrete),
                    # (clamped: a baseline without residual spread makes any move infinitely many sds)
                    **({} if effect is None else {"effect_sd": round(min(effect, 1e9), 2)}), **evidence},
                    evidence["sure"]))
                break
    return found


def _within(before, newest, v, causes, discrete):
    """The window test on the newest rows in the baseline's support: (score, threshold, evidence), or None."""
    cols = sorted({v, *causes})
    both = pd.concat([before[cols].assign(**{TIME: 0}), newest[cols].assign(**{TIME: 1})], ignore_index=True)
    ds = Dataset(both, [c for c in cols if c in discrete] + [TIME])

    def judge(test, looks):
        result = test.test(ds, TIME, v, causes)
        if result.independent:
            return None
        strict = _stricter(test, looks)
        return float(result.bits), float(result.threshold), {
            "sure": strict is not None and not strict.test(ds, TIME, v, causes).independent}
    return judge


def _outside(before: pd.DataFrame, newest: pd.DataFrame, v: str, causes: list[str], discrete: list[str]) -> pd.Series:
    """Newest rows with a continuous cause outside the baseline rows' [min, max] widened by SUPPORT_MARGIN
    of its range, and every discrete cause at a level the baseline has (none for a discrete `v`)."""
    cont = [c for c in causes if c not in discrete]
    out = pd.Series(False, index=newest.index)
    if v in discrete or not cont:
        return out
    lo, hi = before[cont].min(), before[cont].max()
    pad = (hi - lo) * SUPPORT_MARGIN
    out = ((newest[cont] < lo - pad) | (newest[cont] > hi + pad)).any(axis=1)
    for c in causes:
        if c in discrete:
            out &= newest[c].isin(set(before[c]))
    return out


def _beyond(fit):
    """Rows beyond the baseline's support, by v's least-squares fit on the baseline's rows (`_fit`'s): the
    mean of their residuals from it (_shift), a t-test against no shift: a change of f moves it, noise
    that grows with the causes only widens it. Score and threshold in bits of surprise, -log2 p against -log2 alpha,
    the score clear of it by MIN_RATIO (an extrapolation is surer of its own form than the rows are: a
    count that steps up the first time an input passes its largest yet, page faults on new memory, came
    at 1.05 times)."""
    t, df = _shift(*fit)
    p = float(2 * stats.t.sf(abs(t), df))

    def judge(test, looks):
        alpha = getattr(test, "alpha", 0.01)
        if p >= alpha ** MIN_RATIO:
            return None
        return -math.log2(max(p, 1e-300)), -math.log2(alpha), {
            "beyond_support": len(fit[3]), "sure": looks > 1 and p < alpha ** looks}
    return judge


def _fit(before, newest, v, causes, discrete) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """v's least-squares fit on `before` whose terms (_bases) have the least BIC (a fit with terms it does
    not need extrapolates their noise): its pseudo-inverse, its residuals, the newest rows' regressors
    and their residuals from it."""
    y = before[v].to_numpy(float)
    fits = []
    for x_before, x_newest in _bases(before, newest, causes, discrete):
        pinv = np.linalg.pinv(x_before)
        resid = y - x_before @ (pinv @ y)
        bic = len(y) * math.log(max(float(resid @ resid), 1e-300) / len(y)) + x_before.shape[1] * math.log(len(y))
        fits.append((bic, pinv, resid, x_newest))
    _, pinv, resid, x_newest = min(fits, key=lambda f: f[0])
    return pinv, resid, x_newest, newest[v].to_numpy(float) - x_newest @ (pinv @ y)


def _shift(pinv, resid, x_newest, new) -> tuple[float, int]:
    """The newest rows' mean residual from v's fit on the baseline (`_fit`'s four parts) over its standard
    error, and its degrees of freedom. The error counts the fit's own, shared by every extrapolated row,
    and the newest residuals' spread (their noise may grow with the causes)."""
    s2 = float(resid @ resid) / max(len(resid) - x_newest.shape[1], 1)
    centre = x_newest.mean(axis=0)
    spread = float(np.var(new, ddof=1)) if len(new) > 1 else s2
    se = math.sqrt(spread / len(new) + s2 * float(centre @ pinv @ pinv.T @ centre))
    return float(new.mean()) / max(se, 1e-300), max(len(new) - 1, 1)


def _effect(fit) -> float:
    """How far v's mean given its causes moved at the newest rows, in standard deviations of the baseline
    fit's residuals (`fit`, _fit's): the root mean square of the newest residuals' own fit on the same terms,
    f_newest - f_before where the newest rows are (a shift of the mean or of a slope; not of the noise),
    less what that fit takes from noise alone (rank/n of the newest residuals' variance about it). inf
    where the baseline's residuals are all 0 and the move is not."""
    _, resid, x_newest, new = fit
    coef, _, rank, _ = np.linalg.lstsq(x_newest, new, rcond=None)
    moved = x_newest @ coef
    noise = float(np.sum((new - moved) ** 2)) / max(len(new) - rank, 1)
    square, sd = max(float(np.mean(moved ** 2)) - rank * noise / len(new), 0.0), float(resid.std())
    return math.sqrt(square) / sd if sd > 0 else (math.inf if square > 0 else 0.0)


def _bases(before, newest, causes, discrete) -> list[tuple[np.ndarray, np.ndarray]]:
    """Both windows' regressors, eight ways: a constant, each continuous cause (scaled by the baseline's)
    and one indicator per baseline level of a discrete cause but its first; with their pairwise products,
    their squares, or both (linear terms and products extrapolate a sum or a product exactly); and each
    of those with the continuous terms again per level (a task kind's own cost per unit of size: a mix
    that shifts to the kind with the steeper one is no change of either)."""
    cont = [c for c in causes if c not in discrete]
    mean, sd = before[cont].mean(), before[cont].std().replace(0, 1.0)
    pairs = [(i, j) for i in range(len(cont)) for j in range(i + 1, len(cont))]
    levels = [(c, level) for c in causes if c in discrete for level in sorted(set(before[c]), key=str)[1:]]

    def terms(rows, products, squares, per_level):
        z = ((rows[cont] - mean) / sd).to_numpy(float)
        smooth = [*z.T, *(z[:, i] * z[:, j] for i, j in pairs if products),
                  *(z[:, i] ** 2 for i in range(len(cont)) if squares)]
        flags = [(rows[c] == level).to_numpy(float) for c, level in levels]
        cols = [np.ones(len(rows)), *smooth, *flags, *(f * t for f in flags for t in smooth if per_level)]
        return np.column_stack(cols)
    return [(terms(before, p, q, k), terms(newest, p, q, k)) for p in (False, True) for q in (False, True)
            for k in ((False, True) if levels and cont else (False,))]


def _typical(values: pd.Series, discrete: bool):
    """A window's typical value of a variable, for the evidence: the median, or the commonest level."""
    return str(values.mode().iloc[0]) if discrete else round(float(values.median()), 6)


def _per_test(ci_test: CITest | None, tests: int) -> CITest:
    """The test one check runs `tests` times: the KDE test (evidence in bits, as markov_violations
    judges) at its alpha divided by their number, so a check on calm rows raises a false alarm with
    probability about alpha however many variables it judges."""
    test = ci_test or KDEMITest()
    test = test.kde if isinstance(test, AutoTest) else test
    return _with_alpha(test, test.alpha / tests) if tests > 1 else test


def _stricter(test: CITest, looks: int) -> KDEMITest | None:
    """The per-test KDE test at alpha**looks (None for one look, or a test of fixed thresholds)."""
    if looks <= 1 or not isinstance(test, KDEMITest) or test.threshold is not None or test.estimator != "kde":
        return None
    return _with_alpha(test, test.alpha ** looks)


def _with_alpha(test: CITest, alpha: float) -> CITest:
    """The KDE test at another level (any other test as it is)."""
    if not isinstance(test, KDEMITest) or test.threshold is not None:
        return test
    return KDEMITest(estimator=test.estimator, alpha=alpha, n_null=test.n_null, seed=test.seed,
                     local_null=test.local_null, points=test.points)


def _markov_sets(dag: nx.DiGraph, v: str) -> tuple[list[str], list[str]]:
    """`v`'s parents, and the non-descendants the Markov condition says it is independent of given them."""
    parents = set(dag.predecessors(v))
    return sorted(parents), sorted(set(dag.nodes) - nx.descendants(dag, v) - parents - {v})


def edge_changes(baseline: CausalModel, newer: CausalModel, min_bits: float = MIN_BITS, band_bits: float = 0.05,
                 band_ratio: float = 1.0, given: tuple[str, ...] = ()) -> list[Finding]:
    """Edges of at least `min_bits` that appeared or disappeared between `baseline` and `newer`, and
    strengths that moved by more than `band_bits` and by more than a factor 2**band_ratio (both, so
    that neither noise on a weak edge nor a small change of a strong one is an anomaly). An edge is
    named in the baseline's direction where it has one, and a new edge by its ends in name order (its
    orientation in the evidence), so a re-orientation is not a new anomaly. An edge with an end in
    `given` (the task parameters) has no strength change: its mutual information moves with the
    parameter's spread, the workload's mix, whatever the mechanism does."""
    base = {frozenset((e.src, e.dst)): e for e in baseline.edges()}
    new = {frozenset((e.src, e.dst)): e for e in newer.edges()}
    found = [Finding("edge_appeared", *sorted(p), e.strength, min_bits,
                     {"strength_bits": e.strength, "oriented": f"{e.src} -> {e.dst}" if e.directed else None})
             for p, e in new.items() if p not in base and e.strength >= min_bits]
    found += [Finding("edge_disappeared", *_ends(e), e.strength, min_bits, {"baseline_strength_bits": e.strength})
              for p, e in base.items() if p not in new and e.strength >= min_bits]
    for p in (base.keys() & new.keys()) - {p for p in base if p & set(given)}:
        b, n = base[p].strength, new[p].strength
        ratio = abs(math.log2(max(n, 1e-9) / max(b, 1e-9)))
        if abs(n - b) > band_bits and ratio > band_ratio:
            found.append(Finding("strength_changed", *_ends(base[p]), abs(n - b), band_bits,
                                 {"baseline_strength_bits": b, "strength_bits": n, "log2_ratio": round(ratio, 3)}))
    return sorted(found, key=lambda f: f.key)


def separated(model: CausalModel, rows: pd.DataFrame, a: str, b: str, ci_test: CITest) -> bool | None:
    """Whether `model`'s separating set of `a` and `b` separates them on `rows`; None where it recorded
    none (background knowledge, or the sparse-cell rule, decided the pair) or `rows` lack its variables."""
    result = _separation(model, rows, a, b, ci_test)
    return None if result is None else result.independent


def _separation(model: CausalModel, rows: pd.DataFrame, a: str, b: str, ci_test: CITest) -> CIResult | None:
    """The test of a ⊥ b given `model`'s separating set of them on `rows` (None: as `separated`)."""
    given = model.sepsets.get(frozenset((a, b)))
    names = [a, b, *sorted(given or ())]
    if given is None or not set(names) <= set(rows.columns):
        return None
    ds = Dataset(rows[names].reset_index(drop=True), [v for v in names if v in model.discrete])
    return ci_test.test(ds, a, b, tuple(sorted(given)))


def shown_edges(found: list[Finding], baseline: CausalModel, newer: CausalModel, before: pd.DataFrame | None,
                recent: pd.DataFrame, ci_test: CITest) -> list[Finding]:
    """`found` less the appeared and disappeared edges the rows do not bear out: a new edge's ends must no
    longer be separated by the baseline's set on the `recent` rows, and still be on the baseline's
    (`before`); a lost edge's ends must be separated by the newer model's set on `recent`, and not on
    `before`. Not separated means clearly so, by MIN_RATIO, as a Markov violation: a dependence barely
    past the threshold came and went with the machine's speed, a latent cause of two task measures. A
    pair a model holds no set for counts as shown on its side. Otherwise the edge is a learner's flicker
    between two samples of the same tasks, not a change in them."""
    def shown(f: Finding) -> bool:
        model, apart_now = (baseline, False) if f.kind == "edge_appeared" else (newer, True)
        now = _separation(model, recent, f.src, f.dst, ci_test)
        then = None if before is None else _separation(model, before, f.src, f.dst, ci_test)
        return _bears(now, apart_now) and _bears(then, not apart_now)
    return [f for f in found if f.kind not in ("edge_appeared", "edge_disappeared") or shown(f)]


def _bears(result: CIResult | None, apart: bool) -> bool:
    """Whether a separation test bears out `apart` (independent) or its contrary (dependent by MIN_RATIO
    times the threshold at least); no test (None) bears out either."""
    if result is None:
        return True
    return result.independent if apart else not result.independent and result.stat >= MIN_RATIO * result.threshold


def one_line(kind: str, src: str, dst: str, score: float, threshold: float, evidence: dict) -> str:
    """A finding's evidence in one line, as an alert carries it (the full evidence: /api/anomalies)."""
    rows = f" on {evidence['rows']} rows" if "rows" in evidence else ""
    test = f"{score:.3f} bits > {threshold:.3f}{rows}"
    if kind == "markov_violation":
        return f"{dst} depends on {src} given its parents: {test}"
    if kind == "mechanism_changed":
        moved = (f" median {evidence['before']} -> {evidence['newest']}"
                 if "before" in evidence and "newest" in evidence else "")
        return f"{dst}{moved} given its causes: {test}"
    if kind == "strength_changed":
        return (f"{src} --- {dst} {evidence.get('baseline_strength_bits', 0):.3f} -> "
                f"{evidence.get('strength_bits', 0):.3f} bits (baseline -> newest)")
    verb = "appeared" if kind == "edge_appeared" else "disappeared"
    return f"edge {src} --- {dst} {verb}: {score:.3f} bits (at least {threshold:.3f})"


def _ends(e) -> tuple[str, str]:
    """An edge's (src, dst): its direction, or name order when it has none."""
    return (e.src, e.dst) if e.directed else tuple(sorted((e.src, e.dst)))
