"""Instrumented programs find their agent through the environment it gives them, and records spooled
when nothing answers are delivered later."""

import subprocess
import sys

from support import free_port, query, run_cli

from causewatch.agent.sender import Sender
from causewatch.config import AgentConfig

PROGRAM = """
from causewatch.agent import instrument
for i in range(5):
    with instrument.task(app="solver", params={"i": i}):
        with instrument.region("work"):
            sum(range(10000))
print("flushed", instrument.flush(3.0))
"""


def test_a_launched_program_reaches_its_agent_without_any_setting(daemon_process, tmp_path):
    """It stored 0 tasks and 0 regions: the command was not told where its agent was."""
    (tmp_path / "solver.py").write_text(PROGRAM)
    d = daemon_process()
    r = run_cli("agent", "--daemon", d.endpoint, "--node", "n1", "--spool", str(tmp_path / "spool"),
                "--ipc", f"ipc://{tmp_path}/agent.sock", "--", sys.executable, str(tmp_path / "solver.py"),
                timeout=120, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    d.stop()
    assert query(d.db, "SELECT count(*) FROM tasks WHERE node = 'n1' AND app = 'solver'") == [(5,)]
    assert query(d.db, "SELECT count(*) FROM regions WHERE node = 'n1' AND region = 'work'") == [(5,)]
    assert not (tmp_path / "spool" / "instrument").exists()   # through the agent, not around it


def test_a_program_that_reaches_nothing_warns_once_and_its_records_are_delivered_later(daemon_process, tmp_path):
    (tmp_path / "solver.py").write_text(PROGRAM)
    port, spool = free_port(), tmp_path / "spool"
    env = {"CAUSEWATCH_IPC": f"ipc://{tmp_path}/nobody.sock", "CAUSEWATCH_DAEMON": f"tcp://127.0.0.1:{port}",
           "CAUSEWATCH_SPOOL": str(spool), "CAUSEWATCH_NODE": "n2", "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, str(tmp_path / "solver.py")], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 0 and "flushed False" in r.stdout, r.stderr
    warnings = [line for line in r.stderr.splitlines() if "no agent listens" in line]
    assert len(warnings) == 1, r.stderr
    d = daemon_process(port=port)
    agent = Sender(AgentConfig(daemon=d.endpoint, node="n2", spool=str(spool))).start()   # the agent, later
    assert agent.flush(20)
    agent.close()
    d.stop()
    assert query(d.db, "SELECT count(*) FROM tasks WHERE node = 'n2'") == [(5,)]
