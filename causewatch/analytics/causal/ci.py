"""Conditional independence tests as objects: KDE mutual information, Fisher-z, G², d-separation.

`test(data, x, y, z) -> CIResult(stat, threshold, independent, bits, margin)`, cached per
(x, y, z, data version); `n_tests` counts the tests actually computed (cache misses).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Iterable, Sequence

import networkx as nx
import numpy as np
import pandas as pd
from scipy import special

from causewatch.analytics.causal import entropy, gaussian
from causewatch.analytics.causal.gsquare import Counter
from causewatch.analytics.causal.kde_null import evaluation_rows, null_moments
from causewatch.analytics.causal.rcot import RCoT


class CIError(ValueError):
    """Bad input to a CI test: an unknown column, a bad parameter."""


@dataclasses.dataclass(frozen=True)
class CIResult:
    stat: float            # the statistic in the test's own units
    threshold: float       # independent when stat <= threshold
    independent: bool
    bits: float            # the test's own dependence in bits (edge strength is strength.py's, not this)
    margin: float          # (stat - threshold) in null standard deviations: how safe the decision is


class Dataset:
    """A table for CI tests: float columns, discrete flags, and a content version (hash)."""

    def __init__(self, df: pd.DataFrame, discrete: Iterable[str] = ()):
        discrete = set(discrete)
        unknown = discrete - set(df.columns)
        if unknown:
            raise CIError(f"discrete columns {sorted(unknown)} are not in the data (columns: {list(df.columns)})")
        self.names = [str(c) for c in df.columns]
        self.discrete = np.array([c in discrete or not _numeric(df[c]) for c in df.columns], dtype=bool)
        cols = []
        for c, disc in zip(df.columns, self.discrete):
            col = df[c]
            cols.append(entropy.encode_discrete(col.astype(str).to_numpy()) if disc and not _numeric(col)
                        else col.to_numpy(dtype=np.float64))
        self.values = np.column_stack(cols) if cols else np.empty((len(df), 0))
        if not np.isfinite(self.values).all():
            bad = [n for n, ok in zip(self.names, np.isfinite(self.values).all(axis=0)) if not ok]
            raise CIError(f"columns {bad} hold NaN or infinite values; drop or impute those rows first")
        self._index = {n: i for i, n in enumerate(self.names)}
        h = hashlib.blake2b(self.values.tobytes(), digest_size=12)
        h.update(repr((self.names, self.discrete.tolist())).encode())
        self.version = h.hexdigest()

    @property
    def n(self) -> int:
        return self.values.shape[0]

    def index(self, name: str) -> int:
        try:
            return self._index[name]
        except KeyError:
            raise CIError(f"no column {name!r}; columns are {self.names}") from None

    def df(self) -> pd.DataFrame:
        return pd.DataFrame(self.values, columns=self.names)

    def sample(self, max_rows: int | None, seed: int = 0) -> Dataset:
        """This table, or a seeded random subset of `max_rows` of its rows (in their order) when it has
        more: the rows with the smallest keys, a key being a fixed hash of the row's index. Appending
        rows then replaces a matching share of the sample only, so partial_fit's decisions stay reusable."""
        if max_rows is None or self.n <= max_rows:
            return self
        rows = np.sort(np.argpartition(_row_keys(self.n, seed), max_rows)[:max_rows])
        return Dataset(pd.DataFrame(self.values[rows], columns=self.names),
                       [n for n, d in zip(self.names, self.discrete) if d])


def _row_keys(n: int, seed: int) -> np.ndarray:
    """splitmix64 of each row index (plus the seed): a pseudo-random key per row that never changes."""
    z = (np.arange(n, dtype=np.uint64) + np.uint64(seed)) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _numeric(col: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)


class CITest:
    """Base: caching by (data version, {x, y}, z) and the count of computed tests."""

    name = "ci"

    def __init__(self):
        self.cache: dict = {}
        self.n_tests = 0

    def test(self, data: Dataset, x: str, y: str, z: Sequence[str] = ()) -> CIResult:
        a, b = sorted((x, y))
        key = (data.version, a, b, frozenset(z))
        hit = self.cache.get(key)
        if hit is None:
            for name in (a, b, *z):
                data.index(name)
            hit = self._compute(data, a, b, tuple(sorted(z)))
            self.cache[key] = hit
            self.n_tests += 1
        return hit

    def _compute(self, data: Dataset, x: str, y: str, z: tuple[str, ...]) -> CIResult:
        raise NotImplementedError


# Levels of AutoTest when none is given: 0.05 on all-discrete data, where G²'s misses, not false edges,
# were the errors; 0.01 on continuous and mixed data, and 0.03 for RCoT, whose p-values are uniform under
# independence (docs/perf-log.md, "Figures once in the causal code's comments").
DEFAULT_ALPHA = 0.01
DISCRETE_ALPHA = 0.05
RCOT_ALPHA = 0.03


def _z_margin(p: float, alpha: float) -> float:
    """Distance between a p-value and alpha on the normal quantile scale (positive = dependent)."""
    p = min(max(p, 1e-300), 1.0)
    return float(special.ndtri(alpha) - special.ndtri(p))  # isf(p) - isf(alpha), without scipy.stats' overhead


# With the Gaussian-copula look at alpha, the whole KDE value is tested at this share of alpha:
# nonlinear dependences are found far above any of these thresholds, and on linear data every
# extra false rejection of the KDE look is an edge that Fisher-z does not have.
KDE_LOOK_SHARE = 0.1
# Given z the Gaussian look counts only when the KDE value is not this many null sd below what
# the Gaussian part predicts (its value plus the null's bias): else linear partialling has left
# nonlinear confounding behind.
GAUSS_GATE = 3.0


class KDEMITest(CITest):
    """Conditional MI on kernel density estimates (causewatch.analytics.causal.entropy).

    estimator "kde" (default): two looks at each estimate. (1) The whole value against the
    (1 - KDE_LOOK_SHARE·alpha) quantile of a Gamma fitted to the estimator's null distribution on
    independent data of the same shape and size (normal scores for continuous columns, uniform
    codes for discrete ones), calibrated once per shape on a grid of quarter octaves of n and
    interpolated in log n; a conditional test that would reject is checked against `local_null`
    local permutations (Runge 2018: x shuffled among z-neighbours, evaluated at the statistic's
    points), whose mean shifts the threshold up by the smoothing leak. (2) At alpha, its
    Gaussian-copula part (partial correlation of the normal scores) against its exact chi-square
    null, counted given z only when the whole value does not contradict it: Fisher-z's own level,
    so on linear data the test has Fisher-z's power. Dependent when either look rejects: a level
    of at most 1.1·alpha (union bound; docs/causal-measured.md, "The two looks' shares"). With a discrete
    column there is no Gaussian look and the KDE look gets all of alpha. All-discrete tests use
    the chi-square null of G² = 2·n·ln2·I. Above `points` rows, statistics and nulls are evaluated
    at a seeded subset of that many points (the kernel sums still run over all rows): ~n/points
    times faster, noisier. estimator "lemeire": the papers' fixed thresholds, 0.4 bits between two
    continuous variables, 0.2 bits when x or y is discrete.
    """

    name = "kde-mi"

    def __init__(self, estimator: str = "kde", alpha: float = 0.01, n_null: int = 30, seed: int = 0,
                 threshold: float | None = None, local_null: int = 4, points: int = 2000):
        super().__init__()
        entropy.check_estimator(estimator)
        if not 0 < alpha < 1:
            raise CIError(f"alpha must lie in (0, 1), got {alpha}")
        self.estimator, self.alpha, self.n_null, self.seed, self.threshold = estimator, alpha, n_null, seed, threshold
        self.local_null, self.points = local_null, points
        self._prepared: dict[str, np.ndarray] = {}
        self._perms: dict[tuple, list[np.ndarray]] = {}
        self._counted: tuple = (None, None)

    def prepared(self, data: Dataset) -> np.ndarray:
        if data.version not in self._prepared:
            self._prepared = {data.version: entropy.prepare(data.values, data.discrete, self.estimator)}
        return self._prepared[data.version]

    def _compute(self, data, x, y, z):
        return self.block(data, [x], [y], z)

    def block(self, data: Dataset, xs, ys, zs=()) -> CIResult:
        """The test for blocks of columns, I(xs; ys | zs) (not cached: for Markov checks)."""
        idx = [data.index(v) for v in xs], [data.index(v) for v in ys], [data.index(v) for v in zs]
        lemeire = self.estimator == "lemeire" or self.threshold is not None
        cols = idx[0] + idx[1] + idx[2]
        if not lemeire and data.discrete[cols].all():
            return g2_result(self._counter(data), idx, self.alpha)
        rows = None if lemeire else evaluation_rows(data.n, self.points, self.seed)
        bits = entropy.cmi_bits(self.prepared(data), data.discrete, *idx, estimator=self.estimator, seed=self.seed,
                                rows=rows)
        if lemeire:
            thr = self.threshold if self.threshold is not None else (
                0.2 if data.discrete[idx[0] + idx[1]].any() else 0.4)
            return CIResult(bits, thr, bits <= thr, bits, (bits - thr) / 0.1)
        # Two looks at one estimate: the whole KDE value against its calibrated null, and its
        # Gaussian-copula part (the partial correlation of the normal scores, exact chi-square null)
        # at alpha -- at alpha/2 it lost borderline linear edges that Fisher-z keeps. Given z,
        # linear partialling leaves nonlinear confounding behind, so the Gaussian look only counts
        # when the KDE value agrees with it (not below it by more than the null's bias and 3 sd).
        mean, sd = null_moments(data.n, _shape(data, idx), self.n_null, self.seed, self.points)
        gauss, gbits, kde_alpha = -math.inf, 0.0, self.alpha
        if not data.discrete[cols].any():
            gauss, gbits = self._copula_margin(data, idx)
            kde_alpha = self.alpha * KDE_LOOK_SHARE
            if idx[2] and bits < gbits + mean - GAUSS_GATE * sd:
                gauss = -math.inf
        thr = gamma_quantile(mean, sd, 1 - kde_alpha)
        if idx[2] and bits > thr and gauss <= 0 and self.local_null:
            # Smoothing over z leaks x's and y's dependence on z into the estimate; a null from
            # rows permuted among z-neighbours carries the same leak, so shift the threshold by it.
            thr += self._local_shift(data, idx, bits - thr, mean, sd)
        margin = max((bits - thr) / max(sd, 1e-12), gauss)
        return CIResult(bits, thr, margin <= 0, bits, margin)

    def _copula_margin(self, data, idx) -> float:
        bits = entropy.gaussian_cmi_bits(self.prepared(data), *idx)
        df = len(idx[0]) * len(idx[1])
        if idx[2] and self.local_null and bits * 2 * data.n * math.log(2) > special.chdtri(df, self.alpha):
            bits = max(bits - self._gaussian_leak(data, idx, df), 0.0)
        g2 = 2 * data.n * math.log(2) * bits
        p = float(special.chdtrc(len(idx[0]) * len(idx[1]), g2))  # chi-square survival function
        return _z_margin(p, self.alpha), bits

    def _gaussian_leak(self, data, idx, df) -> float:
        """The Gaussian look's leak given z: linear partialling on normal scores leaves nonlinear
        confounding behind (Fig. 1: D and C both depend on B nonlinearly, D ⊥ C | B; docs/causal-measured.md,
        "The Gaussian look given z"). The mean of the partial-correlation bits
        over the local permutations, less their null mean df/(2·n·ln2), at least 0."""
        prep = self.prepared(data)
        values = [entropy.gaussian_cmi_bits(entropy.permuted(prep, idx[0], perm), *idx)
                  for perm in self._local_permutations(data, tuple(idx[2]))]
        return max(float(np.mean(values)) - df / (2 * data.n * math.log(2)), 0.0)

    def _local_shift(self, data, idx, excess, mean, sd) -> float:
        """The leak: mean of the estimate over `local_null` local permutations, minus the null mean
        (at least 0). Stops after the first permutation when the estimate's excess over the
        threshold beats that permutation's shift by 4 sd of a permutation value: the mean of all of
        them would move that far only if the others averaged 5 sd above the first (p ~ 1e-6).
        A permutation value is evaluated at the statistic's points, so its sd is the null's."""
        prep = self.prepared(data)
        rows = evaluation_rows(data.n, self.points, self.seed)
        values = []
        for perm in self._local_permutations(data, tuple(idx[2])):
            values.append(entropy.cmi_bits(prep, data.discrete, *idx, estimator=self.estimator, rows=rows,
                                           permutation=perm))
            if len(values) == 1 and excess > max(values[0] - mean, 0.0) + 4 * sd:
                break
        return max(float(np.mean(values)) - mean, 0.0)

    def _local_permutations(self, data, z) -> list[np.ndarray]:
        """The local permutations for conditioning set z (a neighbour search each), kept per data version."""
        key = (data.version, z)
        if key not in self._perms:
            if self._perms and next(iter(self._perms))[0] != data.version:
                self._perms = {}
            self._perms[key] = entropy.local_permutations(self.prepared(data), data.discrete, z, self.local_null,
                                                          seed=self.seed)
        return self._perms[key]

    def _counter(self, data: Dataset) -> Counter:
        """The contingency counter of this data version (continuous columns as zeros: never counted)."""
        if self._counted[0] != data.version:
            self._counted = (data.version, Counter(np.where(data.discrete, self.prepared(data), 0.0)))
        return self._counted[1]


# Counts: a chi-square p below this share of the level decides without permutations, since G²'s excess
# on sparse tables raises a null's rejections by far less than that (docs/perf-log.md, "G²'s excess").
FAR_BELOW = 0.1


def g2_result(counter: Counter, idx, alpha: float) -> CIResult:
    """The G² test of I(x; y | z) by counting (x, y, z: lists of the counter's column indices). The
    statistic is in bits, G² / (2·n·ln2); where a permutation p decides (sparse tables), the bits of
    the G² whose chi-square p that is, so that stat <= threshold stays the decision."""
    x, y, z = (tuple(int(c) for c in cols) for cols in idx)
    p, g2, df, permuted = counter.p_value(x, y, z, floor=alpha * FAR_BELOW)
    scale = 2 * counter.codes.shape[0] * math.log(2)
    stat, thr = (float(special.chdtri(df, p)) if permuted else g2), float(special.chdtri(df, alpha))
    return CIResult(stat / scale, thr / scale, stat <= thr, g2 / scale, _z_margin(p, alpha))


def _shape(data: Dataset, idx) -> tuple:
    """What the null distribution depends on: per block, 0 for a continuous column or its cardinality."""
    def kinds(cols):
        return tuple(sorted(int(np.unique(data.values[:, c]).size) if data.discrete[c] else 0 for c in cols))
    kx, ky = kinds(idx[0]), kinds(idx[1])
    return (*sorted((kx, ky)), kinds(idx[2]))


def gamma_quantile(mean: float, sd: float, q: float) -> float:
    """Quantile q of the Gamma distribution with this mean and sd (the null is right-skewed, ≥ 0-ish)."""
    if sd <= 0:
        return mean
    if mean <= 0:
        return mean + float(special.ndtri(q)) * sd
    k = (mean / sd) ** 2
    return float(special.gammaincinv(k, q) * sd * sd / mean)  # stats.gamma.ppf(q, k, scale=sd²/mean)


class FisherZTest(CITest):
    """Partial correlation with Fisher's z transform (the linear-Gaussian baseline)."""

    name = "fisher-z"

    def __init__(self, alpha: float = 0.01):
        super().__init__()
        self.alpha = alpha
        self._corr: dict[str, np.ndarray] = {}

    def _compute(self, data, x, y, z):
        if data.version not in self._corr:
            with np.errstate(invalid="ignore", divide="ignore"):
                c = np.corrcoef(data.values, rowvar=False)
            self._corr = {data.version: np.nan_to_num(np.atleast_2d(c))}
        cols = [data.index(x), data.index(y)] + [data.index(v) for v in z]
        prec = np.linalg.pinv(self._corr[data.version][np.ix_(cols, cols)])
        denom = math.sqrt(abs(prec[0, 0] * prec[1, 1])) or 1e-300
        r = float(np.clip(-prec[0, 1] / denom, -0.999999, 0.999999))
        stat = math.sqrt(max(data.n - len(z) - 3, 1)) * abs(math.atanh(r))
        thr = -float(special.ndtri(self.alpha / 2))   # the normal's isf
        return CIResult(stat, thr, stat <= thr, -0.5 * math.log2(1 - r * r), stat - thr)


class GSquareTest(CITest):
    """G² likelihood-ratio test on counts (statistic in bits, G² / (2·n·ln2)); continuous columns are
    cut at `bins` quantiles first."""

    name = "g2"

    def __init__(self, alpha: float = 0.01, bins: int = 4):
        super().__init__()
        self.alpha, self.bins = alpha, bins
        self._counted: tuple = (None, None)

    def _compute(self, data, x, y, z):
        if self._counted[0] != data.version:
            codes = [col if disc else pd.qcut(col, self.bins, labels=False, duplicates="drop")
                     for col, disc in zip(data.values.T, data.discrete)]
            self._counted = (data.version, Counter.from_codes(np.column_stack(codes)))
        return g2_result(self._counted[1], ([data.index(x)], [data.index(y)], [data.index(v) for v in z]), self.alpha)


# RCoT computes the Lindsay-Pilla-Basak p-value only when the two-moment gamma's p-value is within
# this factor of alpha; farther out the decision cannot change, as the two stay within a small factor of
# each other and both fall with the statistic (docs/perf-log.md, "RCoT's p-values").
LPB_REACH = 10.0


class RCoTTest(CITest):
    """The randomized conditional correlation test (causewatch.analytics.causal.rcot) on normal scores
    of the continuous columns and codes of the discrete ones. The statistic is 1 − p against 1 − alpha;
    bits are the Gaussian MI of the residuals' strongest canonical pair."""

    name = "rcot"

    def __init__(self, alpha: float = 0.01, seed: int = 0):
        super().__init__()
        self.alpha, self.seed = alpha, seed
        self._rcot: tuple = (None, None)

    def _compute(self, data, x, y, z):
        if self._rcot[0] != data.version:
            # Normal scores of continuous columns (CI is invariant under monotone maps): on skewed
            # columns (t_comp ~ n³ in the LU model) raw values leave one kernel width for all scales.
            self._rcot = (data.version, RCoT(entropy.prepare(data.values, data.discrete), data.discrete,
                                                  seed=self.seed))
        _, p, r2 = self._rcot[1].pvalue(data.index(x), data.index(y), tuple(data.index(v) for v in z),
                                        near=(self.alpha / LPB_REACH, min(self.alpha * LPB_REACH, 1.0)))
        return CIResult(1 - p, 1 - self.alpha, p > self.alpha, -0.5 * math.log2(1 - r2), _z_margin(p, self.alpha))


class AutoTest(CITest):
    """The default: per data set, the test that won bench/causal.py for its kind. All-discrete: the
    KDE test's counting G² (F1 at G²'s, faster than causal-learn's). All-continuous data that pass as
    jointly Gaussian (gaussian.looks_gaussian): Fisher-z, exact there and far cheaper than RCoT.
    Otherwise RCoT: it beat the KDE test on every continuous and mixed family of the bench, at a
    fraction of its time (docs/perf-log.md, "AutoTest's choice per kind"). Without an `alpha`, the
    level is chosen per kind too: DISCRETE_ALPHA on
    all-discrete data, RCOT_ALPHA where RCoT is picked, DEFAULT_ALPHA otherwise (`kde`, which markov
    checks use, is at DEFAULT_ALPHA)."""

    name = "auto"

    def __init__(self, alpha: float | None = None, seed: int = 0):
        super().__init__()
        self.alpha, self.seed = alpha, seed
        level = DEFAULT_ALPHA if alpha is None else alpha
        self.kde = KDEMITest(alpha=level, seed=seed)
        self.rcot = RCoTTest(alpha=RCOT_ALPHA if alpha is None else alpha, seed=seed)
        self.fisher_z = FisherZTest(alpha=level)
        self.counting = KDEMITest(alpha=DISCRETE_ALPHA if alpha is None else alpha, seed=seed)
        self._chosen: tuple = (None, None)

    def chosen(self, data: Dataset) -> CITest:
        if self._chosen[0] != data.version:
            if data.discrete.all():
                test = self.counting
            elif not data.discrete.any() and gaussian.looks_gaussian(data.values):
                test = self.fisher_z
            else:
                test = self.rcot
            self._chosen = (data.version, test)
        return self._chosen[1]

    def _compute(self, data, x, y, z):
        return self.chosen(data).test(data, x, y, z)


class DSeparationOracle(CITest):
    """The answers a faithful distribution of `dag` would give (for tests of the learner)."""

    name = "d-separation"

    def __init__(self, dag: nx.DiGraph):
        super().__init__()
        self.dag = dag

    def _compute(self, data, x, y, z):
        sep = nx.is_d_separator(self.dag, {x}, {y}, set(z))
        return CIResult(0.0 if sep else 1.0, 0.5, sep, 0.0 if sep else 1.0, -math.inf if sep else math.inf)


def oracle_dataset(nodes: Iterable[str]) -> Dataset:
    """An empty table with these columns: what the d-separation oracle needs as `data`."""
    return Dataset(pd.DataFrame({v: np.zeros(1) for v in nodes}))


def make_ci_test(name: str, **params) -> CITest:
    """A CI test by name: "auto", "kde", "lemeire", "rcot", "fisher-z", "g2"."""
    if name in entropy.ESTIMATORS:
        return KDEMITest(estimator=name, **params)
    tests = {"auto": AutoTest, "rcot": RCoTTest, "fisher-z": FisherZTest, "g2": GSquareTest}
    if name not in tests:
        raise CIError(f"CI test {name!r} unknown; expected auto, kde, lemeire, rcot, fisher-z or g2")
    return tests[name](**params)
