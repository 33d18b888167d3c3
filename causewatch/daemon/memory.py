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
MADV_DONTNEED = 4
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


def _clean_code_mappings(smaps: str = "/proc/self/smaps"):
    """(start, end) of each executable mapping of a file whose pages are all as in the file (no page of it
    written, as relocations would): dropping such a page costs only a read from the page cache."""
    start = end = None
    clean = False
    with open(smaps) as f:
        for line in f:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:   # a mapping's header line
                if start is not None and clean:
                    yield start, end
                executable = "x" in fields[1] and len(fields) > 5 and fields[5].startswith("/")
                start, end = (int(v, 16) for v in fields[0].split("-")) if executable else (None, None)
                clean = executable
            elif fields[0] == "Anonymous:" and int(fields[1]) > 0:
                clean = False
    if start is not None and clean:
        yield start, end


def drop_code_pages() -> None:
    """Drop this process's hold on its libraries' code pages (madvise MADV_DONTNEED on executable file
    mappings none of whose pages was written): they stay in the page cache, and a page used again is
    mapped again from there. The fork server calls it after its preload: the code that importing and
    numba's compiler ran (LLVM's ~60 MB) is not what its workers run, and held by the server alone it
    would count to the daemon's memory for good."""
    if _libc is None:
        return
    _libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for start, end in list(_clean_code_mappings()):
        _libc.madvise(start, end - start, MADV_DONTNEED)


def trim() -> None:
    """Give the free memory of every malloc arena back to the system (malloc_trim)."""
    if _libc is not None:
        _libc.malloc_trim(0)
