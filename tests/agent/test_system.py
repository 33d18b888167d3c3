"""The psutil collector on real child processes; failures become reasons."""

from __future__ import annotations

import itertools
import subprocess
import sys

from causewatch.agent.system import ProcessCollector


def test_process_metrics_of_a_busy_child_with_an_injected_clock():
    p = subprocess.Popen([sys.executable, "-c", "import time\ninput()\nt=time.process_time()\n"
                          "while time.process_time()-t < 0.3: pass\nprint('done', flush=True)\ninput()"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        ticks = itertools.count(0.0, 100.0)           # 100 s per call: utilisation is tiny but defined
        c = ProcessCollector(p.pid, clock=lambda: next(ticks))
        a = c.collect()
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.stdout.readline() == "done\n"
        b = c.collect()
        assert b["process_cpu_user_seconds_total"] > a["process_cpu_user_seconds_total"]
        assert 0 <= b["process_cpu_utilization_ratio"] < 0.01
        assert b["process_threads"] == 1 and b["process_resident_memory_bytes"] > 1e6
        assert "process_voluntary_context_switches_total" in b and c.unavailable == {}
    finally:
        p.kill()
        p.wait()


def test_a_gone_process_gives_nothing_and_a_reason():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    c = ProcessCollector(p.pid)
    assert c.collect() == {}
    assert "NoSuchProcess" in c.unavailable["process"]


def test_a_process_we_may_not_read_keeps_its_readable_parts():
    c = ProcessCollector(1)
    m = c.collect()
    # pid 1's io (and, for a user, its fds) may be refused: those parts become reasons, the rest streams
    assert "process_cpu_user_seconds_total" in m and "process_resident_memory_bytes" in m
    assert set(c.unavailable) <= {"io", "threads"}
    assert all("AccessDenied" in why for why in c.unavailable.values())
