"""Curve fitting with a minimum-description-length choice among function classes (Lemeire et al. §7.2).

L(H) = #parameters·log2(n)/2 + 8·#operations (Eq. 15); L(D|H) = the Gaussian code length of the
residuals, (n/2)·log2(2πe·RSS/n): Eq. 16 states the same code up to the terms that depend on y's
units, which we keep so that choices do not change when y is rescaled.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import pandas as pd
from scipy import linalg

CLASSES = ("polynomial", "inverse", "power", "sqrt", "log", "step")
# Residual variance floor relative to var(y): an exact relation has finite, very short code length.
_REL_FLOOR = 1e-12


class MDLError(ValueError):
    """Bad input to a curve fit (empty data, unknown function class)."""


@dataclasses.dataclass
class Fit:
    """One fitted hypothesis and its description length in bits."""

    kind: str
    params: tuple
    n_params: int
    n_ops: int
    rss: float
    n: int
    model_bits: float
    data_bits: float
    formula: str
    predict: Callable[[np.ndarray], np.ndarray] = dataclasses.field(repr=False, compare=False)

    @property
    def bits(self) -> float:
        return self.model_bits + self.data_bits


def model_bits(n_params: int, n_ops: int, n: int) -> float:
    """Eq. 15 without its constant K: #parameters·log2(n)/2 + 8·#operations."""
    return n_params * math.log2(max(n, 2)) / 2 + 8 * n_ops


def data_bits(rss: float, n: int, var_y: float) -> float:
    """Code length of n Gaussian residuals with the maximum-likelihood variance RSS/n."""
    s2 = max(rss / n, _REL_FLOOR * max(var_y, 1e-300))
    return n / 2 * math.log2(2 * math.pi * math.e * s2)


def _g(v: float) -> str:
    return f"{v:.6g}"


def _make(kind, params, n_params, n_ops, x, y, predict, formula, resid=None) -> Fit:
    """The Fit of `predict` on (x, y); `resid`, y − predict(x), where the caller has it already."""
    resid = y - predict(x) if resid is None else resid
    rss = float(resid @ resid)
    n = len(y)
    return Fit(kind, tuple(float(p) for p in params), n_params, n_ops, rss, n,
               model_bits(n_params, n_ops, n), data_bits(rss, n, float(np.var(y))), formula, predict)


def _affine(feature: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares a, b of y = a + b·feature."""
    a_mat = np.column_stack([np.ones_like(feature), feature])
    (a, b), *_ = np.linalg.lstsq(a_mat, y, rcond=None)
    return a, b


def _polynomials(x, y, max_degree, var):
    """Least-squares polynomials of degree 0, 1, ... max_degree, a generator (the caller stops early),
    all from one QR of the Vandermonde matrix of standardised x, not a fit per degree. Each degree's
    residuals are the last one's less Q's next column times its share of y, not numpy's Polynomial
    objects evaluated per degree (docs/perf-log.md, "MDL's polynomials from one QR")."""
    mu, sd = float(np.mean(x)), float(np.std(x)) or 1.0
    q, r = np.linalg.qr(np.vander((x - mu) / sd, max_degree + 1, increasing=True))
    qy = q.T @ y
    to_raw = _unstandardise(mu, sd, max_degree)
    resid = y
    for degree in range(max_degree + 1):
        k = degree + 1
        std_coef = linalg.solve_triangular(r[:k, :k], qy[:k])
        coef = to_raw[:k, :k].T @ std_coef
        resid = resid - q[:, degree] * qy[degree]
        terms = [_g(coef[0])] + [f"{_g(c)}*{var}" + (f"^{j}" if j > 1 else "") for j, c in enumerate(coef[1:], 1)]
        n_ops = 3 * degree - 1 if degree else 0
        yield _make(f"poly{degree}", coef, degree + 1, n_ops, x, y,
                    lambda v, c=std_coef: np.polynomial.polynomial.polyval((v - mu) / sd, c), " + ".join(terms), resid)


def _unstandardise(mu: float, sd: float, degree: int) -> np.ndarray:
    """M with M[k, j] the coefficient of x^j in ((x − mu)/sd)^k: raw coefficients are M' times the
    standardised ones."""
    m = np.zeros((degree + 1, degree + 1))
    for k in range(degree + 1):
        for j in range(k + 1):
            m[k, j] = math.comb(k, j) * (-mu) ** (k - j) / sd ** k
    return m


def _fit_transform(x, y, kind, var):
    funcs = {"inverse": (lambda v: 1.0 / v, f"/{var}", 2), "sqrt": (np.sqrt, f"*sqrt({var})", 3),
             "log": (np.log, f"*log({var})", 3)}
    f, text, n_ops = funcs[kind]
    a, b = _affine(f(x), y)
    return _make(kind, (a, b), 2, n_ops, x, y, lambda v: a + b * f(v), f"{_g(a)} + {_g(b)}{text}")


def _affine_rss(features: np.ndarray, y: np.ndarray) -> np.ndarray:
    """RSS of the least-squares y = a + b·f for each row f of `features`, in closed form (inf where a
    row overflowed)."""
    fc = features - features.mean(axis=-1, keepdims=True)
    yc = y - y.mean()
    sxx, sxy = (fc * fc).sum(axis=-1), fc @ yc
    rss = yc @ yc - np.where(sxx > 0, sxy * sxy / np.where(sxx > 0, sxx, 1.0), 0.0)
    return np.where(np.isfinite(rss), rss, np.inf)


def _sign(v: float) -> float:
    """numpy's sign, with 0 taken as +1."""
    v = float(v)
    return float((v > 0) - (v < 0) + (v == 0))


def minimize_bounded(func: Callable[[float], float], lo: float, hi: float, xatol: float = 1e-5,
                     maxfun: int = 500) -> float:
    """The x in [lo, hi] at which `func` is least: Brent's bounded method, as scipy.optimize.minimize_scalar
    (method="bounded") runs it, step for step (ported: scipy.optimize loads ~16 MB more into each
    process that fits submodels, the daemon's workers among them)."""
    sqrt_eps, golden_mean = math.sqrt(2.2e-16), 0.5 * (3.0 - math.sqrt(5.0))
    a, b = lo, hi
    fulc = a + golden_mean * (b - a)
    nfc = xf = fulc
    rat = e = 0.0
    fx = func(xf)
    num = 1
    ffulc = fnfc = fx
    xm = 0.5 * (a + b)
    tol1 = sqrt_eps * abs(xf) + xatol / 3.0
    tol2 = 2.0 * tol1
    while abs(xf - xm) > tol2 - 0.5 * (b - a):
        golden = True
        if abs(e) > tol1:   # try a parabolic fit
            golden = False
            r = (xf - nfc) * (fx - ffulc)
            q = (xf - fulc) * (fx - fnfc)
            p = (xf - fulc) * q - (xf - nfc) * r
            q = 2.0 * (q - r)
            if q > 0.0:
                p = -p
            q = abs(q)
            r, e = e, rat
            if abs(p) < abs(0.5 * q * r) and q * (a - xf) < p < q * (b - xf):
                rat = (p + 0.0) / q
                x = xf + rat
                if (x - a) < tol2 or (b - x) < tol2:
                    rat = tol1 * _sign(xm - xf)
            else:
                golden = True
        if golden:
            e = a - xf if xf >= xm else b - xf
            rat = golden_mean * e
        x = xf + _sign(rat) * max(abs(rat), tol1)
        fu = func(x)
        num += 1
        if fu <= fx:
            if x >= xf:
                a = xf
            else:
                b = xf
            fulc, ffulc = nfc, fnfc
            nfc, fnfc = xf, fx
            xf, fx = x, fu
        else:
            if x < xf:
                a = x
            else:
                b = x
            if fu <= fnfc or nfc == xf:
                fulc, ffulc = nfc, fnfc
                nfc, fnfc = x, fu
            elif fu <= ffulc or fulc == xf or fulc == nfc:
                fulc, ffulc = x, fu
        xm = 0.5 * (a + b)
        tol1 = sqrt_eps * abs(xf) + xatol / 3.0
        tol2 = 2.0 * tol1
        if num >= maxfun:
            break
    return xf


def _fit_power(x, y, var):
    logx = np.log(x)
    grid = np.linspace(-3, 3, 61)
    with np.errstate(over="ignore", invalid="ignore"):
        c0 = grid[int(np.argmin(_affine_rss(np.exp(np.outer(grid, logx)), y)))]
        c = minimize_bounded(lambda c: float(_affine_rss(np.exp(c * logx)[None], y)[0]), c0 - 0.1, c0 + 0.1)
    a, b = _affine(x ** c, y)
    return _make("power", (a, b, c), 3, 3, x, y, lambda v: a + b * v ** c, f"{_g(a)} + {_g(b)}*{var}^{_g(c)}")


def _fit_step(x, y, var):
    order = np.argsort(x, kind="stable")
    xs, ys = x[order], y[order]
    n = len(ys)
    cs, cs2 = np.cumsum(ys), np.cumsum(ys * ys)
    k = np.arange(1, n)
    left = cs2[:-1] - cs[:-1] ** 2 / k
    right = (cs2[-1] - cs2[:-1]) - (cs[-1] - cs[:-1]) ** 2 / (n - k)
    cost = np.where(xs[1:] > xs[:-1], left + right, np.inf)  # split only between distinct x
    i = int(np.argmin(cost))
    t = (xs[i] + xs[i + 1]) / 2
    a, b = cs[i] / (i + 1), (cs[-1] - cs[i]) / (n - i - 1)
    return _make("step", (a, b, t), 3, 1, x, y, lambda v: np.where(v < t, a, b),
                 f"{_g(a)} if {var} < {_g(t)} else {_g(b)}")


def candidates(x, y, classes: Iterable[str] = CLASSES, max_degree: int = 8, var: str = "x") -> list[Fit]:
    """Every applicable hypothesis of the classes, best (shortest description) first.

    Polynomial degrees grow from 0 until the description length rises for two degrees in a row. Classes that need x > 0
    (inverse, power, log) or x ≥ 0 (sqrt) are skipped when x leaves that domain.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) != len(y) or len(x) < 3:
        raise MDLError(f"need at least 3 paired values, got {len(x)} x and {len(y)} y")
    unknown = set(classes) - set(CLASSES)
    if unknown:
        raise MDLError(f"unknown function classes {sorted(unknown)}; known: {', '.join(CLASSES)}")
    out: list[Fit] = []
    distinct = len(np.unique(x))
    if "polynomial" in classes:
        best, worse = None, 0
        for fit in _polynomials(x, y, min(max_degree, distinct - 1), var):
            out.append(fit)
            worse = worse + 1 if best is not None and fit.bits > best.bits else 0
            if worse == 2:  # one degree of look-ahead: odd/even-only polynomials skip a degree
                break
            best = fit if best is None or fit.bits < best.bits else best
    positive, nonneg = bool(np.all(x > 0)), bool(np.all(x >= 0))
    for kind in ("inverse", "log"):
        if kind in classes and positive:
            out.append(_fit_transform(x, y, kind, var))
    if "sqrt" in classes and nonneg:
        out.append(_fit_transform(x, y, "sqrt", var))
    if "power" in classes and positive and distinct > 3:
        out.append(_fit_power(x, y, var))
    if "step" in classes and distinct > 1:
        out.append(_fit_step(x, y, var))
    return sorted(out, key=lambda f: f.bits)


def fit_curve(x, y, classes: Iterable[str] = CLASSES, max_degree: int = 8, var: str = "x") -> Fit:
    """The hypothesis y = f(x) of least description length L(H) + L(D|H)."""
    return candidates(x, y, classes, max_degree, var)[0]


@dataclasses.dataclass
class Submodel:
    """X = f(parents): the chosen function (one curve per discrete-parent combination) and its bits."""

    target: str
    parents: tuple[str, ...]
    kind: str
    formula: str
    bits: float
    groups: int


def _group_keys(df: pd.DataFrame, discrete_parents: Sequence[str]):
    if not discrete_parents:
        return [((), df)]
    return list(df.groupby(list(discrete_parents), sort=True))


def _continuous_submodel(df, target, cont, disc, classes):
    groups = _group_keys(df, disc)
    n = len(df)
    if not cont:
        rss = sum(float(((g[target] - g[target].mean()) ** 2).sum()) for _, g in groups)
        bits = model_bits(len(groups), 0, n) + data_bits(rss, n, float(df[target].var(ddof=0)))
        text = (f"{target} = mean of {target} per ({', '.join(disc)})" if disc
                else f"{target} = {_g(df[target].mean())}")
        return Submodel(target, tuple(disc), "mean", text, bits, len(groups))
    if len(cont) > 1:
        return _several_submodel(df, target, cont, disc, groups, classes)
    # One curve per discrete combination; the function type (its operations) is counted once.
    best = None
    for cls in classes:
        fits = []
        for key, g in groups:
            if len(g) < 3:
                continue
            cand = [f for f in candidates(g[cont[0]], g[target], [cls], var=cont[0])]
            if not cand:
                break
            fits.append((key, cand[0]))
        else:
            if not fits:
                continue
            total = sum(f.bits - 8 * f.n_ops for _, f in fits) + 8 * max(f.n_ops for _, f in fits)
            if best is None or total < best[0]:
                best = (total, fits)
    if best is None:
        return _continuous_submodel(df, target, [], disc, classes)
    total, fits = best
    text = "; ".join((f"[{', '.join(map(str, k if isinstance(k, tuple) else (k,)))}] " if disc else "")
                     + f"{target} = {f.formula}" for k, f in fits)
    return Submodel(target, tuple(cont) + tuple(disc), fits[0][1].kind, text, total, len(fits))


def _several_submodel(df, target, cont, disc, groups, classes):
    """Several continuous parents: the shortest of a linear model, an additive model of one curve per
    parent, and (positive data) a product of powers, each fitted per discrete-parent combination."""
    best = None
    for kind, fit in (("linear", _linear_fit), ("additive", _additive_fit), ("product", _product_fit)):
        fits = [fit(g[cont].to_numpy(float), g[target].to_numpy(float), cont, target, classes) for _, g in groups]
        if any(f is None for f in fits):
            continue
        n_params, n_ops, rss = (sum(f[i] for f in fits) for i in range(3))
        bits = model_bits(n_params, n_ops, len(df)) + data_bits(rss, len(df), float(df[target].var(ddof=0)))
        if best is None or bits < best.bits:
            best = Submodel(target, tuple(cont) + tuple(disc), kind, "; ".join(f[3] for f in fits), bits, len(groups))
    return best


def _linear_fit(X, y, cont, target, classes):
    """(#parameters, #operations, RSS, formula) of y = a + sum b_j x_j."""
    a_mat = np.column_stack([np.ones(len(y)), X])
    coef, *_ = np.linalg.lstsq(a_mat, y, rcond=None)
    r = y - a_mat @ coef
    text = f"{target} = {_g(coef[0])} + " + " + ".join(f"{_g(b)}*{c}" for b, c in zip(coef[1:], cont))
    return len(cont) + 1, 2 * len(cont), float(r @ r), text


def _additive_fit(X, y, cont, target, classes, sweeps=5):
    """y = sum f_j(x_j), each f_j the curve of least description length on the partial residuals of
    the others (backfitting); the components' intercepts count as one parameter."""
    if len(y) < 3:
        return None
    parts = np.zeros_like(X)
    fits = [None] * len(cont)
    for _ in range(sweeps):
        for j in range(len(cont)):
            fits[j] = fit_curve(X[:, j], y - parts.sum(axis=1) + parts[:, j], classes, var=cont[j])
            parts[:, j] = fits[j].predict(X[:, j])
    r = y - parts.sum(axis=1)
    n_params = sum(f.n_params for f in fits) - (len(fits) - 1)
    n_ops = sum(f.n_ops for f in fits) + len(fits) - 1
    return n_params, n_ops, float(r @ r), f"{target} = " + " + ".join(f"({f.formula})" for f in fits)


def _product_fit(X, y, cont, target, classes):
    """y = a * prod x_j^b_j (least squares on logs), for positive data: how costs compose (n^3 flops
    times seconds per flop); its RSS is on y itself, like every other hypothesis."""
    if "power" not in classes or (X <= 0).any() or (y <= 0).any():
        return None
    a_mat = np.column_stack([np.ones(len(y)), np.log(X)])
    coef, *_ = np.linalg.lstsq(a_mat, np.log(y), rcond=None)
    r = y - np.exp(a_mat @ coef)
    text = f"{target} = {_g(math.exp(coef[0]))}" + "".join(f"*{c}^{_g(b)}" for b, c in zip(coef[1:], cont))
    return len(cont) + 1, 2 * len(cont), float(r @ r), text


def _discrete_submodel(df, target, parents):
    n = len(df)
    k = df[target].nunique()
    if parents:
        counts = df.groupby(list(parents) + [target], sort=True).size()
        parent_counts = counts.groupby(level=list(range(len(parents)))).transform("sum")
        cells = counts.groupby(level=list(range(len(parents)))).ngroups
    else:
        counts = df.groupby(target).size()
        parent_counts, cells = n, 1
    data = -float((counts * np.log2(counts / parent_counts)).sum())
    return Submodel(target, tuple(parents), "table",
                    f"P({target} | {', '.join(parents) or '∅'}): {cells * (k - 1)} probabilities",
                    model_bits(cells * (k - 1), 0, n) + data, cells)


def fit_submodel(df: pd.DataFrame, target: str, parents: Sequence[str], discrete: Iterable[str] = (),
                 classes: Iterable[str] = CLASSES) -> Submodel:
    """MDL regression of `target` on its parents (Lemeire et al. §7.2).

    Continuous target, one continuous parent: the best function class, one curve per combination of
    the discrete parents. Several continuous parents: per combination, the shortest of a linear
    model, an additive one (a curve per parent) and a product of powers. Discrete
    target: a conditional probability table (continuous parents cut at their quartiles).
    """
    discrete = set(discrete)
    parents = list(parents)
    if target in discrete:
        binned = df[[target] + parents].copy()
        for p in parents:
            if p not in discrete:
                binned[p] = pd.qcut(binned[p], 4, labels=False, duplicates="drop")
        return _discrete_submodel(binned, target, parents)
    cont = [p for p in parents if p not in discrete]
    disc = [p for p in parents if p in discrete]
    return _continuous_submodel(df, target, cont, disc, list(classes))


def relation_bits(df: pd.DataFrame, target: str, variables: Sequence[str], discrete: Iterable[str] = ()) -> float:
    """Description length of target = f(variables) on columns divided by their sd: how the learner
    ranks information-equivalent variables (the relation of least complexity is kept). Dividing
    makes the target's residual code the same for every candidate; not centring keeps positive
    data positive, so log, power and product fits stay available (t = ops·c/f is a product)."""
    discrete = set(discrete)
    cols = [target, *variables]
    std = df[cols].copy()
    for c in cols:
        if c not in discrete:
            std[c] = std[c] / (float(std[c].std(ddof=0)) or 1.0)
    return fit_submodel(std, target, variables, discrete).bits
