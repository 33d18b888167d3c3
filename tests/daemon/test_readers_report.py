"""What the store holds at a glance, read from a real DuckDB store: /api/stats counts the rows of
every table of the schema, the later migrations' tables included."""

from causewatch import wire
from causewatch.daemon import routes, verbs  # noqa: F401 (routes binds the verbs' handlers)
from causewatch.daemon.store import Store, results
from causewatch.daemon.store.schema import TABLES


def test_api_stats_counts_every_table_of_the_schema(tmp_path):
    store = Store(str(tmp_path / "s.duckdb"))
    hello = wire.decode(wire.encode("hello", "n1", "b1", 1, {"hostname": "h", "agent_version": "t"}))
    store.commit_frames([hello])
    store.run(lambda con: results.set_baseline(con, "app:x", 1, "pinned", 1.0))
    with store.cursor() as cur:
        stats = verbs.STATS.call(cur)
    store.close()
    assert list(stats["tables"]) == list(TABLES)
    assert stats["tables"]["baselines"] == 1 and stats["tables"]["nodes"] == 1
    assert stats["tables"]["samples_minute"] == 0 and stats["tables"]["schema_version"] > 0
