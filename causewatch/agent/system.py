"""psutil collectors: node metrics (cpu, load, memory, swap, disk, network) and one target process.

Each collect() returns {metric: value} in base units and never raises: a part psutil cannot read is
left out and its reason kept in `unavailable`, so the sampling loop goes on.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

import psutil

log = logging.getLogger(__name__)


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


class NodeCollector(_Parts):
    """Whole-node metrics; cpu utilisation is computed from cpu-time deltas between calls."""

    def __init__(self, per_cpu: bool = True):
        self.per_cpu = per_cpu
        self.unavailable: dict[str, str] = {}
        self._last_times: list[tuple[float, ...]] | None = None

    def collect(self) -> dict[str, float]:
        return self._run({"cpu": self._cpu, "load": self._load, "memory": self._memory,
                          "disk": self._disk, "net": self._net})

    def _cpu(self, out: dict) -> None:
        per = psutil.cpu_times(percpu=True)
        fields = per[0]._fields
        times = [tuple(t) for t in per]                                  # cpus x modes
        for j, mode in enumerate(fields):
            if mode in ("guest", "guest_nice"):   # already counted inside user/nice
                continue
            column = [row[j] for row in times]
            out[f"cpu_{mode}_seconds_total"] = float(sum(column))
            if self.per_cpu:
                out.update({f"cpu_{mode}_seconds_total.cpu{i}": float(v) for i, v in enumerate(column)})
        counted = [j for j, m in enumerate(fields) if m not in ("guest", "guest_nice")]
        busy_cols = [j for j in counted if fields[j] not in ("idle", "iowait")]
        if self._last_times is not None and len(self._last_times) == len(times):
            d = [[a - b for a, b in zip(now, last)] for now, last in zip(times, self._last_times)]
            total = [sum(row[j] for j in counted) for row in d]
            busy = [sum(row[j] for j in busy_cols) for row in d]
            if sum(total) > 0:
                out["cpu_utilization_ratio"] = float(sum(busy) / sum(total))
            if self.per_cpu:
                out.update({f"cpu_utilization_ratio.cpu{i}": float(b / t)
                            for i, (b, t) in enumerate(zip(busy, total)) if t > 0})
        self._last_times = times

    @staticmethod
    def _load(out: dict) -> None:
        out["load1"], out["load5"], out["load15"] = psutil.getloadavg()

    @staticmethod
    def _memory(out: dict) -> None:
        m, s = psutil.virtual_memory(), psutil.swap_memory()
        out.update(memory_total_bytes=m.total, memory_available_bytes=m.available, memory_used_bytes=m.used,
                   swap_total_bytes=s.total, swap_used_bytes=s.used, swap_in_bytes_total=s.sin,
                   swap_out_bytes_total=s.sout)

    @staticmethod
    def _disk(out: dict) -> None:
        d = psutil.disk_io_counters()
        if d is not None:
            out.update(disk_read_bytes_total=d.read_bytes, disk_written_bytes_total=d.write_bytes,
                       disk_reads_total=d.read_count, disk_writes_total=d.write_count)

    @staticmethod
    def _net(out: dict) -> None:
        n = psutil.net_io_counters()
        if n is not None:
            out.update(net_received_bytes_total=n.bytes_recv, net_sent_bytes_total=n.bytes_sent,
                       net_received_packets_total=n.packets_recv, net_sent_packets_total=n.packets_sent,
                       net_errors_total=n.errin + n.errout, net_dropped_total=n.dropin + n.dropout)


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
