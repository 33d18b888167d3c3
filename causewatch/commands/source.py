"""Where a data verb reads: a running daemon's HTTP API (`--daemon URL`, the default) or a stopped
daemon's store file (`--db FILE`). Both call the verbs daemon/verbs.py declares, `read(verb, **params)`
and `write(verb, body, **params)`, and give the same answers, so a command answers the same either way.

The daemon stays the only process that holds its DuckDB file; writes (kit registration, a pinned
baseline) go through its API too. A daemon that asks for a password or serves HTTPS with its own CA is
reached with a client configuration (--http-config-file, $CAUSEWATCH_HTTP_CONFIG: causewatch/http_client.py).
"""

from __future__ import annotations

import json
import sys
import urllib.parse
from pathlib import Path

from causewatch import defaults
from causewatch.daemon import verbs
from causewatch.errors import InputError, NotFoundError

DEFAULT_DAEMON = f"http://{defaults.HTTP}"


def add_source_arguments(parser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--daemon", metavar="URL", default=DEFAULT_DAEMON,
                       help=f"a running daemon's HTTP API (default {DEFAULT_DAEMON})")
    where.add_argument("--daemons", metavar="URL,URL,...",
                       help="several daemons (shards without peers of their own) answering as one: each asked at "
                            "once, the answers merged, a daemon that did not answer named on a PARTIAL line")
    where.add_argument("--db", metavar="FILE", help="a stopped daemon's DuckDB store instead of the daemon")
    parser.add_argument("--http-config-file", metavar="FILE",
                        help="the daemon's user, password and CA: Prometheus's HTTP client configuration (basic_auth, "
                             "authorization, tls_config), as promtool's --http.config.file "
                             f"(default ${defaults.HTTP_CONFIG_ENV})")


def open_source(args):
    """The store file of --db, else the daemons of --daemons, else the daemon at --daemon (the default
    store file when that daemon does not answer and the file exists next to us); none is a clear error."""
    if getattr(args, "db", None):
        return StoreSource(args.db)
    from causewatch import http_client  # here: it loads the config's YAML reading, which --help needs none of
    client = http_client.load(getattr(args, "http_config_file", None))
    if getattr(args, "daemons", None):
        return ClusterSource(args.daemons.split(","), client=client)
    daemon = DaemonSource(args.daemon, client)
    problem = daemon.unreachable()
    if problem is None:
        return daemon
    if args.daemon == DEFAULT_DAEMON and Path(defaults.DB).is_file():
        return StoreSource(defaults.DB)
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
        """The verb's answer as a daemon's source gives it (JSON written by the route read back)."""
        answer = verb.call(self.con, **params)
        if isinstance(answer, verbs.Text) and answer.ctype == "application/json":
            return json.loads(answer)
        return answer

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


def _daemon_url(url: str, option: str = "--daemon") -> str:
    url = url.strip()
    url = url if "://" in url else f"http://{url}"
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"{option} {url!r}: expected http://HOST:PORT or https://HOST:PORT")
    return url.rstrip("/")


class DaemonSource(_Source):
    """A running daemon, through its HTTP API: JSON for records, Arrow IPC streams for DataFrames (asked
    for with `Accept: verbs.ARROW`; without it the daemon answers a DataFrame in JSON)."""

    def __init__(self, url: str, client=None):
        """`client`: the daemon's credentials, an http_client.HttpClient (None: none)."""
        from causewatch import http_client  # here, as in open_source
        self.url = self.where = _daemon_url(url)
        self.client = client or http_client.HttpClient()
        self.cluster: dict | None = None   # a cluster answer's {shards, missing, partial}

    def unreachable(self) -> str | None:
        """Why nothing listens at the daemon's host and port, or None. A TCP connect, not a verb: asking
        `stats` here counted every table and the samples of every metric, lake included, before each
        command's own request; what the daemon answers, the command's own request tells."""
        import socket  # here, as urllib.request below: a verb's --help needs neither
        parts = urllib.parse.urlsplit(self.url)
        try:
            socket.create_connection((parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)),
                                     timeout=10).close()
        except OSError as e:
            return f"{self.url}: cannot reach the daemon ({e})"
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
        import http.client
        import urllib.error
        import urllib.request

        from causewatch.commands import peer
        request = urllib.request.Request(url, **request)
        for name, value in self.client.headers.items():
            request.add_unredirected_header(name, value)
        try:
            with peer.opener(self.client.context).open(request, timeout=60) as reply:
                data, ctype = reply.read(), reply.headers.get("Content-Type", "")
        except peer.NotHttp as e:
            raise InputError(peer.explain(self.url, e.head, defaults.HTTP)) from None
        except http.client.HTTPException as e:
            raise InputError(f"{self.url}: not an HTTP API's answer ({e!r}); give the daemon's --http address "
                             f"(default {defaults.HTTP})") from None
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace").strip()
            try:
                detail = json.loads(detail)["error"]
            except (ValueError, KeyError, TypeError):
                pass
            if e.code == 404:
                raise NotFoundError(f"{self.url}: {detail}") from None
            if e.code == 401:
                raise InputError(f"{self.url}: {self._refused()}") from None
            raise InputError(f"{self.url}: {detail}" if e.code in (400, 403) else
                             f"{request.full_url}: HTTP {e.code} {str(detail)[:200]}") from None
        except (urllib.error.URLError, OSError) as e:
            raise InputError(f"{self.url}: cannot reach the daemon ({_unreached(getattr(e, 'reason', e))})") from None
        answer, self.cluster = _answer(data, ctype)
        return answer

    def _refused(self) -> str:
        if self.client.has_user:
            return f"the daemon refused the user and password of {self.client.path} (basic_auth)"
        return ("the daemon asks for a user and password: give them in a client configuration, --http-config-file "
                f"FILE or ${defaults.HTTP_CONFIG_ENV} (basic_auth: {{username: NAME, password_file: FILE}})")


class ClusterSource(_Source):
    """Several daemons asked as one, the way a daemon with peers asks its shards (daemon/cluster.py):
    all at once, the answers merged in each verb's order, a daemon that did not answer (down, past the
    timeout, not the verb's kind of answer) named on a PARTIAL line and in `cluster`. A daemon with peers
    of its own already answers for its cluster: beside others its shards would count twice, so its
    answer is refused with the advice to ask it alone."""

    def __init__(self, urls: list[str], timeout: float = 60.0, client=None):
        """`client`: the daemons' credentials, an http_client.HttpClient (None: none)."""
        from causewatch import http_client  # here, as in open_source
        named = {}
        for url in (_daemon_url(u, "--daemons") for u in urls if u.strip()):
            named.setdefault(urllib.parse.urlsplit(url).netloc, url)
        if len(named) < 2:
            raise InputError(f"--daemons {','.join(urls)!r}: give two daemons or more (one: --daemon URL)")
        self.daemons, self.timeout = named, timeout
        self.client = client or http_client.HttpClient()
        self.where = ",".join(named)
        self.cluster: dict | None = None

    def read(self, verb, **params):
        return self._ask("GET", verb, verb.query(**params), b"")

    def write(self, verb, body=None, **params):
        if verb.merge.kind != "fanned":
            raise InputError(f"{verb.path}: a write to one daemon; give it alone with --daemon URL")
        return self._ask("POST", verb, verb.query(**params), json.dumps(body).encode() if body is not None else b"")

    def _ask(self, method: str, verb, params: dict, raw: bytes):
        from causewatch.daemon import cluster
        if verb.merge.kind == "local":
            raise InputError(f"{verb.path}: {verb.merge.reason}; give one daemon with --daemon URL")
        replies = cluster.ask_all(self.daemons, method, verb.path, cluster.asked(verb, params), raw,
                                  f"{verbs.ARROW}, application/json",
                                  "", None, self.timeout, client=self.client)
        for r in replies:
            if r.shards:
                raise InputError(f"{self.daemons[r.shard]} answers for a cluster of its own (shards {r.shards}); "
                                 "ask it alone with --daemon URL")
        code, data, ctype, _ = cluster.merge(verb, params, replies, verbs.ARROW)
        if code == 200:
            answer, self.cluster = _answer(data, ctype)
            return answer
        try:
            body = json.loads(data)
            missing = body.get("cluster", {}).get("missing", {})
            detail = body["error"] + "".join(f"; {k}: {v}" for k, v in missing.items())
        except (ValueError, KeyError, TypeError, AttributeError):
            detail = f"HTTP {code} {data[:200].decode(errors='replace')}"
        raise (NotFoundError if code == 404 else InputError)(f"{self.where}: {detail}")


def _unreached(reason) -> str:
    """Why a daemon was not reached, with what to do about a TLS failure (ssl is loaded by then: urllib's)."""
    import ssl
    if isinstance(reason, ssl.SSLCertVerificationError):
        return (f"{reason.verify_message or reason}: its certificate is not trusted here; give its CA as tls_config: "
                f"{{ca_file: FILE}} in --http-config-file or ${defaults.HTTP_CONFIG_ENV}")
    if isinstance(reason, ssl.SSLError) and reason.reason == "WRONG_VERSION_NUMBER":
        return f"{reason}: the daemon does not speak HTTPS there: give http://"
    return str(reason)


def _answer(data: bytes, ctype: str) -> tuple[object, dict | None]:
    """A daemon's answer as the verb's value (DataFrame, records, Text), and a cluster answer's
    {shards, missing, partial} (None from a lone daemon); a partial answer is said on stderr."""
    about = None
    if ctype == verbs.ARROW:
        answer = _df(data)
        about = answer.attrs.pop("cluster", None)
    elif ctype != "application/json":
        return verbs.Text(data.decode(), ctype), None
    else:
        answer = json.loads(data)
        if isinstance(answer, dict) and isinstance(answer.get("cluster"), dict):
            # an answer for a cluster: the answer without the envelope
            about = answer.pop("cluster")
            if set(answer) == {"records"}:
                answer = answer["records"]
    _say_partial(about)
    return answer, about


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
