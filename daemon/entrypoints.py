"""Every entry point the daemon's worker processes run, registered once by reference under its
calls.Entry key. Only the workers import this module (worker.resolve): it loads the analysis stack.
"""

from __future__ import annotations

from collections.abc import Callable

from causewatch.daemon import jobset, remote
from causewatch.daemon.calls import Entry

ENTRY_POINTS: dict[Entry, Callable] = {
    Entry.INSTALL_JOBS: jobset.install,
    Entry.RUN_JOB: jobset.run,
    Entry.JOB_HELLO: jobset.hello,
    Entry.ANSWER: remote.answer,
}
