"""The store's schema: migrations apply once, and the table list derived from them is exactly the
tables of a freshly migrated file."""

import duckdb

from causewatch.daemon.store import Store, migrate
from causewatch.daemon.store.schema import MIGRATIONS, TABLES


def test_migrations_apply_once(tmp_path):
    db = str(tmp_path / "s.duckdb")
    Store(db).close()
    store = Store(db)
    assert store.version == MIGRATIONS[-1][0]
    assert store.cursor().execute("SELECT count(*) FROM schema_version").fetchone()[0] == len(MIGRATIONS)
    store.close()


def test_the_derived_table_list_is_every_table_of_a_migrated_store(tmp_path):
    """One list, read off the migrations, in the order they create the tables (a table that a later
    migration drops and creates again comes where it was created last)."""
    con = duckdb.connect(str(tmp_path / "s.duckdb"))
    migrate(con)
    found = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()]
    con.close()
    assert sorted(TABLES) == sorted(found) and len(set(TABLES)) == len(TABLES)
    assert {"baselines", "samples_minute", "schema_version"} <= set(TABLES)
    assert TABLES.index("probe_results") < TABLES.index("anomalies") < TABLES.index("baselines")
