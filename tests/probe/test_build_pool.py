"""The reference rounds' pool under SIGINT: held while its workers start, then taken, the pool stopped
first; and `causewatch probe build` stops on one even where it was started with SIGINT ignored."""

import multiprocessing
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from causewatch.probe.build import _started_pool
from causewatch.probe.kit import Worker


class _InterruptedWhileStarting:
    """A spawn context whose Pool gets a real SIGINT to this process as it starts its workers."""

    def __init__(self):
        self.ctx = multiprocessing.get_context("spawn")
        self.pool = None

    def Pool(self, *args, **kwargs):   # multiprocessing's name
        os.kill(os.getpid(), signal.SIGINT)
        self.pool = self.ctx.Pool(*args, **kwargs)
        return self.pool


def test_a_sigint_while_the_workers_start_is_taken_once_they_all_have_started(capfd):
    ctx = _InterruptedWhileStarting()
    runner = signal.signal(signal.SIGINT, signal.default_int_handler)   # as a build has it, whatever runs the test
    try:
        with pytest.raises(KeyboardInterrupt):
            _started_pool(ctx, 2, Worker(command=("true", "{input}")))
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, runner)
    workers = ctx.pool._pool
    assert len(workers) == 2 and all(p.exitcode is not None for p in workers)   # stopped before it raised
    assert "Traceback" not in capfd.readouterr().err


def test_a_build_started_with_sigint_ignored_stops_on_one(tmp_path):
    build = subprocess.Popen([sys.executable, "-m", "causewatch.cli", "probe", "build", "mw", "--workload",
                              "masterworker", "--tasks", "40", "--out", str(tmp_path / "kit"), "--max-spread", "1",
                              "--max-other-cpu", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, process_group=0,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 60
        while not _children(build.pid) and build.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)   # its reference rounds' workers started
        assert _children(build.pid), build.communicate(timeout=30)
        build.send_signal(signal.SIGINT)
        out, err = build.communicate(timeout=20)
    finally:
        if build.poll() is None:
            os.killpg(build.pid, signal.SIGKILL)
            build.wait()
    assert build.returncode == 130, err
    assert "Traceback" not in err, err
    deadline = time.monotonic() + 5   # its workers stopped as it ended; the resource tracker ends after it
    while _group(build.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _group(build.pid), "the build's workers outlived it"


def _children(pid: int) -> list:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _group(pgid: int) -> list[int]:
    found = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid:
                found.append(p.pid)
        except (ProcessLookupError, psutil.Error):
            pass
    return found
