"""`causewatch phases` on a daemon's store: one target and one vector kind per clustering, and a
choice that matches nothing (or several) lists the known targets."""

import json

import pytest
from support import bbv_frames

from causewatch.cli import main
from causewatch.daemon.store import Store


@pytest.fixture
def db(tmp_path):
    path = str(tmp_path / "s.duckdb")
    rows = [("n", "b", i + 1, "app", "native", float(i), i + 1.0, key, 10 + i % 3)
            for i in range(12) for key in (("f", "g") if i % 2 else ("h", "k"))]
    rows += [("n", "b", 100 + i, "app", "python", float(i), i + 1.0, "x.py:f", 5) for i in range(3)]
    rows += [("m", "c", i + 1, "other", "native", float(i), i + 1.0, "z", 1) for i in range(4)]
    store = Store(path)
    store.commit_frames(bbv_frames(rows))
    store.close()
    return path


def test_one_target_and_kind_is_clustered(db, capsys):
    assert main(["phases", db, "--target", "app", "--kind", "native", "--k", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["intervals"] == 12 and out["k"] == 2
    assert sorted(p["intervals"] for p in out["phases"]) == [6, 6]
    assert main(["phases", db, "--target", "other", "--k", "1", "--json"]) == 0   # one kind: no --kind needed
    assert json.loads(capsys.readouterr().out)["intervals"] == 4


@pytest.mark.parametrize("args,problem", [
    ([], "has several targets or kinds: choose one"),
    (["--target", "app"], "has several targets or kinds: choose one"),
    (["--target", "none"], "has no such vectors"),
])
def test_an_ambiguous_or_wrong_choice_lists_the_known_targets(db, capsys, args, problem):
    assert main(["phases", db, *args]) == 2
    err = capsys.readouterr().err
    assert problem in err
    assert "--target app --kind native (12 vectors); --target other --kind native (4 vectors); " \
           "--target app --kind python (3 vectors)" in err


def test_a_file_mode_flag_on_a_bb_file_is_refused(tmp_path, capsys):
    (tmp_path / "a.bb").write_text("T:1:3 :2:1\n")
    assert main(["phases", str(tmp_path / "a.bb"), "--kind", "native"]) == 2
    assert "--target and --kind apply only to the BBVs a daemon stored" in capsys.readouterr().err
