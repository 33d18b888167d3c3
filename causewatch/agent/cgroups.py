"""cgroup v2 accounting of one cgroup: cpu.stat, memory.current/peak/events, io.stat and the pressure
files, as a unit's counters in base units; and what a cgroup says of its allocation (cpuset, memory.max).

`CgroupCounter.collect()` never raises: a file the kernel does not offer (a controller not enabled for
the cgroup, a kernel without PSI) leaves its metrics out, its reason kept in `unavailable`.
"""

from __future__ import annotations

import itertools
import os

USEC = 1e-6
# ticks a part whose file is missing (its controller not enabled) is passed over before it is looked for
# again: a controller enabled later is counted from then on, and a missing file costs no failed open a tick
RETRY_ABSENT = 30
# cpu.stat key -> metric (microseconds -> seconds; nr_* are counts)
_CPU = {"usage_usec": "unit_cpu_seconds_total", "user_usec": "unit_cpu_user_seconds_total",
        "system_usec": "unit_cpu_system_seconds_total", "throttled_usec": "unit_cpu_throttled_seconds_total",
        "nr_periods": "unit_cpu_periods_total", "nr_throttled": "unit_cpu_throttled_periods_total"}
_EVENTS = {"oom": "unit_memory_oom_events_total", "oom_kill": "unit_memory_oom_kills_total"}
_IO = {"rbytes": "unit_io_read_bytes_total", "wbytes": "unit_io_written_bytes_total",
       "rios": "unit_io_reads_total", "wios": "unit_io_writes_total"}
# node_exporter's names for the node's pressure (node_pressure_*), per unit
_PRESSURE = {("cpu", "some"): "unit_pressure_cpu_waiting_seconds_total",
             ("memory", "some"): "unit_pressure_memory_waiting_seconds_total",
             ("memory", "full"): "unit_pressure_memory_stalled_seconds_total",
             ("io", "some"): "unit_pressure_io_waiting_seconds_total",
             ("io", "full"): "unit_pressure_io_stalled_seconds_total"}
METRICS = (*_CPU.values(), "unit_memory_bytes", "unit_memory_peak_bytes", *_EVENTS.values(), *_IO.values(),
           *_PRESSURE.values())
# why a file is absent, by the controller that would offer it
_CONTROLLER = {"cpu.stat": "cpu", "memory.current": "memory", "memory.peak": "memory", "memory.events": "memory",
               "io.stat": "io"}


def find_root(mounts: str = "/proc/self/mounts") -> str | None:
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified beside v1's
    controllers), or None."""
    try:
        with open(mounts) as f:
            found = [line.split()[1] for line in f if line.split()[2:3] == ["cgroup2"]]
    except OSError:
        return None
    return min(found, key=len) if found else None


def cgroup_of(pid: int, proc: str = "/proc") -> str | None:
    """A process's cgroup v2 path (/proc/PID/cgroup's `0::` line, relative to the hierarchy's root), or None."""
    try:
        text = read_text(os.path.join(proc, str(pid), "cgroup"))
    except OSError:
        return None
    return next((line[3:] for line in text.splitlines() if line.startswith("0::")), None)


def read_text(path: str) -> str:
    """A small kernel file's text: os.open and os.read, a third of a Python file object's cost (each unit
    reads four to eight files a tick)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = [os.read(fd, 65536)]
        while len(chunks[-1]) == 65536:
            chunks.append(os.read(fd, 65536))
    finally:
        os.close(fd)
    return b"".join(chunks).decode()


def flat_keyed(text: str) -> dict[str, int]:
    """`key value` lines (cpu.stat, memory.events) as {key: int}."""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            out[key] = int(value)
    return out


def io_totals(text: str) -> dict[str, int]:
    """io.stat's `MAJ:MIN rbytes=.. wbytes=.. rios=.. wios=..` lines summed over the devices."""
    out = dict.fromkeys(_IO, 0)
    for line in text.splitlines():
        for field in line.split()[1:]:
            key, _, value = field.partition("=")
            if key in out and value.isdigit():
                out[key] += int(value)
    return out


def pressure_totals(text: str) -> dict[str, int]:
    """A pressure file's `some`/`full` lines as {line: total stall microseconds}."""
    out = {}
    for line in text.splitlines():
        kind, *fields = line.split()
        for field in fields:
            if field.startswith("total="):
                out[kind] = int(field[len("total="):])
    return out


def cpuset_size(text: str) -> int:
    """How many CPUs a cpuset list names (`0-3,8,10-11` -> 7)."""
    count = 0
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            count += int(hi or lo) - int(lo) + 1
    return count


def allocation(path: str) -> dict:
    """What the cgroup allows: {cpuset, cpus, memory_bytes} as far as its files say (cpu.max's quota
    narrows the cpuset's count; "max" is no limit, left out)."""
    out: dict = {}
    try:
        cpuset = read_text(os.path.join(path, "cpuset.cpus.effective")).strip()
        if cpuset:
            out.update(cpuset=cpuset, cpus=float(cpuset_size(cpuset)))
    except (OSError, ValueError):
        pass
    try:
        quota, period = read_text(os.path.join(path, "cpu.max")).split()[:2]
        if quota != "max":
            out["cpus"] = min(out.get("cpus", float("inf")), int(quota) / int(period))
    except (OSError, ValueError):
        pass
    try:
        limit = read_text(os.path.join(path, "memory.max")).strip()
        if limit != "max":
            out["memory_bytes"] = int(limit)
    except (OSError, ValueError):
        pass
    return out


def _pids(path: str, skip: tuple[str, ...] = ()):
    """The processes of the cgroup and of the ones below it, folder by folder, not into folders named in `skip`."""
    for folder, dirs, _ in os.walk(path):
        dirs[:] = [d for d in dirs if d not in skip]
        try:
            with open(os.path.join(folder, "cgroup.procs")) as f:
                found = [int(line) for line in f.read().split()]
        except (OSError, ValueError):
            continue
        yield from found


def some_pids(path: str, most: int = 8) -> list[int]:
    """Up to `most` processes of the cgroup and the ones below it (Slurm keeps a step's tasks in
    user/task_N), leaving out a `slurm` folder's: slurmstepd's own, whose environment is not the job's."""
    return list(itertools.islice(_pids(path, ("slurm",)), most))


def pids(path: str) -> list[int]:
    """Every process of the cgroup and of the ones below it."""
    return list(_pids(path))


class CgroupCounter:
    """One cgroup's accounting; `path` is its folder in the cgroup v2 hierarchy."""

    def __init__(self, path: str):
        self.path = path
        self.unavailable: dict[str, str] = {}
        self.peak = 0.0   # memory.current's high-water mark seen, where the kernel has no memory.peak
        self._absent: dict[str, int] = {}   # part -> ticks before its missing file is looked for again

    def collect(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for part, reader in (("cpu", self._cpu), ("memory", self._memory), ("memory_events", self._events),
                             ("io", self._io), ("pressure", self._pressure)):
            if self._absent.get(part, 0) > 0:   # a file the kernel does not offer is looked for now and then
                self._absent[part] -= 1
                continue
            part_out: dict[str, float] = {}
            try:
                reader(part_out)   # a part is there whole or not at all
                out.update(part_out)
                self.unavailable.pop(part, None)
            except (OSError, ValueError) as e:
                self.unavailable[part] = self._why(e)
                if isinstance(e, FileNotFoundError) and os.path.isdir(self.path):
                    self._absent[part] = RETRY_ABSENT
        return out

    def _why(self, e: Exception) -> str:
        name = os.path.basename(getattr(e, "filename", "") or "")
        if isinstance(e, FileNotFoundError) and not os.path.isdir(self.path):
            return "the cgroup is gone"
        if isinstance(e, FileNotFoundError) and name in _CONTROLLER:
            return (f"no {name}: the {_CONTROLLER[name]} controller is not enabled for this cgroup (its "
                    f"parent's cgroup.subtree_control; on a hybrid host it may be bound to cgroup v1)")
        if isinstance(e, FileNotFoundError) and name.endswith(".pressure"):
            return f"no {name}: the kernel offers no pressure stall information (psi=1)"
        return f"{type(e).__name__}: {e}"

    def _file(self, name: str) -> str:
        return read_text(os.path.join(self.path, name))

    def _cpu(self, out: dict) -> None:
        for key, value in flat_keyed(self._file("cpu.stat")).items():
            if key in _CPU:
                out[_CPU[key]] = value * USEC if key.endswith("_usec") else float(value)

    def _memory(self, out: dict) -> None:
        current = float(self._file("memory.current"))
        out["unit_memory_bytes"] = current
        try:
            self.peak = max(self.peak, float(self._file("memory.peak")))
        except FileNotFoundError:   # before Linux 5.19: the highest value sampled
            self.peak = max(self.peak, current)
        out["unit_memory_peak_bytes"] = self.peak

    def _events(self, out: dict) -> None:
        events = flat_keyed(self._file("memory.events"))
        out.update({metric: float(events.get(key, 0)) for key, metric in _EVENTS.items()})

    def _io(self, out: dict) -> None:
        out.update({_IO[key]: float(v) for key, v in io_totals(self._file("io.stat")).items()})

    def _pressure(self, out: dict) -> None:
        for resource in ("cpu", "memory", "io"):
            for line, total in pressure_totals(self._file(f"{resource}.pressure")).items():
                metric = _PRESSURE.get((resource, line))
                if metric:
                    out[metric] = total * USEC
