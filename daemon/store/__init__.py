"""The daemon's DuckDB store, by subject: `schema` (migrations, the table list), `frames` (Store, the
ingest writer), `results` (what the analyses write), `retention` (roll-ups and deletions).

Every write and every migration is here; every read is in `causewatch.daemon.readers`.
"""

from causewatch.daemon.store import results, retention, schema
from causewatch.daemon.store.frames import Store
from causewatch.daemon.store.schema import migrate

__all__ = ["Store", "migrate", "results", "retention", "schema"]
