"""The agent's leftovers: a launched command stops with the agent (unless told to stay), no socket file stays.

Real agent processes with a real launched command; the daemon endpoint is unserved (frames spool, and
the agent exits 3: frames were left unacked).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from support import free_port

from causewatch.commands.agent import UNDELIVERED

pytestmark = pytest.mark.service   # agents and their launched commands as processes

CHILD = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)"


def _start(tmp_path: Path, *flags: str) -> tuple[subprocess.Popen, int, Path]:
    sock = tmp_path / "agent.sock"
    pid_file = tmp_path / "child.pid"
    agent = subprocess.Popen(
        [sys.executable, "-m", "causewatch.cli", "agent", "--daemon", f"tcp://127.0.0.1:{free_port()}",
         "--ipc", f"ipc://{sock}", "--flush-timeout", "1", "--stop-grace", "2", *flags,
         "--", sys.executable, "-c", CHILD, str(pid_file)],
        env=dict(os.environ, HOME=str(tmp_path)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()):   # the child runs once the agent samples
        assert agent.poll() is None and time.monotonic() < deadline, agent.stderr.read()
        time.sleep(0.05)
    return agent, int(pid_file.read_text()), sock


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.05)
    return False


def test_sigterm_stops_the_launched_command_and_removes_the_socket(tmp_path):
    agent, child, sock = _start(tmp_path)
    assert sock.exists()
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(30) == UNDELIVERED
    assert _gone(child), "the launched command outlived its agent"
    assert not sock.exists(), "the ipc socket file was left behind"


def test_leave_running_keeps_the_command(tmp_path):
    agent, child, _ = _start(tmp_path, "--leave-running")
    try:
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(30) == UNDELIVERED
        assert psutil.pid_exists(child) and not _gone(child, within=0.5)
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_killed_agent_takes_its_command_along(tmp_path):
    agent, child, _ = _start(tmp_path)
    agent.kill()
    agent.wait(30)
    assert _gone(child), "SIGKILL of the agent left the launched command running"


@pytest.mark.parametrize("flags, words", [(["--json"], "--json applies only to --check"),
                                          (["--stop-grace", "-1"], "--stop-grace")])
def test_agent_flag_mistakes(flags, words):
    r = subprocess.run([sys.executable, "-m", "causewatch.cli", "agent", *flags], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr
