"""`--daemons A,B`: several daemons without peers answer a data verb as one, through the same merge a
daemon with peers uses; a daemon that does not answer is named on a PARTIAL line, never left out
silently; what cannot be merged (a learn, a daemon answering for a cluster of its own) is refused.
`--daemon` at a port that is not HTTP (the agents' ZeroMQ port) is named at once, with the API's."""

import http.server
import json
import socket
import socketserver
import threading
import time

import pytest
import zmq
from support import DaemonProcess, seed_node

from causewatch.cli import main
from causewatch.config import DaemonConfig
from causewatch.daemon.cluster import ANSWERED
from causewatch.daemon.server import Daemon


def _daemon(db, node: str) -> Daemon:
    seed_node(db, node)
    return Daemon(DaemonConfig(db=str(db), bind="tcp://127.0.0.1:0", http="127.0.0.1:0"), jobs=[]).start()


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    folder = tmp_path_factory.mktemp("daemons")
    a, b = _daemon(folder / "a.duckdb", "n1"), _daemon(folder / "b.duckdb", "n2")
    yield f"http://{a.http.address}", f"http://{b.http.address}"
    a.stop()
    b.stop()


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _ask(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_two_daemons_answer_as_one(two, capsys):
    code, out, err = _ask(capsys, "nodes", "--json", "--daemons", ",".join(two))
    assert code == 0, err
    assert [(n["node"], n["hostname"]) for n in json.loads(out)] == [("n1", "host-n1"), ("n2", "host-n2")]
    assert "PARTIAL" not in err


def test_a_daemon_that_does_not_answer_is_named(two, capsys):
    down = _closed_port()
    code, out, err = _ask(capsys, "nodes", "--json", "--daemons", f"{two[0]},{down},{two[1]}")
    assert code == 0 and [n["node"] for n in json.loads(out)] == ["n1", "n2"]
    assert f"PARTIAL answer, shards missing: {down}: " in err and "Connection refused" in err


def test_no_daemon_answering_is_an_error_naming_each(capsys):
    first, second = _closed_port(), _closed_port()
    code, _, err = _ask(capsys, "nodes", "--daemons", f"{first},{second}")
    assert code == 2 and "no shard answered" in err and first in err and second in err


def test_what_cannot_be_merged_is_refused(two, capsys):
    code, _, err = _ask(capsys, "learn", "tasks", "--app", "lu", "--daemons", ",".join(two))
    assert code == 2 and "learn reads the asking shard's rows only" in err and "--daemon URL" in err


class _ClusterAnswer(http.server.BaseHTTPRequestHandler):
    """A daemon with peers of its own: its answers carry the shards they cover."""
    def do_GET(self):
        body = b"[]"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header(ANSWERED, "s1,s2")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_daemon_answering_for_its_own_cluster_is_refused(two, capsys):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ClusterAnswer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        code, _, err = _ask(capsys, "nodes", "--daemons", f"{two[0]},127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
        server.server_close()
    assert code == 2 and "answers for a cluster of its own (shards s1,s2)" in err and "ask it alone" in err


@pytest.mark.parametrize("argv, message", [
    (["--daemons", "http://127.0.0.1:1"], "give two daemons or more"),
    (["--daemons", "ftp://a:1,b:2"], "expected http://HOST:PORT"),
    (["--daemons", ",,"], "give two daemons or more"),
])
def test_bad_daemon_lists_are_named(capsys, argv, message):
    code, _, err = _ask(capsys, "nodes", *argv)
    assert code == 2 and message in err


def test_one_way_to_say_where(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["nodes", "--daemon", "http://127.0.0.1:1", "--daemons", "a:1,b:2"])
    assert stop.value.code == 2 and "not allowed with argument --daemon" in capsys.readouterr().err


@pytest.fixture(scope="module")
def daemon_process(tmp_path_factory):
    daemon = DaemonProcess(tmp_path_factory.mktemp("zmtp") / "cw.duckdb").start()
    yield daemon
    daemon.stop()


def _asked_within(capsys, seconds: float, *argv) -> tuple[int, str]:
    start = time.monotonic()
    code, _, err = _ask(capsys, *argv)
    assert time.monotonic() - start < seconds, f"answered after {time.monotonic() - start:.1f} s: {err}"
    return code, err


def test_the_agents_port_is_named_with_the_http_api_at_once(daemon_process, capsys):
    """It hung 65 s, then said "timed out": the ROUTER's greeting names it, its handshake the API."""
    port = daemon_process.endpoint.removeprefix("tcp://")
    code, err = _asked_within(capsys, 3.0, "anomalies", "--daemon", port)
    assert code == 2 and err.count("\n") == 1, err
    assert f"{port} is the agents' ZeroMQ port; the HTTP API is on http://{daemon_process.http} (give" in err
    code, out, err = _ask(capsys, "nodes", "--json", "--daemon", daemon_process.http)   # and the API answers
    assert code == 0 and json.loads(out) == [], err


@pytest.mark.parametrize("named, api", [(None, "the daemon's --http address (default 127.0.0.1:9464)"),
                                         ("http://0.0.0.0:9999", "http://127.0.0.1:9999 (give that as --daemon)")],
                         ids=["names-none", "names-every-address"])
def test_another_zeromq_port_is_named_with_what_it_says_of_the_api(capsys, named, api):
    router = zmq.Context.instance().socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    if named:
        router.setsockopt(zmq.METADATA, f"X-Http:{named}".encode())
    port = router.bind_to_random_port("tcp://127.0.0.1")
    try:
        code, err = _asked_within(capsys, 3.0, "nodes", "--daemon", f"127.0.0.1:{port}")
    finally:
        router.close()
    assert code == 2 and f"127.0.0.1:{port} is " in err and "ZeroMQ port" in err and f"the HTTP API is on {api}" in err


class _Speaks(socketserver.BaseRequestHandler):
    """A server that speaks first, as sshd does, or answers the request, never in HTTP (`said`, set on the server)."""
    def handle(self):
        self.request.sendall(self.server.said)
        time.sleep(5)


@pytest.mark.parametrize("said, named", [(b"SSH-2.0-OpenSSH_9.2p1\r\n", "answers, but not in HTTP (it sent b'SSH-2"),
                                         (b"HTTP/9 nonsense\r\n\r\n", "not an HTTP API's answer (BadStatusLine")],
                         ids=["a-banner", "a-broken-status-line"])
def test_any_other_port_that_is_not_http_is_named(capsys, said, named):
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Speaks)
    server.daemon_threads, server.said = True, said
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        code, err = _asked_within(capsys, 3.0, "anomalies", "--daemon", f"127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
    assert code == 2 and f"127.0.0.1:{server.server_address[1]}" in err and named in err, err
