"""The daemon's web configuration: the file of Prometheus's exporter-toolkit (node_exporter's
--web.config.file, web.yml), read at start and on SIGHUP. `tls_server_config`: HTTPS, client
certificates; `basic_auth_users`: user -> bcrypt hash, asked of every request; `http_server_config.headers`:
added to every answer. A bad file is a ConfigError naming the file, the line and the key.

What Python's ssl cannot do as Go's crypto/tls does is refused by name, never ignored: client_auth_type
RequestClientCert and RequireAnyClientCert (ssl verifies every certificate it asks for), curve_preferences
(ssl sets one curve); rate_limit too. `http2` is accepted; the server speaks HTTP/1.1.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import hashlib
import hmac
import logging
import os
import re
import ssl
import threading

import bcrypt

from causewatch.config import YamlSection, read_yaml

log = logging.getLogger("causewatch.daemon.http")

VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1, "TLS12": ssl.TLSVersion.TLSv1_2,
            "TLS13": ssl.TLSVersion.TLSv1_3}
CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
               "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
UNVERIFIED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert")
# Go's names of the TLS 1.2 cipher suites (crypto/tls CipherSuites()) as OpenSSL names them. TLS 1.3's
# are accepted and left to OpenSSL: Go does not let them be configured either.
CIPHERS = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA", "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256", "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
TLS13_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
# exporter-toolkit's: the headers that may be set, and the values each takes (None: any)
HEADERS = {"Strict-Transport-Security": None, "X-Content-Type-Options": ("nosniff",),
           "X-Frame-Options": ("deny", "sameorigin"), "X-XSS-Protection": None, "Content-Security-Policy": None}
BCRYPT = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")
MAKE_HASH = ("python3 -c 'import bcrypt, getpass; print(bcrypt.hashpw(getpass.getpass().encode(), "
             "bcrypt.gensalt()).decode())'")

TOP = {"tls_server_config": dict, "http_server_config": dict, "basic_auth_users": dict, "rate_limit": dict}
TLS = {"cert_file": str, "key_file": str, "cert": str, "key": str, "client_ca_file": str, "client_ca": str,
       "client_auth_type": str, "client_allowed_sans": list, "min_version": str, "max_version": str,
       "cipher_suites": list, "prefer_server_cipher_suites": bool, "curve_preferences": list}
HTTP = {"http2": bool, "headers": dict}


class BasicAuth:
    """`Authorization: Basic` checked against bcrypt hashes. A success is remembered (bcrypt is slow on
    purpose: a check at cost 10 takes a tenth of a core-second here, every scrape); a failure is not,
    so a guess always costs a check. One check runs at a time, as in exporter-toolkit: a burst of guesses
    takes one core, not all."""

    REMEMBERED = 256   # (user, password) pairs, the oldest forgotten first

    def __init__(self, users: dict[str, bytes]):
        self.users = users
        self._key = os.urandom(32)            # the remembered pairs are keyed digests, never the passwords
        self._decoy = next(iter(users.values()))   # an unknown user costs a check too: no enumeration by timing
        self._good: dict[bytes, None] = {}
        self._lock = threading.Lock()

    def allows(self, authorization: str) -> bool:
        given = _basic(authorization)
        if given is None:
            return False
        user, password = given
        hashed = self.users.get(user)
        digest = hmac.new(self._key, b"\0".join((user.encode(), password, hashed or b"")), hashlib.sha256).digest()
        if hashed is not None and digest in self._good:
            return True
        with self._lock:
            try:
                good = bcrypt.checkpw(password, hashed or self._decoy) and hashed is not None
            except ValueError:   # a password over bcrypt's 72 bytes
                return False
            if good:
                self._good[digest] = None
                while len(self._good) > self.REMEMBERED:
                    del self._good[next(iter(self._good))]
        return good


def _basic(authorization: str) -> tuple[str, bytes] | None:
    """(user, password) of an `Authorization: Basic …` header, or None."""
    scheme, _, encoded = authorization.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, colon, password = base64.b64decode(encoded.strip(), validate=True).partition(b":")
        return (user.decode(), password) if colon else None
    except (binascii.Error, UnicodeDecodeError):
        return None


@dataclasses.dataclass(frozen=True)
class WebConfig:
    """What the HTTP server does: `tls` (None: plain HTTP), `auth` (None: no user asked), `headers` on
    every answer, `allowed_sans` of which a client certificate must name one (empty: any)."""
    tls: ssl.SSLContext | None = None
    auth: BasicAuth | None = None
    headers: tuple[tuple[str, str], ...] = ()
    allowed_sans: frozenset = frozenset()
    path: str = ""


def load(path: str | None) -> WebConfig:
    """The web configuration in `path` (None: plain HTTP, no user asked)."""
    if not path:
        return WebConfig()
    top = YamlSection(path, *read_yaml(path))
    given = top.check(TOP)
    if given["rate_limit"] is not None:
        raise top.error("rate_limit", "not supported by causewatch (remove it; a proxy in front can limit requests)")
    http = top.section("http_server_config")
    http.check(HTTP)
    tls, sans = _tls(top.section("tls_server_config")) if given["tls_server_config"] else (None, frozenset())
    auth = _users(top.section("basic_auth_users"))
    if auth is not None and tls is None:
        log.warning("%s: basic_auth_users without tls_server_config: passwords cross the network in clear text", path)
    return WebConfig(tls, auth, _headers(http.section("headers")), sans, path)


def _users(users: YamlSection) -> BasicAuth | None:
    hashes = {}
    for user, hashed in users.values.items():
        if not isinstance(user, str) or not isinstance(hashed, str) or not BCRYPT.fullmatch(hashed):
            raise users.error(str(user), f"not a bcrypt hash ($2y$10$ and 53 characters): make one with {MAKE_HASH}")
        hashes[user] = hashed.encode()
    return BasicAuth(hashes) if hashes else None


def _headers(headers: YamlSection) -> tuple[tuple[str, str], ...]:
    out = []
    for name, value in headers.values.items():
        if name not in HEADERS:
            raise headers.error(str(name), f"this header cannot be set (these can: {', '.join(HEADERS)})")
        allowed = HEADERS[name]
        if not isinstance(value, str) or (value and allowed and value not in allowed):
            raise headers.error(name, f"{value!r}: expected {' or '.join(allowed) if allowed else 'a string'}")
        if value:   # blank: unset, as in exporter-toolkit
            out.append((name, value))
    return tuple(out)


def _tls(tls: YamlSection) -> tuple[ssl.SSLContext, frozenset]:
    given = tls.check(TLS)
    if given["curve_preferences"] is not None:
        raise tls.error("curve_preferences", "not supported by causewatch (Python's ssl sets one curve): remove it "
                                             "to offer OpenSSL's")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(context, tls, given)
    _certificate(context, tls, given)
    _clients(context, tls, given)
    _ciphers(context, tls, given)
    return context, frozenset(given["client_allowed_sans"] or ())


def _versions(context: ssl.SSLContext, tls: YamlSection, given: dict) -> None:
    low, high = given["min_version"] or "TLS12", given["max_version"] or "TLS13"
    for key, name in (("min_version", low), ("max_version", high)):
        if name not in VERSIONS:
            raise tls.error(key, f"{name!r}: expected one of {', '.join(VERSIONS)}")
    if VERSIONS[low] > VERSIONS[high]:
        raise tls.error("min_version", f"{low} is above max_version {high}")
    context.minimum_version, context.maximum_version = VERSIONS[low], VERSIONS[high]


def _certificate(context: ssl.SSLContext, tls: YamlSection, given: dict) -> None:
    """The server's certificate and key, from files or given inline (PEM)."""
    paths = {}
    for key in ("cert", "key"):
        if given[key] is not None and given[f"{key}_file"] is not None:
            raise tls.error(key, f"give {key} or {key}_file, not both")
        if given[key] is None and given[f"{key}_file"] is None:
            raise tls.error(f"{key}_file", "missing: HTTPS needs the server's certificate and key (PEM files)")
        paths[key] = tls.file(f"{key}_file")
    try:
        with _pem(given["cert"], paths["cert"]) as cert, _pem(given["key"], paths["key"]) as key:
            context.load_cert_chain(cert, key)
    except ssl.SSLError as e:
        where = "cert_file" if given["cert"] is None else "cert"
        raise tls.error(where, f"cannot load the certificate with its key ({e.reason or e})") from None


@contextlib.contextmanager
def _pem(text: str | None, path: str | None):
    """A path to PEM text given inline (an anonymous in-memory file: a key never touches a disk), or the
    file's own path."""
    if text is None:
        yield path
        return
    fd = os.memfd_create("causewatch-pem")
    try:
        os.write(fd, text.encode())
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


def _clients(context: ssl.SSLContext, tls: YamlSection, given: dict) -> None:
    """client_auth_type, and the CAs that sign the clients' certificates."""
    kind = given["client_auth_type"] or "NoClientCert"
    if kind in UNVERIFIED_CLIENT_AUTH:
        raise tls.error("client_auth_type", f"{kind}: not supported by causewatch (Python's ssl verifies every client "
                                            "certificate it asks for): use VerifyClientCertIfGiven or "
                                            "RequireAndVerifyClientCert with client_ca_file")
    if kind not in CLIENT_AUTH:
        raise tls.error("client_auth_type", f"{kind!r}: expected one of {', '.join(CLIENT_AUTH)}")
    if given["client_ca_file"] is not None and given["client_ca"] is not None:
        raise tls.error("client_ca", "give client_ca or client_ca_file, not both")
    has_ca = given["client_ca_file"] is not None or given["client_ca"] is not None
    if has_ca != (kind != "NoClientCert"):
        raise tls.error("client_auth_type" if has_ca else "client_ca_file",
                        "client CAs given without a client_auth_type that verifies with them" if has_ca else
                        f"missing: {kind} verifies client certificates against the CAs in this file")
    if given["client_allowed_sans"] and kind != "RequireAndVerifyClientCert":
        raise tls.error("client_allowed_sans", "needs client_auth_type RequireAndVerifyClientCert")
    context.verify_mode = CLIENT_AUTH[kind]
    if has_ca:
        try:
            context.load_verify_locations(cafile=tls.file("client_ca_file"), cadata=given["client_ca"])
        except ssl.SSLError as e:
            raise tls.error("client_ca_file" if given["client_ca"] is None else "client_ca",
                            f"no CA certificate read ({e.reason or e})") from None


def _ciphers(context: ssl.SSLContext, tls: YamlSection, given: dict) -> None:
    names = given["cipher_suites"] or []
    unknown = [n for n in names if n not in CIPHERS and n not in TLS13_SUITES]
    if unknown:
        raise tls.error("cipher_suites", f"{', '.join(unknown)}: not a cipher suite (Go's names: "
                                         f"{', '.join([*CIPHERS, *TLS13_SUITES])})")
    chosen = [CIPHERS[n] for n in names if n in CIPHERS]
    if chosen:
        context.set_ciphers(":".join(chosen))
    if given["prefer_server_cipher_suites"] is False:
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE

