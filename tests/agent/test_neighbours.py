"""The node's busiest other processes: on this machine's /proc with real busy children, and on a
made-up /proc tree (odd names, a process gone between two reads, a secret on a command line)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from causewatch import wire
from causewatch.agent.neighbours import COUNT, CPU_RATIO, TopProcesses, command

BUSY = "import sys, time\nt = time.process_time()\nwhile time.process_time() - t < float(sys.argv[1]): pass\n" \
       "time.sleep(60)"


def _by_command(values: dict) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name, value in values.items():
        base, labels = wire.unlabelled(name)
        out.setdefault(labels["command"], {})[base] = value
    return out


def test_busy_children_show_as_one_command_and_the_watched_tree_is_left_out():
    """Two busy copies of one command are one group of two; a busy process under the excluded one is not shown."""
    busy = [subprocess.Popen([sys.executable, "-c", BUSY, "0.6"]) for _ in range(2)]
    watched = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; subprocess.run([sys.executable, "
                                "'-c', 'import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.6:"
                                " pass\\ntime.sleep(60)', 'watched']); import time; time.sleep(60)"])
    t = [0.0]
    top = TopProcesses(exclude=watched.pid, top=50, interval=1.0, clock=lambda: t[0])
    try:
        assert top.collect() == {}              # the first look has nothing to compare with
        start = time.monotonic()
        time.sleep(1.5)
        t[0] = time.monotonic() - start
        groups = _by_command(top.collect())
        assert top.unavailable == {}
        mine = command([sys.executable, "-c", BUSY, "0.6"], "python")
        assert mine.startswith(os.path.basename(sys.executable) + " -c import sys, time t =")
        assert mine in groups, groups
        assert groups[mine][COUNT] == 2 and 0.1 < groups[mine][CPU_RATIO] <= 2.0
        assert not any("watched" in c for c in groups)
        assert len(top.collect()) == 0          # not due again before its interval
    finally:
        for p in [*busy, watched]:
            p.kill()
            p.wait()


def _proc(root, pid: int, comm: str, ppid: int, ticks: int, start: int, argv: list[str]) -> None:
    folder = root / str(pid)
    folder.mkdir(exist_ok=True)
    rest = ["S", str(ppid)] + ["0"] * 9 + [str(ticks), "0"] + ["0"] * 6 + [str(start)] + ["0"] * 20
    (folder / "stat").write_text(f"{pid} ({comm}) {' '.join(rest)}\n")
    (folder / "cmdline").write_bytes("\0".join(argv).encode() + b"\0" if argv else b"")


def test_a_made_up_proc_tree_is_ranked_bounded_and_keeps_secrets_out(tmp_path):
    t = [0.0]
    top = TopProcesses(exclude=10, top=2, proc=str(tmp_path), clock=lambda: t[0], ticks_per_second=100)
    _proc(tmp_path, 10, "app", 1, 0, 5, ["/usr/bin/app"])
    _proc(tmp_path, 11, "worker", 10, 0, 6, ["/usr/bin/app", "--worker"])
    _proc(tmp_path, 20, "we (ird) one", 1, 0, 7, ["/opt/x/db", "serve", "--password=hunter2", "more"])
    _proc(tmp_path, 30, "kworker/0:1", 2, 0, 8, [])
    _proc(tmp_path, 40, "idle", 1, 0, 9, ["/usr/sbin/idle"])
    assert top.collect() == {}
    t[0] = 5.0
    for pid, comm, ppid, ticks, start, argv in [(10, "app", 1, 400, 5, ["/usr/bin/app"]),
                                                (11, "worker", 10, 400, 6, ["/usr/bin/app", "--worker"]),
                                                (20, "we (ird) one", 1, 250, 7, ["/opt/x/db", "serve",
                                                                                  "--password=hunter2", "more"]),
                                                (30, "kworker/0:1", 2, 100, 8, []), (40, "idle", 1, 5, 9, ["/x"]),
                                                (41, "new", 1, 60, 90, ["/usr/bin/new", "job"])]:
        _proc(tmp_path, pid, comm, ppid, ticks, start, argv)
    groups = _by_command(top.collect())
    # 250 ticks in 5 s at 100 a second: half a CPU (a process that named itself: by that name and its
    # program); the app and its worker are the watched tree
    assert groups == {"we (ird) one (db)": {CPU_RATIO: 0.5, COUNT: 1.0}, "[kworker/0:1]": {CPU_RATIO: 0.2, COUNT: 1.0}}
    assert all(len(n) <= wire.MAX_NAME and wire.METRIC_NAME.fullmatch(n) for n in _names(groups))
    # a pid reused by a new process counts from its start; a gone one is forgotten
    t[0] = 10.0
    (tmp_path / "20" / "stat").unlink()
    _proc(tmp_path, 41, "new", 1, 80, 90, ["/usr/bin/new", "job"])
    _proc(tmp_path, 40, "again", 1, 30, 500, ["/usr/bin/again"])
    groups = _by_command(top.collect())
    assert groups["again"] == {CPU_RATIO: 0.06, COUNT: 1.0} and groups["new job"] == {CPU_RATIO: 0.04, COUNT: 1.0}


def _names(groups: dict) -> list[str]:
    return [wire.labelled(base, {"command": c}) for c, values in groups.items() for base in values]


def test_an_unreadable_proc_is_a_reason_not_an_error(tmp_path):
    top = TopProcesses(proc=str(tmp_path / "missing"))
    assert top.collect() == {} and "FileNotFoundError" in top.unavailable["processes"]


def test_a_command_is_the_program_and_its_first_arguments_cut_short():
    assert command(["/usr/bin/python3", "-m", "pytest", "-q", "tests/x.py"], "python3") == "python3 -m pytest -q"
    assert command(["prog", "--token=abc", "x"], "prog") == command(["prog", "--api-key", "abc"], "prog") \
        == command(["prog", "PGPASSWORD=x"], "prog") == "prog"
    assert command(["python3", "-c", "import os\nwhile a == b: pass"], "python3") == \
        "python3 -c import os while a == b:"
    assert command(["python3", "-c", "# causewatch demo hog\nimport os"], "python3") == \
        "python3 -c # causewatch demo hog"
    assert command(["p", "a\n  b", "x" * 40], "p") == "p a b " + "x" * 24   # no word end: cut where it is
    assert command(["python", "-c", "from multiprocessing.forkserver import main"], "python") == \
        "python -c from multiprocessing.for"   # a word end too early: cut where the characters end
    assert command(["python", "-c", "from multiprocessing.forkserver import main"], "causewatch-jobs") == \
        "causewatch-jobs (python)"
    assert len(command(["y" * 100] * 5, "y")) == 60
    long = wire.labelled(CPU_RATIO, {"command": command(["/" * 30] + ["/" * 30] * 3, "c")})
    assert len(long) <= wire.MAX_NAME
