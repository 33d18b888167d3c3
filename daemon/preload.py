"""What the daemon's fork server loads before it forks the worker processes (worker.PRELOAD): the entry
points' registry and with it the analysis stack (pandas, scipy, numba, the analytics, the routes), and
numba's compiler, readied by one kernel (from its cache when there is one).

The workers are forked from that process, so they share these pages instead of each loading its own
copy: the libraries are ~240 MB a process, and numba's first kernel alone ~50 MB (LLVM's set-up) and
a second of CPU. No kernel that runs in parallel is called here: its thread pool must not exist in a
process that forks (docs/memory.md).
"""

from __future__ import annotations

import numpy as np

from causewatch.analytics.fuzzy import Membership
from causewatch.daemon import (
    entrypoints,  # noqa: F401  (loaded to be shared, with all it imports)
    memory,
)

memory.arrow_from_malloc()   # the workers inherit both settings
memory.few_arenas()
Membership("triangle", (0.0, 1.0, 2.0))(np.linspace(0.0, 2.0, 5))   # the fuzzy scores' numba kernel
memory.drop_code_pages()   # the code run to get here, not what the workers run: they map what they use
