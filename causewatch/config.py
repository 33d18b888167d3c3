"""Typed configuration for the daemon and the agent, read from TOML once at start.

Unknown keys and wrong types raise ConfigError naming the key and the file; the rest of the code
receives these dataclasses, never raw dicts.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import socket
import tomllib
import urllib.parse
from pathlib import Path

from causewatch.errors import ConfigError

DEFAULT_ENDPOINT = "tcp://127.0.0.1:5555"


@dataclasses.dataclass
class DaemonConfig:
    db: str = "causewatch.duckdb"
    bind: str = DEFAULT_ENDPOINT
    keys: str | None = None           # folder with server.key_secret and authorized/ (agent public keys)
    insecure: bool = False            # allow a non-loopback bind without CURVE keys
    http: str = "127.0.0.1:9464"      # /metrics and /api/*; "" turns it off
    max_frame_bytes: int = 8 * 1024 * 1024
    batch_max_frames: int = 256       # frames the writer commits in one transaction at most
    fuzzy_terms: str | None = None    # TOML term sets for bottleneck scoring (default: the shipped ones)


@dataclasses.dataclass
class AgentConfig:
    daemon: str = DEFAULT_ENDPOINT
    node: str = dataclasses.field(default_factory=socket.gethostname)
    spool: str = "~/.cache/causewatch/spool"
    spool_max_bytes: int = 256 * 1024 * 1024
    window: int = 32                  # frames in flight without an ack (credit)
    server_key: str | None = None     # daemon public key file (CURVE)
    client_key: str | None = None     # this agent's secret key file (CURVE)
    psutil_interval: float = 1.0
    counters_interval: float = 0.1
    bbv_frequency: int = 1000         # IP samples per second per CPU; 0 turns phase sampling off
    ipc: str = "ipc:///tmp/causewatch-agent.sock"


def _check(cls, raw: dict, where: str):
    fields = {f.name: f for f in dataclasses.fields(cls)}
    out = {}
    for key, value in raw.items():
        if key not in fields:
            raise ConfigError(key, f"unknown setting (known: {', '.join(sorted(fields))})", where)
        default = fields[key].default
        expected = type(default) if default not in (None, dataclasses.MISSING) else str
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise ConfigError(key, f"expected {expected.__name__}, got {type(value).__name__} {value!r}", where)
        out[key] = value
    return cls(**out)


def load(cls, path: str | Path | None = None, section: str | None = None, **overrides):
    """Read `cls` from TOML file `path` (optionally from table `section`), then apply non-None overrides."""
    raw: dict = {}
    where = str(path) if path else "defaults"
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
    raw.update({k.replace("-", "_"): v for k, v in overrides.items() if v is not None})
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
