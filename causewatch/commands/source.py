"""Where a data verb reads: a running daemon's HTTP API (`--daemon URL`, the default) or a stopped
daemon's store file (`--db FILE`). Both call the verbs daemon/verbs.py declares, `read(verb, **params)`
and `write(verb, body, **params)`, and give the same answers, so a command answers the same either way.

The daemon stays the only process that holds its DuckDB file; writes (kit registration, a pinned
baseline) go through its API too.
"""

from __future__ import annotations

import json
import sys
import urllib.parse
from pathlib import Path

from causewatch.config import DaemonConfig
from causewatch.daemon import verbs
from causewatch.errors import InputError, NotFoundError

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
    """A stopped daemon's store: each verb's handler (daemon/routes.py) on a read-only cursor of the file."""

    def __init__(self, path: str):
        from causewatch.daemon import readers, routes  # noqa: F401 (routes binds the verbs' handlers)
        self.path = self.where = path
        self.con = readers.shared.open_store(path, need=("ingest_log",))

    def close(self) -> None:
        self.con.close()

    def read(self, verb, **params):
        return verb.call(self.con, **params)

    def write(self, verb, body=None, **params):
        """A write verb on the file, in the writer's transaction (DuckDB allows one writing process)."""
        from causewatch.daemon.store import Store
        self.con.close()   # our read-only handle would block the writer
        store = Store(self.path)
        try:
            with store.cursor() as cur:
                return verb.call(cur, store.run, body, **params)
        finally:
            store.close()


class DaemonSource(_Source):
    """A running daemon, through its HTTP API: JSON for records, Arrow IPC streams for DataFrames (asked
    for with `Accept: verbs.ARROW`; without it the daemon answers a DataFrame in JSON)."""

    def __init__(self, url: str):
        url = url if "://" in url else f"http://{url}"
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InputError(f"--daemon {url!r}: expected http://HOST:PORT")
        self.url = self.where = url.rstrip("/")
        self.cluster: dict | None = None   # a cluster answer's {shards, missing, partial}

    def unreachable(self) -> str | None:
        try:
            self.read(verbs.STATS)
        except InputError as e:
            return str(e)
        return None

    def read(self, verb, **params):
        query = urllib.parse.urlencode(verb.query(**params), doseq=True)
        return self._call(f"{self.url}{verb.path}?{query}", headers={"Accept": f"{verbs.ARROW}, application/json"})

    def write(self, verb, body=None, **params):
        query = urllib.parse.urlencode(verb.query(**params))
        data = json.dumps(body).encode() if body is not None else b""
        return self._call(f"{self.url}{verb.path}?{query}", data=data, method="POST",
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
            if e.code == 404:
                raise NotFoundError(f"{self.url}: {detail}") from None
            raise InputError(f"{self.url}: {detail}" if e.code in (400, 403) else
                             f"{request.full_url}: HTTP {e.code} {str(detail)[:200]}") from None
        except (urllib.error.URLError, OSError) as e:
            raise InputError(f"{self.url}: cannot reach the daemon ({getattr(e, 'reason', e)})") from None
        if ctype == verbs.ARROW:
            df = _df(data)
            self.cluster = df.attrs.pop("cluster", None)
            _say_partial(self.cluster)
            return df
        if ctype != "application/json":
            return verbs.Text(data.decode(), ctype)
        answer = json.loads(data)
        if isinstance(answer, dict) and isinstance(answer.get("cluster"), dict):
            # a daemon with peers answered for the cluster: the answer without the envelope, partial said
            self.cluster = answer.pop("cluster")
            _say_partial(self.cluster)
            if set(answer) == {"records"}:
                answer = answer["records"]
        return answer


def _say_partial(about: dict | None) -> None:
    """The CLI's line for an answer some shards are missing from (on stderr: stdout stays the answer)."""
    if about and about.get("partial"):
        missing = "; ".join(f"{k}: {v}" for k, v in about.get("missing", {}).items())
        print(f"causewatch: PARTIAL answer, shards missing: {missing} (answered: "
              f"{', '.join(about.get('shards', [])) or 'none'})", file=sys.stderr)


def _df(data: bytes):
    """An Arrow IPC stream as the DataFrame it was, `attrs` from the schema metadata (a cluster answer's
    {shards, missing, partial} as attrs["cluster"])."""
    import pyarrow as pa
    table = pa.ipc.open_stream(data).read_all()
    meta = table.schema.metadata or {}
    df = table.to_pandas()
    df.attrs.update(json.loads(meta.get(b"causewatch", b"{}")))
    if b"causewatch_cluster" in meta:
        df.attrs["cluster"] = json.loads(meta[b"causewatch_cluster"])
    return df
