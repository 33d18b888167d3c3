"""Where a data verb reads: a running daemon's HTTP API (`--daemon URL`, the default) or a stopped
daemon's store file (`--db FILE`). Both give the same frames, so a verb answers the same either way.

The daemon stays the only process that holds its DuckDB file; writes (kit registration, a pinned
baseline) go through its API too.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from pathlib import Path

from causewatch.config import DaemonConfig
from causewatch.errors import InputError

DEFAULT_DAEMON = f"http://{DaemonConfig.http}"


def add_source_arguments(parser) -> None:
    parser.add_argument("--daemon", metavar="URL", default=DEFAULT_DAEMON,
                        help=f"a running daemon's HTTP API (default {DEFAULT_DAEMON})")
    parser.add_argument("--db", metavar="FILE", help="a stopped daemon's DuckDB store instead of the daemon")


def open_source(args):
    """The store file of --db, else the daemon at --daemon (the default store file when that daemon
    does not answer and the file exists next to us); neither is a clear error."""
    if getattr(args, "db", None):
        return StoreSource(args.db)
    daemon = DaemonSource(args.daemon)
    problem = daemon.unreachable()
    if problem is None:
        return daemon
    if args.daemon == DEFAULT_DAEMON and Path(DaemonConfig.db).is_file():
        return StoreSource(DaemonConfig.db)
    raise InputError(f"cannot reach the daemon at {daemon.url} ({problem}); start it, give --daemon URL, "
                     "or read a stopped daemon's store with --db FILE")


class _Source:
    """Closed on leaving a `with` block; `where` names it in messages."""
    where = ""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        pass


class StoreSource(_Source):
    """A stopped daemon's store, read-only through daemon.readers."""

    def __init__(self, path: str):
        from causewatch.daemon import readers
        self.path, self.where, self.readers = path, path, readers
        self.con = readers.shared.open_store(path, need=("ingest_log",))

    def close(self) -> None:
        self.con.close()

    def regions(self, since=None, nodes=None, metrics=None):
        return self.readers.regions.region_summaries(self.con, since, nodes=nodes, metrics=metrics)

    def tasks(self, app=None):
        return self.readers.tasks.task_frame(self.con, app)

    def samples(self, metrics=None, scope=None):
        return self.readers.samples.samples_frame(self.con, metrics, scope)

    def bbv_targets(self):
        return self.readers.phases.bbv_targets(self.con)

    def bbv_rows(self, target, kind):
        return self.readers.phases.bbv_rows(self.con, target, kind)

    def rank(self, app):
        from causewatch.probe.rank import rank_nodes
        probes = self.readers.probes
        return rank_nodes(app, probes.latest_probes(self.con, app), probes.registered_kits(self.con), time.time())

    def nodes(self):
        return self.readers.report.nodes(self.con)

    def models(self, scope=None):
        return self.readers.models.models(self.con, scope)

    def model(self, scope=None, model_id=None) -> dict:
        return self.readers.models.model_record(self.con, scope, model_id)

    def anomalies(self, scope=None, open_only=False, limit=200):
        return self.readers.models.anomalies(self.con, scope, open_only, limit)

    def register_kit(self, row: dict) -> None:
        from causewatch.daemon.store.results import register_kit_file
        self.con.close()   # our read-only handle would block the writer
        register_kit_file(self.path, row)

    def pin_baseline(self, scope: str, model_id: int) -> None:
        import duckdb

        from causewatch.daemon.store.results import set_baseline
        if self.readers.models.model_graph(self.con, scope, model_id) is None:
            raise InputError(f"scope {scope!r} has no model {model_id}")
        self.con.close()
        with duckdb.connect(self.path) as con:
            set_baseline(con, scope, model_id, "pinned", time.time())


class DaemonSource(_Source):
    """A running daemon, through its HTTP API: JSON for records, Arrow IPC streams for frames."""

    def __init__(self, url: str):
        url = url if "://" in url else f"http://{url}"
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InputError(f"--daemon {url!r}: expected http://HOST:PORT")
        self.url = self.where = url.rstrip("/")

    def unreachable(self) -> str | None:
        try:
            self._get("/api/stats", {})
        except InputError as e:
            return str(e)
        return None

    def _get(self, path: str, params: dict):
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None}, doseq=True)
        return self._call(f"{self.url}{path}?{query}")

    def _post(self, path: str, params: dict, body=None):
        query = urllib.parse.urlencode(params)
        data = json.dumps(body).encode() if body is not None else b""
        return self._call(f"{self.url}{path}?{query}", data=data, method="POST",
                          headers={"Content-Type": "application/json"})

    def _call(self, url: str, **request):
        # imported here: urllib.request (http.client, email) is a third of every data verb's start-up,
        # `--help` included, and only talking to a daemon needs it
        import urllib.error
        import urllib.request
        request = urllib.request.Request(url, **request)
        try:
            with urllib.request.urlopen(request, timeout=60) as reply:
                data, ctype = reply.read(), reply.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")
            try:
                detail = json.loads(detail)["error"]
            except (ValueError, KeyError, TypeError):
                pass
            raise InputError(f"{self.url}: {detail}" if e.code in (400, 403) else
                             f"{request.full_url}: HTTP {e.code} {str(detail)[:200]}") from None
        except (urllib.error.URLError, OSError) as e:
            raise InputError(f"{self.url}: cannot reach the daemon ({getattr(e, 'reason', e)})") from None
        return _frame(data) if ctype.startswith("application/vnd.apache.arrow") else json.loads(data)

    @staticmethod
    def _last(since):
        return None if since is None else max(time.time() - since, 0.0)

    def regions(self, since=None, nodes=None, metrics=None):
        return self._get("/api/regions", {"last": self._last(since), "node": nodes,
                                          "metric": None if metrics is None else sorted(metrics)})

    def tasks(self, app=None):
        frame = self._get("/api/tasks", {"app": app})
        return frame, frame.attrs.get("params", {}), frame.attrs.get("counters", {})

    def samples(self, metrics=None, scope=None):
        return self._get("/api/samples", {"metric": metrics, "scope": scope})

    def bbv_targets(self):
        return self._get("/api/bbv-targets", {})

    def bbv_rows(self, target, kind):
        return self._get("/api/bbv", {"target": target, "kind": kind})

    def rank(self, app):
        return self._get("/api/rank", {"app": app})["nodes"]

    def nodes(self):
        return self._get("/api/nodes", {})

    def models(self, scope=None):
        return self._get("/api/models", {"scope": scope})

    def model(self, scope=None, model_id=None) -> dict:
        return self._get("/api/model", {"scope": scope, "model_id": model_id})

    def anomalies(self, scope=None, open_only=False, limit=200):
        return self._get("/api/anomalies", {"scope": scope, "open": int(open_only), "limit": limit})

    def register_kit(self, row: dict) -> None:
        self._post("/api/kits", {}, {"manifest": json.loads(row["manifest"]), "path": row["path"]})

    def pin_baseline(self, scope: str, model_id: int) -> None:
        self._post("/api/baseline", {"scope": scope, "model_id": model_id})


def _frame(data: bytes):
    """An Arrow IPC stream as the DataFrame it was, `attrs` from the schema metadata."""
    import pyarrow as pa
    table = pa.ipc.open_stream(data).read_all()
    frame = table.to_pandas()
    frame.attrs.update(json.loads((table.schema.metadata or {}).get(b"causewatch", b"{}")))
    return frame
