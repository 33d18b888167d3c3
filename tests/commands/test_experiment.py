"""`causewatch experiment`: runs a program over a parameter grid, records parameters and counters per
run, learns from them (one real child process), and names bad parameters."""

import json
import sys

import numpy as np
import pandas as pd
import pytest
from support import run_cli

from causewatch.cli import main


@pytest.mark.slow   # runs the experiment's program per parameter set
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
