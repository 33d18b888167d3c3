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


LONG = "libverylong.so:" + "_ZN5boost" * 25     # a C++ symbol longer than any terminal (the wire takes 256): never cut


@pytest.fixture
def named_db(tmp_path):
    """Two phases an operator should tell apart by name: a solver, and I/O with a long symbol."""
    path = str(tmp_path / "named.duckdb")
    solver = {"solver.py:step": 9, "libm.so.6:exp": 1}
    io = {"données.py:lire": 6, LONG: 3, "[kernel]:do_syscall_64": 1}
    rows = [("n", "b", i + 1, "app", "python", float(i), i + 1.0, key, count)
            for i in range(20) for key, count in (solver if i < 12 else io).items()]
    store = Store(path)
    store.commit_frames(bbv_frames(rows))
    store.close()
    return path


def test_each_phase_names_its_top_functions_with_their_share(named_db, capsys):
    assert main(["phases", named_db, "--k", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["keys"] == "functions"
    tops = {p["intervals"]: p["top"] for p in out["phases"]}
    assert tops[12] == [{"key": "solver.py:step", "share": 0.9}, {"key": "libm.so.6:exp", "share": 0.1}]
    assert tops[8] == [{"key": "données.py:lire", "share": 0.6}, {"key": LONG, "share": 0.3},
                       {"key": "[kernel]:do_syscall_64", "share": 0.1}]
    assert main(["phases", named_db, "--k", "2", "--top", "1", "--json"]) == 0
    assert [len(p["top"]) for p in json.loads(capsys.readouterr().out)["phases"]] == [1, 1]


def test_the_table_shows_each_phase_s_top_functions_one_a_line(named_db, capsys):
    assert main(["phases", named_db, "--k", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].endswith("top functions (share of the phase)")
    solver = next(i for i, line in enumerate(lines) if line.endswith("90.0 %  solver.py:step"))
    assert lines[solver].split()[3] == "12"                               # on the phase's own row
    assert lines[solver + 1].strip() == "10.0 %  libm.so.6:exp"         # then one a line, under it
    assert lines[solver + 1].index("10.0") == lines[solver].index("90.0")
    assert any(line.endswith(f"30.0 %  {LONG}") for line in lines)       # whole, however long


def test_top_zero_prints_the_table_as_before(named_db, capsys):
    assert main(["phases", named_db, "--k", "2", "--top", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == f"{'phase':>5} {'simpoint':>9} {'weight':>8} {'intervals':>9}" and len(lines) == 5
    assert main(["phases", named_db, "--k", "2", "--top", "0", "--json"]) == 0
    assert all("top" not in p for p in json.loads(capsys.readouterr().out)["phases"])


def test_simpoint_s_files_are_the_same_with_top_functions(named_db, tmp_path, capsys):
    written = {}
    for top in ("0", "3"):
        names = {s: tmp_path / f"{top}.{s}" for s in ("simpoints", "weights", "labels")}
        assert main(["phases", named_db, "--k", "2", "--top", top,
                     *[a for s, p in names.items() for a in (f"--save-{s}", str(p))]]) == 0
        written[top] = {s: p.read_text() for s, p in names.items()}
    assert written["0"] == written["3"]
    assert all(len(line.split()) == 2 for text in written["3"].values() for line in text.splitlines())


def test_a_bb_file_names_blocks_or_with_its_pc_file_their_functions(tmp_path, capsys):
    bb, pc = tmp_path / "a.bb", tmp_path / "a.pc"
    bb.write_text("T:1:80 :2:20\n" * 5 + "T:3:50 :4:50\n" * 5)
    pc.write_text("F:1:4010:solve\nF:2:4020:solve\nF:3:4100:write\nF:4:4200:\n")   # block 4: no name
    assert main(["phases", str(bb), "--k", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["keys"] == "blocks"
    assert sorted(t["key"] for p in out["phases"] for t in p["top"]) == ["block 1", "block 2", "block 3", "block 4"]
    assert main(["phases", str(bb), "--k", "2"]) == 0
    assert "--pc-file" in capsys.readouterr().out                         # says how to get the functions
    assert main(["phases", str(bb), "--k", "2", "--pc-file", str(pc), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["keys"] == "functions"
    assert sorted(str(p["top"]) for p in out["phases"]) == [
        str([{"key": "block 4", "share": 0.5}, {"key": "write", "share": 0.5}]), str([{"key": "solve", "share": 1.0}])]


@pytest.mark.parametrize("args,words", [
    (["--top", "-1"], "--top -1: give a count >= 0"),
    (["--pc-file", "x.pc"], "--pc-file applies only to a .bb file"),
])
def test_top_and_pc_file_mistakes(named_db, capsys, args, words):
    assert main(["phases", named_db, *args]) == 2
    assert words in capsys.readouterr().err


def test_an_unreadable_pc_file_is_named(tmp_path, capsys):
    (tmp_path / "a.bb").write_text("T:1:3 :2:1\n")
    assert main(["phases", str(tmp_path / "a.bb"), "--pc-file", str(tmp_path / "none.pc")]) == 2
    assert f"--pc-file {tmp_path / 'none.pc'}: cannot read" in capsys.readouterr().err
