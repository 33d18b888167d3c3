"""Perf events of one unit in cgroup mode (perf_event_open with PERF_FLAG_PID_CGROUP: the unit's cgroup
folder as the pid, one event per CPU), each event its own group so that each is scaled by its own
enabled and running times and says its duty cycle (running / enabled) beside its count.

`open()` gives {event: "ok" or why not}, as hello does for the node's events; `collect()` never raises.
"""

from __future__ import annotations

import errno
import os
import struct

from causewatch.agent import perf

# Events counted per unit: the cheap software ones and the two an IPC needs (each costs a file per CPU a unit)
UNIT_EVENTS = ("task_clock_seconds", "context_switches", "cpu_migrations", "page_faults", "cycles", "instructions")
_FORMAT = perf.FORMAT_TOTAL_TIME_ENABLED | perf.FORMAT_TOTAL_TIME_RUNNING
NO_CGROUP = "no perf_event cgroup for this unit"


def metric(event: str) -> str:
    return f"unit_perf_{event}_total"


def duty(event: str) -> str:
    return f"unit_perf_{event}_running_ratio"


class UnitPerf:
    """The events `events` (names of perf.EVENTS) of the cgroup folder `cgroup` (cgroup v2, or a perf_event
    v1 controller's folder) on every online CPU."""

    def __init__(self, cgroup: str, events=UNIT_EVENTS, proc: str = "/proc", sysfs: str = "/sys"):
        self.cgroup, self.events, self.proc, self.sysfs = cgroup, events, proc, sysfs
        self.fds: dict[str, list[int]] = {}
        self.availability: dict[str, str] = {}

    def open(self) -> dict[str, str]:
        self.close()
        try:
            folder = os.open(self.cgroup, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            self.availability = dict.fromkeys(self.events, f"{NO_CGROUP} ({e.strerror}: {self.cgroup})")
            return self.availability
        try:   # the kernel holds the cgroup for each event: the folder's descriptor is not needed after
            cpus = perf._cpus(self.sysfs)
            self.availability = {name: self._open_event(perf.EVENTS[name], folder, cpus) for name in self.events}
        finally:
            os.close(folder)
        return self.availability

    def _open_event(self, ev: perf.Event, folder: int, cpus: list[int]) -> str:
        fds: list[int] = []
        for cpu in cpus:
            try:
                attr = perf.make_attr(ev.type, ev.config, read_format=_FORMAT, exclude_hv=True)
                fds.append(perf.perf_event_open(attr, folder, cpu, -1, perf.FLAG_PID_CGROUP))
            except OSError as e:
                for fd in fds:
                    os.close(fd)
                return self._why(ev, e)
        self.fds[ev.name] = fds
        return "ok"

    def _why(self, ev: perf.Event, e: OSError) -> str:
        # a software event is there on every kernel with perf: refused, it is the cgroup that cannot be counted
        if e.errno in (errno.EBADF, errno.ENOENT) and ev.type == perf.TYPE_SOFTWARE:
            name = errno.errorcode[e.errno]
            return f"{NO_CGROUP} ({name}: {self.cgroup} is in no perf_event v1 or cgroup2 hierarchy)"
        return perf.reason(e, self.proc)

    def collect(self) -> dict[str, float]:
        """Per event its count since open, each CPU's scaled by its own enabled / running, and its duty
        cycle (running / enabled over the CPUs; absent while the unit has not run since open)."""
        out: dict[str, float] = {}
        for name, fds in self.fds.items():
            total = enabled = running = 0.0
            try:
                for fd in fds:
                    value, on, ran = struct.unpack("=3Q", os.read(fd, 24))
                    total += value * on / ran if ran else 0.0
                    enabled, running = enabled + on, running + ran
            except OSError:
                continue
            out[metric(name)] = total * perf.EVENTS[name].scale
            if enabled:
                out[duty(name)] = running / enabled
        return out

    def close(self) -> None:
        for fds in self.fds.values():
            for fd in fds:
                os.close(fd)
        self.fds = {}
