"""Membership functions of fuzzy sets in two modes, exact curves and FuzzyJ-compatible point lists
(S/Z: 9 points, Pi: 5 a side, flat beyond the ends), and the set algebra hedges build on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numba
import numpy as np

MODES = ("exact", "compatible")
# Number of parameters each shape takes; a Pi set takes (center, width) or (a, b, c, d).
SHAPES = {"s": (2,), "z": (2,), "pi": (2, 4), "triangle": (3,), "trapezoid": (4,), "linear": (2,),
          "gaussian": (2,)}
S_POINTS = 9          # FuzzyJ SFuzzySet / ZFuzzySet
PI_SIDE_POINTS = 5    # FuzzyJ PIFuzzySet: SFunction(5) + ZFunction(5)
GAUSS_POINTS = 33     # FuzzyJ has no Gaussian set; sampled over mean +- 4 sigma
DELTA_Y = 0.1         # FuzzyJ ModifierFunction default precision (DELTA_Y) for expanding sets


class MembershipError(ValueError):
    """A fuzzy set given wrong parameters; the message names the shape and what it needs."""


def s_curve(x, a: float, b: float) -> np.ndarray:
    """Zadeh's S function: 0 up to a, 1 from b, quadratic halves meeting at 0.5 at (a+b)/2."""
    x = np.asarray(x, dtype=float)
    if b <= a:
        return (x > a).astype(float)
    t = np.clip((x - a) / (b - a), 0.0, 1.0)
    return np.where(t <= 0.5, 2.0 * t * t, 1.0 - 2.0 * (1.0 - t) ** 2)


def z_curve(x, a: float, b: float) -> np.ndarray:
    """The mirror of the S function: 1 up to a, 0 from b."""
    return 1.0 - s_curve(x, a, b)


def pi_curve(x, a: float, b: float, c: float, d: float) -> np.ndarray:
    """S on [a, b], 1 on [b, c], Z on [c, d]."""
    return s_curve(x, a, b) * z_curve(x, c, d)


def gaussian(x, mean: float, sigma: float) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    return np.exp(-0.5 * ((x - mean) / sigma) ** 2)


def trapezoid_reference(x, a: float, b: float, c: float, d: float) -> np.ndarray:
    """Plain-Python trapezoid (a triangle when b == c): the reference for the numba kernel."""
    out = []
    for v in np.asarray(x, dtype=float).ravel():
        if v != v:
            out.append(np.nan)
        elif v < a or v > d or (v == d and c < d):
            out.append(0.0)
        elif v < b:
            out.append((v - a) / (b - a))
        elif v <= c:
            out.append(1.0)
        else:
            out.append((d - v) / (d - c))
    return np.array(out)


@numba.njit(cache=True, nogil=True)
def _trapezoid_kernel(x, a, b, c, d):
    # One pass, no temporaries: the hot path of triangle and trapezoid sets in both modes.
    out = np.empty(x.size)
    for i in range(x.size):
        v = x[i]
        if v != v:
            out[i] = np.nan
        elif v < a or v > d or (v == d and c < d):
            out[i] = 0.0
        elif v < b:
            out[i] = (v - a) / (b - a)
        elif v <= c:
            out[i] = 1.0
        else:
            out[i] = (d - v) / (d - c)
    return out


def trapezoid(x, a: float, b: float, c: float, d: float) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    return _trapezoid_kernel(np.ascontiguousarray(x).ravel(), a, b, c, d).reshape(x.shape)


def _corners(shape: str, p: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Corner points of the piecewise-linear shapes (identical in both modes)."""
    if shape == "triangle":
        return np.array(p, float), np.array([0.0, 1.0, 0.0])
    if shape == "trapezoid":
        return np.array(p, float), np.array([0.0, 1.0, 1.0, 0.0])
    a, b = p  # linear: 0 at a rising to 1 at b; a > b makes it falling
    return (np.array([a, b]), np.array([0.0, 1.0])) if a <= b else (np.array([b, a]), np.array([1.0, 0.0]))


def _pi_params(p: tuple) -> tuple[float, float, float, float]:
    if len(p) == 2:
        center, width = p
        return center - width, center, center, center + width
    return p


@dataclass(frozen=True)
class Membership:
    """One fuzzy set: `shape` (one of SHAPES) and its `params`; call it with values and a mode."""
    shape: str
    params: tuple

    def __post_init__(self):
        if self.shape not in SHAPES:
            raise MembershipError(f"unknown shape {self.shape!r}; expected one of {', '.join(SHAPES)}")
        params = tuple(float(v) for v in self.params)
        object.__setattr__(self, "params", params)
        if len(params) not in SHAPES[self.shape]:
            want = " or ".join(str(n) for n in SHAPES[self.shape])
            raise MembershipError(f"shape {self.shape!r} takes {want} parameters, got {len(params)}: {params}")
        if self.shape == "pi" and len(params) == 2 and params[1] <= 0:
            raise MembershipError(f"pi set needs a positive width, got {params[1]}")
        corners = _pi_params(params) if self.shape == "pi" else params
        if self.shape not in ("linear", "gaussian") and any(np.diff(corners) < 0):
            raise MembershipError(f"shape {self.shape!r} needs non-decreasing parameters, got {params}")
        if self.shape == "gaussian" and params[1] <= 0:
            raise MembershipError(f"gaussian set needs a positive sigma, got {params[1]}")

    def exact(self, x) -> np.ndarray:
        p = self.params
        if self.shape == "s":
            return s_curve(x, *p)
        if self.shape == "z":
            return z_curve(x, *p)
        if self.shape == "pi":
            return pi_curve(x, *_pi_params(p))
        if self.shape == "gaussian":
            return gaussian(x, *p)
        if self.shape in ("triangle", "trapezoid"):
            return trapezoid(x, *p) if len(p) == 4 else trapezoid(x, p[0], p[1], p[1], p[2])
        xs, ys = _corners(self.shape, p)
        return np.interp(np.asarray(x, dtype=float), xs, ys)

    def points(self) -> "PointSet":
        """The FuzzyJ-compatible point list of this set."""
        p = self.params
        if self.shape in ("s", "z"):
            xs = np.linspace(p[0], p[1], S_POINTS)
        elif self.shape == "pi":
            a, b, c, d = _pi_params(p)
            left, right = np.linspace(a, b, PI_SIDE_POINTS), np.linspace(c, d, PI_SIDE_POINTS)
            xs = np.concatenate([left, right[1:]]) if b == c else np.concatenate([left, right])
        elif self.shape == "gaussian":
            xs = np.linspace(p[0] - 4 * p[1], p[0] + 4 * p[1], GAUSS_POINTS)
        else:
            return PointSet(*_corners(self.shape, p))
        return PointSet(xs, self.exact(xs))

    def __call__(self, x, mode: str = "exact") -> np.ndarray:
        if mode == "exact":
            return self.exact(x)
        if mode == "compatible":
            # Corner-point sets are the same in both modes; the exact kernel is the faster path.
            return self.exact(x) if self.shape in ("triangle", "trapezoid", "linear") else self.points()(x)
        raise MembershipError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")

    def knots(self) -> np.ndarray:
        """The x values where the curve changes shape (to lay grids for set heights)."""
        if self.shape == "gaussian":
            return np.array([self.params[0] - 4 * self.params[1], self.params[0], self.params[0] + 4 * self.params[1]])
        return np.array(_pi_params(self.params) if self.shape == "pi" else self.params, float)

    def as_set(self, mode: str):
        """This set as an element of the mode's set algebra (PointSet or ExactSet)."""
        if mode == "compatible":
            return self.points()
        if mode == "exact":
            lo, hi = self.knots().min(), self.knots().max()
            pad = max(hi - lo, 1e-12)
            grid = np.union1d(np.linspace(lo - pad, hi + pad, 2049), self.knots())
            return ExactSet(self.exact, grid)
        raise MembershipError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")


class PointSet:
    """A FuzzyJ fuzzy set: points (xs ascending, ys in [0, 1]) joined by lines, flat beyond the ends."""

    def __init__(self, xs, ys):
        self.xs, self.ys = np.asarray(xs, float), np.asarray(ys, float)

    def __call__(self, x) -> np.ndarray:
        return np.interp(np.asarray(x, dtype=float), self.xs, self.ys)

    def expand(self, delta_y: float = DELTA_Y) -> "PointSet":
        """FuzzyJ's expandSet: split each sloped segment so that y changes by at most delta_y per piece."""
        dy = np.abs(np.diff(self.ys))
        # Vertical segments are not split (FuzzyJ skips them too).
        divs = np.where(np.diff(self.xs) > 0, np.maximum(np.ceil(dy / delta_y - 1e-9), 1), 1).astype(int)
        starts = np.repeat(np.arange(len(divs)), divs)
        frac = (np.arange(divs.sum()) - np.repeat(np.cumsum(divs) - divs, divs)) / np.repeat(divs, divs)
        xs = self.xs[starts] + frac * np.diff(self.xs)[starts]
        ys = self.ys[starts] + frac * np.diff(self.ys)[starts]
        return PointSet(np.append(xs, self.xs[-1]), np.append(ys, self.ys[-1]))

    def map(self, fn: Callable[[np.ndarray], np.ndarray], expand: bool = True) -> "PointSet":
        base = self.expand() if expand else self
        return PointSet(base.xs, fn(base.ys))

    def _combine(self, other: "PointSet", op) -> "PointSet":
        xs = np.union1d(self.xs, other.xs)
        d = self(xs) - other(xs)
        # Where the two lines cross inside a segment, the min/max has a corner: add it.
        cross = np.flatnonzero(d[:-1] * d[1:] < 0)
        xc = xs[cross] + (xs[cross + 1] - xs[cross]) * d[cross] / (d[cross] - d[cross + 1])
        xs = np.union1d(xs, xc)
        return PointSet(xs, op(self(xs), other(xs)))

    def and_(self, other: "PointSet") -> "PointSet":
        return self._combine(other, np.minimum)

    def or_(self, other: "PointSet") -> "PointSet":
        return self._combine(other, np.maximum)

    def height(self) -> float:
        return float(self.ys.max())

    def scale(self, k: float) -> "PointSet":
        return PointSet(self.xs, np.clip(self.ys * k, 0.0, 1.0))


class ExactSet:
    """A fuzzy set as a function of x, with a grid of x on which its height (supremum) is taken."""

    def __init__(self, fn: Callable[[np.ndarray], np.ndarray], grid: np.ndarray):
        self.fn, self.grid = fn, grid

    def __call__(self, x) -> np.ndarray:
        return self.fn(np.asarray(x, dtype=float))

    def map(self, fn: Callable[[np.ndarray], np.ndarray], expand: bool = True) -> "ExactSet":
        inner = self.fn
        return ExactSet(lambda x: fn(inner(x)), self.grid)

    def _combine(self, other: "ExactSet", op) -> "ExactSet":
        f, g = self.fn, other.fn
        return ExactSet(lambda x: op(f(x), g(x)), np.union1d(self.grid, other.grid))

    def and_(self, other: "ExactSet") -> "ExactSet":
        return self._combine(other, np.minimum)

    def or_(self, other: "ExactSet") -> "ExactSet":
        return self._combine(other, np.maximum)

    def height(self) -> float:
        """Supremum over the grid, refined between the neighbours of the best grid point."""
        y = self.fn(self.grid)
        i = int(np.argmax(y))
        fine = np.linspace(self.grid[max(i - 1, 0)], self.grid[min(i + 1, len(self.grid) - 1)], 2049)
        return float(max(y[i], self.fn(fine).max()))

    def scale(self, k: float) -> "ExactSet":
        inner = self.fn
        return ExactSet(lambda x: np.clip(inner(x) * k, 0.0, 1.0), self.grid)
