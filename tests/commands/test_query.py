"""`causewatch query` and `causewatch bottlenecks` over a real DuckDB store (paper Fig. 5 data)."""

import json

import duckdb
import pytest

from causewatch.cli import main
from causewatch.daemon.store import migrate


@pytest.fixture
def db(tmp_path):
    path = str(tmp_path / "pic.duckdb")
    con = duckdb.connect(path)
    migrate(con)
    rows = [("PARTICLE_LOAD", 0.9497242344418835, 4.0), ("MPI_SEND", 0.6550124668722567, 3.0),
            ("SR_E_FIELD", 0.2, 3.0)]
    con.executemany("INSERT INTO regions VALUES ('node1', 'b', ?, '3dpic', ?, 0, ?, 1, NULL, ?, NULL, NULL)",
                    [(i, r, d, json.dumps({"L2_TCM": m * 1e6, "L2_TCA": 1e6})) for i, (r, m, d) in enumerate(rows)])
    con.close()
    return path


def test_query_ranks_by_degree(db, capsys):
    assert main(["query", "--db", db, "(L2_TCM/L2_TCA is very high) OR (l2_miss_ratio is low)", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["region"] for r in rows] == ["PARTICLE_LOAD", "SR_E_FIELD", "MPI_SEND"]
    assert rows[0]["degree"] == pytest.approx(1.0) and rows[0]["L2_TCM/L2_TCA"] == pytest.approx(0.9497242344)


def test_query_min_degree_top_and_table(db, capsys):
    assert main(["query", "--db", db, "(l2_miss_ratio is not low)", "--min-degree", "0.5", "--top", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["node", "app", "region", "source", "l2_miss_ratio", "degree"]
    assert [line.split()[2] for line in out[1:]] == ["MPI_SEND", "PARTICLE_LOAD"]   # ties in name order


def test_query_error_points_at_the_column(db, capsys):
    assert main(["query", "--db", db, "(L2_TCM/L2_TCA is hihg)"]) == 2
    err = capsys.readouterr().err
    assert "column 19: expected a term of high, low, medium, found 'hihg'" in err
    assert err.rstrip().endswith(" " * 18 + "^")


def test_query_on_a_missing_store_is_an_input_error(tmp_path, capsys):
    assert main(["query", "--db", str(tmp_path / "nope" / "x.duckdb"), "(time_share is high)"]) == 2
    assert "cannot open the DuckDB store" in capsys.readouterr().err


def test_a_duckdb_file_that_is_no_store_is_refused(tmp_path, capsys):
    duckdb.connect(str(tmp_path / "other.duckdb")).execute("CREATE TABLE t (x INTEGER)").close()
    assert main(["bottlenecks", "--db", str(tmp_path / "other.duckdb")]) == 2
    assert "not a causewatch store (no table ingest_log)" in capsys.readouterr().err


def test_bottlenecks_reproduce_fig5(db, capsys):
    assert main(["bottlenecks", "--db", db, "--metric", "l2_miss_ratio", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["region"], r["bottleneck"]) for r in rows] == [
        ("PARTICLE_LOAD", "Medium (degree=0.502)/High (degree=0.495)/"), ("MPI_SEND", "Negligible (degree=0.1)/")]
    assert rows[0]["severity"] == 0.495 and rows[1]["severity"] == 0.0


def test_bottlenecks_without_negligible_and_with_terms_file(db, tmp_path, capsys):
    terms = tmp_path / "terms.toml"
    terms.write_text('[metrics.l2_miss_ratio]\nexpr = "L2_TCM / L2_TCA"\n'
                     'terms.any = {shape = "linear", params = [0, 1]}\n'
                     'bottleneck.threshold = 0.1\nbottleneck.severity.bad = {shape = "linear", params = [0.1, 0.3]}\n')
    assert main(["bottlenecks", "--db", db, "--terms", str(terms), "--metric", "l2_miss_ratio",
                 "--no-negligible"]) == 0
    out = capsys.readouterr().out
    assert out.count("Bad (degree=1)/") == 2 and "Bad (degree=0.5)/" in out


def test_bottlenecks_bad_terms_file(db, tmp_path, capsys):
    terms = tmp_path / "bad.toml"
    terms.write_text("[metrics.x]\nterms.low = {shape = 'q', params = [1]}\n")
    assert main(["bottlenecks", "--db", db, "--terms", str(terms)]) == 2
    assert "metrics.x.terms.low: unknown shape 'q'" in capsys.readouterr().err
