"""`causewatch diff` through cli.main: on two CSV files (a planted change of one coefficient is that
mechanism, the picture marks it), on a daemon's store file by scope and time ranges (an app whose task
duration starts to depend on its size n directly), the plain store form comparing the baseline model's
window with the newest's; bad inputs exit 2 with one line naming what was wrong."""

import functools
import json
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from task_rows import ingest_tasks, lu_tasks

from causewatch.cli import main
from causewatch.daemon import store


def _network(seed, n=400, z_on_y=1.0):
    rng = np.random.default_rng(seed)
    x1, x2 = rng.normal(size=n), rng.normal(size=n)
    y = x1 + x2 + 0.5 * rng.normal(size=n)
    z = z_on_y * y + 0.5 * rng.normal(size=n)
    return pd.DataFrame({"time": np.arange(n) * 10.0, "x1": x1, "x2": x2, "y": y, "z": z})


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("diff")
    _network(0).to_csv(root / "calm.csv", index=False)
    _network(100, z_on_y=0.5).to_parquet(root / "changed.parquet")
    _network(100).drop(columns="z").to_csv(root / "narrow.csv", index=False)
    _network(1, n=8).to_csv(root / "short.csv", index=False)
    return root


def test_two_files_report_the_planted_mechanism_and_draw_it(files, tmp_path, capsys):
    svg = tmp_path / "diff.svg"
    argv = ["diff", "--baseline", str(files / "calm.csv"), "--incident", str(files / "changed.parquet")]
    assert main([*argv, "--svg", str(svg), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["changed"] and [m["variable"] for m in found["mechanisms"]] == ["z"]
    assert "time" not in found["variables"]["before"]
    assert all({e["src"], e["dst"]} == {"y", "z"} for e in found["edges"]), found["edges"]
    root = ET.parse(svg).getroot()
    framed = [g for g in root.iter("{http://www.w3.org/2000/svg}g") if "mechanism" in g.get("class", "").split()]
    assert ["".join(g.find("{http://www.w3.org/2000/svg}title").itertext()) for g in framed] == ["z"]
    assert main(argv) == 0   # the table for people
    out = capsys.readouterr().out
    assert "mechanism   z given y" in out and "z = " in out


def test_one_process_twice_is_no_change(files, capsys):
    assert main(["diff", "--baseline", str(files / "calm.csv"), "--incident", str(files / "calm.csv")]) == 0
    assert "no change beyond the bands" in capsys.readouterr().out


@pytest.mark.parametrize("extra,says", [
    (["--baseline", "{f}/calm.csv"], "--baseline needs --incident"),
    (["--baseline", "{f}/calm.csv", "--incident", "{f}/nothing.csv"], "nothing.csv: no such file"),
    (["--baseline", "{f}/calm.csv", "--incident", "{f}/narrow.csv"], "columns disagree: z in one only"),
    (["--baseline", "{f}/calm.csv", "--incident", "{f}/short.csv"], "too few complete rows"),
    (["--baseline", "{f}/calm.csv", "--incident", "{f}/calm.csv", "--inputs", "n"], "--inputs: no column(s) n"),
    (["--baseline", "{f}/calm.csv", "--incident", "{f}/calm.csv", "--scope", "app:lu"], "not both"),
    (["--baseline", "{f}/calm.csv", "--incident", "{f}/calm.csv", "--svg", "{f}/no/such/d.svg"], "--svg"),
    ([], "give two windows"),
])
def test_bad_input_exits_2_with_one_line(files, extra, says, capsys):
    assert main(["diff", *[a.format(f=files) for a in extra]]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("causewatch diff: error:") and says in err, err


CALM, BROKEN = (1000.0, 1399.0), (1400.0, 1799.0)   # lu_tasks start one a second from 1000


def _graph():
    return {"nodes": ["n", "duration"], "edges": [], "equivalences": [], "discrete": [], "sepsets": []}


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    """400 tasks of app lu, then 400 whose duration also follows n; a baseline model over the first
    window and a newest one over the second (their windows are what the plain form reads)."""
    path = tmp_path_factory.mktemp("diffstore") / "cw.duckdb"
    s = store.Store(str(path))
    ingest_tasks(s, pd.concat([lu_tasks(0, 0, 400), lu_tasks(1, 400, 400, broken=True)], ignore_index=True))
    edges = pa.table({"src": pa.array([], pa.string()), "dst": pa.array([], pa.string()),
                      "strength": pa.array([], pa.float64()), "directed": pa.array([], pa.bool_())})
    first = s.run(functools.partial(store.results.insert_model, scope="app:lu", window=CALM, n_rows=400,
                                    learned_at=1.0, graph=_graph(), edges=edges))
    s.run(functools.partial(store.results.insert_model, scope="app:lu", window=BROKEN, n_rows=400, learned_at=2.0,
                            graph=_graph(), edges=edges))
    s.run(functools.partial(store.results.set_baseline, scope="app:lu", model_id=first, how="pinned", now=1.0))
    s.close()
    return str(path)


def _duration_changed(found):
    assert found["changed"]
    assert "duration" in [m["variable"] for m in found["mechanisms"]], found["mechanisms"]
    assert not {"n", "dtype"} & {m["variable"] for m in found["mechanisms"]}   # inputs: causes only
    assert any(e["kind"] == "added" and {e["src"], e["dst"]} == {"n", "duration"} for e in found["edges"])


def test_a_stores_app_in_two_time_ranges(db, capsys):
    assert main(["diff", "--db", db, "--scope", "app:lu", "--baseline-window", "1000,1399",
                 "--incident-window", "1400,1799", "--json"]) == 0
    _duration_changed(json.loads(capsys.readouterr().out))
    assert main(["diff", "--db", db, "--scope", "app:lu", "--baseline-window", "1000,1199",
                 "--incident-window", "1200,1399", "--json"]) == 0
    assert not json.loads(capsys.readouterr().out)["changed"]


def test_the_plain_store_form_compares_the_baseline_models_window_with_the_newest(db, capsys):
    assert main(["diff", "--db", db, "--scope", "app:lu", "--json"]) == 0
    _duration_changed(json.loads(capsys.readouterr().out))


@pytest.mark.parametrize("extra,says", [
    (["--scope", "node"], "expected app:APP"),
    (["--scope", "app:lu", "--baseline-window", "5,1"], "START must be before END"),
    (["--scope", "app:lu", "--incident-window", "5000,6000"], "no tasks of app lu started then"),
    (["--scope", "app:other"], "has no baseline model yet"),
])
def test_bad_store_input_exits_2_with_one_line(db, extra, says, capsys):
    assert main(["diff", "--db", db, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err, err
