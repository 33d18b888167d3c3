"""`causewatch daemon --jobs-here` (DaemonConfig.jobs_here): the daemon's own jobs run on its scheduler thread,
in its process, over task rows its ingest took from an agent, and no worker process is ever started."""

import argparse

import numpy as np
import psutil
import pytest
from support import agent_config, lu_task_stream, run_cli

from causewatch.agent.sender import Sender
from causewatch.commands import daemon as daemon_command
from causewatch.config import DaemonConfig
from causewatch.daemon.server import Daemon

pytestmark = pytest.mark.service   # a daemon on loopback and an agent's sender


def _cycle(daemon, sender, rng, count: int, changed: bool) -> list[tuple]:
    """`count` lu tasks sent and stored, then every job due run on this thread; the open anomalies stored."""
    lu_task_stream(sender, rng, count, changed)
    assert sender.flush(60)
    daemon.scheduler.run_all()
    with daemon.store.cursor() as cur:
        return cur.execute("SELECT kind, src, dst FROM anomalies WHERE resolved IS NULL ORDER BY ALL").fetchall()


def test_the_default_jobs_run_in_the_daemons_process_and_open_an_anomaly(tmp_path):
    cfg = DaemonConfig(db=str(tmp_path / "cw.duckdb"), bind="tcp://127.0.0.1:0", http="", jobs_here=True)
    before = set(psutil.Process().children(recursive=True))   # earlier tests' in this process
    daemon = Daemon(cfg).start()   # the default jobs, as `causewatch daemon --jobs-here` runs them
    sender = Sender(agent_config(tmp_path, daemon.endpoint, node="n1")).start()
    rng = np.random.default_rng(11)
    try:
        assert _cycle(daemon, sender, rng, 300, False) == [] and _cycle(daemon, sender, rng, 40, False) == []
        for _ in range(3):
            opened = _cycle(daemon, sender, rng, 80, True)
        assert [dst for _, _, dst in opened] == ["duration"]   # one voice: the task time's change
        with daemon.store.cursor() as cur:
            assert cur.execute("SELECT count(*) FROM models WHERE scope = 'app:lu'").fetchone()[0] >= 3
        assert daemon.jobs_worker.pid is None and set(psutil.Process().children(recursive=True)) <= before
        assert b'causewatch_markov_violation{scope="app:lu",variable="duration"}' in daemon.exporter.exposition()
    finally:
        sender.close()
        daemon.stop()


def test_the_flag_is_the_config_field_and_is_documented():
    parser = argparse.ArgumentParser()
    daemon_command.add_arguments(parser)
    args = parser.parse_args(["--jobs-here", "--db", "x.duckdb"])
    assert daemon_command.load_config(args).jobs_here is True
    assert daemon_command.load_config(parser.parse_args([])).jobs_here is False
    assert "--jobs-here" in " ".join(run_cli("daemon", "--help").stdout.split())
