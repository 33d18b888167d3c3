"""The node's units followed tick by tick: found (`units.scan` of the cgroup v2 hierarchy; Slurm steps also as
slurmstepd's children where no job cgroup was ever seen), named and counted, each start, change and end a
`unit` record, each tick's counters a row of the unit's scope, each job's phase vectors `bbv` bodies
(docs/agent.md, "Units").

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

from causewatch.agent import cgroups, slurm, unit_perf, units
from causewatch.agent.ipsampler import BBVCollector

log = logging.getLogger(__name__)
PARTS = ("cpu", "memory", "memory_events", "io", "pressure")
MAX_TAGGED = 4096        # processes whose unit is kept between two changes of the units
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
    perf: unit_perf.UnitPerf | None = None   # its cgroup's perf events
    bbv: BBVCollector | None = None          # a job's IP samples in cgroup mode, folded into phase vectors
    stepd: int | None = None
    row: dict = field(default_factory=dict)
    ended_steps: dict = field(default_factory=dict)   # a proc-found job's ended steps' totals, by name
    peak: float = 0.0
    tries: int = 0
    restored: bool = False     # from the state file: its start was sent by an earlier run of the agent
    asked: bool = False        # scontrol was asked about the job


def _tag(name: str, record: dict) -> dict:
    """What a task record of a process in this unit is tagged with."""
    return {"unit": name, **({"job_id": record["job_id"]} if record.get("job_id") else {})}


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
    while no job cgroup was seen; `state`: the state file (None: none); `bbv_frequency`: IP samples a second
    of each job with a cgroup, folded into phase vectors (0: none). `vectors` holds the last tick's `bbv` bodies."""

    def __init__(self, root: str | None, proc: str = "/proc", slurm_procs: bool = False, state: str | None = None,
                 clock: Callable[[], float] = time.time, scontrol: str | None = None, bbv_frequency: int = 0):
        self.root, self.proc, self.slurm_procs, self.state = root, proc, slurm_procs, state
        self.clock, self.scontrol, self.bbv_frequency = clock, scontrol, bbv_frequency
        self.running: dict[str, Running] = {}
        self.vectors: list[dict] = []
        self._stepds = slurm.StepdFinder(proc)
        self._job_cgroups = False    # a Slurm job was found as a cgroup: Slurm's proctrack is cgroup here
        self._restored: dict[str, dict] = {}
        self._failed: set[str] = set()   # reasons a tick failed, each logged once
        self._stats: dict[int, tuple] = {}   # this tick's /proc/PID/stat of every process, while steps are found there
        # cgroup folder -> {unit, job_id} of the running units: replaced whole at a change, read by the relay
        self._by_cgroup: dict[str, dict] = {}
        self._mount: str | None = None   # where the cgroup v2 hierarchy is mounted (open finds it)
        self._tags: tuple[dict, dict[int, dict]] = ({}, {})   # (the map it was read from, pid -> tag)

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
        """(the unit records of this tick's changes, in order; {unit: its counters now}), and in `vectors`
        the jobs' phase vectors completed since the last tick; never raises: a tick that fails is logged (once
        per reason) and sends nothing, and the next one tries again."""
        self.vectors = []
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
        for run in self.running.values():
            if run.bbv is not None:
                self.vectors += run.bbv.collect()
        for name in new:
            run = self.running[name]
            run.record["counted"] = self._counted(run)
            if not run.restored:
                records.append({**run.record, "event": "start"})
        records += self._enrich_later(set(new))
        if records:
            self._save()
            self._by_cgroup = {run.record["cgroup"]: _tag(name, run.record) for name, run in self.running.items()
                               if run.record.get("cgroup")}
        return records, rows

    def unit_of(self, pid: int) -> dict:
        """{unit, job_id} of the unit process `pid` runs in, the deepest (a step before its job): by its
        cgroup among the running units', else by its Slurm job's environment; {} when none. Safe beside
        `tick` on another thread (it reads the map a tick replaces whole); a process's answer is kept until
        the units change."""
        by_cgroup = self._by_cgroup
        seen, tags = self._tags
        if seen is not by_cgroup or len(tags) > MAX_TAGGED:
            tags = {}
            self._tags = (by_cgroup, tags)
        if pid not in tags:
            tags[pid] = self._find_unit(pid, by_cgroup)
        return tags[pid]

    def _find_unit(self, pid: int, by_cgroup: dict[str, dict]) -> dict:
        path = cgroups.cgroup_of(pid, self.proc)
        if path is not None and self._mount:   # the path is the hierarchy's, which `root` may lie below
            folder = os.path.join(self._mount, path.lstrip("/")).rstrip("/")
            while len(folder) > len(self._mount):
                if folder in by_cgroup:
                    return by_cgroup[folder]
                folder = os.path.dirname(folder)
        job = slurm.environ(pid, self.proc).get("SLURM_JOB_ID")
        return {"unit": f"job:{job}", "job_id": job} if job else {}

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
            run.perf = unit_perf.UnitPerf(f.path, proc=self.proc)
            run.perf.open()
            if f.kind == "job" and self.bbv_frequency > 0:
                run.bbv = BBVCollector(f.name, cgroup=f.path, frequency=self.bbv_frequency, proc=self.proc,
                                       wall=self.clock)
                run.bbv.open()
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
        if run.perf is not None:
            run.perf.close()
        if run.bbv is not None:   # the samples since the last tick, as a last (shorter) vector
            self.vectors += run.bbv.collect(final=True)
            run.bbv.close()
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
                if run.perf is not None:
                    run.row.update(run.perf.collect())
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
        """{part: "ok" or why it is not counted} of a unit's counters after their first reading, each perf
        event's as `perf.EVENT`, a job's phase vectors as `bbv`."""
        bbv = {"bbv": self._bbv_status(run)} if run.record["kind"] == "job" else {}
        if run.counter is None:
            return {**{part: "ok" if part in ("cpu", "memory", "io") else "no cgroup: summed from its steps' processes"
                       for part in PARTS}, "perf": f"{unit_perf.NO_CGROUP} (found by its processes)", **bbv}
        missing = getattr(run.counter, "unavailable", {})
        events = run.perf.availability if run.perf is not None else {}
        perf = ({f"perf.{k}": v for k, v in events.items()} if events else
                {"perf": f"{unit_perf.NO_CGROUP} (found by its processes)"})
        return {**{part: missing.get(part, "ok") for part in PARTS}, **perf, **bbv}

    def _bbv_status(self, run: Running) -> str:
        """A job's `bbv` in its `counted`: "ok" or why it sends no phase vectors."""
        if run.bbv is not None:
            return run.bbv.status
        if self.bbv_frequency <= 0:
            return "off (job_bbv_frequency = 0)"
        return f"{unit_perf.NO_CGROUP} (found by its processes)"

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
