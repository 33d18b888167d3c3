"""The daemon's weight and its verbs' start-up, on a real `causewatch daemon` with two real
agents and instrumented programs. Once its jobs worker has learnt a model and its API worker has
answered the data verbs: the API worker's own memory is small (it shares the libraries its fork server
loaded), and after it has ended for want of requests the daemon's processes together stay within a
PSS budget (a page shared by n processes counts 1/n to each); the ingesting process has not loaded
pandas; and the data verbs of a CLI that asks the daemon load none of the analysis stack (the daemon's
API worker does their work, with the libraries loaded before the first request). bench/daemon.py
measures the same after 15 minutes, and the verbs' times at load 8."""

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from support import DaemonProcess, wait_for

BUDGET_MB = 400   # the goal for the daemon's processes after 15 minutes with two agents
API_OWN_MB = 80   # the API worker's unique set size after answering (a spawned one loading its own: ~140-230)
PROGRAM = """
import random, sys, time
from causewatch.agent.instrument import flush, region, task
rng = random.Random(sys.argv[1])
for i in range(int(sys.argv[2])):
    n = rng.randint(2_000, 40_000)
    with task(sys.argv[1], params={"n": n}):
        with region("square"):
            sum(i * i for i in range(n))
    time.sleep(0.04)
flush(10)
"""
# What a data verb's CLI process must not load when a daemon answers it (its API worker has them).
HEAVY = ("numpy", "pandas", "pyarrow", "scipy", "numba", "duckdb", "networkx", "causewatch.analytics",
         "causewatch.daemon.readers", "causewatch.daemon.routes")
LOADED = ("import atexit, sys; atexit.register(lambda: print('LOADED', sorted(m for m in {heavy!r} if m in "
          "sys.modules), file=sys.stderr)); from causewatch.cli import main; sys.exit(main(sys.argv[1:]))")
VERBS = (["nodes"], ["bottlenecks"], ["query", "(time_share is high)"], ["learn", "tasks", "--app", "w-1"],
         ["anomalies"], ["model", "--scope", "app:w-1"],
         # an HTCondor execute node's startd cron: the agent-only install must run it
         ["broker", "condor", "w-1", "--node", "w-node-1", "--slots", "1"])


def _get(url: str):
    with urllib.request.urlopen(url, timeout=60) as reply:
        return json.load(reply)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A daemon, two agents, two programs sending 150 tasks each; returns (daemon, {verb: (code, loaded,
    stderr)}) once a model is learnt and each verb was asked through the CLI."""
    folder = tmp_path_factory.mktemp("weight")
    # a steady state: kernels compiled by the daemon's processes would be their own memory
    subprocess.run([sys.executable, str(Path(__file__).parents[1] / "warm_kernels.py")], check=True, timeout=600)
    cfg = folder / "daemon.toml"
    # the jobs worker at nice 0: its weight is the test, not its priority (at SCHED_IDLE on a loaded machine
    # the first model waited for idle cores)
    cfg.write_text("[daemon]\ncausal_interval = 2.0\napi_idle_seconds = 2.0\nanalysis_nice = 0\n")
    daemon = DaemonProcess(folder / "cw.duckdb", extra=["--config", str(cfg)]).start()
    procs = []
    try:
        for n in (1, 2):
            agent_cfg = folder / f"agent-{n}.toml"
            agent_cfg.write_text(f'[agent]\ndaemon = "{daemon.endpoint}"\nnode = "w-node-{n}"\n'
                                 f'spool = "{folder}/spool-{n}"\nipc = "ipc://{folder}/agent-{n}.sock"\n')
            procs.append(subprocess.Popen([sys.executable, "-m", "causewatch.cli", "agent", "--config",
                                           str(agent_cfg)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            procs.append(subprocess.Popen([sys.executable, "-c", PROGRAM, f"w-{n}", "150"],
                                          env={"CAUSEWATCH_CONFIG": str(agent_cfg), "PATH": "/usr/bin:/bin"}))
        api = f"http://{daemon.http}/api"
        assert wait_for(lambda: _get(f"{api}/models?scope=app:w-1"), timeout=180, every=1.0), "no model learnt"
        answers = {}
        for verb in VERBS:
            out = subprocess.run([sys.executable, "-c", LOADED.format(heavy=HEAVY), *verb, "--daemon",
                                  f"http://{daemon.http}"], capture_output=True, text=True, timeout=300)
            loaded = [line for line in out.stderr.splitlines() if line.startswith("LOADED")]
            answers[" ".join(verb)] = (out.returncode, loaded[-1][len("LOADED "):] if loaded else "?", out.stderr)
        api = [p for p in _processes(daemon) if p.name() == "causewatch-api"]
        api_uss = api[0].memory_full_info().uss / 2**20 if api else None
        assert wait_for(lambda: not any(p.name() == "causewatch-api" for p in _processes(daemon)), timeout=60)
        time.sleep(1)
        yield daemon, answers, api_uss
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(60)
        daemon.stop()


def _processes(daemon) -> list[psutil.Process]:
    top = psutil.Process(daemon.proc.pid)
    return [top, *top.children(recursive=True)]


def test_the_api_worker_shares_the_libraries(run):
    assert run[2] is not None and run[2] <= API_OWN_MB, f"the API worker's own memory: {run[2]} MB"


def test_the_daemons_processes_stay_within_the_pss_budget(run):
    sizes = {f"{p.pid} {p.name()}": p.memory_full_info().pss / 2**20 for p in _processes(run[0])}
    assert any(name.endswith("causewatch-jobs") for name in sizes)
    assert sum(sizes.values()) <= BUDGET_MB, "PSS in MB: " + ", ".join(f"{k}: {v:.0f}" for k, v in sizes.items())


def test_the_ingesting_process_never_loaded_pandas(run):
    """pyarrow would import it at the first frame written (docs/memory.md)."""
    maps = {m.path for m in psutil.Process(run[0].proc.pid).memory_maps()}
    assert not [m for m in maps if "/pandas/" in m], "the daemon process maps pandas' libraries"


@pytest.mark.parametrize("verb", [" ".join(v) for v in VERBS])
def test_a_data_verb_asking_the_daemon_loads_no_analysis_library(run, verb):
    code, loaded, stderr = run[1][verb]
    assert code == 0, stderr[-2000:]
    assert loaded == "[]", f"{verb} loaded {loaded}"
