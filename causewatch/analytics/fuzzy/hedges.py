"""Fuzzy hedges (modifiers) as FuzzyJ defines them, applied to sets of either mode's algebra.

Pointwise hedges map membership degrees; norm and slightly need the whole set (its height).
"""

from __future__ import annotations

import numpy as np


def intensify(mu: np.ndarray) -> np.ndarray:
    """Zadeh's contrast intensification: 2 mu^2 up to 0.5, 1 - 2 (1 - mu)^2 above."""
    mu = np.asarray(mu, dtype=float)
    return np.where(mu <= 0.5, 2.0 * mu * mu, 1.0 - 2.0 * (1.0 - mu) ** 2)


# name -> (degree map, whether FuzzyJ expands the set before mapping). `not` is linear in mu, so
# the point list needs no extra points.
POINTWISE = {
    "not": (lambda mu: 1.0 - mu, False),
    "very": (lambda mu: mu ** 2, True),
    "extremely": (lambda mu: mu ** 3, True),
    "somewhat": (np.sqrt, True),
    "more_or_less": (np.cbrt, True),
    "plus": (lambda mu: mu ** 1.25, True),
    "intensify": (intensify, True),
}
HEDGES = (*POINTWISE, "norm", "slightly")


def norm(a):
    """Scale the set so that its highest point has degree 1 (an empty set stays empty)."""
    h = a.height()
    return a if h <= 0 else a.scale(1.0 / h)


def apply(name: str, a):
    """The set `name a`, for `a` a PointSet or ExactSet."""
    if name in POINTWISE:
        fn, expand = POINTWISE[name]
        return a.map(fn, expand)
    if name == "norm":
        return norm(a)
    if name == "slightly":
        # FuzzyJ SlightlyModifier: intensify(norm(plus A AND not very A)).
        return apply("intensify", norm(apply("plus", a).and_(apply("not", apply("very", a)))))
    raise ValueError(f"unknown hedge {name!r}; expected one of {', '.join(HEDGES)}")
