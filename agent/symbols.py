"""Instruction pointers to (module, function): /proc/PID/maps plus ELF .symtab/.dynsym read with numpy.

No ELF library: the few ELF64 structures needed (header, program and section headers, symbols) are
numpy dtypes over a read-only memmap, so only the pages touched are read. C++ names are demangled.
"""

from __future__ import annotations

import logging
import os
from collections import Counter

import numpy as np

try:      # libstdc++'s own demangler through ctypes; a node without libstdc++ keeps the mangled names
    from cxxfilt import Error as DemangleError
    from cxxfilt import demangle as _demangle
except (ImportError, OSError):
    _demangle, DemangleError = None, Exception

log = logging.getLogger(__name__)

_EHDR = np.dtype([("ident", "u1", 16), ("type", "<u2"), ("machine", "<u2"), ("version", "<u4"),
                  ("entry", "<u8"), ("phoff", "<u8"), ("shoff", "<u8"), ("flags", "<u4"), ("ehsize", "<u2"),
                  ("phentsize", "<u2"), ("phnum", "<u2"), ("shentsize", "<u2"), ("shnum", "<u2"),
                  ("shstrndx", "<u2")])
_PHDR = np.dtype([("type", "<u4"), ("flags", "<u4"), ("offset", "<u8"), ("vaddr", "<u8"), ("paddr", "<u8"),
                  ("filesz", "<u8"), ("memsz", "<u8"), ("align", "<u8")])
_SHDR = np.dtype([("name", "<u4"), ("type", "<u4"), ("flags", "<u8"), ("addr", "<u8"), ("offset", "<u8"),
                  ("size", "<u8"), ("link", "<u4"), ("info", "<u4"), ("addralign", "<u8"), ("entsize", "<u8")])
_SYM = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"),
                 ("size", "<u8")])
PT_LOAD, SHT_SYMTAB, SHT_DYNSYM, STT_FUNC, STT_GNU_IFUNC = 1, 2, 11, 2, 10
KERNEL_START = 0xFFFF800000000000
MAX_KEY = 256
UNKNOWN = "?"


class ElfError(ValueError):
    """A file that is not a little-endian ELF64 object this reader understands."""


class ElfSymbols:
    """Function symbols of one ELF64 file, sorted by address, and its PT_LOAD segments."""

    def __init__(self, path: str):
        self.path = path
        data = np.memmap(path, np.uint8, mode="r")
        if data.size < _EHDR.itemsize or bytes(data[:4]) != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise ElfError(f"{path}: not a little-endian ELF64 file")
        eh = data[:_EHDR.itemsize].view(_EHDR)[0]
        ph = self._table(data, int(eh["phoff"]), int(eh["phnum"]), _PHDR)
        self.loads = ph[ph["type"] == PT_LOAD]
        sh = self._table(data, int(eh["shoff"]), int(eh["shnum"]), _SHDR)
        parts, self._strtabs = [], []
        for s in sh[(sh["type"] == SHT_SYMTAB) | (sh["type"] == SHT_DYNSYM)]:
            syms = self._table(data, int(s["offset"]), int(s["size"]) // _SYM.itemsize, _SYM)
            syms = syms[np.isin(syms["info"] & 0xF, (STT_FUNC, STT_GNU_IFUNC)) & (syms["value"] != 0)]
            strtab = sh[int(s["link"])]
            self._strtabs.append(data[int(strtab["offset"]):int(strtab["offset"]) + int(strtab["size"])])
            parts.append(np.stack([syms["value"], syms["size"], syms["name"],
                                   np.full(len(syms), len(self._strtabs) - 1, np.uint64)], axis=1))
        table = np.concatenate(parts) if parts else np.zeros((0, 4), np.uint64)
        # one symbol per address (aliases share one), the .symtab entry first since it was read first
        _, first = np.unique(table[:, 0], return_index=True)
        table = table[first]
        self.addrs, sizes = table[:, 0], table[:, 1]
        self._names, self._tabs = table[:, 2], table[:, 3]
        # a symbol without a size reaches to the next one
        nxt = np.append(self.addrs[1:], np.uint64(2**64 - 1))
        self.ends = np.where(sizes > 0, self.addrs + sizes, nxt)
        self._cache: dict[int, str] = {}

    @staticmethod
    def _table(data: np.ndarray, offset: int, count: int, dtype: np.dtype) -> np.ndarray:
        end = offset + count * dtype.itemsize
        if count == 0 or end > data.size:
            return np.zeros(0, dtype)
        return data[offset:end].view(dtype)

    def file_to_vaddr(self, offsets: np.ndarray) -> np.ndarray:
        """File offsets (what /proc/PID/maps gives) to the link-time addresses symbols use."""
        out = offsets.astype(np.uint64).copy()
        for seg in self.loads:
            inside = (offsets >= seg["offset"]) & (offsets < seg["offset"] + max(int(seg["filesz"]), 1))
            out[inside] = offsets[inside] - seg["offset"] + seg["vaddr"]
        return out

    def names(self, vaddrs: np.ndarray) -> list[str]:
        """Function name for each address, UNKNOWN where no symbol covers it."""
        idx = np.searchsorted(self.addrs, vaddrs, side="right").astype(np.int64) - 1
        ok = idx >= 0
        ok[ok] &= vaddrs[ok] < self.ends[idx[ok]]
        return [self._name(int(i)) if good else UNKNOWN for i, good in zip(idx, ok)]

    def _name(self, i: int) -> str:
        name = self._cache.get(i)
        if name is None:
            tab = self._strtabs[int(self._tabs[i])]
            start = int(self._names[i])
            end = start + int(np.argmax(tab[start:start + 4096] == 0))
            name = demangle(bytes(tab[start:end]).decode("ascii", "replace"))
            self._cache[i] = name
        return name


class KernelSymbols:
    """Function symbols of the running kernel from /proc/kallsyms (all zero when kptr_restrict hides them).

    The ~120k lines are parsed with numpy (fixed-width "ADDRESS T name\t[module]" lines), not line by
    line: reading them is part of the agent's start-up."""

    def __init__(self, proc: str = "/proc"):
        try:
            with open(os.path.join(proc, "kallsyms"), "rb") as f:
                self._raw = f.read()
        except OSError as e:
            log.debug("no kernel symbols: %s", e)
            self._raw = b""
        self.addrs, self._raw, self._starts, self._ends = _parse_kallsyms(self._raw)
        if not self.addrs.any():   # kptr_restrict: every address reads as 0
            self.addrs = self._starts = self._ends = np.zeros(0, np.uint64)

    def names(self, ips: np.ndarray) -> list[str]:
        idx = np.searchsorted(self.addrs, ips, side="right").astype(np.int64) - 1
        return [self._raw[self._starts[i]:self._ends[i]].decode("ascii", "replace") if i >= 0 else UNKNOWN
                for i in idx.tolist()]


def _parse_kallsyms(raw: bytes) -> tuple[np.ndarray, bytes, np.ndarray, np.ndarray]:
    """(addresses, names packed end to end, name starts, name ends) of the text (T/t) symbols, sorted by
    address; the names are copied out so the 5 MB file text is not kept."""
    buf = np.frombuffer(raw, np.uint8)
    ends = np.flatnonzero(buf == ord("\n"))
    starts = np.concatenate(([0], ends[:-1] + 1)).astype(np.int64)
    ok = ends - starts > 19                              # 16 hex digits, type, two spaces, a name
    starts, ends = starts[ok], ends[ok]
    ok = (buf[starts + 16] == ord(" ")) & np.isin(buf[starts + 17], np.frombuffer(b"Tt", np.uint8))
    starts, ends = starts[ok], ends[ok]
    # the 16 hex digits of every line as one string, decoded at once (few temporaries: RSS stays low)
    hexes = buf[starts[:, None] + np.arange(16)].tobytes()
    addrs = np.frombuffer(bytes.fromhex(hexes.decode("ascii")), ">u8").astype(np.uint64)
    tabs = np.flatnonzero(buf == ord("\t"))             # "name\t[module]": the name stops at the tab
    nxt = np.searchsorted(tabs, starts + 19)
    tab = tabs[np.minimum(nxt, len(tabs) - 1)] if len(tabs) else ends
    name_ends = np.where((nxt < len(tabs)) & (tab < ends), tab, ends)
    order = np.argsort(addrs, kind="stable")
    starts, lengths = starts[order] + 19, name_ends[order] - starts[order] - 19
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    names = np.empty(offsets[-1], np.uint8)
    for lo in range(0, len(starts), 8192):     # in blocks: the gather index stays small
        s, n = starts[lo:lo + 8192], lengths[lo:lo + 8192]
        o = offsets[lo:lo + len(s)]
        names[o[0]:o[0] + n.sum()] = buf[np.repeat(s - o, n) + np.arange(o[0], o[0] + n.sum())]
    return addrs[order], names.tobytes(), offsets[:-1], offsets[1:]


def demangle(name: str) -> str:
    """`std::vector<int>::size() const` for `_ZNKSt6vectorIiSaIiEE4sizeEv`; other names as they are."""
    if _demangle is None or not name.startswith("_Z"):
        return name
    try:
        return _demangle(name)
    except DemangleError:
        return name


_KERNELS: dict[str, KernelSymbols] = {}   # per proc root: every sampler in a process shares one table


class ProcessMaps:
    """Executable mappings of one process, re-read when an address falls outside all of them."""

    def __init__(self, pid: int, proc: str = "/proc", elf_cache: dict | None = None,
                 kernel: KernelSymbols | None = None):
        self.pid, self.proc, self.kernel = pid, proc, kernel
        self.elf_cache = {} if elf_cache is None else elf_cache
        self.starts = self.ends = self.offsets = np.zeros(0, np.uint64)
        self.paths: list[str] = []
        self.refresh()

    def refresh(self) -> None:
        """Re-read /proc/PID/maps; a process that is gone keeps the table it had."""
        starts, ends, offsets, paths = [], [], [], []
        try:
            with open(os.path.join(self.proc, str(self.pid), "maps")) as f:
                lines = f.read().splitlines()
        except OSError:
            return
        for line in lines:
            parts = line.split(maxsplit=5)
            if len(parts) < 5 or "x" not in parts[1]:
                continue
            lo, hi = parts[0].split("-")
            starts.append(int(lo, 16))
            ends.append(int(hi, 16))
            offsets.append(int(parts[2], 16))
            paths.append(parts[5].strip() if len(parts) > 5 else "")
        self._set(starts, ends, offsets, paths)

    def _set(self, starts, ends, offsets, paths) -> None:
        order = np.argsort(np.array(starts, np.uint64), kind="stable")
        self.starts = np.array(starts, np.uint64)[order]
        self.ends = np.array(ends, np.uint64)[order]
        self.offsets = np.array(offsets, np.uint64)[order]
        self.paths = [paths[i] for i in order]

    def add(self, start: int, end: int, offset: int, path: str) -> None:
        """A mapping the kernel reported (PERF_RECORD_MMAP); it replaces what it overlaps."""
        keep = [i for i in range(len(self.paths)) if self.ends[i] <= start or self.starts[i] >= end]
        self._set([int(self.starts[i]) for i in keep] + [start], [int(self.ends[i]) for i in keep] + [end],
                  [int(self.offsets[i]) for i in keep] + [offset], [self.paths[i] for i in keep] + [path])

    def _elf(self, path: str) -> ElfSymbols | None:
        if not path.startswith("/"):
            return None
        path = path.removesuffix(" (deleted)")
        if path not in self.elf_cache:
            # through /proc/PID/root, so a process in another mount namespace still resolves
            rooted = os.path.join(self.proc, str(self.pid), "root") + path
            try:
                self.elf_cache[path] = ElfSymbols(rooted if os.path.exists(rooted) else path)
            except (OSError, ValueError) as e:
                log.debug("no symbols for %s: %s", path, e)
                self.elf_cache[path] = None
        return self.elf_cache[path]

    def mapping_of(self, ips: np.ndarray) -> np.ndarray:
        """Index of the mapping holding each address, -1 where none does."""
        idx = np.searchsorted(self.starts, ips, side="right").astype(np.int64) - 1
        ok = idx >= 0
        ok[ok] &= ips[ok] < self.ends[idx[ok]]
        return np.where(ok, idx, -1)

    def keys(self, ips: np.ndarray) -> list[str]:
        """'module:function' for each (unique) address."""
        ips = np.asarray(ips, np.uint64)
        where = self.mapping_of(ips)
        if ((where < 0) & (ips < KERNEL_START)).any():
            self.refresh()     # a library loaded since the last read
            where = self.mapping_of(ips)
        keys = ["[unknown]:" + UNKNOWN] * len(ips)
        in_kernel = np.flatnonzero(ips >= KERNEL_START)
        names = self.kernel.names(ips[in_kernel]) if self.kernel else [UNKNOWN] * len(in_kernel)
        for i, name in zip(in_kernel.tolist(), names):
            keys[i] = _key("[kernel]", name)
        for m in np.unique(where[where >= 0]).tolist():
            sel = np.flatnonzero(where == m)
            path = self.paths[m]
            module = os.path.basename(path.removesuffix(" (deleted)")) if path else "[anon]"
            elf = self._elf(path)
            if elf is None:
                names = [UNKNOWN] * len(sel)
            else:
                names = elf.names(elf.file_to_vaddr(ips[sel] - self.starts[m] + self.offsets[m]))
            for i, name in zip(sel.tolist(), names):
                keys[i] = _key(module, name)
        return keys


def _key(module: str, function: str) -> str:
    key = f"{module}:{function}"
    if not key.isprintable():
        key = "".join(c if c.isprintable() else "?" for c in key)
    return key[:MAX_KEY]


class Symbolizer:
    """Folds (pid, ip) samples into {'module:function': count}, one ProcessMaps per pid, ELF files shared."""

    def __init__(self, proc: str = "/proc"):
        self.proc = proc
        self._maps: dict[int, ProcessMaps] = {}
        self._elf: dict[str, ElfSymbols | None] = {}
        self._kernel: KernelSymbols | None = None

    def fold(self, pids: np.ndarray, ips: np.ndarray) -> Counter:
        out: Counter = Counter()
        if len(ips) == 0:
            return out
        pairs = np.stack([np.asarray(pids, np.uint64), np.asarray(ips, np.uint64)], axis=1)
        uniq, counts = np.unique(pairs, axis=0, return_counts=True)
        for pid in np.unique(uniq[:, 0]).tolist():
            sel = uniq[:, 0] == pid
            for key, c in zip(self.maps(pid).keys(uniq[sel, 1]), counts[sel].tolist()):
                out[key] += c
        return out

    def maps(self, pid: int) -> ProcessMaps:
        """The mappings of `pid`, read from /proc the first time it is seen."""
        maps = self._maps.get(pid)
        if maps is None:
            maps = self._maps[pid] = ProcessMaps(pid, self.proc, self._elf, self.kernel())
        return maps

    def preload(self, pid: int | None) -> None:
        """Read the kernel's table and `pid`'s mappings now rather than at the first samples."""
        self.kernel()
        if pid is not None:
            self.maps(pid)

    def add_mapping(self, pid: int, start: int, length: int, offset: int, path: str) -> None:
        self.maps(pid).add(start, start + length, offset, path)

    def kernel(self) -> KernelSymbols:
        """The kernel's table, read once per process (~0.1 s of CPU for 120k symbols)."""
        if self._kernel is None:
            if self.proc not in _KERNELS:
                _KERNELS[self.proc] = KernelSymbols(self.proc)
            self._kernel = _KERNELS[self.proc]
        return self._kernel

    def forget(self, live_pids: set[int]) -> None:
        """Drop maps of processes that are gone (pids are reused)."""
        for pid in [p for p in self._maps if p not in live_pids]:
            del self._maps[pid]
