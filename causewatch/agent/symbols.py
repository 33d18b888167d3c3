"""Instruction pointers to (module, function): /proc/PID/maps plus ELF .symtab/.dynsym, read with struct.

No ELF library: the few ELF64 structures needed (header, program and section headers, symbols) are
unpacked from a read-only mmap, so only the pages touched are read. C++ names are demangled.
"""

from __future__ import annotations

import functools
import logging
import mmap
import operator
import os
import re
import struct
import sys
from array import array
from bisect import bisect_right
from collections import Counter
from itertools import accumulate, chain, compress, islice, repeat
from operator import itemgetter

log = logging.getLogger(__name__)

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")     # e_ident ... e_shstrndx
_PHDR = struct.Struct("<IIQQQQQQ")             # p_type, p_flags, p_offset, p_vaddr, p_paddr, p_filesz, ...
_SHDR = struct.Struct("<IIQQQQIIQQ")           # sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link, ...
_SYM = struct.Struct("<IBBHQQ")                # st_name, st_info, st_other, st_shndx, st_value, st_size
PT_LOAD, SHT_SYMTAB, SHT_DYNSYM, STT_FUNC, STT_GNU_IFUNC = 1, 2, 11, 2, 10
# 1 for an st_info byte whose symbol type (low 4 bits) is a function: itertools.compress keeps those
_IS_FUNC = bytes(int((b & 0xF) in (STT_FUNC, STT_GNU_IFUNC)) for b in range(256))
KERNEL_START = 0xFFFF800000000000
MAX_KEY = 256
MAX_NAME = 4096
UNKNOWN = "?"


class ElfError(ValueError):
    """A file that is not a little-endian ELF64 object this reader understands."""


class ElfSymbols:
    """Function symbols of one ELF64 file, sorted by address, and its PT_LOAD segments."""

    def __init__(self, path: str):
        self.path = path
        with open(path, "rb") as f:
            try:
                self._data = data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError:   # an empty file cannot be mapped
                raise ElfError(f"{path}: empty, not an ELF64 file") from None
        if len(data) < _EHDR.size or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise ElfError(f"{path}: not a little-endian ELF64 file")
        eh = _EHDR.unpack_from(data)
        phoff, shoff, phnum, shnum = eh[5], eh[6], eh[10], eh[12]
        # (file offset, link-time address, bytes in the file) of each loaded segment
        self.loads = [(ph[2], ph[3], ph[5]) for ph in self._table(phoff, phnum, _PHDR) if ph[0] == PT_LOAD]
        sh = self._table(shoff, shnum, _SHDR)
        # function symbols as columns (address, size, name offset, string table), filled by C-level
        # iteration over strided views of each table: no Python object per symbol is kept
        addrs, sizes, names, tabs, self._strtabs = array("Q"), array("Q"), array("I"), array("H"), []
        for s in sh:
            count, lo = s[5] // _SYM.size, s[4]
            if s[1] not in (SHT_SYMTAB, SHT_DYNSYM) or s[6] >= len(sh) or lo + count * _SYM.size > len(data):
                continue
            table = data[lo:lo + count * _SYM.size]
            words, halves = memoryview(table).cast("Q"), memoryview(table).cast("I")   # 3 words a symbol
            is_func = table[4::_SYM.size].translate(_IS_FUNC)                            # st_info bytes
            addrs.extend(compress(words[1::3], is_func))
            sizes.extend(compress(words[2::3], is_func))
            names.extend(compress(halves[0::6], is_func))
            tabs.extend(repeat(len(self._strtabs), is_func.count(1)))
            strtab = sh[s[6]]
            self._strtabs.append((strtab[4], strtab[4] + strtab[5]))
        if sys.byteorder == "big":   # the views above are native, the file little-endian
            for column in (addrs, sizes, names):
                column.byteswap()
        # sorted by address, one symbol per address (aliases share one): the stable sort puts the entry
        # of the table read first (section order) first, and a row is kept only where the address
        # changes (the 0 before the first also drops undefined, imported functions at address 0)
        order = sorted(range(len(addrs)), key=addrs.__getitem__)
        ordered = array("Q", map(addrs.__getitem__, order))
        keep = list(compress(order, map(operator.ne, ordered, chain((0,), ordered))))
        self.addrs = array("Q", map(addrs.__getitem__, keep))
        self._sizes = array("Q", map(sizes.__getitem__, keep))
        self._names = array("I", map(names.__getitem__, keep))
        self._tabs = array("H", map(tabs.__getitem__, keep))
        self._cache: dict[int, str] = {}

    def _table(self, offset: int, count: int, layout: struct.Struct) -> list[tuple]:
        end = offset + count * layout.size
        if count == 0 or end > len(self._data):
            return []
        return list(layout.iter_unpack(self._data[offset:end]))

    def file_to_vaddr(self, offsets: list[int]) -> list[int]:
        """File offsets (what /proc/PID/maps gives) to the link-time addresses symbols use."""
        out = []
        for off in offsets:
            vaddr = off
            for start, seg_vaddr, size in self.loads:
                if start <= off < start + max(size, 1):
                    vaddr = off - start + seg_vaddr
            out.append(vaddr)
        return out

    def names(self, vaddrs: list[int]) -> list[str]:
        """Function name for each address, UNKNOWN where no symbol covers it."""
        out = []
        for v in vaddrs:
            i = bisect_right(self.addrs, v) - 1
            if i < 0:
                out.append(UNKNOWN)
                continue
            addr, size = self.addrs[i], self._sizes[i]
            # a symbol without a size reaches to the next one
            end = addr + size if size else (self.addrs[i + 1] if i + 1 < len(self.addrs) else 2**64)
            out.append(self._name(i) if v < end else UNKNOWN)
        return out

    def _name(self, i: int) -> str:
        name = self._cache.get(i)
        if name is None:
            lo, hi = self._strtabs[self._tabs[i]]
            start = lo + self._names[i]
            end = self._data.find(b"\0", start, min(hi, start + MAX_NAME))
            name = demangle(self._data[start:end if end >= 0 else start].decode("ascii", "replace"))
            self._cache[i] = name
        return name


# a text (T/t) symbol line of /proc/kallsyms: "ADDRESS T name" or "ADDRESS t name\t[module]"
_KALLSYMS_TEXT = re.compile(rb"^(.{16}) [Tt] ([^\t\n]+)", re.M)


class KernelSymbols:
    """Function symbols of the running kernel from /proc/kallsyms (none when kptr_restrict hides them).

    Read at the first kernel address looked up, not at start (about 0.1 s of CPU that the agent's
    READY need not wait for, and that a sampler limited to user space never pays). The ~120k lines
    are matched by one regular expression, their addresses decoded by one bytes.fromhex, and the
    names packed end to end (few objects: RSS stays low)."""

    def __init__(self, proc: str = "/proc"):
        self.proc = proc
        self._table: tuple[array, bytes, array] | None = None

    @property
    def addrs(self) -> array:
        return self._read()[0]

    def _read(self) -> tuple[array, bytes, array]:
        if self._table is None:
            try:
                with open(os.path.join(self.proc, "kallsyms"), "rb") as f:
                    raw = f.read()
            except OSError as e:
                log.debug("no kernel symbols: %s", e)
                raw = b""
            self._table = _parse_kallsyms(raw)
            if not any(self._table[0]):   # kptr_restrict: every address reads as 0
                self._table = array("Q"), b"", array("I", [0])
        return self._table

    def names(self, ips: list[int]) -> list[str]:
        if not ips:
            return []
        addrs, names, offsets = self._read()
        out = []
        for ip in ips:
            i = bisect_right(addrs, ip) - 1
            out.append(names[offsets[i]:offsets[i + 1]].decode("ascii", "replace") if i >= 0 else UNKNOWN)
        return out


def _parse_kallsyms(raw: bytes, chunk: int = 1 << 18) -> tuple[array, bytes, array]:
    """(addresses, names packed end to end, offsets: name i is names[offsets[i]:offsets[i + 1]]) of the
    text symbols, sorted by address (stable: aliases keep the file's order). Matched `chunk` bytes at a
    time, so the match tuples in memory at once stay near 1 MB, not 20 MB for the whole file."""
    addrs, parts, offsets = array("Q"), [], array("I", [0])
    start = 0
    while start < len(raw):
        end = raw.find(b"\n", start + chunk) + 1 or len(raw)
        found = _KALLSYMS_TEXT.findall(raw[start:end])
        start = end
        try:
            addrs.frombytes(bytes.fromhex(b"".join(map(itemgetter(0), found)).decode("ascii")))
        except ValueError:   # not hex: not a kallsyms this reader understands
            log.debug("unreadable kallsyms addresses")
            return array("Q"), b"", array("I", [0])
        names = list(map(itemgetter(1), found))
        offsets.extend(islice(accumulate(map(len, names), initial=offsets[-1]), 1, None))
        parts.append(b"".join(names))
    if sys.byteorder == "little":   # the hex digits are big-endian, array('Q') native
        addrs.byteswap()
    packed = b"".join(parts)
    if all(map(operator.le, addrs, addrs[1:])):   # the kernel lists its own symbols in order
        return addrs, packed, offsets
    # module symbols may come in any order: sort (stable), then repack the names in that order
    order = sorted(range(len(addrs)), key=addrs.__getitem__)
    names = [packed[offsets[i]:offsets[i + 1]] for i in order]
    return (array("Q", map(addrs.__getitem__, order)), b"".join(names),
            array("I", accumulate(map(len, names), initial=0)))


@functools.cache
def _cxxfilt():
    """cxxfilt (libstdc++'s own demangler through ctypes), or None on a node without libstdc++.
    Imported at the first mangled name: its import runs ldconfig to find libstdc++, a cost the
    agent's start need not pay."""
    try:
        import cxxfilt
    except (ImportError, OSError):
        return None
    return cxxfilt


def demangle(name: str) -> str:
    """`std::vector<int>::size() const` for `_ZNKSt6vectorIiSaIiEE4sizeEv`; other names as they are."""
    cxxfilt = _cxxfilt() if name.startswith("_Z") else None
    if cxxfilt is None:
        return name
    try:
        return cxxfilt.demangle(name)
    except cxxfilt.Error:
        return name


_KERNELS: dict[str, KernelSymbols] = {}   # per proc root: every sampler in a process shares one table


class ProcessMaps:
    """Executable mappings of one process, re-read when an address falls outside all of them."""

    def __init__(self, pid: int, proc: str = "/proc", elf_cache: dict | None = None,
                 kernel: KernelSymbols | None = None):
        self.pid, self.proc, self.kernel = pid, proc, kernel
        self.elf_cache = {} if elf_cache is None else elf_cache
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.offsets: list[int] = []
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
        order = sorted(range(len(starts)), key=starts.__getitem__)
        self.starts = [starts[i] for i in order]
        self.ends = [ends[i] for i in order]
        self.offsets = [offsets[i] for i in order]
        self.paths = [paths[i] for i in order]

    def add(self, start: int, end: int, offset: int, path: str) -> None:
        """A mapping the kernel reported (PERF_RECORD_MMAP); it replaces what it overlaps."""
        keep = [i for i in range(len(self.paths)) if self.ends[i] <= start or self.starts[i] >= end]
        self._set([self.starts[i] for i in keep] + [start], [self.ends[i] for i in keep] + [end],
                  [self.offsets[i] for i in keep] + [offset], [self.paths[i] for i in keep] + [path])

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

    def mapping_of(self, ip: int) -> int:
        """Index of the mapping holding `ip`, -1 where none does."""
        i = bisect_right(self.starts, ip) - 1
        return i if i >= 0 and ip < self.ends[i] else -1

    def keys(self, ips: list[int]) -> list[str]:
        """'module:function' for each (unique) address."""
        where = [self.mapping_of(ip) for ip in ips]
        if any(m < 0 and ip < KERNEL_START for m, ip in zip(where, ips)):
            self.refresh()     # a library loaded since the last read
            where = [self.mapping_of(ip) for ip in ips]
        keys = ["[unknown]:" + UNKNOWN] * len(ips)
        in_kernel = [i for i, ip in enumerate(ips) if ip >= KERNEL_START]
        names = self.kernel.names([ips[i] for i in in_kernel]) if self.kernel else [UNKNOWN] * len(in_kernel)
        for i, name in zip(in_kernel, names):
            keys[i] = _key("[kernel]", name)
        by_mapping: dict[int, list[int]] = {}
        for i, m in enumerate(where):
            if m >= 0:
                by_mapping.setdefault(m, []).append(i)
        for m, sel in by_mapping.items():
            path = self.paths[m]
            module = os.path.basename(path.removesuffix(" (deleted)")) if path else "[anon]"
            elf = self._elf(path)
            if elf is None:
                names = [UNKNOWN] * len(sel)
            else:
                names = elf.names(elf.file_to_vaddr([ips[i] - self.starts[m] + self.offsets[m] for i in sel]))
            for i, name in zip(sel, names):
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

    def fold(self, samples) -> Counter:
        """{'module:function': count} of (pid, ip) pairs; each distinct pair is resolved once."""
        out: Counter = Counter()
        by_pid: dict[int, tuple[list[int], list[int]]] = {}
        for (pid, ip), c in Counter(samples).items():
            ips, counts = by_pid.setdefault(pid, ([], []))
            ips.append(ip)
            counts.append(c)
        for pid, (ips, counts) in by_pid.items():
            for key, c in zip(self.maps(pid).keys(ips), counts):
                out[key] += c
        return out

    def maps(self, pid: int) -> ProcessMaps:
        """The mappings of `pid`, read from /proc the first time it is seen."""
        maps = self._maps.get(pid)
        if maps is None:
            maps = self._maps[pid] = ProcessMaps(pid, self.proc, self._elf, self.kernel())
        return maps

    def preload(self, pid: int | None) -> None:
        """Read `pid`'s mappings now rather than at the first samples (the kernel's table waits for
        the first kernel address)."""
        if pid is not None:
            self.maps(pid)

    def add_mapping(self, pid: int, start: int, length: int, offset: int, path: str) -> None:
        self.maps(pid).add(start, start + length, offset, path)

    def kernel(self) -> KernelSymbols:
        """The kernel's table, shared by every sampler of this process (read at its first use)."""
        if self._kernel is None:
            if self.proc not in _KERNELS:
                _KERNELS[self.proc] = KernelSymbols(self.proc)
            self._kernel = _KERNELS[self.proc]
        return self._kernel

    def forget(self, live_pids: set[int]) -> None:
        """Drop maps of processes that are gone (pids are reused)."""
        for pid in [p for p in self._maps if p not in live_pids]:
            del self._maps[pid]
