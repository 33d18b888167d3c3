"""An agent aimed at a wrong or dead daemon was silent for as long as it ran and exited 0.

Now it says once at WARNING that the daemon does not answer (and once when it answers again), keeps
spooling, and exits 3 when frames were left unacked, naming the spool. Real agent processes and daemons.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
from support import agent_config, free_port, run_cli, wait_for

from causewatch.agent.sender import Sender
from causewatch.commands.agent import UNDELIVERED, exit_status

pytestmark = pytest.mark.service   # agents and daemons as processes

SILENT = "does not answer"


def _config(tmp_path, endpoint: str) -> str:
    path = tmp_path / "agent.toml"
    path.write_text(f'[agent]\ndaemon = "{endpoint}"\nspool = "{tmp_path}/spool"\nipc = "ipc://{tmp_path}/a.sock"\n'
                    'answer_timeout = 1.0\n')
    return str(path)


def _logged_at(line: str) -> float:
    """The wall time of a log line (the CLI's format starts with asctime)."""
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _lines(stderr: str, words: str) -> list[str]:
    return [line for line in stderr.splitlines() if words in line]


def test_an_agent_whose_daemon_does_not_answer_says_so_once_and_exits_3(tmp_path):
    endpoint = f"tcp://127.0.0.1:{free_port()}"    # nothing listens there
    started = time.time()
    r = run_cli("-v", "agent", "--config", _config(tmp_path, endpoint), "--flush-timeout", "1", "--", "sleep", "3",
                timeout=60)
    assert r.returncode == UNDELIVERED, r.stderr[-2000:]
    silent = _lines(r.stderr, SILENT)
    assert len(silent) == 1 and " WARNING " in silent[0], r.stderr[-2000:]   # once, not at every reconnect
    assert endpoint in silent[0] and f"{tmp_path}/spool" in silent[0]
    ended, = _lines(r.stderr, "cmd:sleep exited")
    # after answer_timeout, and while the command still ran: not only at exit, as before
    assert started + 1.0 <= _logged_at(silent[0]) < _logged_at(ended), r.stderr[-2000:]
    left, = _lines(r.stderr, "not acked")
    assert f"{tmp_path}/spool" in left, left


def test_an_agent_with_a_live_daemon_exits_0_and_warns_of_nothing(daemon_process, tmp_path):
    d = daemon_process()
    r = run_cli("agent", "--config", _config(tmp_path, d.endpoint), "--", "sleep", "2", timeout=60)
    assert r.returncode == 0 and SILENT not in r.stderr and "not acked" not in r.stderr, r.stderr[-2000:]


def test_the_sender_says_once_each_way_that_the_daemon_went_silent_and_answers(daemon_process, tmp_path, caplog):
    port = free_port()
    s = Sender(agent_config(tmp_path, f"tcp://127.0.0.1:{port}", answer_timeout=0.3)).start()
    try:
        with caplog.at_level(logging.WARNING, "causewatch.agent.sender"):
            for i in range(3):
                s.send("task", {"app": "a", "task_id": str(i), "start": 0.0, "duration": 1.0})
            assert wait_for(lambda: _lines(caplog.text, SILENT), timeout=10)
            d = daemon_process(port=port)     # started late: ZeroMQ retried all along, the log said it once
            assert s.flush(30), "the spooled frames were not delivered to the late daemon"
            answers, = _lines(caplog.text, "answers again")
            assert len(_lines(caplog.text, SILENT)) == 1 and "sending the 3 frames" in answers, caplog.text
            d.kill()                          # and a daemon lost later is said once more
            s.send("task", {"app": "a", "task_id": "late", "start": 0.0, "duration": 1.0})
            assert wait_for(lambda: len(_lines(caplog.text, SILENT)) == 2, timeout=10), caplog.text
    finally:
        s.close()


def test_a_sender_with_nothing_to_deliver_says_nothing_until_a_frame_waits(tmp_path, caplog):
    s = Sender(agent_config(tmp_path, f"tcp://127.0.0.1:{free_port()}", answer_timeout=0.2)).start()
    try:
        with caplog.at_level(logging.WARNING, "causewatch.agent.sender"):
            time.sleep(0.5)
            assert SILENT not in caplog.text
            s.send("task", {"app": "a", "task_id": "1", "start": 0.0, "duration": 1.0})
            said = wait_for(lambda: _lines(caplog.text, SILENT), timeout=5)   # send() woke the loop: said now
            assert said and "1 frames wait" in said[0], caplog.text
    finally:
        s.close()


def test_a_port_that_speaks_no_zmtp_is_a_daemon_that_does_not_answer(tmp_path, caplog):
    """Each retry's failed handshake disconnects again: that must not restart the silence's clock."""
    server = socket.create_server(("127.0.0.1", 0))

    def refuse():    # a wrong service, e.g. the daemon's HTTP port: it reads the greeting, answers junk, closes
        with contextlib.suppress(OSError):   # until the test shuts the server down
            while True:
                conn, _ = server.accept()
                with conn:
                    conn.recv(64)
                    conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")

    wrong = threading.Thread(target=refuse)
    wrong.start()
    s = Sender(agent_config(tmp_path, f"tcp://127.0.0.1:{server.getsockname()[1]}", answer_timeout=0.3)).start()
    try:
        with caplog.at_level(logging.WARNING, "causewatch.agent.sender"):
            s.send("task", {"app": "a", "task_id": "1", "start": 0.0, "duration": 1.0})
            assert wait_for(lambda: _lines(caplog.text, SILENT), timeout=10), caplog.text
    finally:
        s.close()
        server.shutdown(socket.SHUT_RDWR)   # wakes the accept
        wrong.join(5)
        server.close()


@pytest.mark.parametrize("command, delivered, status", [
    (None, True, 0), (0, True, 0), (None, False, UNDELIVERED), (0, False, UNDELIVERED),
    (5, False, 5), (5, True, 5), (-15, False, 143)])
def test_a_failed_command_s_status_wins_over_frames_left_unacked(command, delivered, status):
    assert exit_status(command, delivered) == status


def test_a_second_agent_on_the_same_ipc_socket_is_told_to_give_another(daemon_process, tmp_path):
    d = daemon_process()
    first_config = _config(tmp_path, d.endpoint)
    (tmp_path / "b").mkdir()
    second_config = Path(_config(tmp_path / "b", d.endpoint))   # its own spool, the first one's ipc socket
    second_config.write_text(second_config.read_text().replace(f"{tmp_path}/b/a.sock", f"{tmp_path}/a.sock"))
    first = subprocess.Popen([sys.executable, "-m", "causewatch.cli", "agent", "--config", first_config, "--", "sleep",
                              "6"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: (tmp_path / "a.sock").exists(), 20)
        second = run_cli("agent", "--config", str(second_config), "--", "sleep", "1", timeout=60)
    finally:
        first.terminate()
        first.wait(30)
    refused, = _lines(second.stderr, "cannot relay task records")
    assert "another agent listens there" in refused and "--ipc ipc:///PATH" in refused, second.stderr[-2000:]
