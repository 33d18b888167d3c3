"""`causewatch query` over a real DuckDB store (paper Fig. 5 data): PERFQL matches ranked by degree,
errors pointing at their column; its tables fit a terminal (long names shortened with …, and said so)
unless --wide, whole in a pipe, and its membership modes are the library's."""

import contextlib
import json
import os
import pty
import subprocess
import sys

import pytest

from causewatch.analytics import fuzzy
from causewatch.cli import main
from causewatch.commands.query import MODES, WIDTH, print_table


def test_query_ranks_by_degree(fig5_db, capsys):
    assert main(["query", "--db", fig5_db, "(L2_TCM/L2_TCA is very high) OR (l2_miss_ratio is low)", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["region"] for r in rows] == ["PARTICLE_LOAD", "SR_E_FIELD", "MPI_SEND"]
    assert rows[0]["degree"] == pytest.approx(1.0) and rows[0]["L2_TCM/L2_TCA"] == pytest.approx(0.9497242344)


def test_query_min_degree_top_and_table(fig5_db, capsys):
    assert main(["query", "--db", fig5_db, "(l2_miss_ratio is not low)", "--min-degree", "0.5", "--top", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["node", "app", "region", "source", "l2_miss_ratio", "degree"]
    assert [line.split()[2] for line in out[1:]] == ["MPI_SEND", "PARTICLE_LOAD"]   # ties in name order


def test_query_error_points_at_the_column(fig5_db, capsys):
    assert main(["query", "--db", fig5_db, "(L2_TCM/L2_TCA is hihg)"]) == 2
    err = capsys.readouterr().err
    assert "column 19: expected a term of high, low, medium, found 'hihg'" in err
    assert err.rstrip().endswith(" " * 18 + "^")


def test_query_on_a_missing_store_is_an_input_error(tmp_path, capsys):
    assert main(["query", "--db", str(tmp_path / "nope" / "x.duckdb"), "(time_share is high)"]) == 2
    assert "cannot open the DuckDB store" in capsys.readouterr().err


def _rows():
    name = "std::_Rb_tree<int, int, std::_Identity<int>, std::less<int>, std::allocator<int> >::_M_erase"
    return [{"node": n, "region": r, "metric": "time_share", "value": v,
             "bottleneck": "Medium (degree=0.502)/High (degree=0.495)/"} for n, r, v in
            (("n1", name, 0.5), ("n2", "main", 0.25))]


def test_a_terminal_s_table_fits_its_width_and_says_names_were_shortened():
    """On a terminal (a pty, 60 columns) names are shortened to fit, and a line says so and how to see them."""
    primary, secondary = pty.openpty()
    code = f"from causewatch.commands.query import print_table\nprint_table({_rows()!r})"
    with subprocess.Popen([sys.executable, "-c", code], stdout=secondary, env=dict(os.environ, COLUMNS="60")) as child:
        os.close(secondary)
        assert child.wait(60) == 0
    out = b""
    with contextlib.suppress(OSError):   # EIO once the child's side is closed and read empty
        while chunk := os.read(primary, 4096):
            out += chunk
    os.close(primary)
    lines = out.decode().splitlines()
    assert max(map(len, lines)) <= 60 and "…" in lines[1] and "main" in lines[2], lines
    assert lines[-1] == "(names shortened to fit 60 columns: --wide shows them whole)"


def test_a_pipe_or_a_file_gets_every_name_whole(capsys):
    print_table(_rows())
    out = capsys.readouterr().out
    assert "_M_erase" in out and "…" not in out and "shortened" not in out and max(map(len, out.splitlines())) > WIDTH


def test_wide_keeps_every_character(capsys):
    print_table(_rows(), wide=True)
    out = capsys.readouterr().out
    assert "_M_erase" in out and "…" not in out and max(map(len, out.splitlines())) > WIDTH


def test_the_modes_shown_are_the_librarys():
    assert MODES == fuzzy.MODES
