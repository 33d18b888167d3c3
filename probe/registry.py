"""The daemon's list of probe kits (table probe_kits): register a built kit, list the kits to send.

Offline registration opens the DuckDB file for writing, so the daemon must be stopped (DuckDB
allows one writing process per file); a running daemon's jobs register through ctx.write.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from causewatch.probe.kit import check_manifest, load_manifest


def register_kit(con, manifest: dict, path: str = "") -> None:
    """Insert or replace (app, kit) in probe_kits, the manifest stored whole so agents get it inline."""
    check_manifest(manifest)
    con.execute("DELETE FROM probe_kits WHERE app = ? AND kit = ?", [manifest["app"], manifest["kit"]])
    con.execute("INSERT INTO probe_kits VALUES (?, ?, ?, ?, ?)",
                [manifest["app"], manifest["kit"], path, json.dumps(manifest), time.time()])


def register_kit_file(db: str, kit: str) -> dict:
    """Register the kit folder `kit` in the store `db` (the daemon must not be running)."""
    import duckdb
    from causewatch.daemon.store import migrate

    manifest = load_manifest(kit)
    con = duckdb.connect(db)
    try:
        migrate(con)
        register_kit(con, manifest, str(Path(kit).resolve()))
    finally:
        con.close()
    return manifest


def registered_kits(con) -> list[dict]:
    """Every registered kit as {app, kit, path, manifest}."""
    rows = con.execute("SELECT app, kit, path, manifest FROM probe_kits ORDER BY app, kit").fetchall()
    return [{"app": a, "kit": k, "path": p, "manifest": json.loads(m) if m else None} for a, k, p, m in rows]
