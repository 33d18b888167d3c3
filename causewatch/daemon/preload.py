"""What the daemon's fork server loads before it forks the worker processes (worker.PRELOAD): the entry
points' registry and with it the analysis stack (pandas, scipy, numba, the analytics, the routes), then
a small causal learn and a fuzzy membership on made-up data, so numba's compiler is readied and the
kernels the API's `learn`, `query` and `bottlenecks` run are loaded (from numba's cache when there is
one), as are networkx's lazily built wrappers: a worker's first request finds them there.

The workers are forked from that process, so they share these pages instead of each loading its own
copy: the libraries are ~240 MB a process, and numba's first kernel alone ~50 MB (LLVM's set-up) and
a second of CPU. No kernel that runs in parallel is called here: its thread pool must not exist in a
process that forks. Last, it lets go of the code pages that importing and numba's compiler ran, which
the workers do not run (docs/memory.md).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from causewatch.analytics.causal import PCLearner, make_ci_test
from causewatch.analytics.fuzzy import Membership
from causewatch.daemon import (
    entrypoints,  # noqa: F401  (loaded to be shared, with all it imports)
    memory,
)

memory.arrow_from_malloc()   # the workers inherit both settings
memory.few_arenas()


def warm() -> None:
    """One fuzzy membership and two small PC learns: on continuous data AutoTest picks RCoT, on discrete
    data G² (their kernels); never the KDE test, whose kernels run in parallel."""
    Membership("triangle", (0.0, 1.0, 2.0))(np.linspace(0.0, 2.0, 5))
    rng = np.random.default_rng(0)
    size = rng.uniform(1.0, 100.0, 300)
    work = size ** 1.5 * rng.uniform(0.9, 1.1, 300)
    tasks = pd.DataFrame({"size": size, "instructions": work, "duration": work * 1e-3 + rng.exponential(0.01, 300)})
    PCLearner(ci_test=make_ci_test("auto"), max_depth=1).fit(tasks)
    kinds = pd.DataFrame({k: rng.integers(0, 3, 300) for k in "abc"})
    PCLearner(ci_test=make_ci_test("auto"), max_depth=1, discrete=list(kinds)).fit(kinds)


warm()
memory.drop_code_pages()   # the code run to get here, not what the workers run: they map what they use
