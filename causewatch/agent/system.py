"""The psutil collector of one target process (the node's own metrics are `causewatch/agent/node/`'s,
under node_exporter's names).

collect() returns {metric: value} in base units and never raises: a part psutil cannot read is left out
and its reason kept in `unavailable`, so the sampling loop goes on.
"""

from __future__ import annotations

import time
from typing import Callable

import psutil


class _Parts:
    """Runs named readers, each guarded, so one failing /proc file costs only its own metrics."""

    unavailable: dict[str, str]

    def _run(self, readers: dict[str, Callable[[dict], None]]) -> dict[str, float]:
        out: dict[str, float] = {}
        for part, reader in readers.items():
            try:
                reader(out)
                self.unavailable.pop(part, None)
            except (psutil.Error, OSError, RuntimeError, ValueError) as e:
                self.unavailable[part] = f"{type(e).__name__}: {e}"
        return out


class ProcessCollector(_Parts):
    """One target process: cpu, memory, io, threads, context switches; `clock` times utilisation."""

    def __init__(self, pid: int, clock: Callable[[], float] = time.monotonic):
        self.pid, self.clock = pid, clock
        self.unavailable: dict[str, str] = {}
        self._proc: psutil.Process | None = None
        self._last: tuple[float, float] | None = None   # (clock, cpu seconds)

    def collect(self) -> dict[str, float]:
        try:
            if self._proc is None:
                self._proc = psutil.Process(self.pid)
            with self._proc.oneshot():
                return self._run({"cpu": self._cpu, "memory": self._memory, "io": self._io,
                                  "threads": self._threads})
        except psutil.Error as e:
            self.unavailable["process"] = f"{type(e).__name__}: {e}"
            return {}

    def _cpu(self, out: dict) -> None:
        t = self._proc.cpu_times()
        now, cpu = self.clock(), t.user + t.system
        out.update(process_cpu_user_seconds_total=t.user, process_cpu_system_seconds_total=t.system,
                   process_children_cpu_seconds_total=t.children_user + t.children_system)
        if self._last is not None and now > self._last[0]:
            out["process_cpu_utilization_ratio"] = (cpu - self._last[1]) / (now - self._last[0])
        self._last = (now, cpu)

    def _memory(self, out: dict) -> None:
        m = self._proc.memory_info()
        out.update(process_resident_memory_bytes=m.rss, process_virtual_memory_bytes=m.vms)

    def _io(self, out: dict) -> None:
        io = self._proc.io_counters()
        out.update(process_read_bytes_total=io.read_bytes, process_written_bytes_total=io.write_bytes,
                   process_read_calls_total=io.read_count, process_write_calls_total=io.write_count)

    def _threads(self, out: dict) -> None:
        c = self._proc.num_ctx_switches()
        out.update(process_threads=self._proc.num_threads(), process_open_fds=self._proc.num_fds(),
                   process_voluntary_context_switches_total=c.voluntary,
                   process_involuntary_context_switches_total=c.involuntary)
