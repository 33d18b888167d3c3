"""Shared fixtures: real daemons (in this process or as child processes) on free loopback ports.

Child daemons run `python -m causewatch.cli daemon` and are stopped by pid; in-process ones through
Daemon.start/stop. Tests read DuckDB files only after the daemon has let go of them.
"""

from __future__ import annotations

import atexit
import typing

import pytest
from support import DaemonProcess

from causewatch.config import DaemonConfig


@atexit.register
def _clear_typing_caches() -> None:
    """typing's caches keep DuckDB objects alive past shutdown, and DuckDB's nanobind then prints
    'leaked instance' lines after pytest's summary (nanobind docs, "refleaks")."""
    for cleanup in typing._cleanups:
        cleanup()


@pytest.fixture
def daemon_process(tmp_path):
    made: list[DaemonProcess] = []

    def make(**kw) -> DaemonProcess:
        d = DaemonProcess(tmp_path / "cw.duckdb", **kw).start()
        made.append(d)
        return d

    yield make
    for d in made:
        d.stop()


@pytest.fixture
def daemon(tmp_path):
    """An in-process daemon with no analysis jobs, on a free port, HTTP on a free port."""
    from causewatch.daemon.server import Daemon
    d = Daemon(DaemonConfig(db=str(tmp_path / "cw.duckdb"), bind="tcp://127.0.0.1:0", http="127.0.0.1:0"),
               jobs=[]).start()
    yield d
    d.stop()
