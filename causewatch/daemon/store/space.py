"""The DuckDB file's free space given back. DuckDB reuses a file's free blocks but gives back only those at
its end (a checkpoint truncates them), and a table's blocks stay where a checkpoint last wrote them: once
the lake has taken most hot rows (a backfill moved, a hot window shortened), the small tables written
after them sit at the end and hold the file at its peak size, most of it free.

`pack`, on the writer in one transaction (`Store.run`): a checkpoint first, so that what the move deleted
is free (a checkpoint cannot reuse the blocks it frees); then, when the free space is large and more
than the used, every small table with a block past where the file could end (the used count, or a large
table's last block) is rewritten (its rows
deleted and inserted again, unchanged), so that `checkpoint`, run after that commit, writes them into
the lowest free blocks and truncates the free end.

Crash safety: the rewrite is one transaction on the store's only writer: a crash before its commit leaves
every row as it was, one after it the same rows, each once (the checkpoints move blocks, never rows).
"""

from __future__ import annotations

import duckdb

from causewatch.daemon.store.schema import BASE_TABLES

# Free space below which nothing is rewritten (64 blocks of 256 KiB).
RECLAIM_BYTES = 16 * 2**20
# Tables of more rows are not rewritten (the cost would be the table's; their own appends refill the
# low blocks): samples_hot, whose newest rows leave for the lake within the hot window, is always one.
REWRITE_ROWS = 500_000
HOT = "samples_hot"


def sizes(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """The store file's block size and its blocks: total, used, free."""
    block, total, used, free = con.execute(
        "SELECT block_size, total_blocks, used_blocks, free_blocks FROM pragma_database_size() "
        "WHERE database_name = current_database()").fetchone()
    return {"block_bytes": block, "total": total, "used": used, "free": free}


def _last_block(con: duckdb.DuckDBPyConnection, table: str) -> int:
    last = con.execute(f"SELECT max(block_id) FROM pragma_storage_info('{table}') WHERE persistent").fetchone()[0]
    return -1 if last is None else last


def pack(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Checkpoint; when the file is mostly free (RECLAIM_BYTES and more than the used), rewrite the small
    tables that hold blocks past the used count, in the caller's transaction; returns their names (then
    run `checkpoint` after the commit)."""
    con.execute("CHECKPOINT")
    size = sizes(con)
    if size["free"] * size["block_bytes"] < RECLAIM_BYTES or size["free"] <= size["used"]:
        return []
    last = {t: _last_block(con, t) for t in BASE_TABLES}
    small = {t for t in BASE_TABLES
             if t != HOT and con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] <= REWRITE_ROWS}
    # the file cannot end before the last block of a table left where it is: only what lies past it moves
    end = max([size["used"] - 1, *(b for t, b in last.items() if t not in small)])
    tail = [t for t in BASE_TABLES if t in small and last[t] > end]
    for table in tail:
        con.execute(f"CREATE TEMP TABLE packing AS SELECT * FROM {table}")
        con.execute(f"DELETE FROM {table}")
        con.execute(f"INSERT INTO {table} SELECT * FROM packing")
        con.execute("DROP TABLE packing")
    return tail


def checkpoint(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """A checkpoint (the rewritten tables into the lowest free blocks, the free end truncated); the sizes."""
    con.execute("CHECKPOINT")
    return sizes(con)
