"""Tests of the analysis worker (daemon/worker.py): a real spawned child at the lowest priority, its
errors raised in the daemon, a death mid-request a clear WorkerError and a fresh child next time."""

import math
import os
import threading
import time

import pytest
from causewatch.daemon.worker import LOWEST_PRIORITY, AnalysisWorker, WorkerError


@pytest.fixture
def worker():
    w = AnalysisWorker()
    yield w
    w.stop()


def test_work_runs_in_a_child_at_the_lowest_priority(worker):
    assert worker(os.getpid) not in (os.getpid(), None)
    assert worker(os.getpriority, os.PRIO_PROCESS, 0) == LOWEST_PRIORITY
    assert worker(os.sched_getscheduler, 0) == os.SCHED_IDLE
    assert os.getpriority(os.PRIO_PROCESS, 0) < LOWEST_PRIORITY   # the daemon itself keeps its priority
    assert worker(math.fsum, [0.1] * 10) == 1.0


def test_a_chosen_niceness_keeps_the_normal_scheduler():
    w = AnalysisWorker(niceness=5)
    try:
        assert w(os.getpriority, os.PRIO_PROCESS, 0) == 5 and w(os.sched_getscheduler, 0) == os.SCHED_OTHER
    finally:
        w.stop()


def test_an_error_in_the_work_is_raised_in_the_daemon_with_the_childs_traceback(worker):
    with pytest.raises(ValueError, match="math domain error") as info:
        worker(math.sqrt, -1.0)
    assert any("in the analysis worker" in note for note in info.value.__notes__)
    assert worker(math.sqrt, 4.0) == 2.0   # the same child goes on


def test_a_child_killed_mid_request_is_a_clear_error_and_the_next_request_gets_a_new_child(worker):
    first = worker(os.getpid)
    threading.Timer(0.5, os.kill, (first, 9)).start()
    with pytest.raises(WorkerError, match=r"ended \(exit code -9\) during sleep"):
        worker(time.sleep, 30)
    second = worker(os.getpid)
    assert second != first


def test_stop_cuts_a_long_request_short_and_refuses_new_ones():
    w = AnalysisWorker()
    w(os.getpid)
    threading.Timer(0.5, w.stop).start()
    t0 = time.monotonic()
    with pytest.raises(WorkerError):
        w(time.sleep, 30)
    assert time.monotonic() - t0 < 10
    assert w.pid is None
    with pytest.raises(WorkerError, match="stopping"):
        w(os.getpid)
