"""`probe build` of an application's own instrumented worker, as its developer runs it: from the
module's folder, with no agent running. The module is found there, and the build's runs of its
tasks send no task or region records anywhere (they are the kit's, not the application's)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from support import ROOT, free_port, query

from causewatch.agent import instrument
from causewatch.agent.sender import INSTRUMENT_SPOOL, Sender
from causewatch.agent.spool import Spool
from causewatch.config import AgentConfig
from causewatch.probe.kit import INSTRUMENT_OFF

SOLVER = """
from causewatch.agent.instrument import configure, region, task

configure(app="solver")


def run_task(spec):
    with task(params={"n": spec["n"]}):
        with region("work"):
            return sum(i * i for i in range(spec["n"]))
"""
# a small build: what is tested is where the module is found and where its records go, not the kit
QUICK = ("--reference-runs", "1", "--repeats", "1", "--warmup", "0", "--workers", "1",
         "--max-spread", "1", "--max-other-cpu", "1", "--min-spread", "0.5")


def app_folder(tmp_path):
    (tmp_path / "solver.py").write_text(SOLVER)
    (tmp_path / "tasks.json").write_text(json.dumps([{"n": n} for n in range(2000, 14000, 2000)]))
    return tmp_path


def no_agent(tmp_path, port: int, *path) -> dict:
    """The environment of a program that reaches neither an agent nor a daemon, with the checkout (and
    `path`, not the application's folder unless given) on PYTHONPATH."""
    return {"CAUSEWATCH_IPC": f"ipc://{tmp_path}/nobody.sock", "CAUSEWATCH_DAEMON": f"tcp://127.0.0.1:{port}",
            "CAUSEWATCH_SPOOL": str(tmp_path / "spool"), "CAUSEWATCH_NODE": "dev",
            "PYTHONPATH": os.pathsep.join(map(str, (ROOT, *path)))}


def causewatch(folder, env: dict, *args: str) -> subprocess.CompletedProcess:
    """The console script, as a user runs it in `folder` (`python -m` would put the folder on sys.path)."""
    return subprocess.run([Path(sys.executable).with_name("causewatch"), *args], capture_output=True, text=True,
                          cwd=str(folder), env=dict(os.environ, **env), timeout=300)


def build(folder, env: dict, *more: str):
    return causewatch(folder, env, "probe", "build", "solver", "--callable", "solver:run_task",
                      "--tasks-file", "tasks.json", "--out", "kits/solver", *QUICK, *more)


def test_probe_build_finds_the_module_in_the_folder_it_runs_in(tmp_path):
    """`causewatch probe build` said the module could not be loaded until PYTHONPATH=. was set."""
    folder = app_folder(tmp_path)
    done = build(folder, no_agent(folder, free_port()), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["worker"] == {"callable": "solver:run_task"}
    said = build(folder, no_agent(folder, free_port()))
    assert said.returncode == 0, said.stderr[-3000:]
    assert f"each node's agent must import solver (here: {folder / 'solver.py'})" in said.stdout
    assert f"PYTHONPATH={folder}" in said.stdout


def test_a_module_found_nowhere_is_named_with_how_to_make_it_importable(tmp_path):
    folder = app_folder(tmp_path)
    done = causewatch(folder, no_agent(folder, free_port()), "probe", "build", "solver",
                      "--callable", "nosuchsolver:run_task", "--tasks-file", "tasks.json", "--out", "kits/x", *QUICK)
    assert done.returncode == 2
    assert "No module named 'nosuchsolver'" in done.stderr and "PYTHONPATH" in done.stderr, done.stderr


def test_the_builds_runs_of_an_instrumented_worker_never_reach_the_store(tmp_path, daemon_process):
    """With no agent it printed daemon warnings and spooled ~110 task records, which the next agent run
    delivered into the application's data."""
    folder, port = app_folder(tmp_path), free_port()
    done = build(folder, no_agent(folder, port, folder))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "does not answer" not in done.stderr and "no agent listens" not in done.stderr, done.stderr[-3000:]
    spooled = folder / "spool" / INSTRUMENT_SPOOL
    assert not spooled.exists() or not Spool(spooled, 2**20).pending(), "the build's task records were spooled"
    d = daemon_process(port=port)
    agent = Sender(AgentConfig(daemon=d.endpoint, node="dev", spool=str(folder / "spool"))).start()   # the next run
    assert agent.flush(20)
    agent.close()
    d.stop()
    assert query(d.db, "SELECT count(*) FROM tasks") == [(0,)]
    assert query(d.db, "SELECT count(*) FROM regions") == [(0,)]


def test_the_instrument_measures_but_sends_nothing_when_turned_off(tmp_path):
    """What the build relies on, in a plain program: CAUSEWATCH_INSTRUMENT=off."""
    program = ("from causewatch.agent import instrument\n"
               "with instrument.task(app='solver') as t:\n    sum(range(100000))\n"
               "print('flushed', instrument.flush(3.0))\n")
    env = dict(os.environ, **no_agent(tmp_path, free_port()), CAUSEWATCH_INSTRUMENT="off")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0 and "flushed True" in done.stdout, done.stderr
    assert not (tmp_path / "spool").exists() and "no agent listens" not in done.stderr
    assert os.environ.get("CAUSEWATCH_INSTRUMENT") is None   # the test's own process is untouched
    assert INSTRUMENT_OFF == {instrument.OFF: "off"}         # the kit's copy of the switch is the instrument's
