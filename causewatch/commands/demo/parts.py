"""What the demo starts beside its daemon: its folder, the probe kit (built, then registered through
the API), and the two agents, one watching the instrumented master-worker workload."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from causewatch.daemon import verbs
from causewatch.errors import InputError

MARK = ".causewatch-demo"   # written into a folder the demo made, so a later run may empty it
SEED = 1                    # the workload's and the probe kit's seeds: the same tasks run to run
PROBE_WAIT = 60.0           # seconds the workload waits for the agents' probes at most
KIT_STOP = 10.0             # seconds an interrupted kit build may take to stop its workers before all are killed
APP = "demo"                # the workload's app, and its causal model's scope
SCOPE = f"app:{APP}"
NODES = (("demo-node-1", True), ("demo-node-2", False))   # (node, watches the workload)
# The watched command waits for a file before it becomes the workload (exec: the agent's counters follow):
# the agents' probes run at their hello and must not share the cores with the workload they predict.
WAIT_THEN_EXEC = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.1)\n" \
                 "os.execv(sys.argv[2], sys.argv[2:])"


def prepare(folder: Path) -> None:
    """Make `folder`, or empty it if an earlier demo made it; a folder with anything else is refused."""
    if folder.exists() and not folder.is_dir():
        raise InputError(f"--dir {folder}: is a file; give a folder")
    if folder.exists() and any(folder.iterdir()):
        if not (folder / MARK).exists():
            raise InputError(f"--dir {folder}: not empty and not made by causewatch demo; "
                             "give a new or empty folder (nothing was deleted)")
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARK).write_text("made by causewatch demo: a later demo empties this folder\n")


def build_kit(folder: Path, quiet: bool) -> None:
    """A probe kit for the demo app (registered once the daemon runs, so new agents get probed on hello)."""
    if not quiet:
        print("building the probe kit for app 'demo' (reference runs of the workload)…", flush=True)
    # Its own process group: a terminal's Ctrl-C reaches the demo alone, which passes exactly one SIGINT on,
    # so the build stops its own pool of workers (killed, it would leave them to die of broken pipes).
    build = subprocess.Popen([sys.executable, "-m", "causewatch.cli", "probe", "build", APP, "--workload",
                              "masterworker", "--tasks", "40", "--task-seed", str(SEED), "--seed", str(SEED),
                              "--out", str(folder / "kit"),
                              # a demo runs wherever it is started: it keeps a noisy kit (its manifest's quality
                              # says so)
                              "--max-spread", "1", "--max-other-cpu", "1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL if quiet else None, process_group=0)
    try:
        code = build.wait()
    except KeyboardInterrupt:
        build.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            build.wait(KIT_STOP)
        with contextlib.suppress(ProcessLookupError):   # whatever of its group is left: workers, timing child
            os.killpg(build.pid, signal.SIGKILL)
        build.wait()
        raise
    if code:
        raise subprocess.CalledProcessError(code, build.args)


def register_kit(folder: Path, url: str, quiet: bool) -> None:
    """Register the kit with the running daemon through its HTTP API (the daemon keeps its store)."""
    subprocess.run([sys.executable, "-m", "causewatch.cli", "probe", "register", str(folder / "kit"), "--daemon", url],
                   check=True, stdout=subprocess.DEVNULL if quiet else None)


def agent(folder: Path, endpoint: str, node: str, watch: bool) -> subprocess.Popen:
    """An agent for `node`; demo-node-1 watches the instrumented master-worker workload, which starts
    once `folder/go` exists and runs until `folder/stop` does, demo-node-2 its node only."""
    cfg = folder / f"{node}.toml"
    # its probe waits for an idle moment a little only: the workload waits PROBE_WAIT s for it at most
    cfg.write_text(f'[agent]\ndaemon = "{endpoint}"\nnode = "{node}"\nspool = "{folder / node}-spool"\n'
                   f'ipc = "ipc://{folder / node}.sock"\nprobe_idle_wait = {PROBE_WAIT / 6:g}\n')
    cmd = [sys.executable, "-m", "causewatch.cli", "agent", "--config", str(cfg)]
    if watch:
        cmd += ["--", sys.executable, "-c", WAIT_THEN_EXEC, str(folder / "go"),
                sys.executable, "-m", "causewatch.probe.workloads.masterworker", "--app", APP,
                "--until", str(folder / "stop"), "--seed", str(SEED), "--workers", "2"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(folder / f"{node}.log", "w"),
                            env=dict(os.environ, CAUSEWATCH_CONFIG=str(cfg)))


def await_probe(api, node: str, proc: subprocess.Popen, quiet: bool) -> None:
    """Wait until `node`'s probe of the demo app is done, as /api/probe-status says (at most PROBE_WAIT s)."""
    if not quiet:
        print(f"probing {node} (one node at a time, before the workload starts: a probe sharing the cores "
              "with it or with another probe would rank this machine slower than itself)…", flush=True)
    t0 = time.monotonic()
    while time.monotonic() - t0 < PROBE_WAIT and proc.poll() is None:
        if any(r["node"] == node and r["state"] == "done" for r in api.read(verbs.PROBE_STATUS, app=APP)):
            if not quiet:
                print(f"probed in {time.monotonic() - t0:.1f} s", flush=True)
            return
        time.sleep(0.2)
    print(f"{node}'s probe did not come back within {PROBE_WAIT:.0f} s: going on without it", file=sys.stderr)
