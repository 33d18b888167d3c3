"""CURVE (Ironhouse): the daemon talks only to agents whose public key is in its allow-list."""

import json
import signal
import sys

import pytest
from support import DaemonProcess, agent_config, query, run_cli, samples, wait_for

from causewatch import cli
from causewatch.agent.sender import Sender
from causewatch.config import DaemonConfig
from causewatch.daemon.server import Daemon


@pytest.fixture
def keys(tmp_path):
    server, agents = tmp_path / "server-keys", tmp_path / "agent-keys"
    for folder, name in ((server, "server"), (agents, "known"), (agents, "stranger")):   # in-process: quick
        assert cli.main(["keys", str(folder), "--name", name, "--json"]) == 0
    assert cli.main(["keys", str(server), "--authorize", str(agents / "known.key")]) == 0
    return server, agents


def test_known_key_accepted_unknown_refused(tmp_path, keys, caplog):
    server, agents = keys
    d = Daemon(DaemonConfig(db=str(tmp_path / "c.duckdb"), bind="tcp://127.0.0.1:0", http="", keys=str(server)),
               jobs=[]).start()
    try:
        def sender(name):
            return Sender(agent_config(tmp_path, d.endpoint, name, server_key=str(server / "server.key"),
                                       client_key=str(agents / f"{name}.key_secret"), answer_timeout=0.3)).start()
        known, stranger = sender("known"), sender("stranger")
        known.send("samples", samples(0))
        stranger.send("samples", samples(0))
        assert known.flush(10)
        assert wait_for(stranger.auth_failed.is_set, timeout=10)
        said = caplog.text.count("does not answer")
        assert not stranger.flush(1) and stranger.unacked == 1
        # a refusal is an answer, whose own ERROR says why: not "does not answer" once answer_timeout passed
        assert caplog.text.count("does not answer") == said, caplog.text
        known.close()
        stranger.close()
    finally:
        d.stop()
    assert query(d.cfg.db, "SELECT DISTINCT node FROM ingest_log") == [("known",)]


def test_keys_refuses_to_overwrite_and_bad_authorize(tmp_path, keys):
    server, _ = keys
    again = run_cli("keys", str(server), "--name", "server")
    assert again.returncode == 2 and "refusing to overwrite" in again.stderr
    bad = tmp_path / "not-a-key"
    bad.write_text("hello")
    r = run_cli("keys", str(server), "--authorize", str(bad))
    assert r.returncode == 2 and "not a CURVE public key" in r.stderr


def test_public_bind_without_keys_is_refused(tmp_path):
    r = run_cli("daemon", "--db", str(tmp_path / "x.duckdb"), "--bind", "tcp://0.0.0.0:0", "--http", "")
    assert r.returncode == 2 and "not loopback" in r.stderr


def curve_sender(tmp_path, endpoint, keys, key_name, node=None, resend_after=10.0):
    server, agents = keys
    return Sender(agent_config(tmp_path, endpoint, node or key_name, server_key=str(server / "server.key"),
                               client_key=str(agents / f"{key_name}.key_secret")), resend_after=resend_after).start()


def test_a_key_may_only_send_as_the_node_it_was_authorized_for(tmp_path, keys):
    """Any agent could name another node (and poison its seqs). With CURVE the node is
    the name `keys --authorize` recorded; a frame naming another is refused and stays in the spool."""
    server, _ = keys
    d = Daemon(DaemonConfig(db=str(tmp_path / "c.duckdb"), bind="tcp://127.0.0.1:0", http="", keys=str(server)),
               jobs=[]).start()
    try:
        honest, forger = curve_sender(tmp_path, d.endpoint, keys, "known"), \
            curve_sender(tmp_path, d.endpoint, keys, "known", node="victim", resend_after=60)
        honest.send("samples", samples(0))
        forger.send("samples", samples(0))
        assert honest.flush(10)
        assert wait_for(lambda: forger.counts["frames_refused"], timeout=10)
        assert forger.unacked == 1 and "'known'" in forger.last_refusal
        honest.close()
        forger.close()
    finally:
        d.stop()
    assert query(d.cfg.db, "SELECT DISTINCT node FROM ingest_log") == [("known",)]


def test_keys_refuses_path_separators_and_secret_keys(tmp_path, keys, capsys):
    """`--name ../../evil` wrote outside DIR; `--authorize X.key_secret` copied a secret.
    (The command runs in-process: a child process costs seconds of imports.)"""
    server, agents = keys
    capsys.readouterr()
    assert cli.main(["keys", str(tmp_path / "k"), "--name", "../../evil"]) == 2
    assert "not a key name" in capsys.readouterr().err
    assert not (tmp_path.parent / "evil.key").exists()
    assert cli.main(["keys", str(server), "--authorize", str(agents / "stranger.key_secret")]) == 2
    assert "secret key" in capsys.readouterr().err
    assert not list((server / "authorized").glob("stranger*"))
    assert cli.main(["keys", str(server), "--authorize", str(agents / "stranger.key"), "--name", "node17",
                     "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["node"] == "node17"
    assert (server / "authorized" / "node17.key").is_file()


def test_a_malformed_authorized_key_stops_the_daemon_naming_the_file(tmp_path, keys):
    server, _ = keys
    (server / "authorized" / "broken.key").write_text("metadata\ncurve\n    public-key = \"tooshort\"\n")
    r = run_cli("daemon", "--db", str(tmp_path / "x.duckdb"), "--bind", "tcp://127.0.0.1:0", "--http", "",
                "--keys", str(server), timeout=60)
    assert r.returncode == 2 and "broken.key" in r.stderr and "Traceback" not in r.stderr


def test_keys_authorized_while_running_are_read_on_change_and_sighup(tmp_path, keys):
    """Keys authorized while the daemon ran were not read until a restart."""
    server, agents = keys
    d = DaemonProcess(tmp_path / "r.duckdb", extra=["--keys", str(server)]).start()
    try:
        stranger = curve_sender(tmp_path, d.endpoint, keys, "stranger")
        stranger.send("samples", samples(0))
        assert wait_for(stranger.auth_failed.is_set, timeout=10)
        (server / "authorized" / "garbage.key").write_text("not a key")   # refused loudly, the rest stays
        assert cli.main(["keys", str(server), "--authorize", str(agents / "stranger.key")]) == 0
        d.proc.send_signal(signal.SIGHUP)
        assert stranger.flush(30), "the newly authorized key was not accepted"
        stranger.close()
        assert d.proc.poll() is None
    finally:
        d.stop()
    assert "garbage.key" in d.proc.stderr.read()


def test_agent_whose_every_frame_is_refused_exits_2_saying_why(tmp_path, keys):
    """An agent whose every frame was refused exited 0. Uses the new key flags."""
    server, agents = keys
    d = DaemonProcess(tmp_path / "a.duckdb", extra=["--keys", str(server)]).start()
    try:
        r = run_cli("agent", "--daemon", d.endpoint, "--node", "impostor", "--spool", str(tmp_path / "sp"),
                    "--ipc", f"ipc://{tmp_path}/a.sock", "--server-key", str(server / "server.key"),
                    "--client-key", str(agents / "known.key_secret"), "--flush-timeout", "3",
                    "--", sys.executable, "-c", "import time; time.sleep(1.5)", timeout=60)
    finally:
        d.stop()
    assert r.returncode == 2 and "refused every frame" in r.stderr and "'known'" in r.stderr, r.stderr[-2000:]
