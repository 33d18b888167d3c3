"""Every everyday mistake exits 2 with one line naming what was wrong, never a traceback.

In-process cases call causewatch.cli.main; the cases that need a running daemon (ports in use, a locked
store) run the real command as a child process next to a real daemon.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support import DaemonProcess, free_port, run_cli

from causewatch import config
from causewatch.cli import main
from causewatch.commands.demo.parts import MARK, prepare

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def files(tmp_path):
    (tmp_path / "zero.toml").write_text('[agent]\nwindow = 3\ncounters_interval = 0\n')
    (tmp_path / "collector.toml").write_text('[agent]\n[agent.collector_intervals]\nnetstatt = 1\n')
    (tmp_path / "terms.toml").write_text('[daemon]\nfuzzy_terms = "/nonexistent/terms.toml"\n')
    (tmp_path / "corrupt.duckdb").write_bytes(b"this is not a DuckDB file\n" * 200)
    (tmp_path / "plain").write_text("a file where a folder is needed\n")
    (tmp_path / "data.csv").write_text("a,b\n" + "".join(f"{i},{2 * i}\n" for i in range(30)))
    (tmp_path / "vectors.txt").write_text("".join(f"T:1:{i + 1} :2:{30 - i}\n" for i in range(30)))
    return tmp_path


CASES = [  # (argv with {tmp}, words the message must hold)
    (["agent", "--config", "{tmp}/zero.toml", "--check"], ["zero.toml:3", "counters_interval", "between"]),
    (["agent", "--config", "{tmp}/collector.toml", "--check"], ["collector.toml:3", "collector_intervals.netstatt",
                                                                 "no node collector of that name", "netstat"]),
    (["agent", "--daemon", "nonsense", "--check"], ["--daemon", "tcp://HOST:PORT"]),
    (["agent", "--daemon", "tcp://10.0.0.1", "--check"], ["--daemon", "port"]),
    (["daemon", "--bind", "tcp://127.0.0.1:99999"], ["--bind", "99999", "1 to 65535"]),
    (["daemon", "--http", "nonsense"], ["--http", "HOST:PORT"]),
    (["daemon", "--http", "127.0.0.1:0"], ["--http", "1 to 65535"]),
    (["daemon", "--config", "{tmp}/terms.toml"], ["terms.toml:2", "fuzzy_terms", "remove the line"]),
    (["bottlenecks", "--db", "{tmp}/corrupt.duckdb"], ["corrupt.duckdb"]),
    (["query", "--db", "{tmp}/missing.duckdb", "(time_share is high)"], ["missing.duckdb"]),
    (["learn", "{tmp}/data.csv", "--dot", "{tmp}/plain/graph.dot"], ["--dot", "plain"]),
    (["phases", "{tmp}/vectors.txt", "--save-simpoints", "{tmp}/plain/x.txt"], ["--save-simpoints"]),
    (["probe", "register", "{tmp}", "--db", "{tmp}/corrupt.duckdb"], ["corrupt.duckdb"]),
    (["probe", "build", "demo", "--workload", "masterworker", "--out", "{tmp}/plain"], ["--out", "plain"]),
    (["model", "--svg", "{tmp}/m.svg", "--history"], ["--svg draws one model and --history shows none"]),
    (["model", "--dot", "{tmp}/m.dot", "--pin", "3", "--scope", "app:x"], ["--dot", "--pin", "--model-id N"]),
    (["demo", "--dir", "{tmp}"], ["--dir", "not made by causewatch demo", "nothing was deleted"]),
    (["demo", "--shards", "9", "--dir", "{tmp}/new"], ["--shards 9", "1 (no shards section) to 8"]),
    (["demo", "--shards", "0", "--dir", "{tmp}/new"], ["--shards 0", "1 (no shards section) to 8"]),
]


@pytest.mark.parametrize("argv, words", CASES, ids=[" ".join(c[0][:2]) + f"-{i}" for i, c in enumerate(CASES)])
def test_mistake_exits_2_with_a_named_cause(files, capsys, argv, words):
    code = main([a.format(tmp=files) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith(f"causewatch {argv[0]}: error: "), err
    assert all(w in err for w in words), err


def test_demo_keeps_a_users_folder_and_reuses_its_own(files):
    assert main(["demo", "--dir", str(files)]) == 2 and (files / "plain").exists()
    own = files / "own"
    prepare(own)
    (own / "causewatch.duckdb").write_text("from an earlier demo")
    prepare(own)
    assert [p.name for p in own.iterdir()] == [MARK]


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    d = DaemonProcess(tmp_path_factory.mktemp("running") / "held.duckdb").start()
    yield d
    d.stop()


@pytest.mark.parametrize("argv, words", [
    (["daemon", "--db", "{tmp}/b.duckdb", "--bind", "{endpoint}", "--http", ""], ["--bind", "in use"]),
    (["daemon", "--db", "{tmp}/b.duckdb", "--bind", "tcp://127.0.0.1:{free}", "--http", "{http}"],
     ["--http", "in use"]),
    (["probe", "register", "{tmp}", "--db", "{db}"], ["held.duckdb", "running daemon"]),
])
@pytest.mark.service   # a daemon process
def test_mistakes_next_to_a_running_daemon(running, tmp_path, argv, words):
    fill = dict(tmp=tmp_path, endpoint=running.endpoint, http=running.http, db=running.db, free=free_port())
    r = run_cli(*[a.format(**fill) for a in argv], timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert all(w in r.stderr for w in words), r.stderr
    assert running.proc.poll() is None      # the running daemon is untouched


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file: an unreadable key cannot be made here")
def test_unreadable_server_key(tmp_path):
    keys = tmp_path / "keys"
    (keys / "authorized").mkdir(parents=True)
    (keys / "server.key_secret").write_text("secret")
    (keys / "server.key_secret").chmod(0)
    r = run_cli("daemon", "--db", str(tmp_path / "k.duckdb"), "--keys", str(keys), "--http", "", timeout=60)
    assert r.returncode == 2 and "not readable" in r.stderr


@pytest.mark.parametrize("name, cls", [("daemon", config.DaemonConfig), ("agent", config.AgentConfig)])
def test_shipped_configs_load(name, cls):
    """The shipped files pass the same checks (the daemon's once named an unshipped fuzzy_terms file)."""
    cfg = config.load(cls, ROOT / "systemd" / f"{name}.toml", name)
    assert cfg.fuzzy_terms is None if name == "daemon" else cfg.bbv_frequency == 1000

