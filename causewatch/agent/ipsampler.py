"""Live phase vectors: cpu-clock IP sampling through perf_event_open, read from the mmap ring buffer.

Samples are unpacked with struct.iter_unpack over the raw ring bytes, mapped to 'module:function' keys
(agent.symbols) and folded into one sparse vector per `interval_cpu` seconds of sampled CPU time.
"""

from __future__ import annotations

import logging
import math
import mmap
import os
import struct
import time
from array import array
from collections import Counter
from operator import itemgetter
from typing import Callable, NamedTuple

import psutil

from causewatch.agent import cgroups, perf
from causewatch.agent.symbols import Symbolizer

log = logging.getLogger(__name__)

SAMPLE_IP, SAMPLE_TID, SAMPLE_TIME = 1, 2, 4
RECORD_MMAP, RECORD_LOST, RECORD_SAMPLE, RECORD_LOST_SAMPLES = 1, 2, 9, 13
CPU_CLOCK = 0
CLOCK_MONOTONIC = 1
# a PERF_RECORD_SAMPLE of SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME: header (type, misc, size), ip, pid, tid, time
SAMPLE = struct.Struct("<IHHQIIQ")
IP, PID, TIME = 3, 4, 6     # their places in an unpacked sample
_HEAD, _TAIL = 1024, 1032   # offsets of data_head / data_tail in struct perf_event_mmap_page


class Records(NamedTuple):
    samples: list[tuple]         # unpacked SAMPLE records
    lost: int                    # samples the kernel reported lost
    mmaps: list[tuple]           # (pid, start, length, file offset, path) of new executable mappings


def parse_records(buf: bytes) -> Records:
    """The records in raw ring-buffer bytes.

    The common case, nothing but 32-byte sample records, is checked with strided array slices and
    unpacked by one struct.iter_unpack; only when other record types are mixed in (a new mapping, a
    loss) are the headers walked one by one.
    """
    n, rest = divmod(len(buf), SAMPLE.size)
    if not rest:
        types = array("I", buf)[0::SAMPLE.size // 4]       # the u32 at byte 0 of every 32-byte slot
        sizes = array("H", buf)[3::SAMPLE.size // 2]       # the u16 at byte 6
        if types.count(RECORD_SAMPLE) == n and sizes.count(SAMPLE.size) == n:
            return Records(list(SAMPLE.iter_unpack(buf)), 0, [])
    return walk_records(buf)


def walk_records(buf: bytes) -> Records:
    """The record-by-record reference reader (also the fallback of parse_records)."""
    samples, lost, mmaps, off = [], 0, [], 0
    while off + 8 <= len(buf):
        kind, _, size = struct.unpack_from("<IHH", buf, off)
        if size < 8:
            break
        if kind == RECORD_SAMPLE and size == SAMPLE.size:
            samples.append(SAMPLE.unpack_from(buf, off))
        elif kind == RECORD_MMAP:   # {pid, tid, addr, len, pgoff, filename}
            pid, _, start, length, pgoff = struct.unpack_from("<IIQQQ", buf, off + 8)
            path = buf[off + 40:off + size].split(b"\0", 1)[0].decode("utf-8", "replace")
            mmaps.append((pid, start, length, pgoff, path))
        elif kind == RECORD_LOST:
            lost += struct.unpack_from("<Q", buf, off + 16)[0]
        elif kind == RECORD_LOST_SAMPLES:
            lost += struct.unpack_from("<Q", buf, off + 8)[0]
        off += size
    return Records(samples, lost, mmaps)


class RingBuffer:
    """The mmap ring of one sampling event: 1 metadata page + 2^n data pages."""

    def __init__(self, fd: int, pages: int = 16):
        self.page = mmap.PAGESIZE
        self.size = pages * self.page
        self.map = mmap.mmap(fd, self.page + self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def drain(self) -> bytes:
        """Everything the kernel wrote since the last drain; hands the space back to the kernel."""
        head = struct.unpack_from("<Q", self.map, _HEAD)[0]
        tail = struct.unpack_from("<Q", self.map, _TAIL)[0]
        if head == tail:
            return b""
        start, n = tail % self.size, head - tail
        base = self.page
        if start + n <= self.size:
            data = self.map[base + start:base + start + n]
        else:
            data = self.map[base + start:base + self.size] + self.map[base:base + n - (self.size - start)]
        struct.pack_into("<Q", self.map, _TAIL, head)
        return data

    def close(self) -> None:
        self.map.close()


class IPSampler:
    """cpu-clock IP sampling of a process (all threads, inherited, one ring per CPU) or a cgroup."""

    def __init__(self, pid: int | None = None, cgroup: str | None = None, frequency: int = 1000,
                 pages: int = 16, proc: str = "/proc", sysfs: str = "/sys"):
        self.pid, self.cgroup, self.frequency, self.pages = pid, cgroup, frequency, pages
        self.proc, self.sysfs = proc, sysfs
        self.period_ns = int(1e9 // frequency)
        self._fds: list[int] = []
        self._rings: list[RingBuffer] = []
        self._cgroup_fd: int | None = None

    def _attr(self, exclude_kernel: bool, inherit: bool) -> perf.EventAttr:
        return perf.make_attr(perf.TYPE_SOFTWARE, CPU_CLOCK, sample_period=self.period_ns,
                              sample_type=SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME, clockid=CLOCK_MONOTONIC,
                              inherit=inherit, exclude_kernel=exclude_kernel, exclude_hv=True,
                              mmap=True)   # new executable mappings, so exited processes still resolve

    def _open_one(self, pid: int, cpu: int, inherit: bool, flags: int) -> int:
        try:
            return perf.perf_event_open(self._attr(False, inherit), pid, cpu, -1, flags)
        except PermissionError:   # kernel samples need a lower perf_event_paranoid; user space may do
            return perf.perf_event_open(self._attr(True, inherit), pid, cpu, -1, flags)

    def open(self) -> str:
        """Start sampling; 'ok' or the reason it cannot (then read() returns nothing)."""
        self.close()
        try:
            cpus = perf._cpus(self.sysfs)
            if self.cgroup is not None:
                self._cgroup_fd = os.open(self.cgroup, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                targets, flags = [self._cgroup_fd], perf.FLAG_PID_CGROUP
            else:
                targets = sorted(int(t) for t in os.listdir(os.path.join(self.proc, str(self.pid), "task")))
                flags = 0
            for cpu in cpus:
                leader = None
                for pid in targets:
                    try:
                        fd = self._open_one(pid, cpu, self.cgroup is None, flags)
                    except ProcessLookupError:
                        if self.cgroup is not None or pid == self.pid:
                            raise
                        continue   # a thread that ended after the listing: the process goes on without it
                    self._fds.append(fd)
                    if leader is None:
                        leader = fd
                        self._rings.append(RingBuffer(fd, self.pages))
                    else:   # every thread's samples on this CPU go to the one ring of this CPU
                        perf.ioctl(fd, perf.IOC_SET_OUTPUT, leader)
        except OSError as e:
            self.close()
            return perf.reason(e, self.proc)
        return "ok"

    def read(self) -> Records:
        """New records of all rings: samples in time order, the lost count, new mappings."""
        samples, lost, mmaps = [], 0, []
        for ring in self._rings:
            rec = parse_records(ring.drain())
            samples += rec.samples
            lost += rec.lost
            mmaps += rec.mmaps
        samples.sort(key=itemgetter(TIME))   # stable: equal times keep their ring's order
        return Records(samples, lost, mmaps)

    def close(self) -> None:
        for ring in self._rings:
            ring.close()
        for fd in self._fds:
            os.close(fd)
        self._rings, self._fds = [], []
        if self._cgroup_fd is not None:
            os.close(self._cgroup_fd)
            self._cgroup_fd = None


class BBVCollector:
    """Sparse function-level vectors of one target, each covering `interval_cpu` s of sampled CPU time
    and at least `min_samples` samples; collect() returns finished `bbv` bodies and never raises."""

    def __init__(self, target: str, pid: int | None = None, cgroup: str | None = None, frequency: int = 1000,
                 interval_cpu: float = 0.1, min_samples: int = 50, proc: str = "/proc", sysfs: str = "/sys",
                 wall: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic):
        self.target = target
        self.sampler = IPSampler(pid, cgroup, frequency, proc=proc, sysfs=sysfs)
        self.per_vector = max(min_samples, math.ceil(interval_cpu * frequency))
        self.min_samples = min_samples
        self.symbols = Symbolizer(proc)
        self.wall, self.monotonic = wall, monotonic
        self.status = "not opened"
        self.lost = 0
        self._pending: list[tuple] = []
        self._lost_unreported = 0
        self._vectors = self._forgot = 0

    def open(self) -> str:
        self._offset = self.wall() - self.monotonic()   # sample times are CLOCK_MONOTONIC
        self.status = self.sampler.open()
        if self.status == "ok":   # now, not in the middle of the target's first interval
            self.symbols.preload(self.sampler.pid)
            # a cgroup's processes that run now mapped their libraries before the kernel's mmap records began
            for pid in cgroups.pids(self.sampler.cgroup) if self.sampler.cgroup else ():
                self.symbols.preload(pid)
        return self.status

    def collect(self, final: bool = False) -> list[dict]:
        """Bodies of the vectors completed since the last call (with `final`, also a last partial one
        holding at least min_samples)."""
        try:
            rec, lost, mmaps = self.sampler.read()
            for pid, start, length, offset, path in mmaps:
                self.symbols.add_mapping(pid, start, length, offset, path)
            self.lost += lost
            self._lost_unreported += lost
            pending = self._pending + rec
            bodies = []
            while len(pending) >= self.per_vector or (final and len(pending) >= self.min_samples):
                chunk, pending = pending[:self.per_vector], pending[self.per_vector:]
                bodies.append(self._body(chunk))
            self._pending = pending
            if self._vectors // 100 > self._forgot:   # maps of exited processes go (a cgroup churns many)
                self._forgot = self._vectors // 100
                self.symbols.forget(set(psutil.pids()) | set(map(itemgetter(PID), pending)))
            return bodies
        except (OSError, ValueError) as e:   # a vanished process or unreadable file: skip, keep going
            log.warning("bbv collect for %s failed: %s", self.target, e)
            return []

    def _body(self, chunk: list[tuple]) -> dict:
        counts: Counter = self.symbols.fold(map(itemgetter(PID, IP), chunk))
        body = {"target": self.target, "kind": "native",
                "start": chunk[0][TIME] * 1e-9 + self._offset,
                "end": chunk[-1][TIME] * 1e-9 + self._offset,
                "vector": {"keys": list(counts), "counts": list(counts.values())}}
        pids = set(map(itemgetter(PID), chunk))
        self._vectors += 1
        if len(pids) == 1:
            body["pid"] = pids.pop()
        if self._lost_unreported:
            body["lost"], self._lost_unreported = int(self._lost_unreported), 0
        return body

    def close(self) -> None:
        self.sampler.close()
