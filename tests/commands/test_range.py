"""`causewatch range` through cli.main on a real store with hot and lake rows: rows as JSON, PromQL's
matrix, a table, and exit 2 naming bad input."""

import functools
import json

import pytest

from causewatch.cli import main
from causewatch.daemon import store

T0 = 1_700_000_000


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("range") / "x.duckdb"
    s = store.Store(str(path))
    s.con.execute("INSERT INTO series VALUES (1, 'n1', 'node', 'node_load1'), (2, 'n2', 'node', 'node_load1')")
    s.con.execute(f"INSERT INTO samples_hot SELECT series_id, ({T0} + k) * 1000, k * series_id "
                  "FROM range(1, 3) s(series_id), range(600) t(k)")
    s.run(functools.partial(store.lake.compact, lake=str(s.lake), cutoff_ms=(T0 + 300) * 1000))
    s.close()
    return str(path)


WHEN = ["--start", str(T0 + 120), "--end", str(T0 + 480), "--step", "120"]


def test_range_answers_rows_and_promql_alike(db, capsys):
    assert main(["range", "node_load1", "--agg", "sum", "--fn", "last", "--db", db, *WHEN, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["t"], r["value"]) for r in rows] == [(T0 + t, 3.0 * t) for t in (120, 240, 360, 480)]
    assert main(["range", "--promql", "sum(node_load1)", "--db", db, *WHEN, "--json"]) == 0
    matrix = json.loads(capsys.readouterr().out)
    assert matrix["data"]["result"][0]["values"] == [[T0 + t, str(3 * t)] for t in (120, 240, 360, 480)]
    assert main(["range", "node_load1", "--node", "n2", "--db", db, *WHEN]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["node", "scope", "metric", "t", "value"] and len(out) == 5


@pytest.mark.parametrize("argv,message", [(["--step", "0"], "step: expected a positive duration"),
                                          (["--promql", "rate(node_load1[1m])"], "unsupported PromQL: function rate()"),
                                          (["node_load1", "--promql", "node_load1"], "--promql: the expression names"),
                                          (["--by", "node"], "by: groups an aggregation across series")])
def test_bad_input_exits_2_naming_it(db, capsys, argv, message):
    assert main(["range", "--db", db, *argv]) == 2
    assert message in capsys.readouterr().err
