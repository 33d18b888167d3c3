"""The daemon's web configuration (exporter-toolkit's web.yml): a bad file named by file, line and key;
basic authentication against real bcrypt hashes, a verified password remembered; HTTPS served by the
daemon's HTTP server to real TLS clients (versions, cipher suites, client certificates, their SANs, a
plain HTTP request, a silent client). Certificates are made by the openssl command."""

import logging
import shutil
import socket
import ssl
import time
import urllib.error
import urllib.request
from base64 import b64encode

import bcrypt
import pytest
from support import ROOT, certificates

from causewatch.daemon import webconfig
from causewatch.daemon.httpapi import HttpApi
from causewatch.errors import ConfigError

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None,
                                reason="needs the openssl command (Debian's openssl package)")
HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()   # cost 4: a real hash, quick to check


@pytest.fixture(scope="module")
def pem(tmp_path_factory):
    return certificates(tmp_path_factory.mktemp("pem"))


def _web(tmp_path, text: str, pem) -> webconfig.WebConfig:
    path = tmp_path / "web.yml"
    path.write_text(text.format(**{k: str(v) for k, v in pem.items()}))
    return webconfig.load(str(path))


TLS = "tls_server_config:\n  cert_file: {server}\n  key_file: {server_key}\n"


@pytest.mark.parametrize("text, where, words", [
    (TLS + "  cert_fil: x\n", "web.yml:4: tls_server_config.cert_fil", "unknown key (known here: cert, cert_file"),
    ("tls_server_config:\n  cert_file: nowhere.pem\n  key_file: {server_key}\n",
     "web.yml:2: tls_server_config.cert_file", "nowhere.pem: no such readable file"),
    ("tls_server_config:\n  key_file: {server_key}\n", "tls_server_config.cert_file",
     "missing: HTTPS needs the server's certificate and key"),
    ("tls_server_config:\n  cert_file: {server}\n  key_file: {client_key}\n", "web.yml:2: tls_server_config.cert_file",
     "cannot load the certificate with its key"),
    ("basic_auth_users:\n  alice: s3cret\n", "web.yml:2: basic_auth_users.alice", "not a bcrypt hash"),
    ("basic_auth_user:\n  alice: x\n", "web.yml:1: basic_auth_user", "unknown key"),
    (TLS + "  client_auth_type: RequireAnyClientCert\n", "web.yml:4: tls_server_config.client_auth_type",
     "not supported by causewatch (Python's ssl verifies every client certificate"),
    (TLS + "  client_auth_type: RequireAndVerifyClientCert\n", "tls_server_config.client_ca_file",
     "missing: RequireAndVerifyClientCert verifies client certificates"),
    (TLS + "  min_version: TLS14\n", "web.yml:4: tls_server_config.min_version", "expected one of TLS10"),
    (TLS + "  min_version: TLS13\n  max_version: TLS12\n", "tls_server_config.min_version", "above max_version"),
    (TLS + "  cipher_suites: [TLS_MADE_UP]\n", "tls_server_config.cipher_suites", "TLS_MADE_UP: not a cipher suite"),
    (TLS + "  prefer_server_cipher_suites: yes please\n", "tls_server_config.prefer_server_cipher_suites",
     "expected true or false"),
    ("http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
     "web.yml:3: http_server_config.headers.X-Frame-Options", "expected deny or sameorigin"),
    ("http_server_config:\n  headers:\n    Server: mine\n", "http_server_config.headers.Server", "cannot be set"),
    ("rate_limit:\n  interval: 1s\n", "web.yml:1: rate_limit", "not supported"),
    ("tls_server_config: [\n", "web.yml: config", "not valid YAML"),
])
def test_a_bad_web_config_names_the_file_line_and_key(tmp_path, pem, text, where, words):
    with pytest.raises(ConfigError) as e:
        _web(tmp_path, text, pem)
    assert where in str(e.value) and words in str(e.value), str(e.value)


def test_the_shipped_example_loads_once_its_placeholders_are_filled(tmp_path, pem):
    example = ((ROOT / "systemd/web.yml").read_text().replace("/etc/causewatch/tls/daemon.pem", "{server}")
               .replace("/etc/causewatch/tls/daemon.key", "{server_key}"))
    with pytest.raises(ConfigError, match="basic_auth_users.prometheus: not a bcrypt hash"):
        _web(tmp_path, example, pem)
    web = _web(tmp_path, example.replace("REPLACE WITH A BCRYPT HASH", HASH), pem)
    assert web.tls is not None and web.auth.users.keys() == {"prometheus"}
    assert web.headers == (("X-Content-Type-Options", "nosniff"),)


def _basic(user: str, password: str) -> str:
    return "Basic " + b64encode(f"{user}:{password}".encode()).decode()


def test_basic_auth_takes_the_right_password_only(tmp_path, pem):
    auth = _web(tmp_path, f"basic_auth_users:\n  alice: '{HASH}'\n", pem).auth
    assert auth.allows(_basic("alice", "s3cret"))
    for wrong in (_basic("alice", "nope"), _basic("bob", "s3cret"), "Bearer s3cret", "Basic !!!", "Basic " +
                  b64encode(b"alice").decode(), ""):
        assert not auth.allows(wrong), wrong


def test_a_verified_password_is_remembered_a_wrong_one_never(tmp_path, pem, monkeypatch):
    auth = _web(tmp_path, f"basic_auth_users:\n  alice: '{HASH}'\n", pem).auth
    checks = []
    real = bcrypt.checkpw
    monkeypatch.setattr(webconfig.bcrypt, "checkpw", lambda *a: checks.append(a) or real(*a))
    assert all(auth.allows(_basic("alice", "s3cret")) for _ in range(50))
    assert len(checks) == 1                      # a scrape a second costs one bcrypt, not one each
    assert not any(auth.allows(_basic("alice", "guess")) for _ in range(3))
    assert len(checks) == 4                      # each guess pays for its check
    assert not auth.allows(_basic("mallory", "s3cret")) and len(checks) == 5   # an unknown user too


def _ok(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


@pytest.fixture
def serve():
    """HttpApi serving a plain app with a web configuration; stopped after the test."""
    servers = []

    def start(web: webconfig.WebConfig) -> str:
        server = HttpApi("127.0.0.1:0", _ok, web)
        server.start()
        servers.append(server)
        return server.address
    yield start
    for server in servers:
        server.stop()


def _client(pem, **kw) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pem["ca"]))
    for key, value in kw.items():
        setattr(context, key, value)
    return context


def _get(address: str, context: ssl.SSLContext) -> bytes:
    with urllib.request.urlopen(f"https://{address}/", context=context, timeout=10) as reply:
        return reply.read()


def test_https_with_the_versions_asked_for(tmp_path, pem, serve):
    address = serve(_web(tmp_path, TLS + "  min_version: TLS13\n", pem))
    assert _get(address, _client(pem)) == b"ok"
    with pytest.raises(urllib.error.URLError, match="VERSION|version"):
        _get(address, _client(pem, maximum_version=ssl.TLSVersion.TLSv1_2))


def test_cipher_suites_in_go_names_bound_tls12(tmp_path, pem, serve):
    suites = "  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]\n"
    address = serve(_web(tmp_path, TLS + "  max_version: TLS12\n" + suites, pem))
    offered = _client(pem)
    offered.set_ciphers("ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384")
    with socket.create_connection(tuple(address.rsplit(":", 1))) as raw, offered.wrap_socket(
            raw, server_hostname="127.0.0.1") as tls:
        assert tls.cipher()[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"
    other = _client(pem)
    other.set_ciphers("ECDHE-ECDSA-AES128-GCM-SHA256")
    with pytest.raises(urllib.error.URLError, match="HANDSHAKE_FAILURE|handshake"):
        _get(address, other)


def test_client_certificates_verified_and_their_sans_matched(tmp_path, pem, serve):
    mutual = TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {ca}\n"
    address = serve(_web(tmp_path, mutual + "  client_allowed_sans: [client-a]\n", pem))
    with_cert = _client(pem)
    with_cert.load_cert_chain(pem["client"], pem["client_key"])
    assert _get(address, with_cert) == b"ok"
    with pytest.raises(OSError):   # refused in the handshake or just after it (TLS 1.3)
        _get(address, _client(pem))     # no certificate
    other = serve(_web(tmp_path, mutual + "  client_allowed_sans: [client-b]\n", pem))
    with pytest.raises(OSError):   # refused in the handshake or just after it (TLS 1.3)
        _get(other, with_cert)          # a verified certificate, but not a SAN allowed


def test_inline_pem_serves_as_the_files_do(tmp_path, pem, serve):
    def block(path) -> str:
        return "\n".join("    " + line for line in path.read_text().splitlines())
    text = f"tls_server_config:\n  cert: |\n{block(pem['server'])}\n  key: |\n{block(pem['server_key'])}\n"
    assert _get(serve(_web(tmp_path, text, pem)), _client(pem)) == b"ok"


def test_plain_http_to_the_tls_port_is_told_and_the_port_still_serves(tmp_path, pem, serve):
    address = serve(_web(tmp_path, TLS, pem))
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://{address}/", timeout=10)
    assert e.value.code == 400 and b"HTTP request to an HTTPS server" in e.value.read()
    assert _get(address, _client(pem)) == b"ok"


def test_a_silent_client_holds_up_no_other(tmp_path, pem, serve):
    address = serve(_web(tmp_path, TLS, pem))
    with socket.create_connection(tuple(address.rsplit(":", 1))):   # connected, never says a word
        start = time.monotonic()
        assert _get(address, _client(pem)) == b"ok"
        # the handshake is on the request's thread: the silent one waits out its own timeout alone
        assert time.monotonic() - start < 5


def test_an_open_port_off_loopback_is_warned_of(tmp_path, pem, caplog):
    with caplog.at_level(logging.WARNING, "causewatch.daemon.http"):
        HttpApi("127.0.0.1:0", _ok).server.server_close()
        assert not caplog.records
        HttpApi("0.0.0.0:0", _ok, _web(tmp_path, f"basic_auth_users:\n  alice: '{HASH}'\n", pem)).server.server_close()
        assert [r.message for r in caplog.records if "are open" in r.message] == []
        HttpApi("0.0.0.0:0", _ok).server.server_close()
    assert "open to whoever reaches this port" in caplog.records[-1].message
