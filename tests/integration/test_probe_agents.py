"""Probes through real agents: a `causewatch agent` child process per node against a daemon with the
probe job. A probe that fails on a node comes back as a failure with its reason (rank and `probe
status` name the node); a probe beside a busy launched program waits for it, or says the node was busy."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from support import ROOT, probe_daemon, run_cli, wait_for

from causewatch.probe import quality

APP = """
def run_task(spec):
    total = 0
    for i in range(spec["n"]):
        total += i * i
    return total
"""
# Every core busy for argv[1] seconds, then idle (the time its load ended written to argv[2]); the
# spinning children die with it (the agent stops the program it launched, not that program's children).
SPIN = """
import ctypes, multiprocessing, os, signal, sys, time

def spin(seconds):
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass

if __name__ == "__main__":
    seconds = float(sys.argv[1])
    others = [multiprocessing.Process(target=spin, args=(seconds,)) for _ in range(os.cpu_count() - 1)]
    for p in others:
        p.start()
    spin(seconds)
    for p in others:
        p.join()
    with open(sys.argv[2], "w") as f:
        f.write(repr(time.time()))
    time.sleep(3600)
"""


def manifest():
    return {"format": "causewatch-probe-kit/1", "app": "tiny", "kit": "k1", "tasks": 10,
            "worker": {"callable": "tinyapp:run_task"}, "reference_seconds": 0.05, "warmup": 0, "repeats": 2,
            "phases": [{"phase": 0, "weight": 1.0, "input": {"n": 20000}, "ref_seconds": 0.005, "ref_se": 0.0001}]}


@pytest.fixture
def daemon(tmp_path):
    d = probe_daemon(tmp_path / "cw.duckdb", manifest())
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "tinyapp.py").write_text(APP)
    yield d
    d.stop()


def start_agent(tmp_path, daemon, node: str, importable: bool, settings: str = "", cmd=()) -> subprocess.Popen:
    """`causewatch agent` for `node`, started in tmp_path; the kit's module is on its PYTHONPATH or not."""
    cfg = tmp_path / f"{node}.toml"
    cfg.write_text(f'[agent]\ndaemon = "{daemon.endpoint}"\nnode = "{node}"\nspool = "{tmp_path}/spool-{node}"\n'
                   f'ipc = "ipc://{tmp_path}/{node}.sock"\n{settings}')
    path = [str(ROOT), *([str(tmp_path / "app")] if importable else [])]
    log = open(tmp_path / f"{node}.log", "w")
    return subprocess.Popen([sys.executable, "-m", "causewatch.cli", "agent", "--config", str(cfg),
                             *(["--", *cmd] if cmd else [])], cwd=str(tmp_path), stdout=log, stderr=log,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join(path)))


def stop(*agents: subprocess.Popen) -> None:
    for agent in agents:
        if agent.poll() is None:
            agent.send_signal(signal.SIGTERM)
    for agent in agents:
        agent.wait(60)


def status(daemon) -> dict:
    out = run_cli("probe", "status", "--daemon", f"http://{daemon.http.address}", "--json")
    assert out.returncode == 0, out.stderr
    return {row["node"]: row for row in json.loads(out.stdout)}


def done(daemon, node: str) -> dict | None:
    row = status(daemon).get(node, {})
    return row if row.get("state") == "done" else None


def test_a_probe_that_fails_on_a_node_is_ranked_as_failed_with_its_reason(tmp_path, daemon):
    """It logged a traceback on the node, and rank said 'probes have not come back yet' for ever."""
    # a long idle wait: a worker that cannot load fails before it, not after
    bad = start_agent(tmp_path, daemon, "bad-node", importable=False, settings="probe_idle_wait = 3600\n")
    try:
        assert wait_for(lambda: status(daemon).get("bad-node", {}).get("state") == "failed", timeout=90), \
            (tmp_path / "bad-node.log").read_text()[-3000:]
        row = status(daemon)["bad-node"]
        assert "No module named 'tinyapp'" in row["reason"] and "PYTHONPATH" in row["reason"]
        assert row["app"] == "tiny" and row["kit"] == "k1" and abs(row["ts"] - time.time()) < 600
        ranked = run_cli("rank", "tiny", "--daemon", f"http://{daemon.http.address}")
        assert ranked.returncode == 2 and "bad-node" in ranked.stderr and "No module named 'tinyapp'" in ranked.stderr
        assert "have not come back" not in ranked.stderr
        good = start_agent(tmp_path, daemon, "good-node", importable=True, settings="probe_idle_wait = 0\n")
        try:
            assert wait_for(lambda: done(daemon, "good-node"), timeout=90), \
                (tmp_path / "good-node.log").read_text()[-3000:]
        finally:
            stop(good)
    finally:
        stop(bad)
    url = f"http://{daemon.http.address}/api/rank?app=tiny"
    with urllib.request.urlopen(url, timeout=30) as reply:
        answer = json.load(reply)
    assert [n["node"] for n in answer["nodes"]] == ["good-node"]
    assert [(f["node"], f["kit"]) for f in answer["failed"]] == [("bad-node", "k1")]
    assert "No module named 'tinyapp'" in answer["failed"][0]["reason"]
    table = run_cli("rank", "tiny", "--daemon", f"http://{daemon.http.address}")
    assert table.returncode == 0, table.stderr
    assert "good-node" in table.stdout and "failed on bad-node" in table.stdout
    listed = run_cli("probe", "status", "--daemon", f"http://{daemon.http.address}")
    assert listed.returncode == 0, listed.stderr
    lines = {line.split()[0]: line for line in listed.stdout.splitlines()[1:] if line.strip()}
    assert lines["good-node"].split()[3] == "done" and lines["bad-node"].split()[3] == "failed"


def probed_beside_a_busy_program(tmp_path, daemon, node: str, settings: str, busy_seconds: float) -> dict:
    """The `probe status` row of `node`'s probe, whose agent launched a program keeping every core busy
    for `busy_seconds` (its end's time then in tmp_path/spun)."""
    (tmp_path / "spin.py").write_text(SPIN)
    agent = start_agent(tmp_path, daemon, node, importable=True, settings=settings,
                        cmd=(sys.executable, str(tmp_path / "spin.py"), str(busy_seconds), str(tmp_path / "spun")))
    try:
        row = wait_for(lambda: done(daemon, node), timeout=180)
        assert row, (tmp_path / f"{node}.log").read_text()[-3000:]
        return row
    finally:
        stop(agent)


def test_a_probe_beside_a_busy_launched_program_says_the_node_was_busy(tmp_path, daemon):
    """The same VM ranked 15.6 x slower than itself: its probe ran while the launched program was busy."""
    row = probed_beside_a_busy_program(tmp_path, daemon, "busy-node", "probe_idle_wait = 3\n"
                                       "probe_max_other_cpu = 0.25\n", busy_seconds=300)
    assert row["busy"] is True and row["other_cpu"] > 0.25, row
    assert row["idle_waited"] >= 2.5, row     # it waited for an idle moment before giving up
    url = f"http://{daemon.http.address}/api/rank?app=tiny"
    with urllib.request.urlopen(url, timeout=30) as reply:
        node = json.load(reply)["nodes"][0]
    assert node["node"] == "busy-node" and node["busy"] is True
    table = run_cli("rank", "tiny", "--daemon", f"http://{daemon.http.address}")
    assert table.returncode == 0 and "busy" in table.stdout, table.stdout


@pytest.mark.serial   # it needs an idle moment, which never comes beside the parallel part's other file
def test_a_probe_waits_until_a_launched_programs_load_ends(tmp_path, daemon):
    # the limit lies between what the machine's other work takes and every core busy
    if quality.idle_window(1.0)["other_cpu"] > 0.55:
        pytest.skip("other processes already load this machine: no idle moment would come")
    row = probed_beside_a_busy_program(tmp_path, daemon, "calm-node", "probe_idle_wait = 120\n"
                                       "probe_max_other_cpu = 0.8\n", busy_seconds=6)
    spun = float((tmp_path / "spun").read_text())
    # the probe began (its result's time less the probe's own seconds) after the program's load ended
    assert row["ts"] - row["probe_seconds"] >= spun - 1.0, (row, spun)
    assert row["busy"] is False and row["idle_waited"] > 0, row


def test_rank_of_an_unprobed_kit_still_says_the_probes_are_pending(tmp_path, daemon):
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://{daemon.http.address}/api/rank?app=tiny", timeout=30)
    assert e.value.code == 404 and "have not come back yet" in e.value.read().decode()
