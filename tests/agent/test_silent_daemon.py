"""Issue 32 item 1: an agent aimed at a wrong or dead daemon was silent for as long as it ran.

Now it says once at WARNING that the daemon does not answer (and once when it answers again), and keeps
spooling. Real senders and daemons.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time

from support import agent_config, free_port, wait_for

from causewatch.agent.sender import Sender

SILENT = "does not answer"


def _lines(stderr: str, words: str) -> list[str]:
    return [line for line in stderr.splitlines() if words in line]


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

