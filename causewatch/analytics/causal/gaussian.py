"""Whether a table looks jointly Gaussian, by each column's D'Agostino–Pearson test and Mardia's (1970)
multivariate skewness and kurtosis: on such data partial correlation is an exact CI test.

On the raw values, not normal scores: a rank transform's small errors, in the near-null directions of
collinear columns, made Gaussian data fail (p 1e-14). The check decides AutoTest's choice; its level
is a rate of calling Gaussian data "not Gaussian", which only costs speed (the kernel test is then
used), while a nonlinear table passing it would cost edges.
"""

from __future__ import annotations

import numpy as np
from scipy import special

# Mardia's skewness is taken on at most this many rows (evenly spread), at O(rows · columns³).
SKEWNESS_ROWS = 1000
# Fewer rows per column than this and the tests' asymptotic nulls are not trusted: "not Gaussian".
MIN_ROWS_PER_COLUMN = 10


def mardia_pvalues(values: np.ndarray) -> tuple[float, float]:
    """(skewness p, kurtosis p) of Mardia's tests on the rows of `values` (n x d, n > d). Kurtosis on
    every row; skewness on SKEWNESS_ROWS rows whitened on their own (whitening a subset by the whole
    table's moments inflates its statistic's variance: p 0.0003 on Gaussian rows)."""
    n = len(values)
    y = _whitened(values)
    d = y.shape[1]
    kurtosis = ((y * y).sum(axis=1) ** 2).mean()   # of squared Mahalanobis norms
    kurtosis_z = (kurtosis - d * (d + 2)) / np.sqrt(8 * d * (d + 2) / n)
    y = _whitened(values[np.linspace(0, n - 1, min(n, SKEWNESS_ROWS)).astype(int)])
    m = len(y)
    # b1 = mean over row pairs of (y_i·y_j)³ = Σ_abc (mean_i y_ia·y_ib·y_ic)², a slice of a at a time.
    skewness = sum(float((((y * y[:, a:a + 1]).T @ y / m) ** 2).sum()) for a in range(y.shape[1]))
    skew_p = float(special.chdtrc(d * (d + 1) * (d + 2) / 6, m * skewness / 6))
    return skew_p, float(special.erfc(abs(kurtosis_z) / np.sqrt(2)))


def normaltest_pvalues(values: np.ndarray) -> np.ndarray:
    """Each column's D'Agostino–Pearson p-value (scipy.stats.normaltest's: skewness and kurtosis tests,
    their squares summed, chi-square on 2 degrees of freedom; D'Agostino, Belanger & D'Agostino 1990),
    without loading scipy.stats; n >= 8 rows (MIN_ROWS_PER_COLUMN keeps it so)."""
    n = float(len(values))
    centred = values - values.mean(axis=0)
    m2 = (centred ** 2).mean(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        b1 = (centred ** 3).mean(axis=0) / m2 ** 1.5
        b2 = (centred ** 4).mean(axis=0) / m2 ** 2
    # skewness test
    y = b1 * np.sqrt((n + 1) * (n + 3) / (6.0 * (n - 2)))
    beta2 = 3.0 * (n * n + 27 * n - 70) * (n + 1) * (n + 3) / ((n - 2.0) * (n + 5) * (n + 7) * (n + 9))
    w2 = -1 + np.sqrt(2 * (beta2 - 1))
    delta, alpha = 1 / np.sqrt(0.5 * np.log(w2)), np.sqrt(2.0 / (w2 - 1))
    y = np.where(y == 0, 1.0, y)
    z_skew = delta * np.log(y / alpha + np.sqrt((y / alpha) ** 2 + 1))
    # kurtosis test
    mean = 3.0 * (n - 1) / (n + 1)
    var = 24.0 * n * (n - 2) * (n - 3) / ((n + 1) * (n + 1.0) * (n + 3) * (n + 5))
    x = (b2 - mean) / np.sqrt(var)
    sqrt_beta1 = (6.0 * (n * n - 5 * n + 2) / ((n + 7) * (n + 9))
                  * np.sqrt(6.0 * (n + 3) * (n + 5) / (n * (n - 2) * (n - 3))))
    a = 6.0 + 8.0 / sqrt_beta1 * (2.0 / sqrt_beta1 + np.sqrt(1 + 4.0 / sqrt_beta1 ** 2))
    denom = 1 + x * np.sqrt(2 / (a - 4.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        term2 = np.sign(denom) * np.where(denom == 0.0, np.nan, ((1 - 2.0 / a) / np.abs(denom)) ** (1 / 3))
    z_kurt = (1 - 2 / (9.0 * a) - term2) / np.sqrt(2 / (9.0 * a))
    return special.chdtrc(2, z_skew ** 2 + z_kurt ** 2)


def _whitened(rows: np.ndarray) -> np.ndarray:
    """The rows, centred and rotated and scaled to identity covariance (biased), in the span of their
    non-null principal directions."""
    x = rows - rows.mean(axis=0)
    lam, vec = np.linalg.eigh(x.T @ x / len(x))
    keep = lam > 1e-12 * lam.max()
    return x @ (vec[:, keep] / np.sqrt(lam[keep]))


def looks_gaussian(values: np.ndarray, alpha: float = 0.01) -> bool:
    """No column's marginal normality test (Bonferroni over the columns) nor either of Mardia's joint
    tests rejects at alpha / 3. The marginal tests see what the joint ones dilute: one nonlinear column
    uncorrelated with the others (docs/causal-measured.md, "Which test for which data")."""
    n, d = values.shape
    if d < 2 or n < MIN_ROWS_PER_COLUMN * d:
        return False
    marginal = float(np.min(normaltest_pvalues(values))) * d
    return min(*mardia_pvalues(values), marginal) > alpha / 3
