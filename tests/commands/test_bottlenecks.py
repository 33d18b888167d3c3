"""`causewatch bottlenecks` over a real DuckDB store: the paper's Fig. 5 verdicts, term files, and a
file that is no store refused."""

import json

import duckdb
from support import bbv_frames

from causewatch import wire
from causewatch.cli import main
from causewatch.daemon.store import Store


def test_bottlenecks_reproduce_fig5(fig5_db, capsys):
    assert main(["bottlenecks", "--db", fig5_db, "--metric", "l2_miss_ratio", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["region"], r["bottleneck"]) for r in rows] == [
        ("PARTICLE_LOAD", "Medium (degree=0.502)/High (degree=0.495)/"), ("MPI_SEND", "Negligible (degree=0.1)/")]
    assert rows[0]["severity"] == 0.495 and rows[1]["severity"] == 0.0


def test_the_table_shows_every_degree_within_its_width(fig5_db, capsys):
    from causewatch.commands.query import WIDTH
    assert main(["bottlenecks", "--db", fig5_db]) == 0
    out = capsys.readouterr().out
    assert "…" not in out and max(map(len, out.splitlines())) <= WIDTH, out
    assert "Medium 0.502/High 0.495" in out and "Negligible 0.1" in out


def test_bottlenecks_without_negligible_and_with_terms_file(fig5_db, tmp_path, capsys):
    terms = tmp_path / "terms.toml"
    terms.write_text('[metrics.l2_miss_ratio]\nexpr = "L2_TCM / L2_TCA"\n'
                     'terms.any = {shape = "linear", params = [0, 1]}\n'
                     'bottleneck.threshold = 0.1\nbottleneck.severity.bad = {shape = "linear", params = [0.1, 0.3]}\n')
    assert main(["bottlenecks", "--db", fig5_db, "--terms", str(terms), "--metric", "l2_miss_ratio",
                 "--no-negligible"]) == 0
    out = capsys.readouterr().out
    assert out.count("Bad 1\n") == 2 and "Bad 0.5\n" in out


def test_bottlenecks_bad_terms_file(fig5_db, tmp_path, capsys):
    terms = tmp_path / "bad.toml"
    terms.write_text("[metrics.x]\nterms.low = {shape = 'q', params = [1]}\n")
    assert main(["bottlenecks", "--db", fig5_db, "--terms", str(terms)]) == 2
    assert "metrics.x.terms.low: unknown shape 'q'" in capsys.readouterr().err


def test_a_duckdb_file_that_is_no_store_is_refused(tmp_path, capsys):
    duckdb.connect(str(tmp_path / "other.duckdb")).execute("CREATE TABLE t (x INTEGER)").close()
    assert main(["bottlenecks", "--db", str(tmp_path / "other.duckdb")]) == 2
    assert "not a causewatch store (no table ingest_log)" in capsys.readouterr().err


def test_a_region_and_its_sampled_function_say_which_time_share_is_which(tmp_path, capsys):
    """An instrumented render (its wall time, what it calls included: 0.67 of the program, High) beside the
    samples in render's own code (0.18, Negligible): the table says what each share is, not two shares of
    one region."""
    store = Store(str(tmp_path / "cw.duckdb"))
    regions = [wire.decode(wire.encode("region", "vm", "b", 2 * i + k + 1, {
        "app": "tiles", "region": name, "start": float(i) + start, "duration": duration, "calls": 1}))
        for i in range(10) for k, (name, start, duration) in enumerate((("render", 0.0, 0.66), ("load", 0.7, 0.2)))]
    samples = bbv_frames([("vm", "b", 100 + i, "app:tiles", "python", float(i), i + 1.0, key, count)
                          for i in range(10) for key, count in (("tiles.py:render", 18), ("tiles.py:work", 82))])
    store.commit_frames(regions + samples)
    store.close()
    assert main(["bottlenecks", "--db", str(tmp_path / "cw.duckdb"), "--metric", "time_share"]) == 0
    out = capsys.readouterr().out.splitlines()
    shown = {line.split()[2]: (line.split()[3], line.split()[5]) for line in out[1:-1]}
    assert shown == {"render": ("region", "0.6667"), "load": ("region", "0.202"), "tiles.py:render": ("bbv", "0.18"),
                     "tiles.py:work": ("bbv", "0.82")}, out
    assert out[-1].startswith("time_share: a region row's is its wall time, what it calls included") \
        and "a bbv row's is the samples in the function's own code" in out[-1]
