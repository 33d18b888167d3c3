"""The store file's free end given back (store/space.py) on real DuckDB files: after a backfill moved to the
lake the file shrinks to about what it holds, every row kept as it was, and a daemon killed mid-pack or
between the pack and its checkpoint keeps each row once."""

import functools
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from causewatch import wire
from causewatch.daemon.store import Store, lake, schema, space


def backfill(s: Store, nodes: int = 6, seconds: int = 3600) -> None:
    """`nodes` agents' 5 x 50 frames of an hour two days ago, committed as the writer's batches."""
    names = [f"metric_{j:03d}" for j in range(50)]
    t0, rng, frames = time.time() - 2 * 86400, np.random.default_rng(0), []
    for n in range(nodes):
        for seq, f in enumerate(range(0, seconds, 5), 1):
            t = t0 + f + np.arange(5.0)
            body = wire.samples_body(t, names, rng.normal(50, 10, (5, 50)).round(2))
            frames.append(wire.decode(wire.encode("samples", f"agent-{n}", "b", seq, body, ts=float(t[-1]))))
    for i in range(0, len(frames), 1024):
        s.commit_frames(frames[i:i + 1024])


def contents(con) -> dict[str, list]:
    return {t: sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in schema.BASE_TABLES}


@pytest.fixture
def moved(tmp_path, monkeypatch):
    """A store whose backfill the lake took (the file checkpointed, at its peak size), and its rows."""
    monkeypatch.setattr(space, "RECLAIM_BYTES", 2**20)   # the test's file is small
    s = Store(str(tmp_path / "s.duckdb"))
    backfill(s)
    s.con.execute("CHECKPOINT")
    s.run(functools.partial(lake.compact, lake=str(s.lake), cutoff_ms=int(time.time() * 1000)))
    s.con.execute("CHECKPOINT")
    yield s, contents(s.con), os.path.getsize(s.path)
    s.close()


def test_after_a_move_the_pack_gives_the_file_back_and_keeps_every_row(moved):
    s, rows, peak = moved
    s.con.execute("CHECKPOINT")
    assert os.path.getsize(s.path) == peak, "a checkpoint alone gave the file back: nothing to test"
    assert s.run(space.pack)
    after = s.run(space.checkpoint)
    assert os.path.getsize(s.path) < 0.6 * peak, (os.path.getsize(s.path), peak, after)
    assert after["total"] < 2 * after["used"] + 2
    assert contents(s.con) == rows
    assert s.run(space.pack) == []   # nothing left to move: the next run does nothing


def test_a_small_free_space_is_left_alone(moved, monkeypatch):
    s, rows, peak = moved
    monkeypatch.setattr(space, "RECLAIM_BYTES", 2 * peak)
    assert s.run(space.pack) == [] and os.path.getsize(s.path) == peak


@pytest.mark.parametrize("kill_at", ["before the commit", "before the checkpoint"])
def test_a_daemon_killed_mid_pack_keeps_each_row_once(moved, kill_at):
    s, rows, peak = moved
    path = s.path
    s.close()
    child = textwrap.dedent(f"""
        import os, signal
        from causewatch.daemon.store import Store, space
        space.RECLAIM_BYTES = 2**20
        s = Store({path!r})
        s.con.begin()
        assert space.pack(s.con)
        if {kill_at!r} == "before the checkpoint":
            s.con.commit()
        os.kill(os.getpid(), signal.SIGKILL)
        """)
    done = subprocess.run([sys.executable, "-c", child], cwd=Path(__file__).resolve().parents[2], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == -9, done.stderr
    again = Store(path)
    try:
        assert contents(again.con) == rows
    finally:
        again.close()
