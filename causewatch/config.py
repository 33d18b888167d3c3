"""Typed configuration for the daemon and the agent, read from TOML once at start.

Unknown keys, wrong types, values out of range and malformed endpoints raise ConfigError naming the key
and the file line (or flag); the rest of the code receives these dataclasses, never raw dicts. The
Prometheus-format YAML files (a web configuration, an HTTP client's) are read by `read_yaml` and
checked a mapping at a time by `YamlSection`, with the same errors.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import socket
import tomllib
import urllib.parse
from pathlib import Path

from causewatch import defaults, shards
from causewatch.errors import ConfigError

DEFAULT_ENDPOINT = "tcp://127.0.0.1:5555"


def _limit(default, lo, hi, *, check: str | None = None):
    """A field whose value must lie in [lo, hi] (None: unbounded); `check` names an extra format check."""
    return dataclasses.field(default=default, metadata={"range": (lo, hi), "check": check})


def _fmt(default, check: str):
    return dataclasses.field(default=default, metadata={"check": check})


def default_spool() -> str:
    """Where an agent's frames wait for the daemon's ack unless configured: under a systemd unit's
    StateDirectory= (systemd names it in $STATE_DIRECTORY: unacked frames are state, which a cache is not
    promised to keep), else the user's XDG cache ($XDG_CACHE_HOME, absolute, or ~/.cache)."""
    state = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
    if os.path.isabs(state):
        return os.path.join(state, "spool")
    cache = os.environ.get("XDG_CACHE_HOME", "")
    return os.path.join(cache if os.path.isabs(cache) else "~/.cache", "causewatch", "spool")


@dataclasses.dataclass
class DaemonConfig:
    db: str = defaults.DB
    bind: str = _fmt(DEFAULT_ENDPOINT, "endpoint")
    keys: str | None = None           # folder with server.key_secret and authorized/ (agent public keys)
    insecure: bool = False            # allow a non-loopback bind without CURVE keys
    http: str = _fmt(defaults.HTTP, "http")   # /metrics and /api/*; "" turns it off
    # TLS and basic authentication for `http`: exporter-toolkit's web.yml, as node_exporter's (daemon/webconfig.py)
    web_config_file: str | None = _fmt(None, "file")
    api_token: str = ""               # bearer token for POST /api/* from other hosts (loopback needs none)
    max_frame_bytes: int = _limit(8 * 1024 * 1024, 1024, 2**31 - 1)
    # A transaction of the writer holds at most batch_max_frames frames and batch_max_bytes of them (the
    # first frame whatever its size): agent-sized frames (5 x 50 values) cost a third less store CPU a
    # value in batches of 1,024 than of 256; the bytes keep a batch of large frames near 256 x 80 KB.
    batch_max_frames: int = _limit(1024, 1, 100_000)
    batch_max_bytes: int = _limit(20 * 2**20, 2**10, 2**34)
    # Group commit: while frames of several agents arrive, the writer gathers them for up to this many
    # seconds after its last commit (a commit's fixed cost is most of a small frame's); one agent's
    # frames alone, a call, a full batch, or frames that stopped coming (agents waiting for their acks)
    # commit at once. 0 commits whatever is queued.
    commit_delay: float = _limit(1.0, 0.0, 10.0)
    # bytes of received frames waiting for the writer; when full the daemon stops reading and the
    # agents' credit runs out, so they wait (nothing is dropped)
    max_queue_bytes: int = _limit(64 * 2**20, 2**20, 2**40)
    # bytes the agents may have sent and not had acked, all together (daemon/credit.py): shared among the
    # connected agents as credit grants, at least one frame each, so ZeroMQ's buffers are bounded
    max_in_flight_bytes: int = _limit(64 * 2**20, 2**20, 2**40)
    # DuckDB's buffer pool (memory_limit): inserted rows stay cached up to it, so without a bound the
    # daemon's RSS grows with the table (~10 MB per million sample values); beyond it DuckDB evicts or spills
    store_memory_bytes: int = _limit(128 * 2**20, 64 * 2**20, 2**44)
    # The Parquet lake (daemon/store/lake.py): samples older than store_hot_seconds move there from DuckDB,
    # checked every compaction_interval (so a backfill's old rows go within minutes); 0 keeps all hot.
    # "" puts the lake beside the DuckDB file (x.duckdb -> x.lake/), so a store is one folder to move.
    store_lake: str = _fmt("", "lake")
    store_hot_seconds: float = _limit(3600.0, 0.0, 3650 * 86400.0)
    compaction_interval: float = _limit(120.0, 1.0, 86400.0)
    fuzzy_terms: str | None = _fmt(None, "file")      # TOML term sets for bottleneck scoring (default: shipped)
    fuzzy_interval: float = _limit(30.0, 1.0, 86400.0)   # seconds between the fuzzy job's scorings
    reprobe_after: float = _limit(86400.0, 0.0, None)  # seconds before a node's probe result is re-taken; 0: never
    # The causal job (daemon/job_causal.py): how often it learns, from how many new task rows at least,
    # in how many evaluations in a row a departure must be found before it is raised as an anomaly,
    # from how many rows a model must be learnt to become the first-stable baseline, and after how many
    # causal_intervals without a task an app's open anomalies resolve (a finished program pages no one).
    causal_interval: float = _limit(60.0, 1.0, 86400.0)
    causal_min_new: int = _limit(20, 1, 100_000)
    causal_confirm: int = _limit(2, 1, 100)
    causal_baseline_rows: int = _limit(200, 1, 1_000_000)
    causal_quiet_intervals: int = _limit(3, 1, 10_000)
    # The jobs worker's niceness (daemon/worker.py); 19, the default, also means SCHED_IDLE: analyses
    # then take only CPU time nothing else wants, so on a machine whose cores are kept busy they wait.
    analysis_nice: int = _limit(19, 0, 19)
    # Seconds the jobs worker may be paused at a stretch while frames wait for the writer (then it
    # runs a quarter of that); 0 never pauses it. Even at SCHED_IDLE its cache and memory traffic slow ingest.
    analysis_pause_max: float = _limit(2.0, 0.0, 3600.0)
    # Seconds an analysis may run at analysis_nice before the jobs worker is raised to analysis_starved_nice
    # (SCHED_OTHER) until it ends, or the job's own interval where shorter (its next run is due); 0 never:
    # at SCHED_IDLE it gets no CPU while every core is busy, and contention is when a model must be learnt.
    # Needs CAP_SYS_NICE or LimitNICE=+10 (the unit's).
    analysis_starved_seconds: float = _limit(20.0, 0.0, 3600.0)
    analysis_starved_nice: int = _limit(10, 0, 19)
    # Seconds without an /api/ request after which the API worker ends (its memory back; the next request
    # forks a new one from the fork server, which holds the libraries, in milliseconds: docs/memory.md).
    api_idle_seconds: float = _limit(60.0, 1.0, 86400.0)
    # A dask.distributed scheduler (tcp://HOST:8786) to run the analyses' heavy work on (the causal
    # learns: daemon/compute.py); "" runs it in the jobs worker, as without a cluster.
    analysis_scheduler: str = _fmt("", "scheduler")
    # Debugging: the jobs run on the scheduler's thread in this process (no jobs worker, no fork server),
    # so a debugger steps from the scheduler to the anomaly row; the analysis stack then loads here.
    jobs_here: bool = False
    # Retention (daemon/job_retention.py), in days; 0 keeps a table forever.
    retain_samples_days: float = _limit(14.0, 0.0, 36500.0)          # raw samples
    retain_bbv_days: float = _limit(14.0, 0.0, 36500.0)              # phase vectors
    retain_samples_minute_days: float = _limit(400.0, 0.0, 36500.0)  # per-minute aggregates of samples
    retain_units_days: float = _limit(400.0, 0.0, 36500.0)   # finished units' rows (a job's summary), from their end
    retention_export: str = _fmt("", "folder")   # Parquet copies of deleted rows go here first ("" = none)
    retention_interval: float = _limit(300.0, 1.0, 86400.0)          # seconds between retention runs
    # Shards (docs/shards.md): this daemon's name ("" = a lone daemon, today's layout); its lake files then
    # go under STORE_LAKE/shard=NAME/. `peers`: the other shards' HTTP APIs, "NAME=http://HOST:PORT", which
    # it fans every /api/ read out to (with api_token), each given peer_timeout seconds to answer.
    shard: str = _fmt("", "shard")
    peers: tuple = _fmt((), "peers")
    peer_timeout: float = _limit(10.0, 0.1, 600.0)

    def __post_init__(self):
        # The aggregates stand in for the raw rows once those are gone: they must outlive them.
        raw, minute = self.retain_samples_days, self.retain_samples_minute_days
        if minute and (raw == 0 or minute < raw):
            raise ConfigError("retain_samples_minute_days", f"{minute!r} is shorter than retain_samples_days "
                              f"({raw!r}, 0 = forever): keep the per-minute aggregates at least as long")
        units = self.retain_units_days   # a finished job's summary outlives its samples
        if units and (raw == 0 or units < raw):
            raise ConfigError("retain_units_days", f"{units!r} is shorter than retain_samples_days ({raw!r}, 0 = "
                              "forever): keep a finished unit's summary at least as long as its samples")
        if self.peers and (not self.shard or self.shard in self.peer_urls()):
            raise ConfigError("peers", "give this daemon its own shard name (shard = NAME), one not among its peers")

    def peer_urls(self) -> dict[str, str]:
        """{shard name: HTTP API URL} of the peers (checked at load)."""
        return shards.parse_members(self.peers)

    def members(self) -> list[str]:
        """Every shard of the site as this daemon knows it: itself and its peers ([] for a lone daemon)."""
        return sorted({self.shard, *self.peer_urls()} - {""})


# Seconds between runs of each node collector (causewatch/agent/node/) unless `collector_intervals` says
# otherwise: each second only what changes each second and is read cheaply (docs/agent.md, "Node collectors").
NODE_COLLECTOR_INTERVALS = {
    "stat": 1.0, "loadavg": 1.0, "meminfo": 1.0, "vmstat": 1.0, "pressure": 1.0, "diskstats": 1.0, "netdev": 1.0,
    "filefd": 10.0, "entropy": 10.0, "filesystem": 10.0, "netclass": 10.0, "softnet": 10.0, "netstat": 10.0,
    "sockstat": 10.0, "arp": 10.0, "udp_queues": 10.0, "conntrack": 10.0, "cpufreq": 10.0, "time": 10.0,
    "timex": 10.0, "uname": 60.0, "os": 60.0, "selinux": 60.0, "nvml": 10.0,
    "textfile": 10.0}
MAX_COLLECTOR_INTERVAL = 86400.0


@dataclasses.dataclass
class AgentConfig:
    daemon: str = _fmt(DEFAULT_ENDPOINT, "endpoint")
    node: str = dataclasses.field(default_factory=socket.gethostname)
    spool: str = dataclasses.field(default_factory=default_spool)
    spool_max_bytes: int = _limit(256 * 1024 * 1024, 1024 * 1024, None)
    # frames in flight without an ack, at most (credit: fewer): a round trip carries at most this many, and
    # under load a round trip takes a daemon's thread wakes, so a small window caps the acks a second
    window: int = _limit(256, 1, 10_000)
    server_key: str | None = None     # daemon public key file (CURVE)
    client_key: str | None = None     # this agent's secret key file (CURVE)
    psutil_interval: float = _limit(1.0, 0.01, 3600.0)
    counters_interval: float = _limit(0.1, 0.001, 3600.0)
    bbv_frequency: int = _limit(1000, 0, 100_000)     # IP samples per second per CPU; 0 turns phase sampling off
    # the same of each job with a cgroup (0: none): lower, as a node runs many jobs and each sample costs the agent
    job_bbv_frequency: int = _limit(100, 0, 100_000)
    ipc: str = _fmt("ipc:///tmp/causewatch-agent.sock", "endpoint")
    # seconds without a handshake (from the start, or since a disconnect) before the sender warns, once,
    # that the daemon does not answer: longer than a daemon's restart takes, short enough to be seen
    answer_timeout: float = _limit(5.0, 0.1, 3600.0)
    # seconds a stopping agent (SIGTERM, or its launched command ended) waits for the daemon's acks of what
    # it has sent; what is still unacked then stays in the spool and goes first at the next start
    stop_drain_seconds: float = _limit(10.0, 1.0, 3600.0)
    # A sharded site's daemons, "NAME=tcp://HOST:PORT": the agent sends to the one its node hashes to
    # (causewatch/shards.py), in place of `daemon`; never to another while that one is down.
    daemons: tuple = _fmt((), "daemons")
    # A probe waits (at most probe_idle_wait s) until other processes use at most probe_max_other_cpu of the
    # machine's CPU, as a launched program's busy start would make the node look slower than it is; it
    # runs anyway after the wait, and its result says whether the node was busy (docs/probes.md).
    probe_idle_wait: float = _limit(60.0, 0.0, 86400.0)
    probe_max_other_cpu: float = _limit(0.25, 0.0, 1.0)
    # The node's units (jobs, services, containers: agent/unitwatch.py), followed without being told, found
    # under cgroup_root ("" = where cgroup v2 is mounted) every psutil_interval; false follows none.
    units: bool = True
    cgroup_root: str = ""
    # {node collector: seconds between its runs, 0 = off} ([agent.collector_intervals]); the rest keep
    # NODE_COLLECTOR_INTERVALS'. They run on the psutil_interval tick, so none more often than that.
    collector_intervals: dict = dataclasses.field(default_factory=dict)
    # node_exporter's --collector.textfile.directory: the textfile collector reads its *.prom files; None = off
    textfile_directory: str | None = None

    def __post_init__(self):
        for name, seconds in self.collector_intervals.items():
            problem = collector_interval_problem(name, seconds, self.psutil_interval)
            if problem:
                raise ConfigError(f"collector_intervals.{name}", problem)
        given = {name: float(seconds) for name, seconds in self.collector_intervals.items()}
        self.collector_intervals = {**NODE_COLLECTOR_INTERVALS, **given}


def collector_interval_problem(name, seconds, tick: float) -> str | None:
    """Why `seconds` is no interval for node collector `name` on a `tick`-second loop, or None."""
    if name not in NODE_COLLECTOR_INTERVALS:
        return f"no node collector of that name (known: {', '.join(sorted(NODE_COLLECTOR_INTERVALS))})"
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return f"expected seconds (a number; 0 turns it off), got {type(seconds).__name__} {seconds!r}"
    if seconds != 0 and not tick <= seconds <= MAX_COLLECTOR_INTERVAL:
        return (f"{seconds!r} s is out of range: give 0 (off) or from psutil_interval ({tick:g} s, the tick node "
                f"collectors run on) to {MAX_COLLECTOR_INTERVAL:g} s")
    return None


@dataclasses.dataclass
class SlurmConfig:
    """`causewatch broker slurm`'s [slurm] table: Slurm's name for each causewatch node whose name differs
    there, how many of the best nodes carry the app's feature, and when a probe result is too old to rank."""
    nodes: dict = dataclasses.field(default_factory=dict)
    best: int = _limit(1, 1, 10_000)
    max_age: float = _limit(2 * 86400.0, 0.0, None)

    def __post_init__(self):
        bad = {k: v for k, v in self.nodes.items() if not isinstance(v, str) or not v}
        if bad:
            raise ConfigError("nodes", f"expected causewatch node = \"slurm node name\", got {bad!r}")


def _check(cls, raw: dict, where: dict[str, str]):
    fields = {f.name: f for f in dataclasses.fields(cls)}
    out = {}
    for key, value in raw.items():
        at = where.get(key, where.get("", ""))
        if key not in fields:
            raise ConfigError(key, f"unknown setting (known: {', '.join(sorted(fields))})", at)
        default = fields[key].default
        if default is dataclasses.MISSING and fields[key].default_factory is not dataclasses.MISSING:
            default = fields[key].default_factory()
        expected = type(default) if default not in (None, dataclasses.MISSING) else str
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if expected is tuple and isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = tuple(value)   # a TOML list of strings (the only lists settings take)
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise ConfigError(key, f"expected {expected.__name__}, got {type(value).__name__} {value!r}", at)
        lo, hi = fields[key].metadata.get("range", (None, None))
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            span = f"at least {lo}" if hi is None else f"between {lo} and {hi}"
            raise ConfigError(key, f"{value!r} is out of range: give a value {span}", at)
        problem = CHECKS[fields[key].metadata["check"]](value) if fields[key].metadata.get("check") else None
        if problem:
            raise ConfigError(key, problem, at)
        out[key] = value
    try:
        return cls(**out)
    except ConfigError as e:   # a check across settings (__post_init__): say where the key came from
        at = where.get(e.key) or where.get(e.key.partition(".")[0]) or where.get("", "")   # TABLE.KEY: its table's line
        raise ConfigError(e.key, e.reason, at) from None


def _port(text: str, what: str) -> str | None:
    if text in ("*", "0") and what == "endpoint":
        return None       # ZeroMQ's "any free port": the daemon prints the one it got
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        extra = " (or * for any free port)" if what == "endpoint" else ""
        return f"port {text!r} is not a number from 1 to 65535{extra}"
    return None


def endpoint_problem(endpoint: str) -> str | None:
    """Why `endpoint` is not a usable ZeroMQ endpoint (tcp://HOST:PORT, ipc://PATH, inproc://NAME), or None."""
    scheme, sep, rest = endpoint.partition("://")
    if not sep or scheme not in ("tcp", "ipc", "inproc") or not rest:
        return f"{endpoint!r} is not an endpoint: write tcp://HOST:PORT or ipc:///PATH"
    if scheme != "tcp":
        return None
    host, colon, port = rest.rpartition(":")
    if not colon or not host:
        return f"{endpoint!r} lacks a port: write tcp://HOST:PORT"
    bad = _port(port, "endpoint")
    return f"{endpoint!r}: {bad}" if bad else None


def http_problem(address: str) -> str | None:
    """Why `address` is not HOST:PORT for the HTTP server ("" turns it off), or None."""
    if address == "":
        return None
    host, colon, port = address.rpartition(":")
    if not colon:
        return f"{address!r} is not HOST:PORT (e.g. 127.0.0.1:9464; \"\" turns HTTP off)"
    bad = _port(port, "http")
    return f"{address!r}: {bad}" if bad else None


def scheduler_problem(address: str) -> str | None:
    """Why `address` is not a Dask scheduler's tcp:// or tls:// address ("" = none), or None."""
    scheme, sep, rest = address.partition("://")
    host, colon, port = rest.rpartition(":")
    if address == "" or (sep and scheme in ("tcp", "tls") and colon and host and not _port(port, "http")):
        return None
    return f"{address!r} is not a Dask scheduler address: write tcp://HOST:PORT (e.g. tcp://scheduler:8786), " \
           "or \"\" to learn in the daemon's jobs worker"


def file_problem(path: str | None) -> str | None:
    if path is None or os.access(os.path.expanduser(path), os.R_OK):
        return None
    return f"{path}: no such readable file (fix the path, or remove the line to use the defaults)"


def folder_problem(path: str) -> str | None:
    folder = os.path.expanduser(path)
    if path == "" or (os.path.isdir(folder) and os.access(folder, os.W_OK)):
        return None
    return f"{path}: no such writable folder (create it, or remove the line to export nothing)"


def lake_problem(path: str) -> str | None:
    """A lake folder need not exist yet (the first move makes it), but it must be possible to make."""
    if "\0" in path:
        return f"{path!r}: a path cannot hold a NUL character"
    folder = Path(os.path.expanduser(path))
    parent = next((p for p in (folder, *folder.parents) if p.exists()), None) if path else None
    if path == "" or (parent is not None and parent.is_dir() and os.access(parent, os.W_OK)):
        return None
    return f"{path}: cannot be made (the nearest existing folder above it is not a writable folder)"


def shard_problem(name: str) -> str | None:
    return shards.name_problem(name) if name else None


def _members_problem(entries: tuple, address_problem) -> str | None:
    try:
        shards.parse_members(entries, address_problem)
    except ValueError as e:
        return str(e)
    return None


def peers_problem(entries: tuple) -> str | None:
    def url(address: str) -> str | None:
        parts = urllib.parse.urlsplit(address)
        return None if parts.scheme in ("http", "https") and parts.hostname else "expected http://HOST:PORT"
    return _members_problem(entries, url)


def daemons_problem(entries: tuple) -> str | None:
    return _members_problem(entries, endpoint_problem)


CHECKS = {"endpoint": endpoint_problem, "http": http_problem, "file": file_problem, "folder": folder_problem,
          "lake": lake_problem, "shard": shard_problem, "peers": peers_problem, "daemons": daemons_problem,
          "scheduler": scheduler_problem}


def _lines(text: str, section: str | None) -> dict[str, int]:
    """Line number of each `key =` in the file (inside [section] when it has one), to name it in errors."""
    out: dict[str, int] = {}
    current = None
    for n, line in enumerate(text.splitlines(), 1):
        head = re.match(r"\s*\[([^\]]+)\]", line)
        if head:
            current = head.group(1).strip()
            continue
        m = re.match(r"\s*([A-Za-z0-9_-]+)\s*=", line)
        # a table inside the section ([agent.collector_intervals]) names its keys as TABLE.KEY
        inner = current[len(section) + 1:] if current and section and current.startswith(f"{section}.") else None
        key = f"{inner}.{m.group(1)}" if m and inner else m and m.group(1)
        if key and (current is None or current == section or inner) and key not in out:
            out[key] = n
    return out


def load(cls, path: str | Path | None = None, section: str | None = None, **overrides):
    """Read `cls` from TOML file `path` (optionally from table `section`), then apply non-None overrides."""
    raw: dict = {}
    where = {"": str(path) if path else "defaults"}
    if path:
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise ConfigError("config", f"cannot read: {e.strerror}", str(path)) from e
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError("config", f"not valid TOML ({e})", str(path)) from e
        if section:
            raw = raw.get(section, raw)
        where.update({k: f"{path}:{n}" for k, n in _lines(text, section).items()})
    for key, value in overrides.items():
        if value is not None:
            raw[key.replace("-", "_")] = value
            where[key.replace("-", "_")] = f"--{key.replace('_', '-')}"
    return _check(cls, raw, where)


def is_loopback(endpoint: str) -> bool:
    """True when a tcp:// endpoint binds only loopback; ipc:// and inproc:// count as local."""
    url = urllib.parse.urlsplit(endpoint)
    if url.scheme in ("ipc", "inproc"):
        return True
    host = url.hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_yaml(path: str) -> tuple[dict, dict[str, int]]:
    """A YAML file's top mapping (an empty file: {}), and the line of each key by its dotted path
    (`tls_server_config.cert_file`), to name it in errors."""
    import yaml  # only a daemon or a client given such a file parses YAML
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError("config", f"cannot read: {e.strerror}", path) from e
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        values = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError("config", f"not valid YAML ({' '.join(str(e).split())})", path) from None
    if values is not None and not isinstance(values, dict):
        raise ConfigError("config", f"expected a mapping of settings, got {type(values).__name__}", path)
    lines: dict[str, int] = {}

    def walk(node, prefix: str) -> None:
        for key, value in node.value if isinstance(node, yaml.MappingNode) else ():
            lines.setdefault(f"{prefix}{key.value}", key.start_mark.line + 1)
            walk(value, f"{prefix}{key.value}.")
    walk(node, "")
    return values or {}, lines


YAML_TYPES = {str: "a string", bool: "true or false", int: "an integer", list: "a list of strings",
              dict: "a mapping"}


class YamlSection:
    """One mapping of a file `read_yaml` read (`prefix`: its dotted path), checked against the keys it
    may hold; every error names the file, the line and the key's dotted path."""

    def __init__(self, path: str, values: dict, lines: dict[str, int], prefix: str = ""):
        self.path, self.values, self.lines, self.prefix = path, values, lines, prefix

    def error(self, key: str, reason: str) -> ConfigError:
        name = f"{self.prefix}{key}"
        line = self.lines.get(name) or self.lines.get(self.prefix.rstrip("."))
        return ConfigError(name, reason, f"{self.path}:{line}" if line else self.path)

    def check(self, types: dict[str, type]) -> dict:
        """Each known key's value (None when absent or empty); an unknown key or a value not of its
        type (YAML_TYPES) is a ConfigError."""
        for key, value in self.values.items():
            if key not in types:
                raise self.error(str(key), f"unknown key (known here: {', '.join(sorted(types))})")
            kind = types[key]
            good = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
            if value is not None and (not good or (kind is list and not all(isinstance(v, str) for v in value))):
                raise self.error(key, f"expected {YAML_TYPES[kind]}, got {type(value).__name__} {value!r}")
        return {key: self.values.get(key) for key in types}

    def section(self, key: str) -> "YamlSection":
        """The mapping under `key` (checked by `check` as a dict; absent: an empty one)."""
        return YamlSection(self.path, self.values.get(key) or {}, self.lines, f"{self.prefix}{key}.")

    def file(self, key: str) -> str | None:
        """The readable file `key` names, relative to the file's folder as exporter-toolkit and Prometheus
        resolve it (None when absent)."""
        value = self.values.get(key)
        if value is None:
            return None
        path = os.path.join(os.path.dirname(self.path), os.path.expanduser(value))
        if not os.access(path, os.R_OK) or os.path.isdir(path):
            raise self.error(key, f"{value}: no such readable file")
        return path
