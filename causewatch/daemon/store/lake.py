"""The cold half of the store: samples older than the hot window, moved out of DuckDB into zstd Parquet
files sorted by series and time, in a hive layout under the store's lake folder (samples/day=YYYY-MM-DD/).

Crash safety, the whole argument: a file is written first, into the staging folder that no reader
knows (on a read cursor: the writer goes on storing frames meanwhile); then ONE DuckDB transaction on
the writer checks that the hot rows of its range are still the rows written (their count), renames it
into its day's folder, records it in `lake_files`, deletes the same rows from `samples_hot` and
re-creates the `samples` view over the new file list. Readers see the view of a committed transaction,
so a row is hot or cold, never both, never neither. A crash before the commit leaves an unlisted file
(the rows are still hot); a crash after it leaves nothing to do. `sweep` deletes unlisted files and
the staging folder, at open and before every move; dropping a partition (retention, a merge) is the
same in reverse: unlist in a transaction, then sweep.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import shutil
import time
import uuid
from pathlib import Path

import duckdb

from causewatch.daemon.store import mantissas
from causewatch.daemon.store.views import IDS, LAYOUTS, MANTISSAS, NAMES, create_views, listed, samples_filter, value_of

DAY_MS = 86_400_000
TABLE = "samples"        # the lake's one table so far: its folder under the lake
SHARD = "shard"          # a shard's level in a shared lake: shard=NAME/samples/day=.../
MANIFEST = "manifest.json"   # a shard's listed files, for other shards' readers (publish)
STAGING = ".staging"     # where a merge writes before its swap: never read, emptied by every sweep
# The hot table a move deletes from and the dictionary that names its series (daemon/store/schema.py).
HOT, SERIES = "samples_hot", "series"
SCALES = "lake_scales"   # what a move or a merge registers: its series' scales (store/mantissas.py)
# Sorted by series, then time: the strings fall into long runs (zstd makes them nearly free), the
# times into small steps (delta), and one node's or series' rows into few row groups (pruning).
ORDER = "node, scope, metric, ts"
# Measured by bench/storage.py over ten layouts: Parquet v2 encodes the ms times and the values' mantissas
# (store/mantissas.py) as deltas and the other values BYTE_STREAM_SPLIT, which DuckDB's dictionary pages
# would otherwise pre-empt (DICTIONARY_SIZE_LIMIT 1: the sorted names compress to nearly nothing under zstd
# without one); large row groups, zstd level 9.
# The export's own DuckDB (export): what it may hold before it spills, and the rows a streamed batch holds.
EXPORT_MEMORY_BYTES = 256 * 2**20
EXPORT_BATCH_ROWS = 1 << 17
# What a connection that reads the lake sets: a file is never rewritten in place (a move or a merge writes
# a new one), so its footer is read once, not at every query.
READS = "SET parquet_metadata_cache = true"
COPY_OPTIONS = ("FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL 9, PARQUET_VERSION v2, "
                "DICTIONARY_SIZE_LIMIT 1, ROW_GROUP_SIZE 1048576")


def folder_for(db: str, configured: str = "", shard: str = "") -> Path | None:
    """The lake folder: the configured one, else beside the DuckDB file (`x.duckdb` -> `x.lake/`), so
    a store is one folder to back up or move; None for an in-memory store (nothing to move to). A shard
    writes a level below, `shard=NAME/`: several daemons share one lake, each listing its own files."""
    if configured:
        folder = Path(configured).expanduser()
    elif db in ("", ":memory:") or db.startswith(":memory:"):
        return None
    else:
        folder = Path(db).with_suffix(".lake")
    return folder / f"{SHARD}={shard}" if shard else folder


def publish(con: duckdb.DuckDBPyConnection, lake: Path | None) -> int:
    """Write the lake's catalog as MANIFEST (a temporary file renamed into place: a reader sees the old
    list or the new, whole): how other shards' readers find this shard's committed files without opening
    its DuckDB file. Run after the transaction that changed the list commits (a listed file is complete
    and its rows no longer hot). Returns the files listed."""
    if lake is None or not lake.name.startswith(f"{SHARD}="):
        return 0     # a lone daemon's lake: no other reader
    rows = con.execute("SELECT path, day::VARCHAR, rows, ts_min, ts_max, layout FROM lake_files ORDER BY day, path"
                       ).fetchall()
    files = [dict(zip(("path", "day", "rows", "ts_min", "ts_max", "layout"), r)) for r in rows]
    lake.mkdir(parents=True, exist_ok=True)
    tmp = lake / f".{MANIFEST}.{uuid.uuid4().hex}"
    tmp.write_text(json.dumps({"written": time.time(), "files": files}))
    os.replace(tmp, lake / MANIFEST)
    return len(files)


def shard_files(root: str | Path, skip: str = "") -> dict[str, list[str]]:
    """{shard: [absolute paths]} of the files each shard's MANIFEST under the shared lake `root` lists and
    that exist (a file merged away since the manifest was written is left out), but shard `skip`'s.
    A manifest that cannot be read is left out, its shard absent from the answer."""
    return {shard: [f for f, _ in files] for shard, files in _manifests(root, skip).items()}


def _manifests(root: str | Path, skip: str = "") -> dict[str, list[tuple[str, int]]]:
    """shard_files' answer with each file's layout (a manifest written before layouts were: IDS)."""
    out: dict[str, list[tuple[str, int]]] = {}
    for manifest in sorted(Path(root).glob(f"{SHARD}=*/{MANIFEST}")):
        shard = manifest.parent.name.partition("=")[2]
        if shard == skip:
            continue
        try:
            files = [(manifest.parent / f["path"], int(f.get("layout", IDS)))
                     for f in json.loads(manifest.read_text())["files"]]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        out[shard] = [(str(f), layout) for f, layout in files if f.is_file()]
    return out


def sweep(con: duckdb.DuckDBPyConnection, lake: Path | None) -> dict[str, list[str]]:
    """Delete the lake's unlisted files (left by a move that did not commit, or unlisted by retention)
    and name the listed ones that are missing (someone deleted them: their rows are lost)."""
    if lake is None or not (lake / TABLE).is_dir():
        return {"removed": [], "missing": listed(con) if lake is not None else []}
    shutil.rmtree(lake / STAGING, ignore_errors=True)
    keep = set(listed(con))
    on_disk = {str(p.relative_to(lake)) for p in (lake / TABLE).rglob("*.parquet")}
    removed = sorted(on_disk - keep)
    for p in removed:
        (lake / p).unlink(missing_ok=True)
    for d in (lake / TABLE).iterdir():
        if d.is_dir() and not any(d.iterdir()):
            d.rmdir()
    return {"removed": removed, "missing": sorted(keep - on_disk)}


def shard_samples(root: str | Path, shard: str, metrics: list[str] | None = None, scope: str | None = None):
    """Shard `shard`'s committed lake samples (the files its manifest names, under the shared lake `root`)
    with the `samples` view's columns, as an Arrow table; None when it has none. What a global query
    reads of a shard that does not answer: its history, not its hot window."""
    files = _manifests(root).get(shard)
    if not files:
        return None
    where, params = samples_filter(metrics, scope)
    parts = [f"SELECT node, ts / 1000 AS ts, scope, metric, {value_of(layout)} AS value FROM read_parquet("
             f"{_quoted([f for f, of in files if of == layout])}) WHERE {where}"
             for layout in LAYOUTS if any(of == layout for _, of in files)]
    with duckdb.connect() as con:
        return con.sql(" UNION ALL ".join(parts) + " ORDER BY ts, node, scope, metric",
                       params=params * len(parts)).to_arrow_table()


def _quoted(paths) -> str:
    """A DuckDB list literal of file paths."""
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths) + "]"


def day_of(seconds: float) -> str:
    """The UTC day (YYYY-MM-DD) a time in unix seconds falls on: a lake partition's name."""
    return dt.datetime.fromtimestamp(seconds // 86400 * 86400, dt.UTC).strftime("%Y-%m-%d")


def _day(ms: int) -> str:
    return day_of(ms // 1000)


def compact(con: duckdb.DuckDBPyConnection, lake: str, cutoff_ms: int) -> dict:
    """`move` with every step on `con` (a store's writer, in one transaction: tests and benches); the
    rows stream out on a cursor of its own, as the daemon's export does."""
    return move(lake, cutoff_ms, read=con.cursor, read_at_store=lambda fn: fn(con), write=lambda fn: fn(con))


def move(lake: str, cutoff_ms: int, read, read_at_store, write) -> dict:
    """Sweep, then move the hot samples with ts < cutoff_ms into the lake, a file per day: each slice
    sorted and written by `read_at_store(fn)` (fn(cursor), off the writer in the daemon), adopted by `write(fn)`
    (fn(writer) in one transaction; fn crosses pickled: partials of this module's functions). `read()`
    is a cursor to close. {"moved": {day: rows}, "removed": [...], "missing": [...]} (sweep's)."""
    swept = write(functools.partial(sweep, lake=Path(lake)))
    with read() as cur:
        ranges = slices(cur, cutoff_ms)
    moved = {}
    for lo, hi in ranges:
        out = read_at_store(functools.partial(export, lake=lake, lo=lo, hi=hi))
        if out:
            moved[_day(lo)] = write(functools.partial(adopt, lake=lake, staged=out[0], lo=lo, hi=hi, rows=out[1]))
    return {"moved": moved, **swept}


def slices(con, cutoff_ms: int) -> list[tuple[int, int]]:
    """The [lo, hi) ms ranges a move of the hot samples with ts < cutoff_ms writes, a file each: one
    per day they fall on."""
    return [(d, min(d + DAY_MS, cutoff_ms)) for (d,) in con.execute(
        f"SELECT DISTINCT ts // {DAY_MS} * {DAY_MS} FROM {HOT} WHERE ts < ? ORDER BY 1", [cutoff_ms]).fetchall()]


def export(cur: duckdb.DuckDBPyConnection, lake: str, lo: int, hi: int) -> tuple[str, int] | None:
    """Write the hot samples with lo <= ts < hi, sorted, into a new file in the staging folder; (staged
    path relative to the lake, rows), or None when there are none. The rows stream out of the store on
    `cur` (a read cursor: the daemon runs this off the writer) into a DuckDB of the export's own, which
    sorts and writes them within its own memory limit, spilling to the staging folder: the store's limit
    is left to the writer, whose commits failed for memory while a 10-minute slice of 1,000 agents was
    sorted beside them."""
    folder = Path(lake)
    staged = f"{STAGING}/{uuid.uuid4().hex}.parquet"
    (folder / STAGING).mkdir(parents=True, exist_ok=True)
    query = f"""SELECT s.node, s.scope, s.metric, h.series_id, h.ts, h.value, k.scale FROM {HOT} h
        JOIN {SERIES} s USING (series_id) LEFT JOIN {SCALES} k USING (series_id) WHERE h.ts >= ? AND h.ts < ?"""
    # a cursor of its own, so the caller's connection (the writer's, in adopt) has no result left open
    with cur.cursor() as streaming, duckdb.connect(config={
            "memory_limit": f"{EXPORT_MEMORY_BYTES}B", "threads": 1,
            "temp_directory": str(folder / STAGING / "spill")}) as sorter:
        _scales(streaming, f"SELECT series_id, value FROM {HOT} WHERE ts >= ? AND ts < ?", [lo, hi])
        # the export's own connection, closed below: the reader stays registered no longer than it lives
        sorter.register("hot_rows", streaming.sql(query, params=[lo, hi]).to_arrow_reader(EXPORT_BATCH_ROWS))
        # COPY takes no bound parameters: the path is ours
        n = sorter.execute(f"""COPY ({mantissas.encoded(f"SELECT * FROM hot_rows ORDER BY {ORDER}")})
            TO '{str(folder / staged).replace("'", "''")}' ({COPY_OPTIONS})""").fetchone()[0]
    if not n:
        (folder / staged).unlink(missing_ok=True)
        return None
    return staged, n


def _scales(con: duckdb.DuckDBPyConnection, rows: str, params: list | None = None) -> None:
    """Register, as SCALES on `con` (a connection of the caller's own), each series' scale in `rows`: an
    Arrow table of one row a series, whose size the planner knows, so a join builds its hash table on it
    and not on the rows (a stream it takes for one row)."""
    con.register(SCALES, con.sql(mantissas.scales(rows), params=params).to_arrow_table())


def adopt(con: duckdb.DuckDBPyConnection, lake: str, staged: str, lo: int, hi: int, rows: int) -> int:
    """In the writer's transaction: make the exported file of the hot samples with lo <= ts < hi part of
    the lake, listed, and delete those rows from the hot table; returns the rows moved. Between the
    export and this, rows are only ever added to the hot table (deletes are the jobs', which run one at a
    time), so the same count means the same rows. Another count (rows of the range arrived meanwhile: a
    backfill, or an agent whose clock is behind by more than the hot window) drops the file and exports
    the range again here, holding the writer: the rare case, and one that always ends. The file is renamed
    into its day's folder before the commit: a crash between leaves it unlisted, for the sweep."""
    folder = Path(lake)
    if con.execute(f"SELECT count(*) FROM {HOT} WHERE ts >= ? AND ts < ?", [lo, hi]).fetchone()[0] != rows:
        (folder / staged).unlink(missing_ok=True)
        out = export(con, lake, lo, hi)
        if out is None:
            return 0
        staged, rows = out
    rel = f"{TABLE}/day={_day(lo)}/{uuid.uuid4().hex}.parquet"
    (folder / rel).parent.mkdir(parents=True, exist_ok=True)
    os.replace(folder / staged, folder / rel)
    try:
        first, last, n = con.execute(f"SELECT min(ts), max(ts), count(*) FROM read_parquet('{folder / rel}')"
                                     ).fetchone()
        if n != rows:
            raise RuntimeError(f"lake file {rel} holds {n} rows where {rows} were written")
        _list(con, folder, rel, _day(lo), rows, first, last)
        con.execute(f"DELETE FROM {HOT} WHERE ts >= ? AND ts < ?", [lo, hi])
        create_views(con, folder)
        return rows
    except BaseException:   # the transaction's rollback keeps the rows hot
        (folder / rel).unlink(missing_ok=True)
        raise


def _list(con: duckdb.DuckDBPyConnection, folder: Path, rel: str, day: str, rows: int, lo: int, hi: int) -> None:
    """A file of this module's layout (MANTISSAS) in the lake's catalog."""
    con.execute("INSERT INTO lake_files (path, tbl, day, rows, bytes, ts_min, ts_max, written, layout) "
                "VALUES (?, ?, ?::DATE, ?, ?, ?, ?, ?, ?)",
                [rel, TABLE, day, rows, os.path.getsize(folder / rel), lo, hi, time.time(), MANTISSAS])


def drop_before(con: duckdb.DuckDBPyConnection, lake: Path, day: str) -> int:
    """Unlist the lake's partitions of days before `day` (YYYY-MM-DD) and re-create the views; the next
    sweep deletes their files. Returns the rows dropped."""
    rows = con.execute("SELECT coalesce(sum(rows), 0) FROM lake_files WHERE day < ?::DATE", [day]).fetchone()[0]
    if rows:
        con.execute("DELETE FROM lake_files WHERE day < ?::DATE", [day])
        create_views(con, lake)
    return rows


def merge(lake: str, files: list[tuple[str, int]], memory_bytes: int = 256 * 2**20, series=None) -> tuple[str, int]:
    """Rewrite `files` (one day's, (relative path, layout)) as one sorted file of this module's layout in
    the staging folder, outside the store (the jobs worker runs this on its own DuckDB: the writer is not
    held while it sorts). `series` (an Arrow table of the store's series: series_id, node, scope, metric)
    gives the ids of files of the first layout, which name their series only; a row whose names it lacks
    keeps a null id. Returns (staged path relative to the lake, rows)."""
    folder = Path(lake)
    staged = f"{STAGING}/{uuid.uuid4().hex}.parquet"
    (folder / STAGING).mkdir(parents=True, exist_ok=True)
    parts = []
    for layout in LAYOUTS:
        paths = [folder / f for f, of in files if of == layout]
        if not paths:
            continue
        source = f"read_parquet({_quoted(paths)}, hive_partitioning = false)"
        if layout == NAMES:
            parts.append(f"""SELECT c.node, c.scope, c.metric, s.series_id, c.ts, c.value FROM {source} c
                LEFT JOIN series_rows s USING (node, scope, metric)""")
        else:
            parts.append(f"SELECT node, scope, metric, series_id, ts, {value_of(layout)} AS value FROM {source}")
    with duckdb.connect(config={"memory_limit": f"{memory_bytes}B", "threads": 1,
                                "temp_directory": str(folder / STAGING / "spill")}) as con:
        if series is not None:   # on the merge's own connection, closed below
            con.register("series_rows", series)
        source = " UNION ALL ".join(parts)
        _scales(con, source)
        rows = con.execute(f"""COPY ({mantissas.encoded(f'SELECT r.*, k.scale FROM ({source}) r LEFT JOIN {SCALES} k '
                                                       f'USING (series_id) ORDER BY {ORDER}')})
            TO '{str(folder / staged).replace("'", "''")}' ({COPY_OPTIONS})""").fetchone()[0]
    return staged, rows


def swap(con: duckdb.DuckDBPyConnection, lake: str, old: list[str], staged: str, rows: int) -> bool:
    """In the writer's transaction: list the merged file `staged` in place of `old`, which must all
    still be listed and hold `rows` together (else the merge is stale: False, and the next sweep takes
    the staged file). The file is renamed into its day's folder before the commit: a crash between
    leaves it unlisted, for the sweep."""
    folder = Path(lake)
    found = con.execute("SELECT count(*), sum(rows), min(day)::VARCHAR, count(DISTINCT day) FROM lake_files "
                        "WHERE list_contains(?, path)", [old]).fetchone()
    if found[0] != len(old) or found[1] != rows or found[3] != 1:
        return False
    rel = f"{TABLE}/day={found[2]}/{uuid.uuid4().hex}.parquet"
    os.replace(folder / staged, folder / rel)
    try:
        lo, hi = con.execute(f"SELECT min(ts), max(ts) FROM read_parquet('{folder / rel}')").fetchone()
        con.execute("DELETE FROM lake_files WHERE list_contains(?, path)", [old])
        _list(con, folder, rel, found[2], rows, lo, hi)
        create_views(con, folder)
        return True
    except BaseException:
        (folder / rel).unlink(missing_ok=True)
        raise
