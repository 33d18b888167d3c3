"""The units the agent follows by itself: cgroup folder names read as jobs, steps, services, containers and
pods; cgroup v2 accounting and Slurm's own words parsed; and a real cgroup v2 subtree made here, with a busy
process in a fake service, a fake pod's container and a Slurm-like step, found, counted and ended, and Slurm-like
jobs' processes IP-sampled into their phase vectors."""

import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from support import lost_cpu_seconds

from causewatch import wire
from causewatch.agent import cgroups, slurm, units, unitwatch
from causewatch.agent.runner import Agent
from causewatch.agent.sender import Sender
from causewatch.config import AgentConfig, DaemonConfig
from causewatch.daemon.server import Daemon

HEX = "ab" * 32
POD = "1b2c3d4e-aaaa-bbbb-cccc-0123456789ab"
POD2 = "9f8e7d6c-dddd-eeee-ffff-0123456789ab"


def tree(root: Path, *folders: str) -> Path:
    for f in folders:
        (root / f).mkdir(parents=True, exist_ok=True)
    return root


def test_cgroup_folder_names_are_read_as_units(tmp_path):
    pod = f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD.replace('-', '_')}.slice"
    root = tree(tmp_path, "system.slice/nginx.service/inner", "system.slice/system-getty.slice/getty@tty1.service",
                "system.slice/slurmstepd.scope/job_42/step_0/user/task_0",
                "system.slice/slurmstepd.scope/job_42/step_batch",
                f"system.slice/docker-{HEX}.scope", f"machine.slice/libpod-{HEX[::-1]}.scope",
                f"{pod}/cri-containerd-{'cd' * 32}.scope", f"kubepods/besteffort/pod{POD2}/{'ef' * 32}",
                f"docker/{'12' * 32}", f"user.slice/user-1000.slice/{'34' * 32}", "init.scope", "user.slice/x.service")
    found = units.scan(str(root))
    kinds = {name: (u.kind, u.parent, u.path.removeprefix(str(root) + "/")) for name, u in found.items()}
    assert kinds == {
        "service:nginx.service": ("service", None, "system.slice/nginx.service"),
        "service:getty@tty1.service": ("service", None, "system.slice/system-getty.slice/getty@tty1.service"),
        "job:42": ("job", None, "system.slice/slurmstepd.scope/job_42"),
        "step:42.0": ("step", "job:42", "system.slice/slurmstepd.scope/job_42/step_0"),
        "step:42.batch": ("step", "job:42", "system.slice/slurmstepd.scope/job_42/step_batch"),
        f"container:{HEX[:12]}": ("container", None, f"system.slice/docker-{HEX}.scope"),
        f"container:{HEX[::-1][:12]}": ("container", None, f"machine.slice/libpod-{HEX[::-1]}.scope"),
        f"pod:{POD}": ("pod", None, pod),
        f"pod:{POD2}": ("pod", None, f"kubepods/besteffort/pod{POD2}"),
        f"container:{'cd' * 6}": ("container", f"pod:{POD}", f"{pod}/cri-containerd-{'cd' * 32}.scope"),
        f"container:{'ef' * 6}": ("container", f"pod:{POD2}", f"kubepods/besteffort/pod{POD2}/{'ef' * 32}"),
        f"container:{'12' * 6}": ("container", None, f"docker/{'12' * 32}"),
    }   # a bare id outside a runtime's folder, init.scope and a user's service are no units
    assert found["step:42.0"].job_id == "42" and found["step:42.0"].step == "0"
    assert found[f"container:{HEX[:12]}"].extra == {"runtime": "docker", "container_id": HEX}
    assert all(wire.unit_kind(name) == u.kind for name, u in found.items())


def test_cgroup_v2_files_read_as_counters_and_missing_ones_say_why(tmp_path):
    (tmp_path / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n"
                                       "nr_periods 10\nnr_throttled 4\nthrottled_usec 300000\n")
    (tmp_path / "memory.current").write_text("1048576\n")
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 2\noom_kill 1\n")
    (tmp_path / "io.stat").write_text("8:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n"
                                      "8:16 rbytes=4096 wbytes=0 rios=1 wios=0\n")
    (tmp_path / "cpu.pressure").write_text("some avg10=1.00 avg60=0.50 avg300=0.10 total=1500000\n"
                                           "full avg10=0.00 avg60=0.00 avg300=0.00 total=7\n")
    counter = cgroups.CgroupCounter(str(tmp_path))
    got = counter.collect()
    assert got == {"unit_cpu_seconds_total": 2.5, "unit_cpu_user_seconds_total": 2.0,
                   "unit_cpu_system_seconds_total": 0.5, "unit_cpu_periods_total": 10.0,
                   "unit_cpu_throttled_periods_total": 4.0, "unit_cpu_throttled_seconds_total": 0.3,
                   "unit_memory_bytes": 1048576.0, "unit_memory_peak_bytes": 1048576.0,
                   "unit_memory_oom_events_total": 2.0, "unit_memory_oom_kills_total": 1.0,
                   "unit_io_read_bytes_total": 8192.0, "unit_io_written_bytes_total": 8192.0,
                   "unit_io_reads_total": 2.0, "unit_io_writes_total": 2.0}
    # memory.pressure is missing: the pressure part is left out whole, saying which file
    assert counter.unavailable == {"pressure": "no memory.pressure: the kernel offers no pressure stall information "
                                               "(psi=1)"}
    (tmp_path / "memory.current").unlink()
    counter.collect()
    assert counter.unavailable["memory"].startswith("no memory.current: the memory controller is not enabled")
    (tmp_path / "memory.current").write_text("2048\n")   # the controller enabled later: found within 30 ticks
    seen = [("unit_memory_bytes" in counter.collect()) for _ in range(cgroups.RETRY_ABSENT + 1)]
    assert seen == [False] * cgroups.RETRY_ABSENT + [True] and "memory" not in counter.unavailable
    assert set(got) <= set(cgroups.METRICS)


def test_what_a_cgroup_allows(tmp_path):
    (tmp_path / "cpuset.cpus.effective").write_text("0-3,8,10-11\n")
    (tmp_path / "memory.max").write_text("2147483648\n")
    assert cgroups.allocation(str(tmp_path)) == {"cpuset": "0-3,8,10-11", "cpus": 7.0, "memory_bytes": 2**31}
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    (tmp_path / "memory.max").write_text("max\n")
    assert cgroups.allocation(str(tmp_path)) == {"cpuset": "0-3,8,10-11", "cpus": 1.5}
    mounts = tmp_path / "mounts"
    mounts.write_text("cgroup /sys/fs/cgroup/cpu cgroup rw 0 0\ncgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n")
    assert cgroups.find_root(str(mounts)) == "/sys/fs/cgroup/unified"
    mounts.write_text("proc /proc proc rw 0 0\n")
    assert cgroups.find_root(str(mounts)) is None


SHOW_JOB = ("JobId=7 JobName=train UserId=ann(1001) GroupId=ann(1001) JobState=RUNNING NumNodes=2 NumCPUs=8 "
            "TRES=cpu=8,mem=16G,node=2,billing=8,gres/gpu=4 Features=(null)")


def test_slurm_says_the_owner_name_and_allocation():
    assert slurm.parse_show_job(SHOW_JOB) == {"user": "ann", "uid": 1001, "job_name": "train", "cpus": 4.0,
                                             "memory_bytes": 8 * 2**30, "gpus": 2}
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_USER": "ann", "SLURM_JOB_UID": "1001", "SLURM_JOB_NAME": "train",
           "SLURM_CPUS_ON_NODE": "4", "SLURM_MEM_PER_CPU": "1024", "SLURM_JOB_GPUS": "0,1"}
    assert slurm.from_environ(env) == {"user": "ann", "uid": 1001, "job_name": "train", "cpus": 4.0,
                                       "memory_bytes": 4 * 2**30, "gpus": 2}
    assert slurm.from_environ({"SLURM_JOB_CPUS_PER_NODE": "2(x3)", "SLURM_MEM_PER_NODE": "500"}) == {
        "cpus": 2.0, "memory_bytes": 500 * 2**20}
    assert slurm.stepd_step(b"slurmstepd: [42.batch]\0") == ("42", "batch")
    assert slurm.stepd_step(b"/usr/sbin/slurmd\0-D\0") is None
    assert slurm.show_job("7", scontrol="/nonexistent/scontrol")[1].startswith("scontrol show job 7: FileNotFoundError")


# ---- a real cgroup v2 subtree ---------------------------------------------------------------------

SPIN = """import os, sys, time
t = time.process_time()
while time.process_time() - t < float(sys.argv[1]):
    pass
time.sleep(float(sys.argv[2]))
"""


class Subtree:
    """A cgroup v2 subtree of this test under the hierarchy's root: folders made, controllers enabled on
    the way down where the kernel offers them, busy children moved in before they exec, all removed."""

    def __init__(self):
        mounted = cgroups.find_root()
        if mounted is None:
            pytest.skip("no cgroup v2 hierarchy is mounted here (/proc/self/mounts)")
        self.root = Path(mounted) / f"cw-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        try:
            self.root.mkdir()
        except OSError as e:
            pytest.skip(f"cgroup v2 at {mounted} is not writable here ({e.strerror}): run as root")
        self.children: list[subprocess.Popen] = []

    def make(self, relative: str) -> Path:
        path = self.root
        for part in Path(relative).parts:
            offered = (path / "cgroup.controllers").read_text().split()
            wanted = [c for c in ("cpu", "memory", "io") if c in offered]
            if wanted:
                (path / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
            path = path / part
            path.mkdir(exist_ok=True)
        return path

    def run(self, relative: str, program: str, *args: str, **popen) -> subprocess.Popen:
        """`python -c program args...`, moved into the folder `relative` before it execs."""
        procs = str(self.make(relative) / "cgroup.procs")

        def join():
            with open(procs, "w") as f:
                f.write("0")
        child = subprocess.Popen([sys.executable, "-c", program, *args], preexec_fn=join, **popen)
        self.children.append(child)
        return child

    def spin(self, relative: str, cpu_seconds: float, then_sleep: float) -> subprocess.Popen:
        return self.run(relative, SPIN, str(cpu_seconds), str(then_sleep))

    def remove(self, relative: str) -> None:
        """A folder and the folders below it, deepest first (a cgroup with processes cannot go)."""
        path = self.root / relative
        for folder in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            folder.rmdir()
        path.rmdir()

    def close(self) -> None:
        for child in self.children:
            if child.poll() is None:
                child.kill()
                child.wait()
        for folder in sorted((p for p in self.root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            folder.rmdir()
        self.root.rmdir()


@pytest.fixture
def subtree():
    t = Subtree()
    yield t
    t.close()


def cpu_of(child: subprocess.Popen) -> float | None:
    """A child's own CPU seconds as the kernel's rusage gives its parent once it ended (None: it runs)."""
    pid, _, usage = os.wait4(child.pid, os.WNOHANG)
    if pid == 0:
        return None
    child.returncode = 0
    return usage.ru_utime + usage.ru_stime


class Recorder:
    def __init__(self):
        self.sent: list[tuple[str, dict]] = []

    def send(self, kind, body):
        wire.decode(wire.encode(kind, "n", "b", 1, body))   # every body the agent sends is one the daemon takes
        self.sent.append((kind, body))

    def records(self, name: str) -> list[dict]:
        return [b for k, b in self.sent if k == "unit" and b["unit"] == name]

    def values(self, scope: str, metric: str) -> list[float]:
        out = []
        for kind, body in self.sent:
            if kind == "samples" and body["scope"] == scope:
                _, names, values, _ = wire.samples_arrays(body)
                out += [v for v in values[:, names.index(metric)].tolist() if v == v] if metric in names else []
        return out


SERVICE, CONTAINER = "system.slice/fake.service", f"kubepods.slice/kubepods-pod{POD.replace('-', '_')}.slice/" \
                                                  f"cri-containerd-{HEX}.scope"
STEP = "system.slice/slurmstepd.scope/job_42/step_0"


@pytest.mark.slow
def test_a_real_cgroup_subtree_is_found_counted_and_ended(subtree, tmp_path):
    """A fake service, a fake pod's container and a Slurm-like step, each with a busy process: the agent,
    pointed at the subtree by `cgroup_root`, starts each unit once, counts its CPU seconds as the kernel's
    rusage of the process within 10 %, and ends each when its folder goes. The folders are found before
    their processes start, as perf's events count from a unit's finding on."""
    for folder in (SERVICE, CONTAINER, f"{STEP}/user/task_0"):
        subtree.make(folder)
    cfg = AgentConfig(node="n", spool=str(tmp_path / "spool"), cgroup_root=str(subtree.root), daemon="tcp://127.0.0.1:9")
    sender = Recorder()
    agent = Agent(cfg, sender)
    agent.units.slurm_procs = False   # the subtree's units alone, not another test's Slurm steps on this machine
    assert agent.open()["counters"]["units.cgroup"] == "ok"
    agent.sample_units(time.time())
    spins = {SERVICE: subtree.spin(SERVICE, 0.8, 0.6), CONTAINER: subtree.spin(CONTAINER, 0.5, 0.6),
             STEP: subtree.spin(f"{STEP}/user/task_0", 0.6, 0.6)}
    own = {folder: None for folder in spins}
    while any(own[f] is None for f in spins):
        agent.sample_units(time.time())
        for folder, child in spins.items():
            if own[folder] is None:
                own[folder] = cpu_of(child)
        time.sleep(0.2)
    agent.sample_units(time.time())   # the last reading after every process ended
    for folder in (*spins, str(Path(STEP).parent), str(Path(CONTAINER).parent)):
        subtree.remove(folder)
    agent.sample_units(time.time())
    agent.flush_batches()
    names = {SERVICE: "service:fake.service", CONTAINER: f"container:{HEX[:12]}", STEP: "step:42.0"}
    for folder, name in names.items():
        records = sender.records(name)
        assert [r["event"] for r in records] == ["start", "end"], records
        start, end = records
        assert start["cgroup"] == str(subtree.root / folder) and start["counted"]["cpu"] == "ok"
        measured = end["totals"]["unit_cpu_seconds_total"]
        assert measured == pytest.approx(own[folder], rel=0.10), (name, measured, own[folder])
        assert sender.values(name, "unit_cpu_seconds_total")[-1] == measured
        assert end["end"] >= start["start"]
    job = sender.records("job:42")   # found before its processes: its owner comes in an update
    assert [r["event"] for r in job] == ["start", "update", "end"] and "user" not in job[0] and job[1]["user"]
    service = sender.records("service:fake.service")
    assert service[0]["counted"]["perf.task_clock_seconds"] == "ok"   # perf in cgroup mode, per unit
    assert service[1]["totals"]["unit_perf_task_clock_seconds_total"] == pytest.approx(own[SERVICE], rel=0.10)
    assert sender.records("step:42.0")[0]["parent"] == "job:42"
    assert sender.records(f"pod:{POD}")[0]["extra"]["pod_uid"] == POD
    memory = sender.records("service:fake.service")[0]["counted"]["memory"]
    controllers = (subtree.root / "cgroup.controllers").read_text().split()
    assert memory == "ok" if "memory" in controllers else memory.startswith("no memory.current: the memory controller")
    assert not [key for key in agent._batches if wire.unit_kind(key[0])]   # an ended unit's batch goes with it


def test_an_agent_that_restarts_goes_on_with_its_units_and_ends_the_gone_ones(tmp_path):
    """The running set is kept in a state file: a unit still there keeps its start (no second start
    record), one that ended while the agent was down gets its end."""
    root = tree(tmp_path / "cg", "system.slice/a.service", "system.slice/b.service")
    state = str(tmp_path / "units.json")
    clock = iter(range(100, 200)).__next__
    first = unitwatch.UnitWatch(str(root), state=state, clock=clock)
    first.open()
    records, _ = first.tick()
    assert sorted(r["unit"] for r in records) == ["service:a.service", "service:b.service"]
    (root / "system.slice/b.service").rmdir()
    again = unitwatch.UnitWatch(str(root), state=state, clock=clock)
    again.open()
    records, _ = again.tick()
    assert [(r["unit"], r["event"], r["start"]) for r in records] == [("service:b.service", "end", 100)]
    assert records[0]["extra"]["ended_unseen"] is True
    assert again.running["service:a.service"].record["start"] == 100


def unit_series(daemon: Daemon) -> list[str]:
    with urllib.request.urlopen(f"http://{daemon.http.address}/metrics", timeout=10) as r:
        return [line for line in r.read().decode().splitlines() if line.startswith("causewatch_unit_")]


@pytest.mark.service
def test_two_hundred_short_units_in_a_row_leave_no_series_at_the_daemon(subtree, tmp_path):
    """Real cgroups made and removed 200 times, the agent's records and counters through a real sender to
    a real daemon: while one runs /metrics has its series alone; after them, none, and all 200 are listed."""
    daemon = Daemon(DaemonConfig(db=str(tmp_path / "u.duckdb"), bind="tcp://127.0.0.1:0", http="127.0.0.1:0"),
                    jobs=[]).start()
    cfg = AgentConfig(node="n", spool=str(tmp_path / "spool"), cgroup_root=str(subtree.root), daemon=daemon.endpoint)
    sender = Sender(cfg).start()
    try:
        agent = Agent(cfg, sender)
        agent.units.slurm_procs = False
        agent.open()
        for i in range(200):
            subtree.make(f"system.slice/short-{i}.service")
            agent.sample_units(time.time())
            if i == 100:   # the one running now, alone
                agent.flush_batches()
                assert sender.flush(30)
                running = unit_series(daemon)
                assert running and all('unit="service:short-100.service"' in line for line in running)
            subtree.remove(f"system.slice/short-{i}.service")
            agent.sample_units(time.time())
        agent.flush_batches()
        assert sender.flush(30)
        assert unit_series(daemon) == []
        with urllib.request.urlopen(f"http://{daemon.http.address}/api/jobs?kind=service&limit=1000") as r:
            listed = json.load(r)
        assert len(listed) == 200 and {u["state"] for u in listed} == {"finished"}
    finally:
        sender.close()
        daemon.stop()


def test_a_steps_processes_are_counted_once_whoever_reaps_them(tmp_path):
    """slurmstepd 10 runs a script 11 that runs a program 12: while they live their own times, once reaped
    their parent's cutime, and the last reading of one whose parent went first (it leaves the step)."""
    tick = os.sysconf("SC_CLK_TCK")
    counter = slurm.StepCounter(10, proc=str(tmp_path))   # no per-process files: memory and I/O read as 0

    def cpu(stats):   # {pid: (ppid, utime, stime, cutime, cstime, start)}
        return counter.collect(stats)["unit_cpu_seconds_total"] * tick
    stepd = (1, 50, 50, 0, 0, 1)   # slurmstepd's own time is not the job's
    assert cpu({10: stepd, 11: (10, 2, 1, 0, 0, 5), 12: (11, 100, 10, 0, 0, 6)}) == pytest.approx(113)
    assert cpu({10: stepd, 11: (10, 2, 1, 140, 12, 5)}) == pytest.approx(155)            # 12 ended, 11 reaped it
    assert cpu({10: (1, 50, 50, 160, 13, 1)}) == pytest.approx(173)                       # 11 ended, reaped
    orphan = slurm.StepCounter(10, proc=str(tmp_path))
    orphan.collect({10: stepd, 11: (10, 0, 0, 0, 0, 5), 12: (11, 30, 0, 0, 0, 6)})
    # 11 went first: 12 is init's now, out of the step (as for Slurm's linuxproc), its last reading kept
    assert orphan.collect({10: stepd, 12: (1, 40, 0, 0, 0, 6)})["unit_cpu_seconds_total"] * tick == pytest.approx(30)
    assert orphan.collect({10: stepd})["unit_cpu_seconds_total"] * tick == pytest.approx(30)


def test_a_jobs_environment_is_read_from_its_tasks_not_from_slurmstepd(tmp_path):
    for folder, pids in (("step_0/slurm", "100\n"), ("step_0/user/task_0", "200\n201\n")):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "cgroup.procs").write_text(pids)
    assert cgroups.some_pids(str(tmp_path)) == [200, 201]


def test_a_failing_tick_sends_nothing_and_says_why_once(tmp_path, monkeypatch, caplog):
    watch = unitwatch.UnitWatch(str(tmp_path))
    watch.open()
    monkeypatch.setattr(unitwatch.units, "scan", lambda root: 1 / 0)
    assert watch.tick() == ([], {}) and watch.tick() == ([], {})
    said = [r.getMessage() for r in caplog.records if "units failed" in r.getMessage()]
    assert said == ["following the node's units failed this tick (logged once): ZeroDivisionError: division by zero"]


def test_an_instrumented_processs_tasks_are_tagged_with_its_unit_and_job(subtree, tmp_path):
    """A process in a Slurm-like step's cgroup sends a task record: the agent relays it with the step and
    its job in its extra (the daemon learns the job's tasks as a scope); one outside every unit goes as it came."""
    import msgpack
    child = subtree.spin(f"{STEP}/user/task_0", 0.0, 30.0)
    cfg = AgentConfig(node="n", spool=str(tmp_path / "spool"), cgroup_root=str(subtree.root), daemon="tcp://127.0.0.1:9")
    sender = Recorder()
    agent = Agent(cfg, sender)
    agent.units.slurm_procs = False
    agent.open()
    agent.sample_units(time.time())

    def task(pid):
        return msgpack.packb({"type": "task", "body": {"app": "lu", "task_id": f"t{pid}", "start": 1.0,
                                                        "duration": 0.5, "extra": {"pid": pid, "thread": "main"}}})
    assert agent.relay(task(child.pid)) and agent.relay(task(os.getpid()))
    tasks = {b["task_id"]: b["extra"] for k, b in sender.sent if k == "task"}
    assert tasks[f"t{child.pid}"] == {"pid": child.pid, "thread": "main", "unit": "step:42.0", "job_id": "42"}
    outside = os.environ.get("SLURM_JOB_ID")
    assert tasks[f"t{os.getpid()}"] == {"pid": os.getpid(), "thread": "main",
                                        **({"unit": f"job:{outside}", "job_id": outside} if outside else {})}


def test_a_units_perf_events_are_counted_in_cgroup_mode_each_with_its_duty_cycle(subtree, tmp_path):
    """A busy process in a fake service's cgroup: its task-clock counted in cgroup mode, about the CPU the
    cgroup's cpu.stat says, each event with a duty cycle in (0, 1]; an event the machine cannot count and a
    folder in no cgroup hierarchy each say why, as hello does."""
    from causewatch.agent import perf, unit_perf
    lost = lost_cpu_seconds()
    child = subtree.spin(SERVICE, 0.6, 0.0)
    folder = str(subtree.root / SERVICE)
    counted = unit_perf.UnitPerf(folder, events=("task_clock_seconds", "context_switches", "cycles"))
    why = counted.open()
    assert why["task_clock_seconds"] == why["context_switches"] == "ok"
    pmu = perf.CounterCollector("system", groups=(("cycles",),)).open()["cycles"]
    assert why["cycles"] == "ok" if pmu == "ok" else why["cycles"].split(":")[0] == pmu.split(":")[0]
    child.wait()
    values, usage = counted.collect(), cgroups.CgroupCounter(folder).collect()
    counted.close()
    lost = lost_cpu_seconds() - lost
    task_clock, cpu = values["unit_perf_task_clock_seconds_total"], usage["unit_cpu_seconds_total"]
    assert 0.9 * cpu <= task_clock <= 1.1 * cpu + lost, (task_clock, cpu, lost)
    assert 0 < values["unit_perf_task_clock_seconds_running_ratio"] <= 1.0
    assert values["unit_perf_context_switches_total"] >= 1
    nowhere = unit_perf.UnitPerf(str(tmp_path), events=("task_clock_seconds",)).open()
    assert nowhere["task_clock_seconds"].startswith(f"{unit_perf.NO_CGROUP} (EBADF: {tmp_path} is in no perf_event")
    gone = unit_perf.UnitPerf(str(tmp_path / "gone"), events=("task_clock_seconds",)).open()
    assert gone["task_clock_seconds"] == f"{unit_perf.NO_CGROUP} (No such file or directory: {tmp_path / 'gone'})"


# Compresses for argv[1] CPU seconds once a line comes in: its interpreter's start is spent before that
ZLIB = """import os, sys, time, zlib
data = os.urandom(1 << 16)
print(flush=True)
sys.stdin.readline()
t = time.process_time()
while time.process_time() - t < float(sys.argv[1]):
    zlib.compress(data, 6)
"""


def vectors_of(sent: list[tuple[str, dict]], target: str) -> list[dict]:
    return [b for k, b in sent if k == "bbv" and b["target"] == target]


def libz_share(vectors: list[dict]) -> float:
    """The share of the vectors' samples in zlib's own functions (keys `libz.so.1:deflate…`)."""
    total = sum(n for v in vectors for n in v["vector"]["counts"])
    return sum(n for v in vectors for k, n in zip(v["vector"]["keys"], v["vector"]["counts"])
               if k.startswith("libz")) / total


def test_a_jobs_ip_samples_go_as_its_phase_vectors_each_tick_and_a_last_one_at_its_end(subtree, tmp_path):
    """Two Slurm-like jobs' processes compress with zlib: the agent samples each job's cgroup and sends native
    vectors of target `job:ID` that name zlib's functions (a process there before its job was found too: its
    libraries are read at the finding), the longer job's at its ticks, the shorter one's (fewer samples than a
    vector holds) as a last, partial vector at its end, before its end record; each start record says bbv
    "ok". With job_bbv_frequency = 0 a job says so and sends none."""
    jobs = {"42": 0.5, "43": 0.06}
    folders = {job: f"system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0" for job in jobs}
    children = {job: subtree.run(folders[job], ZLIB, str(cpu), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True) for job, cpu in jobs.items()}
    for child in children.values():
        child.stdout.readline()
        child.stdout.close()
    cfg = AgentConfig(node="n", spool=str(tmp_path / "spool"), cgroup_root=str(subtree.root), job_bbv_frequency=1000,
                      daemon="tcp://127.0.0.1:9")
    sender = Recorder()
    agent = Agent(cfg, sender)
    agent.units.slurm_procs = False
    agent.open()
    agent.sample_units(time.time())   # both jobs found, each one's sampler open before its work starts
    for child in children.values():
        child.stdin.write("\n")
        child.stdin.close()
    while any(child.poll() is None for child in children.values()):
        agent.sample_units(time.time())
        time.sleep(0.1)
    agent.sample_units(time.time())   # the samples of the work's end
    running = list(sender.sent)
    for job in jobs:
        subtree.remove(f"system.slice/slurmstepd.scope/job_{job}")
    agent.sample_units(time.time())
    long, short = (sender.records(f"job:{job}") for job in jobs)
    assert [r["event"] for r in long] == [r["event"] for r in short] == ["start", "end"]
    assert long[0]["counted"]["bbv"] == short[0]["counted"]["bbv"] == "ok"
    ticked = vectors_of(running, "job:42")
    assert len(ticked) >= 3 and {(v["kind"], v.get("pid")) for v in ticked} == {("native", children["42"].pid)}
    assert libz_share(ticked) > 0.5
    assert long[0]["start"] <= ticked[0]["start"] and ticked[-1]["end"] <= long[-1]["end"]
    assert vectors_of(running, "job:43") == []   # too few samples for a vector while it ran
    [last] = vectors_of(sender.sent, "job:43")
    assert 50 <= sum(last["vector"]["counts"]) < 100 and libz_share([last]) > 0.5, last["vector"]
    kinds = [(k, b.get("target") or b.get("unit")) for k, b in sender.sent[len(running):]]
    assert kinds.index(("bbv", "job:43")) < kinds.index(("unit", "job:43"))

    subtree.make(folders["42"])
    off = Recorder()
    quiet = Agent(AgentConfig(node="n", spool=str(tmp_path / "off"), cgroup_root=str(subtree.root), job_bbv_frequency=0,
                              daemon="tcp://127.0.0.1:9"), off)
    quiet.units.slurm_procs = False
    quiet.open()
    quiet.sample_units(time.time())
    assert off.records("job:42")[0]["counted"]["bbv"] == "off (job_bbv_frequency = 0)"
    assert not [k for k, _ in off.sent if k == "bbv"]
