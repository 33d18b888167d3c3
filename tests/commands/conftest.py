"""Fixtures of the command tests: a daemon's store holding known region summaries."""

import json

import duckdb
import pytest

from causewatch.daemon.store import create_views, migrate


@pytest.fixture
def fig5_db(tmp_path):
    """A store whose regions are the paper's Fig. 5 example (L2 miss ratios of a 3D PIC code)."""
    path = str(tmp_path / "pic.duckdb")
    con = duckdb.connect(path)
    migrate(con)
    create_views(con)
    rows = [("PARTICLE_LOAD", 0.9497242344418835, 4.0), ("MPI_SEND", 0.6550124668722567, 3.0),
            ("SR_E_FIELD", 0.2, 3.0)]
    con.executemany("INSERT INTO regions VALUES ('node1', 'b', ?, '3dpic', ?, 0, ?, 1, NULL, ?, NULL, NULL)",
                    [(i, r, d, json.dumps({"L2_TCM": m * 1e6, "L2_TCA": 1e6})) for i, (r, m, d) in enumerate(rows)])
    con.close()
    return path
