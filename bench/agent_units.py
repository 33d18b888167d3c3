"""Agent cost with running units: the node-only agent's CPU and memory with no units and with N, same window.

A cgroup v2 folder of this run is made below the hierarchy's mount (root only) and the agent pointed at it
(`cgroup_root`): first empty, then holding N units (default 20) as `units.scan` finds them, in turn a
Slurm-like job with its step, a systemd-like service, a Kubernetes-like pod with its container, a service;
each leaf holds one mostly idle process (about a millisecond of work a second). The agent runs node-only
at 1 Hz (counters and psutil 1 s, no IP sampling of the node or of jobs) against a real daemon, whose own
CPU is not counted. Once the daemon lists every unit as running, after a warm-up, one window per run: CPU
seconds of the agent's process tree per wall second (/proc ticks, ended threads included; beside it the
schedstat nanoseconds of its live threads), its RSS and PSS at the window's end, the 1-minute load average,
and the running units the daemon lists then (/api/jobs). Goals: <= 0.2 % of a core with no units, <= 1 %
with 20, RSS <= 60 MB. The folders and their processes go at the end, also on an error, Ctrl-C or SIGTERM.
Usage: python bench/agent_units.py [--units 20] [--seconds 60] [--json]
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import pwd
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
from agent_overhead import agent_config
from agent_vs_peers import get, start_daemon_with_http
from cputime import live_cpu_seconds, tree_cpu_seconds
from startup import start_agent

from causewatch import wire
from causewatch.agent import cgroups

CPU_GOALS = {"none": 0.2, "units": 1.0}   # % of one core, per run
RSS_GOAL_MB = 60.0
WARMUP = 10.0         # seconds after the units are listed: the first ticks open every unit's perf events
LISTED_WAIT = 120.0   # seconds for the daemon to list the units, the agent's start included
MIX = ("job", "service", "pod", "service")   # the leaves' kinds in turn (a job and a pod are two units each)
JOB_BASE = 990_000    # fake Slurm job ids, far above a test cluster's own
# a unit's process: asleep, waking each second for a little work, so that its counters move every tick
UNIT_WORK = "import time\nwhile True:\n    time.sleep(1.0)\n    sum(range(50_000))\n"


def leaf(kind: str, i: int) -> tuple[str, tuple[str, ...], dict[str, str]]:
    """(folder below the subtree, the units it and its parent are, extra environment of its process)."""
    if kind == "job":
        job = str(JOB_BASE + i)
        # a real job's processes carry these: its owner and allocation come without asking scontrol
        env = {"SLURM_JOB_ID": job, "SLURM_STEP_ID": "0", "SLURM_JOB_UID": str(os.getuid()),
               "SLURM_JOB_USER": pwd.getpwuid(os.getuid()).pw_name, "SLURM_JOB_NAME": "cw-bench",
               "SLURM_CPUS_ON_NODE": "1", "SLURM_MEM_PER_NODE": "256"}
        return f"system.slice/slurmstepd.scope/job_{job}/step_0", (f"job:{job}", f"step:{job}.0"), env
    if kind == "pod":
        pod, container = str(uuid.uuid4()), uuid.uuid4().hex * 2
        return (f"kubepods.slice/kubepods-pod{pod.replace('-', '_')}.slice/cri-containerd-{container}.scope",
                (f"pod:{pod}", f"container:{container[:12]}"), {})
    return f"system.slice/cw-bench-{i}.service", (f"service:cw-bench-{i}.service",), {}


def layout(n: int) -> list[tuple[str, tuple[str, ...], dict[str, str]]]:
    """Leaves making exactly n units: MIX in turn, a service where one unit is left."""
    leaves, count = [], 0
    for i in itertools.count():
        if count >= n:
            return leaves
        leaves.append(leaf(MIX[i % len(MIX)] if n - count > 1 else "service", i))
        count += len(leaves[-1][1])


class Subtree:
    """A cgroup v2 folder of this run below the hierarchy's mount, its unit folders and their processes."""

    def __init__(self, mount: str):
        self.root = Path(mount) / f"cw-bench-units-{os.getpid()}"
        self.root.mkdir()
        self.procs: list[subprocess.Popen] = []

    def make(self, relative: str) -> Path:
        """The folders down to `relative`, each enabling for its children the controllers the kernel offers
        (on a hybrid host, none: cpu.stat and the pressure files are there all the same)."""
        path = self.root
        for part in Path(relative).parts:
            wanted = [c for c in ("cpu", "memory", "io") if c in (path / "cgroup.controllers").read_text().split()]
            if wanted:
                (path / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
            path = path / part
            path.mkdir(exist_ok=True)
        return path

    def run(self, relative: str, env: dict[str, str]) -> None:
        """UNIT_WORK in the folder `relative`, moved there before it execs (it never runs outside)."""
        procs = self.make(relative) / "cgroup.procs"
        self.procs.append(subprocess.Popen([sys.executable, "-c", UNIT_WORK], env={**os.environ, **env},
                                           preexec_fn=lambda: procs.write_text("0")))

    def close(self) -> None:
        """Every process killed and reaped, then every folder removed, deepest first (a populated cgroup
        cannot go)."""
        for p in self.procs:
            p.kill()
            p.wait()
        for folder in sorted((p for p in self.root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            folder.rmdir()
        self.root.rmdir()


def running_units(http: str) -> set[str]:
    """The units the daemon lists as running, of every kind."""
    names = set()
    for kind in wire.UNIT_KINDS:
        text = get(f"{http}/api/jobs?kind={kind}&state=running&limit=1000")
        if text is None:
            raise SystemExit(f"{http}/api/jobs did not answer")
        names |= {row["unit"] for row in json.loads(text)}
    return names


def wait_listed(http: str, expected: set[str]) -> None:
    deadline = time.monotonic() + LISTED_WAIT
    while not expected <= (seen := running_units(http)):
        if time.monotonic() > deadline:
            raise SystemExit(f"the daemon lists {len(expected & seen)} of the {len(expected)} units as running "
                             f"after {LISTED_WAIT:.0f} s")
        time.sleep(1.0)


def tree_memory(pid: int) -> tuple[float, float]:
    """(RSS, PSS) in MB of a process and its descendants; PSS splits shared pages among their users."""
    top = psutil.Process(pid)
    infos = [p.memory_full_info() for p in (top, *top.children(recursive=True))]
    return sum(i.rss for i in infos) / 2**20, sum(i.pss for i in infos) / 2**20


def measure(folder: str, endpoint: str, http: str, root: Path, expected: set[str], seconds: float,
            name: str) -> dict:
    """One agent over the subtree at `root`: its figures over a window once the daemon lists `expected`."""
    config = agent_config(folder, endpoint, name, counters_interval=1.0, psutil_interval=1.0, bbv_frequency=0,
                          job_bbv_frequency=0, cgroup_root=json.dumps(str(root)))
    agent, _ = start_agent(sys.executable, ["--config", config, "--flush-timeout", "5"], folder,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listed(http, expected)
        time.sleep(WARMUP)
        ticks, live, t0 = tree_cpu_seconds(agent.pid), live_cpu_seconds(agent.pid), time.monotonic()
        time.sleep(seconds)
        wall = time.monotonic() - t0
        cpu, live_cpu = tree_cpu_seconds(agent.pid) - ticks, live_cpu_seconds(agent.pid) - live
        rss, pss = tree_memory(agent.pid)
        seen = running_units(http)
        return {"units_made": len(expected), "cpu_percent": 100 * cpu / wall, "cpu_percent_live_threads":
                100 * live_cpu / wall, "cpu_goal_percent": CPU_GOALS[name], "rss_mb": rss, "pss_mb": pss,
                "rss_goal_mb": RSS_GOAL_MB, "load1": os.getloadavg()[0], "running_units_listed": len(seen),
                "made_units_listed": len(seen & expected), "wall_seconds": wall}
    finally:
        agent.terminate()
        agent.wait(30)


def run(n: int, seconds: float, mount: str) -> dict:
    """Both runs, the daemon and the subtree made here and gone at the end."""
    leaves = layout(n)
    expected = {name for _, names, _ in leaves for name in names}
    with tempfile.TemporaryDirectory(prefix="cw-units-") as folder:
        daemon, endpoint = start_daemon_with_http(folder)
        try:
            subtree = Subtree(mount)
            try:
                runs = {"none": measure(folder, endpoint, daemon.http, subtree.root, set(), seconds, "none")}
                for relative, _, env in leaves:
                    subtree.run(relative, env)
                runs["units"] = measure(folder, endpoint, daemon.http, subtree.root, expected, seconds, "units")
            finally:
                subtree.close()
        finally:
            daemon.terminate()
            daemon.wait(30)
    kinds = collections.Counter(wire.unit_kind(name) for name in expected)
    return {"cpus": os.cpu_count(), "seconds": seconds, "units": n, "processes": len(leaves),
            "kinds": {kind: kinds[kind] for kind in wire.UNIT_KINDS if kinds[kind]},
            "runs": runs}


def why_not() -> str | None:
    """Why units cannot be made here, or None."""
    if os.geteuid() != 0:
        return "not root: making cgroup v2 folders needs root"
    mount = cgroups.find_root()
    if mount is None:
        return "no cgroup v2 hierarchy is mounted (/proc/self/mounts)"
    if not os.access(mount, os.W_OK):
        return f"the cgroup v2 hierarchy at {mount} is not writable here"
    return None


def show(figures: dict) -> None:
    kinds = ", ".join(f"{k} {v}" for k, v in figures["kinds"].items())
    print(f"{figures['units']} units ({kinds}; {figures['processes']} processes), {figures['seconds']:.0f} s "
          f"windows, {figures['cpus']} CPUs")
    for name, r in figures["runs"].items():
        label = "no units" if name == "none" else f"{r['units_made']} units"
        cpu_ok = "met" if r["cpu_percent"] <= r["cpu_goal_percent"] else "missed"
        rss_ok = "met" if r["rss_mb"] <= r["rss_goal_mb"] else "missed"
        print(f"{label}: agent CPU {r['cpu_percent']:.3f} % of one core (goal <= {r['cpu_goal_percent']} %: {cpu_ok};"
              f" live threads by schedstat {r['cpu_percent_live_threads']:.3f} %), RSS {r['rss_mb']:.1f} MB (goal <= "
              f"{r['rss_goal_mb']:.0f} MB: {rss_ok}), PSS {r['pss_mb']:.1f} MB, load1 {r['load1']:.2f}; the daemon "
              f"lists {r['running_units_listed']} running units ({r['made_units_listed']} of the "
              f"{r['units_made']} made)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=20, help="units in the second run (default 20)")
    ap.add_argument("--seconds", type=float, default=60.0, help="measuring window per run (default 60)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    if args.units < 0 or args.seconds < 1:
        ap.error(f"--units {args.units} --seconds {args.seconds}: give at least 0 units and 1 second")
    reason = why_not()
    if reason is not None:
        print(json.dumps({"skipped": reason}) if args.json else f"agent_units: skipped, {reason}")
        return 0
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))   # the cleanup runs as on Ctrl-C
    figures = run(args.units, args.seconds, cgroups.find_root())
    if args.json:
        print(json.dumps(figures, indent=1))
    else:
        show(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
