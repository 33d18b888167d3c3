"""Counters through perf_event_open(2) via ctypes: event groups, multiplex scaling, scopes, availability.

An event that cannot be opened is skipped and its reason kept (`availability`), so a node without a
hardware PMU still streams software counters; `collect()` never raises.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import math
import os
import platform
import struct
from dataclasses import dataclass

log = logging.getLogger(__name__)

_NR_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241, "ppc64le": 319, "s390x": 331, "riscv64": 241}
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

TYPE_HARDWARE, TYPE_SOFTWARE, TYPE_HW_CACHE = 0, 1, 3
FORMAT_TOTAL_TIME_ENABLED, FORMAT_TOTAL_TIME_RUNNING, FORMAT_GROUP = 1, 2, 8
FLAG_FD_CLOEXEC, FLAG_PID_CGROUP = 8, 4
IOC_ENABLE, IOC_DISABLE, IOC_RESET, IOC_SET_OUTPUT, IOC_FLAG_GROUP = 0x2400, 0x2401, 0x2403, 0x2405, 1
# bit positions inside perf_event_attr's flag word (include/uapi/linux/perf_event.h)
BIT = {"disabled": 0, "inherit": 1, "exclude_kernel": 5, "exclude_hv": 6, "mmap": 8, "freq": 10, "use_clockid": 25}


class EventAttr(ctypes.Structure):
    """struct perf_event_attr up to sig_data (PERF_ATTR_SIZE_VER7, 128 bytes)."""

    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
                ("sample_period", ctypes.c_uint64), ("sample_type", ctypes.c_uint64),
                ("read_format", ctypes.c_uint64), ("flags", ctypes.c_uint64),
                ("wakeup_events", ctypes.c_uint32), ("bp_type", ctypes.c_uint32),
                ("config1", ctypes.c_uint64), ("config2", ctypes.c_uint64),
                ("branch_sample_type", ctypes.c_uint64), ("sample_regs_user", ctypes.c_uint64),
                ("sample_stack_user", ctypes.c_uint32), ("clockid", ctypes.c_int32),
                ("sample_regs_intr", ctypes.c_uint64), ("aux_watermark", ctypes.c_uint32),
                ("sample_max_stack", ctypes.c_uint16), ("reserved_2", ctypes.c_uint16),
                ("aux_sample_size", ctypes.c_uint32), ("reserved_3", ctypes.c_uint32),
                ("sig_data", ctypes.c_uint64)]


def make_attr(type_: int, config: int, *, read_format: int = 0, sample_period: int = 0,
              sample_type: int = 0, clockid: int | None = None, **flags: bool) -> EventAttr:
    """A perf_event_attr; `flags` are names of BIT set to True."""
    attr = EventAttr(type=type_, size=ctypes.sizeof(EventAttr), config=config, read_format=read_format,
                     sample_period=sample_period, sample_type=sample_type)
    if clockid is not None:
        attr.clockid, flags["use_clockid"] = clockid, True
    attr.flags = sum(1 << BIT[name] for name, on in flags.items() if on)
    return attr


def perf_event_open(attr: EventAttr, pid: int, cpu: int, group_fd: int = -1, flags: int = 0) -> int:
    """The raw system call; raises OSError with the kernel's errno."""
    nr = _NR_PERF_EVENT_OPEN.get(platform.machine())
    if nr is None:
        raise OSError(errno.ENOSYS, f"perf_event_open number unknown on {platform.machine()}")
    fd = _libc.syscall(ctypes.c_long(nr), ctypes.byref(attr), ctypes.c_int(pid), ctypes.c_int(cpu),
                       ctypes.c_int(group_fd), ctypes.c_ulong(flags | FLAG_FD_CLOEXEC))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd


def ioctl(fd: int, request: int, arg: int = 0) -> None:
    if _libc.ioctl(ctypes.c_int(fd), ctypes.c_ulong(request), ctypes.c_ulong(arg)) < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def paranoid(proc: str = "/proc") -> int | None:
    """/proc/sys/kernel/perf_event_paranoid, or None when the kernel has no perf events at all."""
    try:
        with open(os.path.join(proc, "sys/kernel/perf_event_paranoid")) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


_WHY = {errno.ENOENT: "no PMU exposes this event", errno.ENODEV: "no PMU exposes this event",
        errno.EOPNOTSUPP: "not supported by the PMU", errno.EINVAL: "event or scope rejected by the kernel",
        errno.ESRCH: "target process is gone", errno.EMFILE: "too many open files",
        errno.EBUSY: "PMU is busy (held exclusively)", errno.ENOSYS: "kernel without perf events"}


_CGROUP_WHY = "ENOENT: the cgroup is not in a perf_event (v1) or cgroup2 hierarchy"


def reason(err: OSError, proc: str = "/proc") -> str:
    """A short text for hello: the errno name and what it means here."""
    name = errno.errorcode.get(err.errno or 0, str(err.errno))
    if err.errno in (errno.EACCES, errno.EPERM):
        return f"{name}: permission denied (perf_event_paranoid={paranoid(proc)}; needs CAP_PERFMON)"
    return f"{name}: {_WHY.get(err.errno, err.strerror)}"


@dataclass(frozen=True)
class Event:
    """One countable event; `scale` turns the raw count into base units (task-clock ns -> s)."""
    name: str
    type: int
    config: int
    scale: float = 1.0


def _cache(cache_id: int, op: int = 0, result: int = 1) -> int:
    return cache_id | op << 8 | result << 16


EVENTS = {e.name: e for e in [
    Event("cycles", TYPE_HARDWARE, 0), Event("instructions", TYPE_HARDWARE, 1),
    Event("cache_references", TYPE_HARDWARE, 2), Event("cache_misses", TYPE_HARDWARE, 3),
    Event("branch_instructions", TYPE_HARDWARE, 4), Event("branch_misses", TYPE_HARDWARE, 5),
    Event("l1d_read_misses", TYPE_HW_CACHE, _cache(0)), Event("llc_read_misses", TYPE_HW_CACHE, _cache(2)),
    Event("task_clock_seconds", TYPE_SOFTWARE, 1, 1e-9), Event("page_faults", TYPE_SOFTWARE, 2),
    Event("context_switches", TYPE_SOFTWARE, 3), Event("cpu_migrations", TYPE_SOFTWARE, 4),
]}
# Hardware events go in small groups: a PMU has few counters, and a group that does not fit is never
# scheduled. Pairs that form a ratio share a group so the ratio is measured over the same time.
DEFAULT_GROUPS = (("cycles", "instructions"), ("cache_references", "cache_misses"),
                  ("branch_instructions", "branch_misses"), ("l1d_read_misses",), ("llc_read_misses",),
                  ("task_clock_seconds", "page_faults", "context_switches", "cpu_migrations"))
# derived name -> (numerator, denominator), computed over each interval where both sides exist
DERIVED = {"ipc": ("instructions", "cycles"), "cpi": ("cycles", "instructions"),
           "cache_miss_ratio": ("cache_misses", "cache_references"),
           "branch_miss_ratio": ("branch_misses", "branch_instructions")}


class EventGroup:
    """One perf event group on one (pid, cpu): the first event that opens leads, the rest follow.

    Read with PERF_FORMAT_GROUP so all members are one consistent snapshot; counts are scaled by
    time_enabled / time_running when the kernel multiplexed the group.
    """

    def __init__(self, events, pid: int, cpu: int = -1, *, inherit: bool = False, cgroup: bool = False,
                 proc: str = "/proc"):
        self.opened: list[Event] = []
        self.failed: dict[str, str] = {}
        self.fds: list[int] = []
        fmt = FORMAT_GROUP | FORMAT_TOTAL_TIME_ENABLED | FORMAT_TOTAL_TIME_RUNNING
        for ev in events:
            attr = make_attr(ev.type, ev.config, read_format=fmt, disabled=not self.fds, inherit=inherit,
                             exclude_hv=True)
            try:
                fd = perf_event_open(attr, pid, cpu, self.fds[0] if self.fds else -1,
                                     FLAG_PID_CGROUP if cgroup else 0)
            except OSError as e:
                self.failed[ev.name] = (_CGROUP_WHY if cgroup and e.errno in (errno.ENOENT, errno.EBADF)
                                        else reason(e, proc))
                continue
            self.fds.append(fd)
            self.opened.append(ev)
        if self.fds:
            ioctl(self.fds[0], IOC_ENABLE, IOC_FLAG_GROUP)

    def read(self) -> list[float] | None:
        """Scaled counts in base units, one per opened event (see `scaled`)."""
        if not self.fds:
            return None
        return scaled(os.read(self.fds[0], 8 * (3 + len(self.fds))), [ev.scale for ev in self.opened])

    def close(self) -> None:
        for fd in reversed(self.fds):
            os.close(fd)
        self.fds, self.opened = [], []


def scaled(raw: bytes, units) -> list[float]:
    """A PERF_FORMAT_GROUP read {nr, time_enabled, time_running, values[nr]} (native u64 words) in base
    units, extrapolated by enabled/running when multiplexed; NaN when the group was enabled but never
    got a counter (a task that has not run since open is enabled for 0 ns and counts a true 0)."""
    nr, enabled, running = struct.unpack_from("=3Q", raw)
    counts = struct.unpack_from(f"={nr}Q", raw, 24)
    if running == 0:
        return [math.nan if enabled > 0 else 0.0] * nr
    factor = enabled / running
    return [c * u * factor for c, u in zip(counts, units)]


def derive(now: dict, last: dict) -> dict[str, float | None]:
    """DERIVED ratios over the interval between two cumulative snapshots, where both sides exist."""
    out: dict[str, float | None] = {}
    for name, (num, den) in DERIVED.items():
        if now.get(num) is not None and now.get(den) is not None:
            d_den = now[den] - last.get(den, 0.0)
            out[name] = (now[num] - last.get(num, 0.0)) / d_den if d_den > 0 else None
    return out


def _cpus(sysfs: str = "/sys") -> list[int]:
    """Online CPU numbers (system-wide and cgroup events need one event per CPU)."""
    try:
        with open(os.path.join(sysfs, "devices/system/cpu/online")) as f:
            text = f.read().strip()
    except OSError:
        return list(range(os.cpu_count() or 1))
    cpus: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


class CounterCollector:
    """Cumulative counters for one scope, plus derived ratios over each collect() interval.

    scope "process": `pid` and all its threads (one inherited group set per existing thread, so threads
    and children started later are counted too); "thread": the calling thread only (pid 0);
    "cgroup": the cgroup directory `cgroup` on every CPU; "system": every CPU (per-CPU values are
    returned as `<name>.cpu<N>` when `per_cpu`).
    """

    def __init__(self, scope: str = "process", pid: int | None = None, cgroup: str | None = None,
                 groups=DEFAULT_GROUPS, events=EVENTS, per_cpu: bool = False, proc: str = "/proc",
                 sysfs: str = "/sys"):
        self.scope, self.pid, self.cgroup, self.per_cpu = scope, pid, cgroup, per_cpu
        self.group_names, self.events, self.proc, self.sysfs = groups, events, proc, sysfs
        self._groups: list[tuple[int, EventGroup]] = []   # (cpu or -1, group)
        self._last: dict[str, float] = {}
        self._cgroup_fd: int | None = None
        self.availability: dict[str, str] = {}

    def _targets(self) -> list[tuple[int, int, bool, bool]]:
        """(pid, cpu, inherit, cgroup flag) for every group set this scope needs."""
        if self.scope == "thread":
            return [(0, -1, False, False)]
        if self.scope == "process":
            tids = sorted(int(t) for t in os.listdir(os.path.join(self.proc, str(self.pid), "task")))
            return [(tid, -1, True, False) for tid in tids]
        if self.scope == "cgroup":
            self._cgroup_fd = os.open(self.cgroup, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            return [(self._cgroup_fd, cpu, False, True) for cpu in _cpus(self.sysfs)]
        if self.scope == "system":
            return [(-1, cpu, False, False) for cpu in _cpus(self.sysfs)]
        raise ValueError(f"scope {self.scope!r}: expected process, thread, cgroup or system")

    def open(self) -> dict[str, str]:
        """Open every event that can be opened; returns availability {event: 'ok' | reason}."""
        self.close()
        try:
            targets = self._targets()
        except OSError as e:
            why = f"{errno.errorcode.get(e.errno or 0, e.errno)}: target not found ({e.filename or e.strerror})"
            self.availability = {name: why for g in self.group_names for name in g}
            return self.availability
        failed: dict[str, str] = {}
        ok: set[str] = set()
        for pid, cpu, inherit, cgroup in targets:
            for names in self.group_names:
                group = EventGroup([self.events[n] for n in names], pid, cpu, inherit=inherit, cgroup=cgroup,
                                   proc=self.proc)
                ok.update(ev.name for ev in group.opened)
                failed.update(group.failed)
                if group.fds:
                    self._groups.append((cpu, group))
        self.availability = {name: "ok" if name in ok else failed.get(name, "not opened")
                             for g in self.group_names for name in g}
        return self.availability

    def collect(self) -> dict[str, float | None]:
        """Cumulative counts since open() (None where no value) and interval ratios; never raises."""
        out = self.totals()
        derived = derive(out, self._last)
        self._last = {k: v for k, v in out.items() if v is not None}
        out.update(derived)
        return out

    def totals(self) -> dict[str, float | None]:
        """Cumulative counts since open() (None where no value), without ratios; never raises."""
        totals: dict[str, float] = {}
        for cpu, group in self._groups:
            try:
                values = group.read()
            except OSError as e:
                log.debug("reading perf group failed: %s", e)
                continue
            for ev, v in zip(group.opened, values):
                totals[ev.name] = totals.get(ev.name, 0.0) + v
                if self.per_cpu and cpu >= 0:
                    totals[f"{ev.name}.cpu{cpu}"] = v
        return {k: (None if math.isnan(v) else float(v)) for k, v in totals.items()}

    def __del__(self):
        self.close()

    def close(self) -> None:
        for _, group in self._groups:
            group.close()
        self._groups = []
        if self._cgroup_fd is not None:
            os.close(self._cgroup_fd)
            self._cgroup_fd = None


def thread_counters() -> CounterCollector:
    """Counters of the calling thread (software always, hardware where the PMU allows)."""
    c = CounterCollector(scope="thread")
    c.open()
    return c
