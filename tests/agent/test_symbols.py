"""ELF symbol tables read with numpy and /proc/PID/maps, checked against the loader's own addresses."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess

import numpy as np
import pytest

from causewatch.agent.symbols import KERNEL_START, ElfError, ElfSymbols, KernelSymbols, ProcessMaps, Symbolizer


def _addr(fn) -> int:
    return ctypes.cast(fn, ctypes.c_void_p).value


def test_live_addresses_resolve_to_their_functions():
    names = ["PyLong_FromLong", "PyDict_New", "PyList_Append"]
    addrs = np.array([_addr(getattr(ctypes.pythonapi, n)) for n in names], np.uint64)
    keys = ProcessMaps(os.getpid()).keys(addrs + 1)     # inside the function, not only at its start
    assert [k.split(":")[1] for k in keys] == names
    assert all(k.split(":")[0].startswith(("libpython", "python")) for k in keys)


def test_symbols_agree_with_nm():
    lib = next(p for p in open(f"/proc/{os.getpid()}/maps").read().split() if "libpython" in p)
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("nm not installed")
    table = [(int(a, 16), n) for a, t, n in (line.split() for line in out.stdout.splitlines()
                                             if len(line.split()) == 3) if t in "Tt"][:200]
    elf = ElfSymbols(lib)
    got = elf.names(np.array([a for a, _ in table], np.uint64))
    # aliases share an address: the name found must be one of the names nm lists there
    by_addr: dict[int, set] = {}
    for a, n in table:
        by_addr.setdefault(a, set()).add(n.split("@")[0])
    assert sum(g in by_addr[a] for g, (a, _) in zip(got, table)) >= 0.95 * len(table)


def test_kernel_unmapped_and_non_elf(tmp_path):
    keys = ProcessMaps(os.getpid()).keys(np.array([KERNEL_START + 4096, 16], np.uint64))
    assert keys == ["[kernel]:?", "[unknown]:?"]
    (tmp_path / "x.so").write_bytes(b"not an elf file at all" * 10)
    with pytest.raises(ElfError):
        ElfSymbols(str(tmp_path / "x.so"))


def test_fold_counts_per_key_across_pids():
    a = _addr(ctypes.pythonapi.PyLong_FromLong)
    s = Symbolizer()
    c = s.fold(np.array([os.getpid()] * 3 + [2**22 + 7]), np.array([a, a + 2, a + 4, a], np.uint64))
    assert sorted(c.values()) == [1, 3] and c["[unknown]:?"] == 1
    assert [k.split(":")[1] for k, n in c.items() if n == 3] == ["PyLong_FromLong"]


def test_forget_drops_the_maps_of_gone_processes_only():
    s = Symbolizer()
    s.fold(np.array([os.getpid(), 2**22 + 7]), np.array([16, 16], np.uint64))
    s.forget({os.getpid()})
    assert set(s._maps) == {os.getpid()}


def test_kernel_addresses_resolve_through_kallsyms():
    k = KernelSymbols()
    if len(k.addrs) == 0:
        pytest.skip("kernel addresses hidden (kptr_restrict)")
    by_addr: dict[int, set] = {}
    with open("/proc/kallsyms") as f:
        for line in f:
            a, kind, name = line.split()[:3]
            if kind in "Tt":
                by_addr.setdefault(int(a, 16), set()).add(name)
    addrs = np.array(sorted(by_addr)[::997], np.uint64)
    got = ProcessMaps(os.getpid(), kernel=k).keys(addrs)
    assert all(key.split(":", 1)[1] in by_addr[int(a)] for key, a in zip(got, addrs.tolist()))
    assert all(key.startswith("[kernel]:") for key in got)


def test_cpp_names_are_demangled():
    """A C++ function of the live libstdc++ resolves to its readable name, not _ZNSt6thread4joinEv."""
    lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
    addr = np.array([_addr(lib["_ZNSt6thread4joinEv"]) + 1], np.uint64)
    (key,) = ProcessMaps(os.getpid()).keys(addr)
    assert key.startswith("libstdc++") and key.endswith(":std::thread::join()")
