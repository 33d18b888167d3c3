"""`causewatch learn` on CSV, Parquet and a store's samples and tasks: the model, the test and level it
chose, background flags and files, mistakes named (in-process through causewatch.cli.main; the
entry point's help in a child process)."""

import json

import numpy as np
import pandas as pd
import pytest
from support import run_cli

from causewatch import wire
from causewatch.cli import main
from causewatch.daemon.store import Store


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
    assert (out["ci_test"], out["alpha"]) == ("rcot", 0.03)   # nonlinear: RCOT_ALPHA
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
    df = pd.DataFrame({"dtype": dtype, "n": n, "misses": n * size * (1 + 0.1 * rng.random(300))})
    df.to_parquet(tmp_path / "lu.parquet")
    assert main(["learn", str(tmp_path / "lu.parquet"), "--tier", "inputs:dtype,n", "--json"]) == 0
    edges = {(e["src"], e["dst"], e["directed"]) for e in json.loads(capsys.readouterr().out)["edges"]}
    assert edges == {("dtype", "misses", True), ("n", "misses", True)}


def test_entry_point_help_has_examples():
    out = run_cli("learn", "--help")
    assert out.returncode == 0 and "causewatch learn tasks --app lu" in out.stdout


def test_learn_over_stored_samples_learns_between_metrics(tmp_path, capsys):
    db = tmp_path / "cw.duckdb"
    rng = np.random.default_rng(3)
    t = np.arange(400, dtype=float)
    load = rng.uniform(0, 1, 400)
    values = np.column_stack([load, 2 * load + 0.05 * rng.normal(size=400), rng.normal(size=400)])
    store = Store(str(db))
    store.commit_frames([wire.decode(wire.encode("samples", "n1", "b1", 1, wire.samples_body(
        t, ["load", "cpu_seconds", "unrelated"], values)))])
    store.close()
    assert main(["learn", f"duckdb:{db}:samples", "--metric", "load", "--metric", "cpu_seconds",
                 "--metric", "unrelated", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["nodes"] == ["node/cpu_seconds", "node/load", "node/unrelated"]
    assert [{e["src"], e["dst"]} for e in out["edges"]] == [{"node/load", "node/cpu_seconds"}]
    assert main(["learn", f"duckdb:{db}:samples", "--metric", "nothing"]) == 2
    assert "no samples stored of nothing" in capsys.readouterr().err
    assert main(["learn", f"duckdb:{db}:tasks", "--metric", "load"]) == 2
    assert "--metric and --bucket apply only to samples" in capsys.readouterr().err


@pytest.mark.parametrize("spec", ["duckdb:{db}:nope"])
def test_learn_names_the_tables_a_file_has(tmp_path, capsys, spec):
    db = tmp_path / "cw.duckdb"
    Store(str(db)).close()
    assert main(["learn", spec.format(db=db)]) == 2
    err = capsys.readouterr().err
    assert "no table 'nope'" in err and "samples" in err


def short_task_frames(seed: int, n: int = 400) -> list[wire.Frame]:
    """n records of a tile renderer's short tasks, as the instrument measures them on a busy machine:
    cpu_seconds 2 ms per 32 of tile, doubled at depth 2, with 15 % noise and a timer's tail; a
    wait for a CPU that grows with it; on 97 % of the tasks no blocking, so duration = cpu_seconds +
    cpu_wait_seconds to the microsecond (an identity of the measures, not a mechanism); on the rest a
    few ms blocked. Context switches follow the wall time."""
    rng = np.random.default_rng(seed)
    tile, depth = rng.choice([16, 32, 64], n), rng.choice([1, 2], n)
    cpu = 2e-3 * tile / 32 * depth * rng.lognormal(0, 0.15, n) + rng.exponential(3e-4, n)
    wait = cpu * rng.exponential(1.5, n)
    blocked = np.where(rng.random(n) < 0.97, 0.0, rng.exponential(2e-3, n))
    duration = cpu + wait + blocked + rng.uniform(-1e-6, 1e-6, n)
    switches = rng.poisson(1 + duration / 8e-4)
    return [wire.decode(wire.encode("task", "n1", "b1", i + 1, {
        "app": "tiles", "task_id": str(i), "start": 1000.0 + i, "duration": float(duration[i]),
        "cpu_seconds": float(cpu[i]), "params": {"tile": int(tile[i]), "depth": int(depth[i])},
        "counters": {"cpu_wait_seconds": float(wait[i]), "context_switches": float(switches[i]),
                     "page_faults": float(rng.poisson(44)), "task_clock_seconds": float(cpu[i] + 2e-6)}}))
        for i in range(n)]


def test_learn_tasks_finds_what_short_tasks_cpu_time_depends_on(tmp_path, capsys):
    """Short CPU-bound tasks rarely block, so given duration and the CPU wait their CPU time is fixed:
    every cause of cpu_seconds tests independent of it given those two. That independence is the
    identity's, not the causes' (a deterministic relation): depth, which doubles the CPU time, and tile
    stay its parents, seed after seed."""
    for seed in range(4):
        db = tmp_path / f"tiles-{seed}.duckdb"
        store = Store(str(db))
        store.commit_frames(short_task_frames(seed))
        store.close()
        assert main(["learn", "tasks", "--db", str(db), "--app", "tiles", "--json"]) == 0
        edges = {(e["src"], e["dst"]) for e in json.loads(capsys.readouterr().out)["edges"]}
        assert {("depth", "cpu_seconds"), ("tile", "cpu_seconds")} <= edges, (seed, sorted(edges))
