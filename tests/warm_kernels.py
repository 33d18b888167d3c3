"""Compile the numba kernels a daemon runs into the checkout's cache (numba's files beside the sources),
as a deployed daemon's first hour leaves them: the fork server's warm-up, then small learns with a
conditioning set on a chain, continuous and mixed, by AutoTest (the API's learn: RCoT, G²) and by the KDE
test (the causal job's, whose kernels run in parallel), and RCoT's p-value by Lindsay-Pilla-Basak (which
it takes only near the threshold). A test of a daemon's steady state runs this first: in a fresh clone its
processes would otherwise compile them (an API worker's own memory was 124 MB there, against 80 allowed)."""

import numpy as np
import pandas as pd

import causewatch.daemon.preload  # noqa: F401  (its warm-up: RCoT, G², a fuzzy membership)
from causewatch.analytics.causal import KDEMITest, PCLearner, make_ci_test
from causewatch.analytics.causal.rcot import chi2_mixture_sf

rng = np.random.default_rng(0)
n = rng.integers(2_000, 40_000, 300)
cpu = n * 1e-6 * rng.uniform(0.9, 1.1, 300)
chain = pd.DataFrame({"n": n, "cpu_seconds": cpu, "duration": cpu + rng.exponential(0.001, 300),
                      "kind": rng.integers(0, 3, 300)})
for test in (make_ci_test("auto"), KDEMITest()):
    PCLearner(ci_test=test, max_depth=1).fit(chain[["n", "cpu_seconds", "duration"]])
    PCLearner(ci_test=test, max_depth=1, discrete=["kind"]).fit(chain)
chi2_mixture_sf(np.array([3.0, 2.0, 1.0, 0.5, 0.25]), 4.0)
