"""The agent loop's parts: the non-drifting schedule, columnar batches, sd_notify, targets."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from causewatch import wire
from causewatch.agent import runner
from causewatch.errors import InputError
from causewatch.systemd import sd_notify


@given(st.floats(0.01, 5.0), st.lists(st.floats(0.0, 20.0), min_size=1, max_size=30))
def test_schedule_stays_on_its_grid_and_only_moves_forward(period, lateness):
    due, t0 = 100.0, 100.0
    for late in lateness:
        now = due + late * period
        nxt = runner._next(due, period, now)
        assert nxt >= now and nxt > due                                      # never in the past
        assert abs((nxt - t0) / period - round((nxt - t0) / period)) < 1e-6   # a multiple of the period
        assert nxt - now <= period * (1 + 1e-9)                              # and the first one in the future
        due = nxt


def test_batch_is_columnar_with_nulls_for_missing_metrics():
    b = runner.Batch("pid:1")
    b.add(1.0, {"a": 1.0, "b": 2.0})
    b.add(2.0, {})                                  # an empty reading is no row
    b.add(3.0, {"a": 3.0, "c": None})
    body = b.body()
    frame = wire.decode(wire.encode("samples", "n", "boot", 1, body))
    t, names, values, nulls = wire.samples_arrays(frame.body)
    assert t.tolist() == [1.0, 3.0] and names == ["a", "b", "c"]
    assert values[0, 0] == 1.0 and values[1, 0] == 3.0
    assert nulls.tolist() == [[False, False, True], [False, True, True]]
    assert b.body() is None                         # emptied by the flush


def test_sd_notify_writes_datagrams_to_the_notify_socket(tmp_path):
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind(path)
        assert sd_notify("READY=1", env={"NOTIFY_SOCKET": path})
        assert s.recv(64) == b"READY=1"
    assert not sd_notify("READY=1", env={})
    assert runner._watchdog_period({"WATCHDOG_USEC": "4000000"}) == 2.0
    assert runner._watchdog_period({"WATCHDOG_USEC": "4000000", "WATCHDOG_PID": "1"}) is None
    assert runner._watchdog_period({}) is None


def test_targets_that_do_not_exist_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="--pid"):
        runner.find_target(pid=2**22 + 5)
    with pytest.raises(InputError, match="--match"):
        runner.find_target(match="no-such-program-anywhere")
    with pytest.raises(InputError, match="--cgroup"):
        runner.find_target(cgroup=str(tmp_path / "absent"))
    with pytest.raises(InputError, match="cannot run"):
        runner.launch(["/nonexistent/program"])
    assert runner.find_target(pid=os.getpid()).label == f"pid:{os.getpid()}"
    assert runner.find_target() is None


def test_a_launched_command_waits_until_released(tmp_path):
    marker = tmp_path / "ran"
    target = runner.launch([sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"])
    with pytest.raises(subprocess.TimeoutExpired):
        target.child.wait(0.3)                      # held before exec
    assert not marker.exists()
    target.release()
    assert target.child.wait(30) == 0 and marker.exists()


def test_a_match_finds_the_oldest_process_of_that_name(tmp_path):
    script = tmp_path / "cw-match-me"
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.stdin.read()\n")
    script.chmod(0o755)
    first = subprocess.Popen([str(script)], stdin=subprocess.PIPE)
    second = subprocess.Popen([str(script)], stdin=subprocess.PIPE)
    try:
        import psutil
        for p in (first, second):                   # both exist (and have their names) before we look
            psutil.Process(p.pid).create_time()
        target = runner.find_target(match="cw-match-me")
        assert target.pid == first.pid
    finally:
        for p in (first, second):
            p.kill()
            p.wait()


def test_hello_reports_node_facts_and_counter_reasons(tmp_path):
    from causewatch.config import AgentConfig
    agent = runner.Agent(AgentConfig(node="n", spool=str(tmp_path)), sender=_Recorder(),
                         target=runner.find_target(pid=os.getpid()))
    hello = agent.open()
    frame = wire.decode(wire.encode("hello", "n", "b", 1, hello))
    assert frame.body["cores"] == os.cpu_count() and frame.body["memory_bytes"] > 0
    assert hello["counters"]["node.task_clock_seconds"] == "ok" and hello["counters"]["bbv"] == "ok"
    assert hello["extra"]["pid"] == os.getpid()
    agent.sample_fast()
    agent.sample_slow()
    scopes = {scope for scope, _ in agent._batches}
    assert scopes == {"node", f"pid:{os.getpid()}"}
    for c in (agent.node_counters, agent.target_counters, agent.bbv):
        c.close()
    assert np.isfinite(list(agent._batches[("node", "slow")].rows[0].values())).all()


def test_the_shipped_agent_config_and_unit_are_consistent():
    from pathlib import Path

    from causewatch import config
    from causewatch.config import AgentConfig
    root = Path(__file__).resolve().parents[2] / "systemd"
    cfg = config.load(AgentConfig, root / "agent.toml", "agent")
    assert cfg.counters_interval == 0.1 and cfg.psutil_interval == 1.0 and cfg.bbv_frequency == 1000
    unit = (root / "causewatch-agent.service").read_text()
    assert "Type=notify" in unit and "WatchdogSec=" in unit
    assert "ExecStart=/usr/bin/causewatch agent --config /etc/causewatch/agent.toml" in unit
    assert cfg.ipc.startswith("ipc:///run/causewatch/") and "RuntimeDirectory=causewatch" in unit


class _Recorder:
    def __init__(self):
        self.sent = []
        self.event = threading.Event()

    def send(self, kind, body):
        self.sent.append((kind, body))
        self.event.set()


def test_run_probe_runs_the_handed_in_runner_in_a_thread_and_sends_its_result(tmp_path, caplog):
    from causewatch.config import AgentConfig
    result = {"app": "mw", "kit": "k", "predicted_seconds": 2.0, "lo": 1.5, "hi": 2.5, "ratio": 1.1,
              "probe_seconds": 0.2}
    agent = runner.Agent(AgentConfig(node="n", spool=str(tmp_path)), sender=_Recorder(),
                         run_probe=lambda body: dict(result, kit=body["kit"]))
    agent.on_command(wire.Frame("run_probe", "daemon", "b", 1, 0.0, {"app": "mw", "kit": "k7"}))
    assert agent.sender.event.wait(10)
    assert agent.sender.sent == [("probe_result", dict(result, kit="k7"))]
    # a failing kit is logged; the agent carries on and sends the daemon why, as a valid probe_result
    agent.run_probe = lambda body: 1 / 0
    agent.sender = _Recorder()
    agent.on_command(wire.Frame("run_probe", "daemon", "b", 2, 0.0, {"app": "mw", "kit": "bad"}))
    assert agent.sender.event.wait(10)
    assert "run_probe mw/bad failed: ZeroDivisionError: division by zero" in caplog.text
    [(kind, body)] = agent.sender.sent
    assert kind == "probe_result" and body["error"] == "ZeroDivisionError: division by zero"
    assert (body["app"], body["kit"]) == ("mw", "bad") and body["probe_seconds"] >= 0
    assert wire.decode(wire.encode(kind, "n", "b", 1, body)).body == body
    # the kit's own mistake is said as it is, without a traceback
    def refuse(body):
        raise InputError("worker callable 'x:y' cannot be loaded")
    agent.run_probe = refuse
    agent.sender = _Recorder()
    caplog.clear()
    agent.on_command(wire.Frame("run_probe", "daemon", "b", 3, 0.0, {"app": "mw", "kit": "bad"}))
    assert agent.sender.event.wait(10)
    assert agent.sender.sent[0][1]["error"] == "worker callable 'x:y' cannot be loaded"
    assert "Traceback" not in caplog.text


def test_an_agent_built_without_a_probe_runner_logs_and_ignores_run_probe(tmp_path, caplog):
    from causewatch.config import AgentConfig
    agent = runner.Agent(AgentConfig(node="n", spool=str(tmp_path)), sender=_Recorder())
    agent.on_command(wire.Frame("run_probe", "daemon", "b", 1, 0.0, {"app": "mw", "kit": "k7"}))
    assert "run_probe mw/k7 ignored" in caplog.text
    assert agent.sender.sent == [] and not agent._probes


def test_stopping_a_launched_command_stops_the_processes_it_started(tmp_path):
    """One that ignores SIGTERM too: killed after the grace, none left re-parented to PID 1."""
    import psutil
    program = ("import signal, subprocess, sys, time\n"
               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
               "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
               "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)'])\n"
               "time.sleep(300)\n")
    target = runner.launch([sys.executable, "-c", program])
    target.release()
    me = psutil.Process(target.child.pid)
    deadline = time.monotonic() + 30
    while len(me.children(recursive=True)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    started = me.children(recursive=True)
    assert len(started) == 2
    assert target.stop(1.0) == -15
    gone, alive = psutil.wait_procs(started, timeout=5)
    assert not alive, alive


def test_node_collectors_slower_than_the_loop_get_batches_of_their_own(tmp_path):
    from causewatch.config import AgentConfig
    t = [1000.0]
    agent = runner.Agent(AgentConfig(node="n", spool=str(tmp_path)), sender=_Recorder(), monotonic=lambda: t[0])
    for _ in range(3):
        agent.sample_slow()
        t[0] += 1.0
    agent.flush_batches("slow")
    frames = [(len(body["t"]) // 8, body["names"]) for kind, body in agent.sender.sent if kind == "samples"]
    [every_second] = [names for rows, names in frames if rows == 3]
    assert "node_load1" in every_second and not {"load1", "memory_total_bytes"} & set(every_second)
    assert not any(n.startswith("node_filesystem_") for n in every_second)
    slow = [names for rows, names in frames if rows == 1]
    assert len(slow) == 2 and any(n.startswith("node_filesystem_size_bytes") for n in slow[0] + slow[1])
    agent.node.close()
