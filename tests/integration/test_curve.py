"""CURVE (Ironhouse): the daemon talks only to agents whose public key is in its allow-list."""

import pytest
from support import agent_config, query, run_cli, samples, wait_for

from causewatch.agent.sender import Sender
from causewatch.config import DaemonConfig
from causewatch.daemon.server import Daemon


@pytest.fixture
def keys(tmp_path):
    server, agents = tmp_path / "server-keys", tmp_path / "agent-keys"
    for folder, name in ((server, "server"), (agents, "known"), (agents, "stranger")):
        r = run_cli("keys", str(folder), "--name", name, "--json")
        assert r.returncode == 0, r.stderr
    assert run_cli("keys", str(server), "--authorize", str(agents / "known.key")).returncode == 0
    return server, agents


def test_known_key_accepted_unknown_refused(tmp_path, keys):
    server, agents = keys
    d = Daemon(DaemonConfig(db=str(tmp_path / "c.duckdb"), bind="tcp://127.0.0.1:0", http="", keys=str(server)),
               jobs=[]).start()
    try:
        def sender(name):
            return Sender(agent_config(tmp_path, d.endpoint, name, server_key=str(server / "server.key"),
                                       client_key=str(agents / f"{name}.key_secret"))).start()
        known, stranger = sender("known"), sender("stranger")
        known.send("samples", samples(0))
        stranger.send("samples", samples(0))
        assert known.flush(10)
        assert wait_for(stranger.auth_failed.is_set, timeout=10)
        assert not stranger.flush(1) and stranger.unacked == 1
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
