"""/proc/stat, loadavg, meminfo, vmstat, pressure, filefd, entropy: node_exporter's cpu, stat, loadavg,
meminfo, vmstat, pressure, filefd and entropy collectors."""

from __future__ import annotations

import os
import re

from causewatch.agent.node.files import name, number, path, read

USER_HZ = os.sysconf("SC_CLK_TCK")
# /proc/stat's cpuN columns: the first eight are node_cpu_seconds_total's modes, then guest and guest_nice
MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
# /proc/stat's single-number lines
_STAT = {"ctxt": "node_context_switches_total", "btime": "node_boot_time_seconds",
         "processes": "node_forks_total", "procs_running": "node_procs_running",
         "procs_blocked": "node_procs_blocked", "intr": "node_intr_total"}
VMSTAT_FIELDS = re.compile(r"^(oom_kill|pgpg|pswp|pg.*fault).*")   # node_exporter's default --collector.vmstat.fields
_PARENS = re.compile(r"\((.*)\)")


class Stat:
    """/proc/stat: node_exporter's cpu collector (node_cpu_seconds_total{cpu,mode}, node_cpu_guest_seconds_total)
    and its stat collector (context switches, forks, interrupts, procs), from one read."""
    name = "stat"

    def __init__(self, proc: str = "/proc"):
        self.file = path(proc, "stat")
        self._cpus: dict[str, tuple[str, ...]] = {}   # "cpu3" -> its ten series' names

    def collect(self) -> dict[str, float]:
        out = {}
        for line in read(self.file).splitlines():
            key, _, rest = line.partition(" ")
            if key in _STAT:
                out[_STAT[key]] = float(rest.lstrip().split(" ", 1)[0])
            elif key.startswith("cpu") and key != "cpu":
                names = self._cpus.get(key) or self._cpus.setdefault(key, _cpu_names(key[3:]))
                out.update(zip(names, [int(v) / USER_HZ for v in rest.split()[:10]]))
        if not out:
            raise ValueError(f"{self.file}: no cpu or counter lines")
        return out


def _cpu_names(cpu: str) -> tuple[str, ...]:
    return (*(name("node_cpu_seconds_total", ("cpu", cpu), ("mode", m)) for m in MODES),
            *(name("node_cpu_guest_seconds_total", ("cpu", cpu), ("mode", m)) for m in ("user", "nice")))


class LoadAvg:
    name = "loadavg"

    def __init__(self, proc: str = "/proc"):
        self.file = path(proc, "loadavg")

    def collect(self) -> dict[str, float]:
        one, five, fifteen = read(self.file).split()[:3]
        return {"node_load1": float(one), "node_load5": float(five), "node_load15": float(fifteen)}


class MemInfo:
    """/proc/meminfo as node_memory_<Field>_bytes (kB fields) or node_memory_<Field> (page counts). The file's
    words are split once and read at the places its layout gives, the layout checked by its field names each run
    and worked out again when they differ (a third of the line-by-line parse)."""
    name = "meminfo"

    def __init__(self, proc: str = "/proc"):
        self.file = path(proc, "meminfo")
        self._layout: tuple[int, list[int], list[str], list[tuple[str, int, float]]] | None = None

    def collect(self) -> dict[str, float]:
        text = read(self.file)
        words = text.split()
        layout = self._layout
        if layout is None or len(words) != layout[0] or [words[i] for i in layout[1]] != layout[2]:
            layout = self._layout = self._plan(text, len(words))
        return {metric: float(words[i]) * factor for metric, i, factor in layout[3]}

    def _plan(self, text: str, width: int) -> tuple:
        """(words, where each field's name is, those names, (metric, value's place, factor) per field)."""
        places, keys, values, at = [], [], [], 0
        for line in text.splitlines():
            words = line.split()
            if len(words) not in (2, 3) or not words[0].endswith(":") or words[2:] not in ([], ["kB"]):
                raise ValueError(f"{self.file}: {line[:40]!r} is no 'Field: value [kB]' line")
            key, kb = words[0][:-1], len(words) == 3
            metric = "node_memory_" + _PARENS.sub(r"_\1", key) + ("_bytes" if kb else "")
            places.append(at)
            keys.append(words[0])
            values.append((metric, at + 1, 1024.0 if kb else 1.0))
            at += len(words)
        return width, places, keys, values


class VmStat:
    """/proc/vmstat's fields that node_exporter keeps by default (faults, paging, swapping, OOM kills)."""
    name = "vmstat"

    def __init__(self, proc: str = "/proc", fields: re.Pattern = VMSTAT_FIELDS):
        self.file, self.fields = path(proc, "vmstat"), fields
        self._keys: list[str] | None = None
        self._keep: list[tuple[int, str]] = []   # (the value's place among the words, metric)

    def collect(self) -> dict[str, float]:
        words = read(self.file).split()
        if len(words) % 2:
            raise ValueError(f"{self.file}: {len(words)} words, not name-value pairs")
        keys = words[0::2]
        if keys != self._keys:   # one comparison in C: the names as the last run had them
            self._keys, self._keep = keys, [(2 * i + 1, f"node_vmstat_{k}") for i, k in enumerate(keys)
                                            if self.fields.match(k)]
        if not self._keep:
            raise ValueError(f"{self.file}: none of the fields {self.fields.pattern}")
        return {metric: float(words[i]) for i, metric in self._keep}


# PSI: (resource, line) -> node_exporter's name (it exports no cpu "full" line)
_PRESSURE = {("cpu", "some"): "node_pressure_cpu_waiting_seconds_total",
             ("io", "some"): "node_pressure_io_waiting_seconds_total",
             ("io", "full"): "node_pressure_io_stalled_seconds_total",
             ("memory", "some"): "node_pressure_memory_waiting_seconds_total",
             ("memory", "full"): "node_pressure_memory_stalled_seconds_total"}


class Pressure:
    """/proc/pressure/{cpu,io,memory}: the stall totals (microseconds) as seconds."""
    name = "pressure"

    def __init__(self, proc: str = "/proc"):
        self.files = [(resource, path(proc, "pressure", resource)) for resource in ("cpu", "io", "memory")]

    def collect(self) -> dict[str, float]:
        out = {}
        for resource, file in self.files:
            for line in read(file).splitlines():
                kind, _, fields = line.partition(" ")
                total = fields.rpartition(" ")[2]
                if not total.startswith("total="):
                    raise ValueError(f"{file}: {line[:60]!r} has no total=")
                metric = _PRESSURE.get((resource, kind))
                if metric:
                    out[metric] = int(total[6:]) / 1e6
        return out


class FileFd:
    name = "filefd"

    def __init__(self, proc: str = "/proc"):
        self.file = path(proc, "sys/fs/file-nr")

    def collect(self) -> dict[str, float]:
        allocated, _, maximum = read(self.file).split()
        return {"node_filefd_allocated": float(allocated), "node_filefd_maximum": float(maximum)}


class Entropy:
    name = "entropy"

    def __init__(self, proc: str = "/proc"):
        self.dir = path(proc, "sys/kernel/random")

    def collect(self) -> dict[str, float]:
        return {"node_entropy_available_bits": number(read(path(self.dir, "entropy_avail")).strip()),
                "node_entropy_pool_size_bits": number(read(path(self.dir, "poolsize")).strip())}
