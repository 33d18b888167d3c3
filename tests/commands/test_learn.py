"""Tests of the `causewatch learn` and `causewatch experiment` commands (in-process through
causewatch.cli.main, one real child process for the entry point and for the experiment runner)."""

import json
import sys

import numpy as np
import pandas as pd
import pytest
from support import run_cli

from causewatch.cli import main


@pytest.fixture
def fig1_csv(tmp_path):
    rng = np.random.default_rng(0)
    n = 400
    a, d = rng.uniform(0, 1, n), rng.uniform(0, 1, n)
    b = 1.5 * np.sin(3 * a) + d ** 2 + 0.15 * rng.normal(size=n)
    c = np.exp(b) + 1.5 * rng.normal(size=n)
    path = tmp_path / "fig1.csv"
    pd.DataFrame({"A": a, "B": b, "C": c, "D": d}).to_csv(path, index=False)
    return path


def test_learn_json_prints_nodes_edges_equivalences(fig1_csv, capsys):
    assert main(["learn", str(fig1_csv), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["nodes"] == ["A", "B", "C", "D"]
    assert {(e["src"], e["dst"], e["directed"]) for e in out["edges"]} == {
        ("A", "B", True), ("D", "B", True), ("B", "C", True)}
    assert set(out["edges"][0]) == {"src", "dst", "directed", "strength"}
    assert out["equivalences"] == []


def test_learn_says_which_test_and_level_auto_chose(fig1_csv, tmp_path, capsys):
    assert main(["learn", str(fig1_csv), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["ci_test"], out["alpha"]) == ("rcot", 0.01)   # nonlinear
    rng = np.random.default_rng(1)
    a = rng.normal(size=1500)
    b = a + rng.normal(size=1500)
    path = tmp_path / "linear.csv"
    pd.DataFrame({"a": a, "b": b, "c": b - a + rng.normal(size=1500)}).to_csv(path, index=False)
    assert main(["learn", str(path)]) == 0
    assert "CI tests (fisher-z, alpha 0.01)" in capsys.readouterr().out   # jointly Gaussian
    codes = tmp_path / "discrete.csv"
    pd.DataFrame({"a": a > 0, "b": b > 0, "c": b - a > 1}).astype(int).to_csv(codes, index=False)
    assert main(["learn", str(codes), "--discrete", "a,b,c", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["ci_test"], out["alpha"]) == ("kde-mi", 0.05)   # counting G² at the all-discrete level
    assert main(["learn", str(codes), "--discrete", "a,b,c", "--alpha", "0.001", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["alpha"] == 0.001   # a given level is kept on every kind


def test_learn_background_flags_and_files(fig1_csv, tmp_path, capsys):
    dot, tetrad = tmp_path / "g.dot", tmp_path / "g.txt"
    assert main(["learn", str(fig1_csv), "--estimator", "fisher-z", "--tier", "inputs:A,D", "--tier", "outputs:C",
                 "--forbid", "A-B", "--require", "D->C", "--max-depth", "1", "--dot", str(dot),
                 "--tetrad", str(tetrad), "--json"]) == 0
    edges = {(e["src"], e["dst"], e["directed"]) for e in json.loads(capsys.readouterr().out)["edges"]}
    assert ("D", "C", True) in edges and not any({s, t} == {"A", "B"} for s, t, _ in edges)
    assert dot.read_text().startswith('digraph "causal" {')
    assert tetrad.read_text().startswith("Graph Nodes:\nA;B;C;D\n")


@pytest.mark.parametrize("flag,value,message", [
    ("--forbid", "A", "expected a-b"),
    ("--require", "A-B", "expected a->b"),
    ("--tier", "inputs", "expected NAME:a,b"),
    ("--discrete", "nope", "no column(s) ['nope']"),
    ("--tier", "inputs:zz", "unknown variables ['zz']"),
])
def test_learn_bad_flags_exit_2_naming_the_problem(fig1_csv, capsys, flag, value, message):
    assert main(["learn", str(fig1_csv), "--estimator", "fisher-z", flag, value]) == 2
    assert message in capsys.readouterr().err


def test_learn_missing_file_and_bad_duckdb_spec(capsys):
    assert main(["learn", "/nonexistent.csv"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["learn", "duckdb:only"]) == 2
    assert "expected duckdb:FILE:TABLE" in capsys.readouterr().err


def test_learn_reads_parquet_with_discrete_text_columns(tmp_path, capsys):
    rng = np.random.default_rng(1)
    dtype = rng.choice(["short", "int", "double"], 300)
    size = pd.Series(dtype).map({"short": 2, "int": 4, "double": 8}).to_numpy()
    n = rng.uniform(5, 300, 300)
    frame = pd.DataFrame({"dtype": dtype, "n": n, "misses": n * size * (1 + 0.1 * rng.random(300))})
    frame.to_parquet(tmp_path / "lu.parquet")
    assert main(["learn", str(tmp_path / "lu.parquet"), "--tier", "inputs:dtype,n", "--json"]) == 0
    edges = {(e["src"], e["dst"], e["directed"]) for e in json.loads(capsys.readouterr().out)["edges"]}
    assert edges == {("dtype", "misses", True), ("n", "misses", True)}


def test_entry_point_help_has_examples():
    out = run_cli("learn", "--help")
    assert out.returncode == 0 and "causewatch learn tasks --app lu" in out.stdout


def test_experiment_records_parameters_and_counters_then_learns(tmp_path):
    program = tmp_path / "work.py"
    program.write_text("import sys\nn = int(sys.argv[1])\nsum(i * i for i in range(n * 20000))\n"
                       "buf = bytearray(n * {'a': 1, 'b': 4}[sys.argv[2]] * 20000)\n")
    out = tmp_path / "runs.csv"
    res = run_cli("experiment", "--param", "n=1..100", "--param", "kind=a,b", "--runs", "25", "--out", str(out),
                  "--estimator", "fisher-z", "--json", "--", sys.executable, str(program), "{n}", "{kind}")
    assert res.returncode == 0, res.stderr
    runs = pd.read_csv(out)
    assert len(runs) == 25 and set(runs.kind) <= {"a", "b"} and runs.n.between(1, 100).all()
    assert {"wall_seconds", "user_seconds", "max_rss_bytes", "minor_faults", "exit_code"} <= set(runs.columns)
    assert (runs.exit_code == 0).all()
    assert runs.max_rss_bytes.between(1e6, 100e6).all()  # the program's peak, not the forked parent's
    assert np.corrcoef(runs.n, runs.user_seconds + runs.sys_seconds)[0, 1] > 0.5
    model = json.loads(res.stdout)
    assert "n" in model["nodes"]
    assert all(e["src"] == "n" for e in model["edges"] if "n" in (e["src"], e["dst"]))


def test_experiment_refuses_bad_params(capsys):
    assert main(["experiment", "--param", "n=9..1", "--", "true"]) == 2
    assert "LO is above HI" in capsys.readouterr().err
    assert main(["experiment", "--param", "n=1..3", "--", "echo", "{m}"]) == 2
    assert "placeholder 'm'" in capsys.readouterr().err
