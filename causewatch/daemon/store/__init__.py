"""The daemon's DuckDB store, by subject: `schema` (migrations, the table list), `views` (the outward
tables over the base ones, hot and cold as one), `frames` (Store, the ingest writer), `results` (what
the analyses write), `retention` (roll-ups and deletions), `lake` (the cold Parquet half), `mantissas`
(its values as decimal mantissas), `space` (the file's free end given back).

Every write and every migration is here; every read is in `causewatch.daemon.readers`.
"""

from causewatch.daemon.store import lake, mantissas, results, retention, schema, space, views
from causewatch.daemon.store.frames import Store
from causewatch.daemon.store.schema import migrate
from causewatch.daemon.store.views import create_views

__all__ = ["Store", "create_views", "lake", "mantissas", "migrate", "results", "retention", "schema", "space",
           "views"]
