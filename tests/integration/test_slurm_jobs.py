"""Slurm jobs found by the agent itself: the brokers' real Slurm (Debian's slurmctld and three `slurmd -N nX` on
this machine, slurm_cluster.Cluster) runs two `sbatch` jobs, each its own busy program, one of them as
another user. Its proctrack is linuxproc (no job cgroups), so the agent finds them as slurmstepd's children
and their SLURM_* environment; `causewatch jobs` on the daemon lists both with their users and allocations,
each job's CPU seconds agree with its program's own rusage within 10 %, and both end when Slurm ends them."""

import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from slurm_cluster import SLURM_MARKS, Cluster
from support import wait_for

from causewatch.cli import main
from causewatch.config import DaemonConfig
from causewatch.daemon.server import Daemon

pytestmark = [*SLURM_MARKS, pytest.mark.service, pytest.mark.slow]
# The program of each job: its own CPU seconds of work, its rusage written, idle until the test has seen
# it running (a loaded machine once ended a job before the agent's first look), then idle a moment more (the
# agent's last reading of it comes after its work, as it would of any program whose last second is quiet).
PROGRAM = """import json, os, resource, sys, time
t = time.process_time()
while time.process_time() - t < float(sys.argv[1]):
    pass
r = resource.getrusage(resource.RUSAGE_SELF)
with open(sys.argv[2], "w") as f:
    json.dump({"cpu_seconds": r.ru_utime + r.ru_stime}, f)
deadline = time.time() + 60
while not os.path.exists(sys.argv[3]) and time.time() < deadline:
    time.sleep(0.1)
time.sleep(1.5)
"""
# the system's Python: the other user may not reach this test's virtual environment
PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
# two jobs, each on a node of its own (one CPU each): the seconds of work, who submits, the memory asked for
JOBS = {"spin-a": (2.0, None, "100M"), "spin-b": (1.5, "nobody", None)}


@pytest.fixture
def world():
    base = Path(tempfile.mkdtemp(prefix="cw-slurm-jobs-"))
    base.chmod(0o755)          # the other user's job reads its script and writes its rusage below here
    cluster = Cluster(base)
    first = random.randrange(10**6, 6 * 10**7)   # job ids no other test cluster here hands out (< MaxJobId)
    with open(base / "slurm.conf", "a") as f:
        f.write(f"FirstJobId={first}\n")
    daemon, agent = None, None
    try:
        cluster.start()
        daemon = Daemon(DaemonConfig(db=str(base / "cw.duckdb"), bind="tcp://127.0.0.1:0", http="127.0.0.1:0"),
                        jobs=[]).start()
        empty = base / "no-cgroups"   # this Slurm puts no job in a cgroup: nothing else of the machine's is counted
        empty.mkdir()
        (base / "agent.toml").write_text(f"""[agent]
daemon = "{daemon.endpoint}"
node = "slurm-host"
spool = "{base / 'spool'}"
ipc = "ipc://{base / 'agent.sock'}"
psutil_interval = 0.25
counters_interval = 0.25
bbv_frequency = 0
cgroup_root = "{empty}"
""")
        agent = subprocess.Popen([sys.executable, "-m", "causewatch.cli", "agent", "--config",
                                  str(base / "agent.toml")], env=cluster.env, stderr=open(base / "agent.err", "w"))
        yield cluster, daemon, base
    finally:
        if agent is not None:
            agent.send_signal(signal.SIGTERM)
            agent.wait(30)
        cluster.run("scancel", "--full", "-u", "root")
        cluster.run("scancel", "--full", "-u", "nobody")
        if daemon is not None:
            daemon.stop()
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


def submit(cluster: Cluster, base: Path, name: str, seconds: float, user: str | None, memory: str | None) -> str:
    work = base / name
    work.mkdir()
    work.chmod(0o777)
    (work / "program.py").write_text(PROGRAM)
    (work / "job.sh").write_text(f"#!/bin/sh\nexec {PYTHON} {work / 'program.py'} {seconds} "
                                 f"{work / 'rusage.json'} {base / 'seen'}\n")
    (work / "job.sh").chmod(0o755)
    options = [f"--uid={user}"] if user else []
    options += [f"--mem={memory}"] if memory else []
    done = cluster.run("sbatch", "--parsable", "-N1", "-n1", "-J", name, "--chdir", str(work), "-o",
                       str(work / "out.txt"), *options, str(work / "job.sh"), check=True)
    return done.stdout.strip().split(";")[0]


def jobs(daemon: Daemon, capsys, *options: str) -> list[dict]:
    assert main(["jobs", "--daemon", f"http://{daemon.http.address}", "--json", *options]) == 0
    return json.loads(capsys.readouterr().out)


def test_two_sbatch_jobs_are_found_counted_and_ended(world, capsys):
    cluster, daemon, base = world
    ids = {submit(cluster, base, name, *spec): name for name, spec in JOBS.items()}
    seen_running: set[str] = set()

    def worked_and_seen() -> bool:   # each job's work done, and the daemon lists each as running
        seen_running.update(j["job_id"] for j in jobs(daemon, capsys, "--running"))
        return seen_running >= set(ids) and all((base / name / "rusage.json").exists() for name in JOBS)
    if not wait_for(worked_and_seen, timeout=40, every=0.2):
        why = {name: (base / name / "out.txt").read_text()[-500:] for name in JOBS}
        pytest.fail(f"{seen_running} {why} {cluster.run('squeue').stdout} {(base / 'agent.err').read_text()[-2000:]}")
    (base / "seen").touch()
    assert wait_for(lambda: not cluster.run("squeue", "-h").stdout.strip(), timeout=30, every=0.2), \
        cluster.run("squeue").stdout
    ended = time.time()
    assert wait_for(lambda: {j["job_id"] for j in jobs(daemon, capsys, "--finished")} >= set(ids), timeout=10), \
        (base / "agent.err").read_text()[-2000:]
    found = {j["job_id"]: j for j in jobs(daemon, capsys) if j["job_id"] in ids}
    figures = []
    for job_id, name in ids.items():
        seconds, user, memory = JOBS[name]
        j = found[job_id]
        own = json.loads((base / name / "rusage.json").read_text())["cpu_seconds"]
        assert (j["job_name"], j["user"], j["node"], j["source"]) == (name, user or "root", "slurm-host", "proc")
        assert j["cpus"] == 1.0
        assert j["memory_bytes"] == (100 * 2**20 if memory else 200 * 2**20)   # asked for, else the node's
        figures.append(f"{name} ({user or 'root'}): {j['cpu_seconds']:.3f} CPU-s counted, {own:.3f} in its rusage")
        assert j["cpu_seconds"] == pytest.approx(own, rel=0.10), (name, j["cpu_seconds"], own)
        assert j["state"] == "finished" and j["started"] < j["ended"] <= ended + 2.0
        assert 0 < j["cpu_efficiency"] <= 1.1
    steps = {s["unit"] for s in jobs(daemon, capsys, "--kind", "step")}
    assert {f"step:{i}.batch" for i in ids} <= steps
    [report] = (main(["job", next(iter(ids)), "--daemon", f"http://{daemon.http.address}", "--json"]) == 0
                and json.loads(capsys.readouterr().out))
    assert report["steps"][0]["step"] == "batch" and report["counted"]["pressure"].startswith("no cgroup")
    print("; ".join(figures))
