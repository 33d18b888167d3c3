"""What Slurm says of a job on this node: its owner, name and allocation, from a job process's environment
(SLURM_*) and from `scontrol show job -o ID`; and, where Slurm's proctrack is not cgroup, its steps
found as slurmstepd's child processes in /proc, counted process by process.

Nothing here raises: what cannot be read is left out (the caller says why the unit is counted less).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

SCONTROL_TIMEOUT = 3.0   # seconds: a controller that does not answer costs one tick, not the agent
_STEPD = re.compile(r"slurmstepd: \[(\d+)\.([A-Za-z0-9_]+)\]")
_SIZE = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}


def environ(pid: int, proc: str = "/proc") -> dict[str, str]:
    """The SLURM_* variables of a process (empty when it cannot be read)."""
    try:
        with open(os.path.join(proc, str(pid), "environ"), "rb") as f:
            pairs = f.read().split(b"\0")
    except OSError:
        return {}
    out = {}
    for pair in pairs:
        if pair.startswith(b"SLURM_"):
            key, _, value = pair.decode(errors="replace").partition("=")
            out[key] = value
    return out


def _count(text: str | None) -> int | None:
    """A Slurm count: `4`, or `2(x3)` (per node), as the first number."""
    m = re.match(r"\d+", text or "")
    return int(m[0]) if m else None


def size_bytes(text: str | None) -> int | None:
    """A Slurm size, megabytes by default (`200`, `200M`, `4G`), in bytes."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGTP]?)", (text or "").strip())
    return int(float(m[1]) * _SIZE[m[2] or "M"]) if m else None


def from_environ(env: dict[str, str]) -> dict:
    """The unit fields a job's environment gives: user, uid, job_name, cpus, memory_bytes, gpus."""
    out: dict = {}
    if env.get("SLURM_JOB_USER"):
        out["user"] = env["SLURM_JOB_USER"]
    if (env.get("SLURM_JOB_UID") or "").isdigit():
        out["uid"] = int(env["SLURM_JOB_UID"])
    if env.get("SLURM_JOB_NAME"):
        out["job_name"] = env["SLURM_JOB_NAME"]
    cpus = _count(env.get("SLURM_CPUS_ON_NODE") or env.get("SLURM_JOB_CPUS_PER_NODE"))
    if cpus is not None:
        out["cpus"] = float(cpus)
    memory = size_bytes(env.get("SLURM_MEM_PER_NODE"))
    if memory is None and cpus is not None and size_bytes(env.get("SLURM_MEM_PER_CPU")) is not None:
        memory = size_bytes(env["SLURM_MEM_PER_CPU"]) * cpus
    if memory is not None:
        out["memory_bytes"] = memory
    gpus = _count(env.get("SLURM_GPUS_ON_NODE"))
    if gpus is None and env.get("SLURM_JOB_GPUS"):
        gpus = len(env["SLURM_JOB_GPUS"].split(","))
    if gpus is not None:
        out["gpus"] = gpus
    return out


def parse_show_job(line: str) -> dict:
    """The unit fields of one `scontrol show job -o` line: the job's owner and name, and its TRES per node
    (a job's TRES are its totals over NumNodes)."""
    fields = dict(token.split("=", 1) for token in line.split() if "=" in token)
    out: dict = {}
    m = re.fullmatch(r"([^()]+)\((\d+)\)", fields.get("UserId", ""))
    if m:
        out.update(user=m[1], uid=int(m[2]))
    if fields.get("JobName"):
        out["job_name"] = fields["JobName"]
    nodes = max(1, _count(fields.get("NumNodes")) or 1)
    tres = dict(t.split("=", 1) for t in fields.get("TRES", "").split(",") if "=" in t)
    if _count(tres.get("cpu")) is not None:
        out["cpus"] = _count(tres["cpu"]) / nodes
    if size_bytes(tres.get("mem")) is not None:
        out["memory_bytes"] = size_bytes(tres["mem"]) // nodes
    gpus = tres.get("gres/gpu")
    if _count(gpus) is not None:
        out["gpus"] = _count(gpus) // nodes
    return out


def show_job(job_id: str, conf: str | None = None, scontrol: str | None = None) -> tuple[dict, str | None]:
    """(`parse_show_job` of the job, None) from scontrol, or ({}, why not). `conf`: the job's SLURM_CONF
    (a node may serve a cluster whose configuration is not the default one)."""
    scontrol = scontrol or shutil.which("scontrol")
    if scontrol is None:
        return {}, "no scontrol on PATH"
    env = {**os.environ, "SLURM_CONF": conf} if conf else None
    try:
        done = subprocess.run([scontrol, "show", "job", "-o", job_id], capture_output=True, text=True,
                              timeout=SCONTROL_TIMEOUT, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {}, f"scontrol show job {job_id}: {type(e).__name__}: {e}"
    if done.returncode != 0:
        return {}, f"scontrol show job {job_id}: {(done.stderr or done.stdout).strip()[:200]}"
    return parse_show_job(done.stdout), None


def stepd_step(cmdline: bytes) -> tuple[str, str] | None:
    """(job id, step) of a slurmstepd's command line, `slurmstepd: [42.batch]`."""
    m = _STEPD.search(cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return (m[1], m[2]) if m else None


def read_stat(pid: int, proc: str = "/proc") -> tuple | None:
    """(ppid, utime, stime, cutime, cstime, starttime) in clock ticks from /proc/PID/stat, or None."""
    try:
        with open(os.path.join(proc, str(pid), "stat"), "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[1]), int(fields[11]), int(fields[12]), int(fields[13]), int(fields[14]), int(fields[19]))


class StepdFinder:
    """slurmstepd processes by /proc's listing and each new pid's `comm` (read once per pid): a listing a
    tick, not a read per process."""

    def __init__(self, proc: str = "/proc"):
        self.proc = proc
        self._comm: dict[int, bytes] = {}
        self._steps: dict[int, tuple[str, str] | None] = {}

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in os.listdir(self.proc) if p.isdigit()]
        except OSError:
            return []

    def find(self, pids: list[int]) -> dict[int, tuple[str, str]]:
        """{slurmstepd pid: (job id, step)} among `pids`."""
        alive = set(pids)
        for gone in [p for p in self._comm if p not in alive]:
            del self._comm[gone]
            self._steps.pop(gone, None)
        for pid in pids:
            if pid not in self._comm:
                self._comm[pid] = self._read(pid, "comm").strip()
        found = {}
        for pid in pids:
            if self._comm[pid] == b"slurmstepd":
                if self._steps.get(pid) is None:
                    self._steps[pid] = stepd_step(self._read(pid, "cmdline"))
                if self._steps[pid] is not None:
                    found[pid] = self._steps[pid]
        return found

    def _read(self, pid: int, name: str) -> bytes:
        try:
            with open(os.path.join(self.proc, str(pid), name), "rb") as f:
                return f.read()
        except OSError:
            return b""


def process_tree(stats: dict[int, tuple], top: int) -> list[int]:
    """The pids below `top` (not itself) by the ppid of each in `stats` ({pid: read_stat})."""
    children: dict[int, list[int]] = {}
    for pid, stat in stats.items():
        children.setdefault(stat[0], []).append(pid)
    out, stack = [], list(children.get(top, ()))
    while stack:
        pid = stack.pop()
        out.append(pid)
        stack.extend(children.get(pid, ()))
    return out


class StepCounter:
    """One step's counters from its processes' /proc files. CPU seconds: slurmstepd's reaped children
    (cutime, cstime), the live processes below it with what they reaped, and the last reading of a
    process whose parent went before it could reap it (then no one's cutime holds it). Read and written
    bytes: the live processes' and the last reading of each gone one. Resident memory and its
    high-water mark."""

    def __init__(self, stepd: int, proc: str = "/proc"):
        self.stepd, self.proc = stepd, proc
        self.tick = os.sysconf("SC_CLK_TCK")
        self.page = os.sysconf("SC_PAGE_SIZE")
        # (pid, start ticks) -> (ppid, user s, system s, read bytes, written bytes) at the last tick
        self._last: dict[tuple[int, int], tuple[int, float, float, int, int]] = {}
        self._gone = [0.0, 0.0, 0, 0]   # what no live reading holds any more: user, system, read, written
        self.peak = 0.0
        self.unavailable = {"memory_events": "no cgroup: this step's processes are slurmstepd's children "
                                              "(Slurm's proctrack is not cgroup here)",
                            "pressure": "no cgroup: pressure stall information is per cgroup"}

    def collect(self, stats: dict[int, tuple]) -> dict[str, float]:
        """The step's counters from this tick's {pid: read_stat} of every process."""
        own = stats.get(self.stepd)
        if own is None:
            return {}
        tree = process_tree(stats, self.stepd)
        rss, now = 0, {}
        for pid in tree:
            ppid, utime, stime, cutime, cstime, start = stats[pid]
            read, written, resident = self._io_memory(pid)
            rss += resident
            now[(pid, start)] = (ppid, (utime + cutime) / self.tick, (stime + cstime) / self.tick, read, written)
        live = {pid for pid, _ in now} | {self.stepd}
        for key, (ppid, user, system, read, written) in self._last.items():
            if key not in now:
                if ppid not in live:
                    self._gone[0] += user
                    self._gone[1] += system
                self._gone[2] += read
                self._gone[3] += written
        self._last = now
        user = own[3] / self.tick + sum(r[1] for r in now.values()) + self._gone[0]
        system = own[4] / self.tick + sum(r[2] for r in now.values()) + self._gone[1]
        self.peak = max(self.peak, float(rss))
        return {"unit_cpu_seconds_total": user + system, "unit_cpu_user_seconds_total": user,
                "unit_cpu_system_seconds_total": system, "unit_processes": float(len(tree)),
                "unit_memory_bytes": float(rss), "unit_memory_peak_bytes": self.peak,
                "unit_io_read_bytes_total": float(sum(r[3] for r in now.values()) + self._gone[2]),
                "unit_io_written_bytes_total": float(sum(r[4] for r in now.values()) + self._gone[3])}

    def _io_memory(self, pid: int) -> tuple[int, int, int]:
        """(read bytes, written bytes, resident bytes) of a process; 0 for what cannot be read."""
        base = os.path.join(self.proc, str(pid))
        read = written = resident = 0
        try:
            with open(os.path.join(base, "statm")) as f:
                resident = int(f.read().split()[1]) * self.page
            with open(os.path.join(base, "io")) as f:
                io = dict(line.split(": ", 1) for line in f.read().splitlines() if ": " in line)
            read, written = int(io.get("read_bytes", 0)), int(io.get("write_bytes", 0))
        except (OSError, ValueError, IndexError):
            pass   # gone since the listing
        return read, written, resident
