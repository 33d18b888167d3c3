"""`causewatch diagnose` through cli.main on files written as the held-out evaluation writes them: a
recorded PetShop incident ranks its root cause in the top 3; bad inputs exit 2 with one line."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from support import shared_data

from causewatch.cli import main


def _petshop_metrics(path):
    df = pd.read_csv(path, header=[0, 1, 2], index_col=0)
    df.columns = ["_".join(c) for c in df.columns]
    df.index.name = "time"
    return df


def _write_petshop_case(root, scenario, issue, out):
    """baseline.csv, incident.csv (the same columns), edges.csv and units.json of one recorded issue."""
    adj = pd.read_csv(root / scenario / "graph.csv", index_col=0)
    edges = [(adj.index[i], adj.columns[j]) for i, j in zip(*np.nonzero(adj.to_numpy()))]
    nodes = sorted({n for e in edges for n in e}, key=len, reverse=True)
    incident = _petshop_metrics(root / scenario / "train" / issue / "metrics.csv")
    baseline = _petshop_metrics(root / scenario / "noissue" / "metrics.csv")
    columns = list(dict.fromkeys([*incident.columns, *[c for c in baseline.columns
                                                       if any(c.startswith(n + "_") for n in nodes)]]))
    baseline.reindex(columns=columns).to_csv(out / "baseline.csv")
    incident.reindex(columns=columns).to_csv(out / "incident.csv")
    units = {n: [c for c in columns if c.startswith(n + "_") and not any(
        len(m) > len(n) and c.startswith(m + "_") for m in nodes)] for n in nodes}
    (out / "units.json").write_text(json.dumps(units))
    pd.DataFrame(edges, columns=["src", "dst"]).to_csv(out / "edges.csv", index=False)
    meta = json.loads((root / scenario / "train" / issue / "target.json").read_text())
    t = meta["target"]
    return f"{t['node']}_{t['metric']}_{t['agg']}", meta["root_cause"]["node"]


@pytest.mark.parametrize("scenario,issue", [("low_traffic", "issue_0"), ("high_traffic", "issue_5")])
def test_a_recorded_petshop_incident_ranks_its_root_cause_in_the_top_3(scenario, issue, tmp_path, capsys):
    target, truth = _write_petshop_case(shared_data("rca/petshop"), scenario, issue, tmp_path)
    argv = ["diagnose", "--baseline", str(tmp_path / "baseline.csv"), "--incident", str(tmp_path / "incident.csv"),
            "--target", target, "--graph", str(tmp_path / "edges.csv"), "--units", str(tmp_path / "units.json")]
    assert main([*argv, "--json"]) == 0
    causes = json.loads(capsys.readouterr().out)["causes"]
    assert truth in [c["unit"] for c in causes[:3]], causes[:3]
    assert set(causes[0]) == {"unit", "score", "evidence"} and len({c["score"] for c in causes[:5]}) == 5
    assert main(argv) == 0   # the table for people
    assert truth in capsys.readouterr().out


@pytest.fixture
def windows(tmp_path):
    rng = np.random.default_rng(0)
    base = pd.DataFrame({"time": np.arange(40) * 60, "a_lat": rng.normal(1, 0.1, 40), "b_lat": rng.normal(2, 0.1, 40)})
    inc = pd.DataFrame({"time": [3000, 3060, 3120], "a_lat": [1.0, 3.0, 3.1], "b_lat": [2.0, 2.1, 2.0]})
    base.to_csv(tmp_path / "base.csv", index=False)
    inc.to_csv(tmp_path / "inc.csv", index=False)
    inc.iloc[:0].to_csv(tmp_path / "empty.csv", index=False)
    inc.rename(columns={"b_lat": "c_lat"}).to_csv(tmp_path / "other.csv", index=False)
    (tmp_path / "edges.csv").write_text("src,dst\na_lat,ghost\n")
    return tmp_path


def test_diagnose_without_target_or_graph_ranks_the_changed_column(windows, capsys):
    assert main(["diagnose", "--baseline", str(windows / "base.csv"), "--incident", str(windows / "inc.csv"),
                 "--json"]) == 0
    causes = json.loads(capsys.readouterr().out)["causes"]
    assert [c["unit"] for c in causes] == ["a_lat", "b_lat"] and causes[0]["score"] >= 1 > causes[1]["score"]
    assert causes[0]["evidence"].startswith("a_lat rose from 0.9") and " to 3.1 (robust z " in causes[0]["evidence"]


@pytest.mark.parametrize("extra,message", [
    (["--target", "nope"], "the target column 'nope' is in neither window"),
    (["--incident-file", "empty.csv"], "the window has no rows"),
    (["--incident-file", "other.csv"], "the two windows' columns disagree"),
    (["--graph", "edges.csv", "--units", "units.json"], "names units that --units and the columns lack: ghost"),
    (["--incident-file", "missing.csv"], "missing.csv: no such file"),
])
def test_bad_inputs_exit_2_with_one_line(windows, extra, message, capsys):
    (windows / "units.json").write_text(json.dumps({"a": ["a_lat"], "b": ["b_lat"]}))
    incident = "inc.csv"
    if extra[0] == "--incident-file":
        incident, extra = extra[1], []
    argv = ["diagnose", "--baseline", str(windows / "base.csv"), "--incident", str(windows / incident), "--json"]
    argv += [str(windows / x) if x.endswith((".csv", ".json")) else x for x in extra]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("causewatch diagnose: error: ") and message in err


def test_a_bad_input_exits_2_in_a_real_process(windows):
    r = subprocess.run([sys.executable, "-m", "causewatch.cli", "diagnose", "--baseline", str(windows / "base.csv"),
                        "--incident", str(windows / "other.csv")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "causewatch diagnose: error: the two windows' columns disagree: only the baseline has b_lat"]
