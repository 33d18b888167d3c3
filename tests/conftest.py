"""Shared fixtures: real daemons (in this process or as child processes) on free loopback ports.

Child daemons run `python -m causewatch.cli daemon` and are stopped by pid; in-process ones through
Daemon.start/stop. Tests read DuckDB files only after the daemon has let go of them.

A skip whose reason reads "<what> missing" or "<what> missing — <how to get it>" is summed up at the end,
one line per module; for commands, .ci/test-packages gives the Debian packages to install.
"""

from __future__ import annotations

import atexit
import re
import typing
from pathlib import Path

import pytest
from support import DaemonProcess

from causewatch.config import DaemonConfig

PACKAGES = Path(__file__).resolve().parents[1] / ".ci/test-packages"
MISSING = re.compile(r"(?P<what>.+) missing(?P<how> — .+)?")


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


def pytest_collection_modifyitems(items):
    """The end-to-end files (tests/integration) first, then the other files that start services or hold
    slow tests, each file's tests in their order: a worker of `--dist loadfile` takes a file whole, and a
    long file handed out last kept one worker going alone for minutes while the others had finished (make
    test passes --no-loadscope-reorder, which keeps this order)."""
    heavy = {item.path for item in items if item.get_closest_marker("slow") or item.get_closest_marker("service")}
    items.sort(key=lambda item: (item.path.parent.name != "integration", item.path not in heavy))


def pytest_terminal_summary(terminalreporter):
    """One line per module with skipped tests: how many, and why (with how to get what is missing)."""
    modules: dict[str, list[str]] = {}
    for report in terminalreporter.stats.get("skipped", []):
        modules.setdefault(report.nodeid.split("::")[0], []).append(_reason(report))
    if modules:
        terminalreporter.section("skipped: what is missing and how to get it", sep="-")
    packages = _packages()
    for module, reasons in sorted(modules.items()):
        terminalreporter.line(f"{module} ({len(reasons)} test{'s' * (len(reasons) > 1)}): {_told(reasons, packages)}")


def _reason(report) -> str:
    """A skip report's reason, without pytest's "Skipped: " prefix."""
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple | list) else str(report.longrepr)
    return reason.removeprefix("Skipped: ")


def _packages() -> dict[str, list[str]]:
    """Each command the tests look for -> the Debian packages that bring it."""
    rows = (line.split() for line in PACKAGES.read_text().splitlines())
    return {row[0]: row[1:] for row in rows if len(row) > 1 and not row[0].startswith("#")}


def _told(reasons: list[str], packages: dict[str, list[str]]) -> str:
    """A module's distinct skip reasons; the missing commands among them in one, with their packages."""
    commands, others = [], []
    for reason in dict.fromkeys(reasons):
        said = MISSING.fullmatch(reason)
        named = re.split(r", | and ", said["what"]) if said and not said["how"] else []
        if named and all(c in packages for c in named):
            commands += named
        else:
            others.append(reason)
    if commands:
        needs = dict.fromkeys(p for c in commands for p in packages[c])
        others.insert(0, f"{', '.join(dict.fromkeys(commands))} missing — `apt-get install {' '.join(needs)}` "
                         "(or run `make test` as root)")
    return "; ".join(others)
