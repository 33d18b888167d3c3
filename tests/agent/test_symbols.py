"""ELF symbol tables read with struct and /proc/PID/maps, checked against the loader's own addresses."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import struct
import subprocess

import pytest

from causewatch.agent.symbols import (
    KERNEL_START,
    ElfError,
    ElfSymbols,
    KernelSymbols,
    ProcessMaps,
    Symbolizer,
    _parse_kallsyms,
)


def _addr(fn) -> int:
    return ctypes.cast(fn, ctypes.c_void_p).value


def test_live_addresses_resolve_to_their_functions():
    names = ["PyLong_FromLong", "PyDict_New", "PyList_Append"]
    addrs = [_addr(getattr(ctypes.pythonapi, n)) for n in names]
    keys = ProcessMaps(os.getpid()).keys([a + 1 for a in addrs])     # inside the function, not only at its start
    assert [k.split(":")[1] for k in keys] == names
    assert all(k.split(":")[0].startswith(("libpython", "python")) for k in keys)


def test_symbols_agree_with_nm():
    lib = next(p for p in open(f"/proc/{os.getpid()}/maps").read().split() if "libpython" in p)
    if shutil.which("nm") is None:
        pytest.skip("nm missing")
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True)
    table = [(int(a, 16), n) for a, t, n in (line.split() for line in out.stdout.splitlines()
                                             if len(line.split()) == 3) if t in "Tt"][:200]
    elf = ElfSymbols(lib)
    got = elf.names([a for a, _ in table])
    # aliases share an address: the name found must be one of the names nm lists there
    by_addr: dict[int, set] = {}
    for a, n in table:
        by_addr.setdefault(a, set()).add(n.split("@")[0])
    assert sum(g in by_addr[a] for g, (a, _) in zip(got, table)) >= 0.95 * len(table)


def test_kernel_unmapped_and_non_elf(tmp_path):
    keys = ProcessMaps(os.getpid()).keys([KERNEL_START + 4096, 16])
    assert keys == ["[kernel]:?", "[unknown]:?"]
    (tmp_path / "x.so").write_bytes(b"not an elf file at all" * 10)
    with pytest.raises(ElfError):
        ElfSymbols(str(tmp_path / "x.so"))


def test_fold_counts_per_key_across_pids():
    a = _addr(ctypes.pythonapi.PyLong_FromLong)
    s = Symbolizer()
    c = s.fold(zip([os.getpid()] * 3 + [2**22 + 7], [a, a + 2, a + 4, a]))
    assert sorted(c.values()) == [1, 3] and c["[unknown]:?"] == 1
    assert [k.split(":")[1] for k, n in c.items() if n == 3] == ["PyLong_FromLong"]


def test_forget_drops_the_maps_of_gone_processes_only():
    s = Symbolizer()
    s.fold([(os.getpid(), 16), (2**22 + 7, 16)])
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
    addrs = sorted(by_addr)[::997]
    got = ProcessMaps(os.getpid(), kernel=k).keys(addrs)
    assert all(key.split(":", 1)[1] in by_addr[a] for key, a in zip(got, addrs))
    assert all(key.startswith("[kernel]:") for key in got)


def test_cpp_names_are_demangled():
    """A C++ function of the live libstdc++ resolves to its readable name, not _ZNSt6thread4joinEv."""
    lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
    (key,) = ProcessMaps(os.getpid()).keys([_addr(lib["_ZNSt6thread4joinEv"]) + 1])
    assert key.startswith("libstdc++") and key.endswith(":std::thread::join()")


def _elf(symbols: list[tuple[str, int, int, int]], dynamic: list[tuple[str, int, int, int]]) -> bytes:
    """A minimal little-endian ELF64 file built by hand: one PT_LOAD (file 0x1000 -> 0x401000), a
    .symtab and a .dynsym sharing one string table; symbols are (name, st_info, address, size)."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n, *_ in symbols + dynamic)
    offsets, at = {}, 1
    for n, *_ in symbols + dynamic:
        offsets[n], at = at, at + len(n) + 1

    def table(syms):
        return struct.pack("<IBBHQQ", 0, 0, 0, 0, 0, 0) + b"".join(
            struct.pack("<IBBHQQ", offsets[n], info, 0, 1, addr, size) for n, info, addr, size in syms)

    symtab, dynsym = table(symbols), table(dynamic)
    ph_off, body_off = 64, 64 + 56
    sym_off = body_off
    dyn_off = sym_off + len(symtab)
    str_off = dyn_off + len(dynsym)
    sh_off = str_off + len(names)
    header = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" + bytes(9), 3, 62, 1, 0, ph_off, sh_off, 0,
                         64, 56, 1, 64, 4, 0)
    load = struct.pack("<IIQQQQQQ", 1, 5, 0x1000, 0x401000, 0x401000, 0x2000, 0x2000, 0x1000)
    sections = (bytes(64)
                + struct.pack("<IIQQQQIIQQ", 0, 2, 0, 0, sym_off, len(symtab), 3, 1, 8, 24)    # .symtab
                + struct.pack("<IIQQQQIIQQ", 0, 11, 0, 0, dyn_off, len(dynsym), 3, 1, 8, 24)  # .dynsym
                + struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, str_off, len(names), 0, 0, 1, 0))    # .strtab
    return header + load + symtab + dynsym + names + sections


FUNC, OBJECT, IFUNC = 0x12, 0x11, 0x1A     # global binding | STT_FUNC, STT_OBJECT, STT_GNU_IFUNC


def test_a_hand_built_elf_file_resolves_as_built(tmp_path):
    path = tmp_path / "libhand.so"
    path.write_bytes(_elf([("alpha", FUNC, 0x401000, 0x10), ("beta", FUNC, 0x401020, 0),
                           ("table", OBJECT, 0x401010, 8), ("_ZNSt6thread4joinEv", FUNC, 0x401100, 4),
                           ("picked", IFUNC, 0x401200, 4), ("imported", FUNC, 0, 0)],
                          [("alpha_alias", FUNC, 0x401000, 0x10), ("gamma", FUNC, 0x401080, 0x8)]))
    elf = ElfSymbols(str(path))
    assert elf.loads == [(0x1000, 0x401000, 0x2000)]
    assert elf.file_to_vaddr([0x1000, 0x1021, 0x5000]) == [0x401000, 0x401021, 0x5000]
    got = elf.names([0x401000, 0x40100F, 0x401010, 0x401020, 0x40107F, 0x401080, 0x401088, 0x401102,
                     0x401203, 0x400FFF])
    # .symtab's alpha wins over .dynsym's alias; the object is not a function; beta, without a size,
    # reaches gamma; gamma ends at its size; the C++ name is demangled; an ifunc counts
    assert got == ["alpha", "alpha", "?", "beta", "beta", "gamma", "?", "std::thread::join()", "picked", "?"]


def test_hand_built_kallsyms_parse_as_written(tmp_path):
    (tmp_path / "kallsyms").write_text(
        "ffffffff81000200 T second\n"
        "ffffffff81000000 T _stext\n"
        "ffffffff81000000 t _text\n"
        "ffffffff81000100 D some_data\n"
        "ffffffffc0000000 t mod_func\t[e1000]\n"
        "ffffffff81000300 W weak_one\n")
    k = KernelSymbols(str(tmp_path))
    assert list(k.addrs) == [0xffffffff81000000, 0xffffffff81000000, 0xffffffff81000200, 0xffffffffc0000000]
    # aliases keep the file's order (the last one is found), data and weak symbols are not text
    assert k.names([0xffffffff81000150, 0xffffffff81000250, 0xffffffffc0000010, 0xffffffff80000000]) == \
        ["_text", "second", "mod_func", "?"]
    (tmp_path / "kallsyms").write_text("0000000000000000 T _stext\n0000000000000000 t other\n")
    assert len(KernelSymbols(str(tmp_path)).addrs) == 0          # kptr_restrict hides every address


def test_kallsyms_read_in_chunks_equals_read_at_once():
    """Chunk edges fall inside lines; the chunked parse must not lose, split or reorder a symbol."""
    with open("/proc/kallsyms", "rb") as f:
        raw = f.read()
    lines = raw.splitlines(keepends=True)
    shuffled = b"".join(lines[len(lines) // 2:] + lines[:len(lines) // 2])   # out of order: the sorting path
    for text in (raw, shuffled):
        whole = _parse_kallsyms(text, chunk=len(text) + 1)
        assert _parse_kallsyms(text, chunk=1000) == whole
        assert len(whole[0]) == sum(1 for line in lines if line[17:18] in (b"T", b"t"))
    head = b"".join(lines[:300])
    assert _parse_kallsyms(head, chunk=1) == _parse_kallsyms(head, chunk=len(head) + 1)   # a line per chunk
