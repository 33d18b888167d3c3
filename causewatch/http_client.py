"""How the CLI reaches a daemon whose HTTP asks for TLS or a password: Prometheus's HTTP client
configuration file, as promtool's and amtool's --http.config.file read it (`basic_auth`, `authorization`,
`tls_config`), named by --http-config-file or $CAUSEWATCH_HTTP_CONFIG. Secrets stay in files, never on
a command line that `ps` shows.

    basic_auth: {username: ops, password_file: /etc/causewatch/ops.password}
    tls_config: {ca_file: /etc/causewatch/ca.pem}
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from causewatch import defaults
from causewatch.config import YamlSection, read_yaml

ENV = defaults.HTTP_CONFIG_ENV
TOP = {"basic_auth": dict, "authorization": dict, "tls_config": dict}
BASIC = {"username": str, "password": str, "password_file": str}
AUTHORIZATION = {"type": str, "credentials": str, "credentials_file": str}
TLS = {"ca_file": str, "cert_file": str, "key_file": str, "insecure_skip_verify": bool}


@dataclasses.dataclass(frozen=True)
class HttpClient:
    """`headers` for every request (Authorization), `context` for https:// (None: Python's default, the
    system's CAs), `path` the file they came from ("" for none), `has_user` whether it names one."""
    headers: dict = dataclasses.field(default_factory=dict)
    context: object = None
    path: str = ""
    has_user: bool = False


def load(path: str | None = None) -> HttpClient:
    """The client configuration in `path`, else in $CAUSEWATCH_HTTP_CONFIG, else none."""
    path = path or os.environ.get(ENV)
    if not path:
        return HttpClient()
    top = YamlSection(path, *read_yaml(path))
    given = top.check(TOP)
    if given["basic_auth"] is not None and given["authorization"] is not None:
        raise top.error("authorization", "give basic_auth or authorization, not both")
    headers = {}
    if given["basic_auth"] is not None:
        headers["Authorization"] = _basic(top.section("basic_auth"))
    if given["authorization"] is not None:
        headers["Authorization"] = _authorization(top.section("authorization"))
    context = _context(top.section("tls_config")) if given["tls_config"] is not None else None
    return HttpClient(headers, context, path, given["basic_auth"] is not None)


def _secret(section: YamlSection, key: str) -> str:
    """`key` given inline or in `key`_file (its surrounding white space dropped, as Prometheus does)."""
    inline, path = section.values.get(key), section.file(f"{key}_file")
    if inline is not None and path is not None:
        raise section.error(key, f"give {key} or {key}_file, not both")
    if path is None and inline is None:
        raise section.error(f"{key}_file", "missing (a file holding it, readable by you alone)")
    return inline if path is None else Path(path).read_text().strip()


def _basic(section: YamlSection) -> str:
    import base64  # with struct and binascii, not to be loaded by every data verb's start-up
    given = section.check(BASIC)
    if not given["username"]:
        raise section.error("username", "missing")
    pair = f"{given['username']}:{_secret(section, 'password')}".encode()
    return "Basic " + base64.b64encode(pair).decode()


def _authorization(section: YamlSection) -> str:
    given = section.check(AUTHORIZATION)
    return f"{given['type'] or 'Bearer'} {_secret(section, 'credentials')}"


def _context(section: YamlSection):
    import ssl  # a third of urllib's import, needed only for https://
    given = section.check(TLS)
    try:
        context = ssl.create_default_context(cafile=section.file("ca_file"))
    except ssl.SSLError as e:
        raise section.error("ca_file", f"no CA certificate read ({e.reason or e})") from None
    cert, key = section.file("cert_file"), section.file("key_file")
    if (cert is None) != (key is None):
        raise section.error("cert_file" if cert is None else "key_file", "missing: a client certificate needs both")
    if cert is not None:
        try:
            context.load_cert_chain(cert, key)
        except ssl.SSLError as e:
            raise section.error("cert_file", f"cannot load the certificate with its key ({e.reason or e})") from None
    if given["insecure_skip_verify"]:
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return context
