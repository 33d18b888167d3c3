"""How the daemon's processes keep their memory small (docs/memory.md): pandas kept out of the ingesting
process, Arrow's buffers taken from malloc, few malloc arenas, and freed memory handed back.

glibc's malloc keeps what a process frees for its next allocations: in an arena per thread (up to 8 a
core), and above the top of each heap until it is trimmed. Arrow's default pool (mimalloc) keeps its
own. A daemon that ingests in bursts and workers that answer a request or run a job, then wait, would
each hold their peak; `trim()` gives back what is free after each burst, and one allocator to trim
(`arrow_from_malloc`) and few arenas (`few_arenas`) leave less to hold.
"""

from __future__ import annotations

import ctypes
import logging
import sys

import pyarrow as pa

log = logging.getLogger("causewatch.daemon.memory")
M_ARENA_MAX = -8   # mallopt's parameter (malloc.h)
ARENAS = 2         # malloc arenas a process may use: its threads share them (ingest is one writer thread)

try:
    _libc = ctypes.CDLL("libc.so.6", use_errno=True)
except OSError:   # not glibc: its allocator has its own policy, nothing to set
    _libc = None


class _NoPandas:
    """A meta path finder for which pandas does not exist."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "pandas":
            raise ModuleNotFoundError("pandas is kept out of the ingesting process", name=name)
        return None


def arrow_without_pandas() -> None:
    """Keep pandas out of this process. pyarrow looks for pandas on its first `pa.array()` (to ask whether
    the argument is a pandas object), and the store's writes build arrays: pandas would load into the
    ingesting process at its first frame, ~50 MB it never uses. Let pyarrow look once while pandas
    cannot be imported: it then takes pandas to be absent for that check for good, while `to_pandas()`
    would still import it. A no-op where pandas is loaded already (a test's process)."""
    if "pandas" in sys.modules:
        return
    sys.meta_path.insert(0, _NoPandas)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(_NoPandas)


def arrow_from_malloc() -> None:
    """Arrow's new buffers from malloc (the system pool), so that `trim()` gives back Arrow's too."""
    pa.set_memory_pool(pa.system_memory_pool())


def few_arenas(n: int = ARENAS) -> None:
    """At most `n` malloc arenas in this process from now on (before its threads start)."""
    if _libc is not None and not _libc.mallopt(M_ARENA_MAX, n):
        log.debug("mallopt(M_ARENA_MAX, %d) refused", n)


def trim() -> None:
    """Give the free memory of every malloc arena back to the system (malloc_trim)."""
    if _libc is not None:
        _libc.malloc_trim(0)
