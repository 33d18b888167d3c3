"""The node's units followed tick by tick: found (`units.scan` of the cgroup v2 hierarchy; Slurm steps also as
slurmstepd's children where no job cgroup was ever seen), named and counted, each start, change and end a
`unit` record, each tick's counters a row of the unit's scope (docs/agent.md, "Units").

Records go once per change, never as labels on samples. The running set is kept in a state file, so an
agent that restarts goes on with the same units (same start) and ends those that ended while it was down.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import shutil
import time
from dataclasses import dataclass, field
from typing import Callable

from causewatch.agent import cgroups, slurm, units

log = logging.getLogger(__name__)
PARTS = ("cpu", "memory", "memory_events", "io", "pressure")
ENRICH_TICKS = 10        # ticks a job's owner and allocation are looked for when its first look found none
# ends go children first, starts parents first: a step never outlives its job in the records' order
_DEPTH = {"job": 0, "pod": 0, "service": 0, "step": 1, "container": 1}
_SUMMED = ("unit_cpu_seconds_total", "unit_cpu_user_seconds_total", "unit_cpu_system_seconds_total",
           "unit_io_read_bytes_total", "unit_io_written_bytes_total", "unit_memory_bytes", "unit_processes")


@dataclass
class Running:
    """A unit being followed: its record as last sent, how it is counted, its newest counters."""
    record: dict
    counter: object | None = None          # CgroupCounter, StepCounter, or None (a job summed from its steps)
    stepd: int | None = None
    row: dict = field(default_factory=dict)
    ended_steps: dict = field(default_factory=dict)   # a proc-found job's ended steps' totals, by name
    peak: float = 0.0
    tries: int = 0
    restored: bool = False     # from the state file: its start was sent by an earlier run of the agent
    asked: bool = False        # scontrol was asked about the job


def slurm_installed() -> bool:
    return bool(shutil.which("slurmstepd") or shutil.which("slurmstepd", path="/usr/sbin:/sbin"))


def user_name(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def owner_uid(pid: int, proc: str = "/proc") -> int | None:
    """The real uid of a process (/proc/PID/status), or None."""
    try:
        with open(os.path.join(proc, str(pid), "status")) as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


class UnitWatch:
    """`root`: the cgroup v2 hierarchy to scan (None: none); `slurm_procs`: look for slurmstepd's children
    while no job cgroup was seen; `state`: the state file (None: none)."""

    def __init__(self, root: str | None, proc: str = "/proc", slurm_procs: bool = False, state: str | None = None,
                 clock: Callable[[], float] = time.time, scontrol: str | None = None):
        self.root, self.proc, self.slurm_procs, self.state = root, proc, slurm_procs, state
        self.clock, self.scontrol = clock, scontrol
        self.running: dict[str, Running] = {}
        self._stepds = slurm.StepdFinder(proc)
        self._job_cgroups = False    # a Slurm job was found as a cgroup: Slurm's proctrack is cgroup here
        self._restored: dict[str, dict] = {}
        self._failed: set[str] = set()   # reasons a tick failed, each logged once
        self._stats: dict[int, tuple] = {}   # this tick's /proc/PID/stat of every process, while steps are found there
        self._mount: str | None = None      # where cgroup v2 is mounted: /proc/PID/cgroup's paths are below it

    def open(self) -> dict[str, str]:
        """What the units are found by here, "ok" or why not (hello's counters); the state file read."""
        self._restored = self._load()
        self._mount = cgroups.find_root(os.path.join(self.proc, "self/mounts"))
        cgroup = "ok" if self.root and os.path.isdir(self.root) else (
            f"{self.root}: no such folder" if self.root else "no cgroup v2 hierarchy mounted (/proc/self/mounts)")
        procs = "ok" if self.slurm_procs else "off (no slurmstepd on this node)"
        return {"units.cgroup": cgroup, "units.slurm_procs": procs}

    # ---- a tick ----
    def tick(self) -> tuple[list[dict], dict[str, dict]]:
        """(the unit records of this tick's changes, in order; {unit: its counters now}); never raises: a
        tick that fails is logged (once per reason) and sends nothing, and the next one tries again."""
        try:
            return self._tick()
        except Exception as e:   # the sampling loop goes on without this tick's units
            reason = f"{type(e).__name__}: {e}"
            if reason not in self._failed:
                self._failed.add(reason)
                log.warning("following the node's units failed this tick (logged once): %s", reason, exc_info=True)
            return [], {}

    def _tick(self) -> tuple[list[dict], dict[str, dict]]:
        now = self.clock()
        found = units.scan(self.root) if self.root else {}
        if any(f.kind == "job" for f in found.values()):
            self._job_cgroups = True
        self._stats = self._procs_found(found) if self.slurm_procs and not self._job_cgroups else {}
        records = [self._end(name, now) for name in sorted(set(self.running) - set(found),
                                                            key=lambda n: -_DEPTH[self.running[n].record["kind"]])]
        records += self._restored_ends(found, now)
        new = sorted(set(found) - set(self.running), key=lambda n: _DEPTH[found[n].kind])
        for name in new:
            self.running[name] = self._start(found[name], now)
        for name in new:   # once every new unit is there: a job found by its steps reads their processes
            if not self.running[name].restored:
                self._describe(self.running[name])
        rows = self._count(self._stats)
        for name in new:
            run = self.running[name]
            run.record["counted"] = self._counted(run)
            if not run.restored:
                records.append({**run.record, "event": "start"})
        records += self._enrich_later(set(new))
        if records:
            self._save()
        return records, rows

    def _procs_found(self, found: dict[str, units.Found]) -> dict[int, tuple]:
        """Slurm steps as slurmstepd processes, and their jobs, added to `found`; every process's stat."""
        pids = self._stepds.pids()
        stepds = self._stepds.find(pids)
        if not stepds:
            return {}
        stats = {pid: s for pid in pids if (s := slurm.read_stat(pid, self.proc)) is not None}
        for pid, (job, step) in stepds.items():
            found.setdefault(f"job:{job}", units.Found(f"job:{job}", "job", "", job_id=job, extra={"stepd": pid}))
            found[f"step:{job}.{step}"] = units.Found(f"step:{job}.{step}", "step", "", f"job:{job}", job, step,
                                                      extra={"stepd": pid})
        return stats

    def _restored_ends(self, found: dict, now: float) -> list[dict]:
        """The units of the state file that are gone now: ended while the agent was down (no totals)."""
        if not self._restored:
            return []
        gone = [r for name, r in self._restored.items() if name not in found]
        self._restored = {name: r for name, r in self._restored.items() if name in found}
        return [{**r, "event": "end", "end": now, "extra": {**r.get("extra", {}), "ended_unseen": True}}
                for r in gone]

    def unit_of(self, pid: int) -> str | None:
        """The deepest running unit whose cgroup holds the process (a step before its job), or None."""
        path = cgroups.of_process(pid, self.proc)
        if path is None or self._mount is None:
            return None
        where = self._mount + path.rstrip("/")
        best, depth = None, -1
        for name, run in self.running.items():
            cgroup = run.record.get("cgroup")
            if cgroup and len(cgroup) > depth and (where == cgroup or where.startswith(cgroup + "/")):
                best, depth = name, len(cgroup)
        return best

    # ---- start, end ----
    def _start(self, f: units.Found, now: float) -> Running:
        restored = self._restored.pop(f.name, None)
        record = restored or {"unit": f.name, "kind": f.kind, "start": now, "source": "cgroup" if f.path else "proc"}
        for key, value in (("parent", f.parent), ("job_id", f.job_id), ("step", f.step), ("cgroup", f.path or None)):
            if value is not None:
                record[key] = value
        extra = {k: v for k, v in f.extra.items() if k != "stepd"}
        if extra:
            record["extra"] = {**record.get("extra", {}), **extra}
        run = Running(record, stepd=f.extra.get("stepd"), restored=restored is not None)
        if f.path:
            run.counter = cgroups.CgroupCounter(f.path)
        elif f.kind == "step":
            run.counter = slurm.StepCounter(run.stepd, self.proc)
        if run.stepd is not None and not restored:   # found by a slurmstepd: it started when that did
            run.record["start"] = self._started(run.stepd, now)
        return run

    def _started(self, pid: int, default: float) -> float:
        """When a process started, unix seconds (/proc/PID/stat's start ticks after boot)."""
        stat = slurm.read_stat(pid, self.proc)
        try:
            with open(os.path.join(self.proc, "stat")) as f:
                boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
        except (OSError, StopIteration, ValueError):
            return default
        return boot + stat[5] / os.sysconf("SC_CLK_TCK") if stat else default

    def _end(self, name: str, now: float) -> dict:
        run = self.running.pop(name)
        parent = self.running.get(run.record.get("parent") or "")
        if parent is not None and parent.counter is None:   # a proc-found job keeps its ended steps' totals
            parent.ended_steps[name] = run.row
        totals = {k: v for k, v in run.row.items() if v == v}
        end = {**run.record, "event": "end", "end": max(now, run.record["start"])}
        return {**end, "totals": totals} if totals else end

    # ---- counting ----
    def _count(self, stats: dict[int, tuple]) -> dict[str, dict]:
        rows = {}
        for name, run in self.running.items():
            if isinstance(run.counter, slurm.StepCounter):
                run.row = run.counter.collect(stats)
            elif run.counter is not None:
                run.row = run.counter.collect()
            else:
                continue
            rows[name] = run.row
        for name, run in self.running.items():
            if run.counter is None:   # a job found by its slurmstepd processes: the sum of its steps
                rows[name] = run.row = self._sum_steps(name, run)
        return {name: row for name, row in rows.items() if row}

    def _sum_steps(self, name: str, run: Running) -> dict:
        live = [r.row for r in self.running.values() if r.record.get("parent") == name]
        steps = live + list(run.ended_steps.values())
        out = {k: sum(s.get(k, 0.0) for s in steps) for k in _SUMMED if any(k in s for s in steps)}
        for k in ("unit_memory_bytes", "unit_processes"):   # levels, not totals: the live steps' alone
            if k in out:
                out[k] = sum(s.get(k, 0.0) for s in live)
        if "unit_memory_bytes" in out:
            run.peak = max(run.peak, out["unit_memory_bytes"], *(s.get("unit_memory_peak_bytes", 0.0) for s in steps))
            out["unit_memory_peak_bytes"] = run.peak
        return out

    def _counted(self, run: Running) -> dict[str, str]:
        """{part: "ok" or why it is not counted} of a unit's counters after their first reading."""
        if run.counter is None:
            return {part: "ok" if part in ("cpu", "memory", "io") else "no cgroup: summed from its steps' processes"
                    for part in PARTS}
        missing = getattr(run.counter, "unavailable", {})
        return {part: missing.get(part, "ok") for part in PARTS}

    # ---- who and what: owner, name, allocation ----
    def _describe(self, run: Running) -> None:
        """Fill the record's owner, job name and allocation from what Slurm and the cgroup say."""
        r = run.record
        pids = self._processes(run)
        pid = pids[0] if pids else None
        if r["kind"] in ("job", "step"):   # the job's environment: a process that has it (an extern step's may not)
            envs = [e for e in (slurm.environ(p, self.proc) for p in pids) if "SLURM_JOB_ID" in e]
            env = envs[0] if envs else {}
            r.update({k: v for k, v in slurm.from_environ(env).items() if k not in r})
            known = {"user", "cpus", "memory_bytes"} <= set(r)
            if r["kind"] == "job" and (pid or run.tries + 1 >= ENRICH_TICKS) and not run.asked and not known:
                run.asked = True
                shown, why = slurm.show_job(r["job_id"], env.get("SLURM_CONF"), self.scontrol)
                r.update({k: v for k, v in shown.items() if k not in r})
                if why:
                    r.setdefault("extra", {})["allocation"] = why
            if r["kind"] == "step":
                job = self.running.get(r.get("parent") or "")
                if job is not None:
                    r.update({k: job.record[k] for k in ("user", "uid", "job_name") if k in job.record and k not in r})
        if r.get("cgroup"):
            limits = cgroups.allocation(r["cgroup"])
            if "cpuset" in limits:
                r["cpuset"] = limits["cpuset"]
            r.update({k: v for k, v in limits.items() if k not in r})
        if "uid" not in r and pid:
            uid = owner_uid(pid, self.proc)
            if uid is not None:
                r["uid"] = uid
        name = user_name(r["uid"]) if "uid" in r and "user" not in r else None
        if name:
            r["user"] = name
        run.tries += 1

    def _processes(self, run: Running) -> list[int]:
        """Some processes of the unit: in its cgroup, or below its (or its steps') slurmstepd."""
        if run.record.get("cgroup"):
            return cgroups.some_pids(run.record["cgroup"])
        if run.stepd is not None:
            return self._children(run.stepd)[:8]
        steps = [r for r in self.running.values() if r.record.get("parent") == run.record["unit"] and r.stepd]
        return [c for s in steps for c in self._children(s.stepd)][:8]

    def _children(self, pid: int) -> list[int]:
        return slurm.process_tree(self._stats, pid)

    def _enrich_later(self, new: set[str]) -> list[dict]:
        """Jobs first seen before a process of theirs ran (no owner yet): looked at again, an update when found."""
        out = []
        for name, run in self.running.items():
            r = run.record
            if name not in new and r["kind"] == "job" and "user" not in r and run.tries < ENRICH_TICKS:
                before = dict(r)
                self._describe(run)
                if r != before:
                    out.append({**r, "event": "update"})
        return out

    # ---- the state file ----
    def _load(self) -> dict[str, dict]:
        if not self.state:
            return {}
        try:
            with open(self.state) as f:
                saved = json.load(f)
            return {name: r for name, r in saved.items() if isinstance(r, dict) and r.get("unit") == name}
        except (OSError, ValueError, AttributeError):
            return {}

    def _save(self) -> None:
        if not self.state:
            return
        try:
            os.makedirs(os.path.dirname(self.state) or ".", exist_ok=True)
            with open(f"{self.state}.tmp", "w") as f:
                json.dump({name: {k: v for k, v in run.record.items() if k != "event"}
                           for name, run in self.running.items()}, f)
            os.replace(f"{self.state}.tmp", self.state)
        except OSError as e:
            log.warning("cannot keep the running units in %s: %s", self.state, e)
