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

    def collect(self) -> dict[str, float]:
        out = {}
        for line in read(self.file).splitlines():
            key, _, rest = line.partition(" ")
            if key.startswith("cpu") and key != "cpu":
                out.update(zip(_cpu_names(key[3:]), (int(v) / USER_HZ for v in rest.split()[:10])))
            elif key in _STAT:
                out[_STAT[key]] = float(rest.lstrip().split(" ", 1)[0])
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
    """/proc/meminfo as node_memory_<Field>_bytes (kB fields) or node_memory_<Field> (page counts)."""
    name = "meminfo"

    def __init__(self, proc: str = "/proc"):
        self.file = path(proc, "meminfo")
        self._names: dict[tuple[str, bool], str] = {}

    def collect(self) -> dict[str, float]:
        out = {}
        for line in read(self.file).splitlines():
            key, sep, rest = line.partition(":")
            if not sep:
                raise ValueError(f"{self.file}: {line[:40]!r} is no 'Field: value' line")
            value, *unit = rest.split()
            kb = bool(unit)
            metric = self._names.get((key, kb)) or self._name(key, kb)
            out[metric] = float(value) * 1024 if kb else float(value)
        return out

    def _name(self, key: str, kb: bool) -> str:
        metric = "node_memory_" + _PARENS.sub(r"_\1", key) + ("_bytes" if kb else "")
        self._names[(key, kb)] = metric
        return metric


class VmStat:
    """/proc/vmstat's fields that node_exporter keeps by default (faults, paging, swapping, OOM kills)."""
    name = "vmstat"

    def __init__(self, proc: str = "/proc", fields: re.Pattern = VMSTAT_FIELDS):
        self.file, self.fields = path(proc, "vmstat"), fields
        self._keep: dict[tuple[str, ...], list[tuple[int, str]]] = {}

    def collect(self) -> dict[str, float]:
        words = read(self.file).split()
        if len(words) % 2:
            raise ValueError(f"{self.file}: {len(words)} words, not name-value pairs")
        keys = tuple(words[0::2])
        keep = self._keep.get(keys)
        if keep is None:
            keep = self._keep[keys] = [(i, f"node_vmstat_{k}") for i, k in enumerate(keys) if self.fields.match(k)]
        if not keep:
            raise ValueError(f"{self.file}: none of the fields {self.fields.pattern}")
        values = words[1::2]
        return {metric: float(values[i]) for i, metric in keep}


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
        self.dir = path(proc, "pressure")

    def collect(self) -> dict[str, float]:
        out = {}
        for resource in ("cpu", "io", "memory"):
            for line in read(path(self.dir, resource)).splitlines():
                kind, *fields = line.split()
                metric = _PRESSURE.get((resource, kind))
                total = fields[-1] if fields else ""
                if not total.startswith("total="):
                    raise ValueError(f"{self.dir}/{resource}: {line[:60]!r} has no total=")
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
