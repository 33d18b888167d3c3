"""The daemon's CURVE allow-list: each authorized/NAME.key binds one agent public key to node NAME.

Read at start (a malformed file stops the daemon, naming the file), again on SIGHUP and whenever the
folder changes (a malformed file is then refused loudly and counted; the other keys stay in force).
"""

from __future__ import annotations

import logging
from pathlib import Path

import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

from causewatch.errors import ConfigError

log = logging.getLogger("causewatch.daemon.authorized")


def public_key(path: Path) -> bytes:
    """The raw 32-byte CURVE public key of a key file; ValueError naming what is wrong with it."""
    try:
        public, secret = zmq.auth.load_certificate(str(path))
    except (OSError, ValueError) as e:
        raise ValueError(f"not a CURVE public key file ({e})") from None
    if secret:
        raise ValueError("holds a secret key: only public keys belong in authorized/")
    try:
        raw = z85.decode(public)
    except (ValueError, TypeError, KeyError, IndexError):
        raw = b""
    if len(raw) != 32:
        raise ValueError(f"public key {public[:60]!r} is not a Z85 CURVE key (40 characters)")
    return raw


class AuthorizedKeys:
    """Public key -> node name, from FOLDER/*.key; the pyzmq ZAP handler asks `callback`."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.names: dict[bytes, str] = {}
        self.refused_files = 0
        self._stamp: tuple = ()

    def _fingerprint(self) -> tuple:
        try:
            return tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(self.folder.glob("*.key")))
        except OSError:
            return ("unreadable",)

    def load(self, strict: bool) -> int:
        """(Re)read the folder; strict (at start) raises ConfigError on a malformed file. Returns the count."""
        stamp, names = self._fingerprint(), {}
        for path in sorted(self.folder.glob("*.key")):
            try:
                names[public_key(path)] = path.stem
            except ValueError as e:
                if strict:
                    raise ConfigError("keys", f"{e} (fix or remove it)", str(path)) from None
                self.refused_files += 1
                log.error("authorized key %s refused: %s; that agent cannot connect until it is fixed", path, e)
        self.names, self._stamp = names, stamp   # one assignment: the ZAP thread sees old or new, whole
        return len(names)

    def changed(self) -> bool:
        return self._fingerprint() != self._stamp

    def callback(self, domain: str, z85_key: bytes) -> bool:
        return z85.decode(z85_key) in self.names

    def authenticator(self, ctx: zmq.Context) -> ThreadAuthenticator:
        """A started ZAP handler that allows these keys and names each connection's User-Id after its key."""
        auth = ThreadAuthenticator(ctx)
        auth.curve_user_id = lambda key: self.names.get(key, "")
        auth.start()
        auth.configure_curve_callback(domain="*", credentials_provider=self)
        return auth
