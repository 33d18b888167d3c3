"""The PC-stable learner with background knowledge, information equivalences and incremental refits.

Adjacency search as in Colombo & Maathuis (2014, PC-stable: adjacency sets frozen per depth, so the
skeleton does not depend on the column order); v-structures by the majority rule; Meek's rules R1-R4;
information-equivalent variables (Lemeire et al. §6.2) keep the edge of least MDL complexity.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from itertools import combinations

import numpy as np
import pandas as pd
from threadpoolctl import ThreadpoolController

from causewatch.analytics.causal import mdl
from causewatch.analytics.causal.background import Background
from causewatch.analytics.causal.ci import AutoTest, CIResult, CITest, Dataset
from causewatch.analytics.causal.gsquare import combination_codes
from causewatch.analytics.causal.model import CausalModel
from causewatch.analytics.causal.strength import edge_strengths

ORIENTATIONS = ("majority", "conservative", "standard")
# An information equivalence needs I(x;y | s') > 0 by at least this many null sd: a deterministic
# relation is far above that, a chance rejection at alpha almost never is (Fisher-z: p < 3e-8).
EQUIVALENCE_MARGIN = 3.0
# Information equivalence comes from deterministic relations (Lemeire et al. §6.2): the two candidates
# must be a function of one another up to this share of unexplained variance. Without it a
# conditional test short of power given a descendant (LU: n and t_comp for l2m_op given c_op)
# made a non-deterministic pair look equivalent and kept the wrong edge.
DETERMINED_R2 = 0.99
# A discrete variable counts as a function of a set of discrete ones only with at least this many rows
# per level combination of the set on average (with one row per combination any variable is one).
MIN_ROWS_PER_CELL = 20
# A continuous variable is a linear function of two or more continuous ones (an accounting identity, as
# a short task's duration = CPU time + CPU wait) when one plane holds more than EXACT_SHARE of the rows to
# within EXACT_TOL of its sd: tight enough that near relations stay the test's (docs/causal-measured.md,
# "A variable determined by an identity").
EXACT_SHARE = 0.5
EXACT_TOL = 3e-3
EXACT_TRIES = 30   # random planes tried: enough to find an identity that most rows hold
# How many of an end's strongest neighbours are tried as the hidden strong cause (PCLearner.unmask).
UNMASK = 2
# Only an independence this close to the threshold (margin above -UNMASK_BAND null sd; at alpha 0.01
# a p-value below about 0.09) is checked for masking: a weak cause hidden by strong ones leaves its
# test near alpha, and a clear independence spared the check saves the tests that were half of a fit on
# linear and mixed data (docs/causal-measured.md, "PC-stable, orientation, unmasking").
UNMASK_BAND = 1.0


class PCError(ValueError):
    """Bad learner parameters or data."""


@functools.cache
def _blas_pools() -> ThreadpoolController:
    """The process's BLAS thread pools, found once: the search is a noticeable share of a small fit
    (docs/perf-log.md, "The BLAS pools' search")."""
    return ThreadpoolController()


def _pair(a: str, b: str) -> frozenset:
    return frozenset((a, b))


class PCLearner:
    """PC-stable causal structure learning; `fit(df)` returns self with the result in `model_`.

    Parameters
    ----------
    ci_test : a CITest (default AutoTest(): RCoT on mixed data, else the calibrated KDE MI test).
    max_depth : largest conditioning set tried.
    background : Background knowledge: forbidden pairs are never tested, required edges never
        removed, tiers orient edges; no orientation step introduces a directed cycle.
    discrete : names of discrete columns (non-numeric columns are discrete anyway).
    orientation : "majority" (an unshielded triple a–c–b is a collider when c lies in fewer than half
        of the separating sets of a and b found among the subsets of their adjacencies; exactly half
        leaves it unoriented), "conservative" (Ramsey et al. 2006: a collider when c is in none of
        them, unoriented when in some but not all) or "standard" (c not in the first separating set found).
    equivalences : detect information-equivalent variables and keep the simplest edge.
    unmask : before removing x – y for x ⊥ y | s, check that the independence is not a strong
        other neighbour of one end masking a weak dependence (see _masked).
    reuse_margin : in partial_fit, an earlier CI decision is reused when |margin| (its distance from
        the threshold in null standard deviations) is at least this and it was tested on at least
        half of today's rows; the others are re-tested. (Without the second rule a decision made on a
        model's first rows stood for every later version: docs/perf-log.md, "partial_fit's reuse rule".)
    max_rows : CI tests and equivalence checks see a seeded random sample of at most this many rows
        (None: all). The KDE test's null is tabulated up to 16,384 rows; beyond, rows add cost
        (kernel sums over every row, nulls simulated at that size) and power no decision needs.
        The model keeps every row (its data, submodels).
    """

    def __init__(self, ci_test: CITest | None = None, max_depth: int = 3, background: Background | None = None,
                 discrete: Iterable[str] = (), orientation: str = "majority", equivalences: bool = True,
                 reuse_margin: float = 2.0, unmask: bool = True, max_rows: int | None = 16384):
        self.ci_test = ci_test
        self.max_depth = max_depth
        self.background = background
        self.discrete = tuple(discrete)
        self.orientation = orientation
        self.equivalences = equivalences
        self.reuse_margin = reuse_margin
        self.unmask = unmask
        self.max_rows = max_rows

    # ---- public estimator API -------------------------------------------------------------------
    def fit(self, data: pd.DataFrame | Dataset) -> PCLearner:
        self._validate()
        self.df_ = data.df() if isinstance(data, Dataset) else data.reset_index(drop=True)
        self.data_ = data if isinstance(data, Dataset) else Dataset(self.df_, self.discrete)
        self._previous: dict = {}
        return self._run()

    def partial_fit(self, new_rows: pd.DataFrame, keep: int | None = None) -> PCLearner:
        """Append rows (then keep the newest `keep` of all: None, every one) and re-learn, re-testing only
        CI decisions that were close to their threshold."""
        if not hasattr(self, "data_"):
            return self.fit(new_rows)
        missing = set(self.df_.columns) - set(new_rows.columns)
        if missing:
            raise PCError(f"new rows lack the columns {sorted(missing)}")
        self.df_ = pd.concat([self.df_, new_rows[self.df_.columns]], ignore_index=True)
        if keep is not None and len(self.df_) > keep:
            self.df_ = self.df_.tail(keep).reset_index(drop=True)
        self.data_ = Dataset(self.df_, [n for n, d in zip(self.data_.names, self.data_.discrete) if d])
        self._previous = self.decisions_
        return self._run()

    # ---- the algorithm --------------------------------------------------------------------------
    def _validate(self):
        if self.orientation not in ORIENTATIONS:
            raise PCError(f"orientation {self.orientation!r} unknown; expected one of {', '.join(ORIENTATIONS)}")
        if self.max_depth < 0:
            raise PCError(f"max_depth must be >= 0, got {self.max_depth}")
        if self.max_rows is not None and self.max_rows < 2:
            raise PCError(f"max_rows must be at least 2 (or None for every row), got {self.max_rows}")
        if self.ci_test is None:
            self.ci_test = AutoTest()

    def _run(self) -> PCLearner:
        # One BLAS thread: the tests' matrices are small (rows x ~100), and a pool's idle threads
        # spin between calls: a 10-variable fit took 20 CPU-s with 2 threads on a busy 2-core machine, 0.9 with 1.
        with _blas_pools().limit(limits=1, user_api="blas"):
            return self._search()

    def _search(self) -> PCLearner:
        self.tested_ = self.data_.sample(self.max_rows)
        self.background_ = self.background or Background()
        self.background_.validate(self.data_.names)
        self.decisions_: dict = {}
        self.n_tests_ = 0
        self.n_reused_ = 0
        self.equivalences_: list[dict] = []
        self._functions: dict = {}
        adj = self._adjacency_search()
        arcs, undirected = self._orient(adj)
        # Strength is one quantity whatever the test: I(a; b) in bits, bounded by either end's entropy
        # (strength.py); the tests' own `bits` differ in kind (RCoT's canonical correlation is unbounded).
        self.strengths_ = edge_strengths(self.data_.values, self.data_.names, self.data_.discrete,
                                         [frozenset(a) for a in arcs] + [frozenset(p) for p in undirected])
        self.model_ = CausalModel.from_search(
            nodes=self.data_.names, arcs=arcs, undirected=undirected, strengths=self.strengths_,
            sepsets=self.sepsets_, equivalences=self.equivalences_,
            discrete=[n for n, d in zip(self.data_.names, self.data_.discrete) if d], data=self.df_)
        return self

    def _ci(self, x: str, y: str, z=()) -> CIResult:
        a, b = sorted((x, y))
        key = (a, b, frozenset(z))
        res = self.decisions_.get(key, (None,))[0]
        if res is None:
            res, rows = self._previous.get(key, (None, 0))
            if res is not None and abs(res.margin) >= self.reuse_margin and 2 * rows >= self.tested_.n:
                self.n_reused_ += 1
            else:
                before = self.ci_test.n_tests
                res, rows = self.ci_test.test(self.tested_, a, b, tuple(sorted(z))), self.tested_.n
                self.n_tests_ += self.ci_test.n_tests - before
            self.decisions_[key] = (res, rows)   # with the rows it was tested on
        return res

    def _adjacency_search(self) -> dict[str, set[str]]:
        names, bg = self.data_.names, self.background_
        adj = {v: {w for w in names if w != v and bg.adjacency_allowed(v, w)} for v in names}
        self.sepsets_: dict = {}
        self._excused: dict = {}  # kept edge of an equivalence -> partners whose conditioning is ignored
        for depth in range(self.max_depth + 1):
            frozen = {v: set(adj[v]) for v in names}  # PC-stable: conditioning sets come from here
            if all(len(frozen[v]) - 1 < depth for v in names):
                break
            for x in names:
                for y in sorted(frozen[x]):
                    if y in adj[x] and not bg.is_required(x, y):
                        self._test_edge(adj, frozen, x, y, depth)
        return adj

    def _test_edge(self, adj, frozen, x, y, depth):
        for s in combinations(sorted(frozen[x] - {y} - self.background_.outputs()), depth):
            res = self._ci(x, y, s)
            if not res.independent:
                continue
            if (self._excused.get(_pair(x, y), set()) & set(s) or self._determined_by(x, s) or self._determined_by(y, s)
                    or self._sparse(x, y, s)):
                continue
            kept = self._equivalence(adj, x, y, s) if self.equivalences and depth else None
            if kept is None and not (self.unmask and res.margin > -UNMASK_BAND and self._masked(frozen, x, y, s)):
                self._remove(adj, x, y, s)
                return

    def _sparse(self, x: str, y: str, s: tuple) -> bool:
        """Whether s has discrete columns that, with x's and y's where discrete, cut the tested rows into
        cells of fewer than MIN_ROWS_PER_CELL rows on average: an independence given them is a test
        without power, not a finding (Spirtes et al. 2000, §5.4.2: too few rows per degree of freedom)."""
        data = self.tested_
        if not any(data.discrete[data.index(c)] for c in s):
            return False
        cols = [data.index(c) for c in (x, y, *s) if data.discrete[data.index(c)]]
        key = ("cells", frozenset(cols))
        if key not in self._functions:
            cells = int(combination_codes(data.values[:, cols]).max()) + 1
            self._functions[key] = cells * MIN_ROWS_PER_CELL > data.n
        return self._functions[key]

    def _determined_by(self, v: str, s: tuple) -> bool:
        """Whether v is a function of two or more columns s: discrete v of discrete s (one value per level
        combination of s, with at least MIN_ROWS_PER_CELL rows per combination on average), or continuous
        v of continuous s by an exact linear identity (_identity). Then v ⊥ anything | s holds by
        construction and says nothing about v's edges (Lemeire et al. §6, deterministic relations):
        asia's either = tub OR lung lost either – xray and either – dysp to that, short tasks' cpu_seconds
        = duration − cpu_wait_seconds its causes. One determining variable is the information
        equivalence handled in _equivalence."""
        data = self.tested_
        cols = [data.index(c) for c in (v, *s)]
        if len(s) < 2:
            return False
        key = (v, frozenset(s))
        if key not in self._functions:
            if data.discrete[cols].all():
                cells = combination_codes(data.values[:, cols[1:]])
                n_cells = int(cells.max()) + 1
                pairs = combination_codes(np.column_stack([cells, data.values[:, cols[0]]]))
                self._functions[key] = int(pairs.max()) + 1 == n_cells and n_cells * MIN_ROWS_PER_CELL <= data.n
            else:
                self._functions[key] = not data.discrete[cols].any() and _identity(data.values[:, cols])
        return self._functions[key]

    def _masked(self, frozen, x, y, s) -> bool:
        """Whether x ⊥ y | s is a lack of power: given s and the UNMASK other neighbours h of y (or of x)
        most strongly dependent on it (marginally; of the 2·UNMASK strongest) that the other end is
        independent of given s, x and y are decisively dependent; or dependent at the test's level
        while some h shows the collider x → y ← h (x ⊥ h | s but not given s and y), unless every
        column is discrete.
        Strong other causes of y hide a weak one (LU: ops and f_clock hide c_op from t_comp)."""
        at_level = not self.tested_.discrete.all()
        for a, b in ((x, y), (y, x)):
            # (pairs the background keeps apart or requires are never tested, so they cannot serve)
            bg = self.background_
            pool = sorted((v for v in frozen[b] - {a} - set(s) - bg.outputs()
                           if bg.adjacency_allowed(a, v) and not bg.is_required(a, v) and not bg.is_required(v, b)),
                          key=lambda v: (-self._ci(v, b).bits, v))  # marginal: cached
            hidden = tuple(v for v in pool[:2 * UNMASK] if self._ci(a, v, s).independent)[:UNMASK]
            if not hidden:
                continue
            given_hidden = self._ci(a, b, (*s, *hidden))
            # a decisive dependence, or one at the level with the collider's signature (h depends on a
            # given b): at the level alone it kept false edges (docs/perf-log.md, "Figures once in the
            # causal code's comments"); not on all-discrete data, whose functions make colliders
            if given_hidden.margin >= EQUIVALENCE_MARGIN or (not given_hidden.independent and at_level and any(
                    not self._ci(a, h, (*s, b)).independent for h in hidden)):
                return True
        return False

    def _remove(self, adj, x, y, s):
        adj[x].discard(y)
        adj[y].discard(x)
        self.sepsets_[_pair(x, y)] = tuple(s)

    def _equivalence(self, adj, x, y, s):
        """Lemeire et al. Eq. 12: x and w ∈ s are information equivalent for y (or y and w for x) when
        I(x;y | s') > 0, I(x;y | s) = 0 and I(w;y | s' ∪ {x}) = 0 with s' = s \\ {w}. Keep the edge
        of least complexity; return the kept partner, or None when no equivalence holds or the
        x–y edge is the more complex one (it is then removed as usual). I(x;y | s') > 0 must be
        decisive (margin at least EQUIVALENCE_MARGIN): a chance rejection at level alpha makes two
        correlated variables look equivalent for an independent third, and its edge would stay."""
        df = None
        for target, other in ((y, x), (x, y)):
            for w in s:
                if w not in adj[target] or self.background_.is_required(w, target):
                    continue
                rest = tuple(v for v in s if v != w)
                if self._ci(other, target, rest).margin < EQUIVALENCE_MARGIN or \
                        not self._ci(w, target, rest + (other,)).independent:
                    continue
                df = self.tested_.df() if df is None else df
                disc = [n for n, d in zip(self.data_.names, self.data_.discrete) if d]
                if not (_determined(df, other, w, disc) or _determined(df, w, other, disc)):
                    continue
                costs = {v: mdl.relation_bits(df, target, (v,), disc) for v in (other, w)}
                keep = min((other, w), key=lambda v: (costs[v], v))
                drop = w if keep == other else other
                self.equivalences_.append({"target": target, "variables": sorted((other, w)), "kept": keep,
                                           "given": sorted(rest), "bits": {k: round(v, 3) for k, v in costs.items()}})
                self._excused.setdefault(_pair(keep, target), set()).add(drop)
                if drop == w:
                    self._remove(adj, w, target, rest + (other,))
                    return w
                return None
        return None

    # ---- orientation --------------------------------------------------------------------------
    def _orient(self, adj):
        pdag = _PDAG(adj, self.background_)
        for a, b in sorted(self.background_.required):
            pdag.orient(a, b)
        for p in sorted(pdag.undirected, key=sorted):
            forced = self.background_.forced(*sorted(p))
            if forced:
                pdag.orient(*forced)
        for a, c, b in self._colliders(adj):
            pdag.orient(a, c)
            pdag.orient(b, c)
        pdag.meek()
        return pdag.arcs, pdag.undirected

    def _colliders(self, adj):
        names = self.data_.names
        out = []
        self.ambiguous_ = []
        for c in names:
            for a, b in combinations(sorted(adj[c]), 2):
                # Pairs the background keeps apart were never tested: no evidence for a collider.
                if b in adj[a] or _pair(a, b) not in self.sepsets_:
                    continue
                share = self._sepset_share(adj, a, b, c)
                cut = 0.0 if self.orientation == "conservative" else 0.5
                if share < cut or share == 0:
                    out.append((a, c, b))
                elif share == cut or (self.orientation == "conservative" and share < 1):
                    self.ambiguous_.append((a, c, b))
        return out

    def _sepset_share(self, adj, a, b, c) -> float:
        """Fraction of the separating sets of a and b that contain c."""
        sep = self.sepsets_.get(_pair(a, b), ())
        if self.orientation == "standard":
            return 1.0 if c in sep else 0.0
        found = set()
        for side, other in ((a, b), (b, a)):
            pool = sorted(adj[side] - {other} - self.background_.outputs())
            for k in range(min(len(pool), self.max_depth) + 1):
                for s in combinations(pool, k):
                    if self._ci(side, other, s).independent:
                        found.add(frozenset(s))
        if not found:
            return 1.0 if c in sep else 0.0
        return sum(c in s for s in found) / len(found)


def _identity(values: np.ndarray) -> bool:
    """Whether column 0 is, on more than EXACT_SHARE of the rows, the same linear function of the others
    to within EXACT_TOL of its sd, and varies on those rows (a column constant on most rows is no identity).
    Robust to the rows off it (a task that blocked): planes through random rows (RANSAC), seeded."""
    y, n = values[:, 0], len(values)
    X = np.column_stack([np.ones(n), values[:, 1:]])
    tol = EXACT_TOL * y.std()
    if tol == 0 or n < 4 * X.shape[1]:
        return False
    rng = np.random.default_rng(0)
    for _ in range(EXACT_TRIES):
        rows = rng.choice(n, X.shape[1], replace=False)
        coef = np.linalg.lstsq(X[rows], y[rows], rcond=None)[0]
        on = np.abs(X @ coef - y) <= tol
        if on.mean() > EXACT_SHARE and np.ptp(y[on]) > tol:
            return True
    return False


def _determined(df: pd.DataFrame, a: str, b: str, discrete) -> bool:
    """Whether a is a function of b: a's values constant within b's levels (b discrete), else the
    MDL curve b -> a leaving at most 1 - DETERMINED_R2 of a's variance."""
    y = df[a].to_numpy(float)
    var = float(y.var())
    if var == 0:
        return True
    if b in discrete or df[b].nunique() <= 2:
        rss = float(((y - df.groupby(b)[a].transform("mean").to_numpy(float)) ** 2).sum())
    else:
        rss = mdl.fit_curve(df[b].to_numpy(float), y).rss
    return rss <= (1 - DETERMINED_R2) * var * len(y)


class _PDAG:
    """A partially directed graph that refuses orientations closing a directed cycle or breaking the
    background knowledge."""

    def __init__(self, adj, background: Background):
        self.adj = {v: set(ws) for v, ws in adj.items()}
        self.undirected = {_pair(v, w) for v, ws in adj.items() for w in ws}
        self.arcs: set[tuple[str, str]] = set()
        self.bg = background

    def children(self, v):
        return {b for a, b in self.arcs if a == v}

    def _reaches(self, src, dst) -> bool:
        seen, stack = {src}, [src]
        while stack:
            for w in self.children(stack.pop()):
                if w == dst:
                    return True
                if w not in seen:
                    seen.add(w)
                    stack.append(w)
        return False

    def orient(self, a, b) -> bool:
        p = _pair(a, b)
        if p not in self.undirected or not self.bg.orientation_allowed(a, b) or self._reaches(b, a):
            return False
        self.undirected.discard(p)
        self.arcs.add((a, b))
        return True

    def is_und(self, a, b):
        return _pair(a, b) in self.undirected

    def meek(self):
        changed = True
        while changed:
            changed = False
            for p in sorted(self.undirected, key=sorted):
                a, b = sorted(p)
                for u, v in ((a, b), (b, a)):
                    if _pair(u, v) in self.undirected and self._meek_rule(u, v) and self.orient(u, v):
                        changed = True

    def _meek_rule(self, a, b) -> bool:
        """Whether Meek's R1-R4 orient the undirected a – b as a -> b."""
        adj = self.adj
        parents_a = {u for u, w in self.arcs if w == a}
        # R1: c -> a – b with c, b non-adjacent.
        if any(b not in adj[c] for c in parents_a):
            return True
        # R2: a -> c -> b.
        if any((c, b) in self.arcs for c in self.children(a)):
            return True
        parents_b = {u for u, w in self.arcs if w == b}
        und_a = {c for c in adj[a] if self.is_und(a, c)}
        # R3: a – c -> b, a – d -> b, c and d non-adjacent.
        cands = sorted(und_a & parents_b)
        if any(d not in adj[c] for c, d in combinations(cands, 2)):
            return True
        # R4: a – d, d -> c -> b, a adjacent to c, d and b non-adjacent.
        for c in parents_b & adj[a]:
            if any((d, c) in self.arcs and d not in adj[b] for d in und_a):
                return True
        return False
