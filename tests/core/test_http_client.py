"""The CLI's client configuration (Prometheus's HTTP client file, as promtool's --http.config.file):
the Authorization header and TLS context it makes, its secrets from files, and each mistake named by
file, line and key. (Against a real daemon: tests/integration/test_web_config.py.)"""

import base64
import ssl

import pytest

from causewatch import http_client
from causewatch.errors import ConfigError


def _load(tmp_path, text: str) -> http_client.HttpClient:
    (tmp_path / "client.yml").write_text(text)
    return http_client.load(str(tmp_path / "client.yml"))


def test_basic_auth_from_a_password_file_beside_the_config(tmp_path):
    (tmp_path / "pw").write_text("s3cret\n")     # the newline an editor leaves is not the password's
    client = _load(tmp_path, "basic_auth:\n  username: ops\n  password_file: pw\n")
    assert client.headers == {"Authorization": "Basic " + base64.b64encode(b"ops:s3cret").decode()}
    assert client.has_user and client.context is None


def test_authorization_sends_the_token(tmp_path):
    (tmp_path / "token").write_text("t0ken\n")
    assert _load(tmp_path, "authorization:\n  credentials_file: token\n").headers == {"Authorization": "Bearer t0ken"}


def test_the_file_named_by_the_environment_when_no_flag_names_one(tmp_path, monkeypatch):
    (tmp_path / "c.yml").write_text("basic_auth: {username: ops, password: pw}\n")
    monkeypatch.setenv(http_client.ENV, str(tmp_path / "c.yml"))
    assert http_client.load().path == str(tmp_path / "c.yml")
    monkeypatch.delenv(http_client.ENV)
    assert http_client.load() == http_client.HttpClient()


def test_tls_config_makes_a_verifying_context(tmp_path):
    client = _load(tmp_path, "tls_config: {insecure_skip_verify: false}\n")
    assert client.context.verify_mode == ssl.CERT_REQUIRED and client.context.check_hostname
    client = _load(tmp_path, "tls_config: {insecure_skip_verify: true}\n")
    assert client.context.verify_mode == ssl.CERT_NONE


@pytest.mark.parametrize("text, words", [
    ("basic_auth: {username: a, password: b}\nauthorization: {credentials: c}\n",
     "client.yml:2: authorization: give basic_auth or authorization, not both"),
    ("basic_auth:\n  username: a\n  password: b\n  password_file: client.yml\n",
     "client.yml:3: basic_auth.password: give password or password_file, not both"),
    ("basic_auth:\n  username: a\n", "client.yml:1: basic_auth.password_file: missing"),
    ("basic_auth:\n  username: a\n  password_file: nowhere\n",
     "client.yml:3: basic_auth.password_file: nowhere: no such readable file"),
    ("tls_config:\n  ca_file: client.yml\n  server_name: x\n", "client.yml:3: tls_config.server_name: unknown key"),
    ("tls_config:\n  ca_file: client.yml\n", "client.yml:2: tls_config.ca_file: no CA certificate read"),
    ("tls_config:\n  cert_file: client.yml\n", "client.yml:1: tls_config.key_file: missing"),
    ("- basic_auth\n", "client.yml: config: expected a mapping of settings, got list"),
])
def test_a_mistake_is_named_by_file_line_and_key(tmp_path, text, words):
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, text)
    assert words in str(e.value), str(e.value)
