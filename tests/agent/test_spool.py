"""The on-disk spool: survives reopening, drops the oldest when full and says which."""

import pytest

from causewatch.agent.spool import Spool


def test_frames_survive_reopening(tmp_path):
    s = Spool(tmp_path, 10_000)
    for seq in range(1, 6):
        s.put("b1", seq, bytes([seq]) * 100)
    s.remove("b1", 2)
    s.close()
    again = Spool(tmp_path, 10_000)
    assert [(b, q, len(d)) for b, q, d in again.pending()] == [("b1", q, 100) for q in (1, 3, 4, 5)]
    assert again.bytes == 400


def test_full_spool_drops_oldest_and_reports_them(tmp_path):
    s = Spool(tmp_path, 1000)
    dropped = [s.put("b", seq, b"x" * 300) for seq in range(1, 6)]
    assert dropped == [[], [], [], [("b", 1)], [("b", 2)]]
    assert [q for _, q, _ in s.pending()] == [3, 4, 5] and s.bytes == 900


def test_frame_larger_than_spool_is_refused(tmp_path):
    with pytest.raises(ValueError, match="larger than the whole spool"):
        Spool(tmp_path, 10).put("b", 1, b"x" * 11)
