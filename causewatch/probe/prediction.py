"""Prediction intervals of probe predictions, log-normal: the timing noise of the probe's repeats and
of the kit's reference timings, plus the run-to-run spread of whole runs on the reference node.
Also the pooled ratio (wall per CPU second over a probe's blocks) with its standard error.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special


def relative_sd(values) -> float:
    """Sample sd over mean (0 for fewer than two values or a mean of zero)."""
    v = np.asarray(values, float)
    return float(v.std(ddof=1) / v.mean()) if len(v) > 1 and v.mean() > 0 else 0.0


def relative_se2(mean: float, sd: float, n: int) -> float:
    """Squared relative standard error of a mean of `n` timings (0 for a mean of nothing or zero)."""
    return (sd / mean) ** 2 / n if mean > 0 and n > 0 else 0.0


def ratio_se2(weights, ratios, rel_se2) -> float:
    """Squared relative standard error of P = sum w_i r_i / sum w_i, each r_i with its own (delta method)."""
    p = sum(w * r for w, r in zip(weights, ratios))
    if p <= 0:
        return 0.0
    return sum((w * r / p) ** 2 * v for w, r, v in zip(weights, ratios, rel_se2))


def pooled_ratio(numerators, denominators) -> tuple[float, float]:
    """R = sum y / sum x over blocks, and its squared relative standard error: the survey-sampling ratio
    estimator with the blocks as clusters. Adjacent blocks that share out one node's throttling (one
    gets the throttle the next escapes) scatter more than their sum, so the error is conservative."""
    y, x = np.asarray(numerators, float), np.asarray(denominators, float)
    if len(x) == 0 or x.sum() <= 0 or y.sum() <= 0:
        raise ValueError("a pooled ratio needs blocks with positive totals")
    r = y.sum() / x.sum()
    n = len(x)
    if n < 2:
        return float(r), 0.0
    return float(r), float(((y - r * x) ** 2).sum() / (n * (n - 1) * (x.mean() * r) ** 2))


def span_stretch(timings: list[dict]) -> tuple[float, float]:
    """Wall per CPU second of `kit.measure` blocks (their spans), pooled, and its squared relative
    standard error."""
    return pooled_ratio([t["span_seconds"] for t in timings], [t["span_cpu_seconds"] for t in timings])


def prediction_interval(centre: float, probe_se2: float, run_rel_sd: float, runs: int,
                        min_spread: float) -> tuple[float, float]:
    """95 % interval for one more whole run predicted at `centre`.

    Two independent parts on the log scale: the probe's estimate (normal, relative variance
    `probe_se2`) and a new run's deviation from the mean of the kit's `runs` reference runs
    (Student's t on runs - 1 degrees of freedom, relative sd `run_rel_sd`). Never narrower than
    +-min_spread: runs taken back to back at build time miss the drift a node shows over hours.
    """
    run_part = 0.0
    if runs > 1:
        run_part = (special.stdtrit(runs - 1, 0.975) * run_rel_sd) ** 2 * (1 + 1 / runs)
    half = max(math.sqrt(special.ndtri(0.975) ** 2 * probe_se2 + run_part), math.log1p(min_spread))
    return centre * math.exp(-half), centre * math.exp(half)
