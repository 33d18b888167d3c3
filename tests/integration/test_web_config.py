"""`causewatch daemon --web-config-file web.yml` (exporter-toolkit's file, as node_exporter takes it) with
real clients: curl with and without the password and the CA, Debian's prometheus scraping /metrics over
HTTPS with basic auth, the CLI's data verbs with a Prometheus client configuration or without one, a bad
file stopping the start with exit 2, SIGHUP reloading the file. One daemon child process for the module;
certificates made by the openssl command."""

import json
import os
import shutil
import signal
import subprocess
import urllib.parse
import urllib.request

import bcrypt
import pytest
from support import DaemonProcess, certificates, free_port, run_cli, seed_node, wait_for

from causewatch.config import DaemonConfig
from causewatch.daemon.server import Daemon

CURL, PROMETHEUS = shutil.which("curl"), shutil.which("prometheus")
pytestmark = pytest.mark.skipif(shutil.which("openssl") is None,
                                reason="needs the openssl command (Debian's openssl package)")
needs_curl = pytest.mark.skipif(CURL is None, reason="needs curl (Debian's curl package)")
USER, PASSWORD = "prometheus", "scrape-s3cret"


def _web_yml(folder, pem, users: dict[str, str]) -> str:
    """TLS, a header, and each user's bcrypt hash (cost 4: a wrong password's check, never remembered,
    stays well inside a 1 s scrape timeout at load 10)."""
    hashes = "".join(f"  {user}: '{bcrypt.hashpw(pw.encode(), bcrypt.gensalt(4)).decode()}'\n"
                     for user, pw in users.items())
    return (f"tls_server_config:\n  cert_file: {pem['server'].name}\n  key_file: {pem['server_key'].name}\n"
            "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n"
            f"basic_auth_users:\n{hashes}")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The daemon over HTTPS asking for USER's PASSWORD (a node in its store), the files around it."""
    folder = tmp_path_factory.mktemp("web")
    pem = certificates(folder)
    (folder / "web.yml").write_text(_web_yml(folder, pem, {USER: PASSWORD}))
    (folder / "password").write_text(PASSWORD + "\n")
    os.chmod(folder / "password", 0o600)
    (folder / "client.yml").write_text(f"basic_auth:\n  username: {USER}\n  password_file: password\n"
                                       f"tls_config:\n  ca_file: {pem['ca']}\n")
    seed_node(folder / "cw.duckdb", "n1")
    daemon = DaemonProcess(folder / "cw.duckdb", extra=["--web-config-file", str(folder / "web.yml")]).start()
    yield daemon, folder, pem
    daemon.stop()


def _curl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CURL, "-s", "-D", "-", *args], capture_output=True, text=True, timeout=30)


@needs_curl
def test_curl_needs_the_password_and_the_ca(site):
    daemon, folder, pem = site
    url, ca = f"https://{daemon.http}", ["--cacert", str(pem["ca"])]
    for path in ("/metrics", "/api/nodes"):
        r = _curl(*ca, url + path)
        assert r.stdout.startswith("HTTP/1.0 401") and "\nWWW-Authenticate: Basic" in r.stdout, r.stdout
    assert _curl(*ca, "-u", f"{USER}:wrong", url + "/metrics").stdout.startswith("HTTP/1.0 401")
    r = _curl(*ca, "-u", f"{USER}:{PASSWORD}", url + "/metrics")
    assert r.stdout.startswith("HTTP/1.0 200") and "causewatch_frames_stored_total" in r.stdout
    assert "\nX-Content-Type-Options: nosniff" in r.stdout
    r = _curl(*ca, "-u", f"{USER}:{PASSWORD}", url + "/api/nodes")
    assert json.loads(r.stdout.split("\n\n", 1)[1])[0]["node"] == "n1"
    assert _curl("-u", f"{USER}:{PASSWORD}", url + "/metrics").returncode == 60   # no CA: curl trusts it not
    r = _curl(f"http://{daemon.http}/metrics")                                   # plain HTTP to the TLS port
    assert r.stdout.startswith("HTTP/1.0 400") and "HTTP request to an HTTPS server" in r.stdout
    assert daemon.proc.poll() is None


def _prometheus_up(port: int) -> dict[str, str]:
    query = urllib.parse.urlencode({"query": "up"})
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?{query}", timeout=5) as r:
            return {s["metric"]["job"]: s["value"][1] for s in json.load(r)["data"]["result"]}
    except OSError:
        return {}


@pytest.mark.skipif(PROMETHEUS is None, reason="needs Debian's prometheus package")
def test_prometheus_scrapes_over_tls_with_basic_auth(site, tmp_path):
    daemon, folder, pem = site
    def job(name: str, password) -> str:
        return (f"  - job_name: {name}\n    scheme: https\n    tls_config: {{ca_file: {pem['ca']}}}\n"
                f"    basic_auth: {{username: {USER}, password_file: {password}}}\n"
                f"    static_configs: [{{targets: ['{daemon.http}']}}]\n")
    (tmp_path / "wrong").write_text("not-it\n")
    (tmp_path / "prometheus.yml").write_text("global: {scrape_interval: 1s, scrape_timeout: 1s}\nscrape_configs:\n"
                                             + job("causewatch", folder / "password")
                                             + job("wrong-password", tmp_path / "wrong"))
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        up = wait_for(lambda: len(_prometheus_up(port)) == 2 and _prometheus_up(port), timeout=90, every=0.5)
        assert up == {"causewatch": "1", "wrong-password": "0"}, (tmp_path / "prometheus.log").read_text()[-2000:]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets", timeout=5) as r:
            errors = {t["labels"]["job"]: t["lastError"] for t in json.load(r)["data"]["activeTargets"]}
        assert errors["causewatch"] == "" and "401" in errors["wrong-password"], errors
    finally:
        proc.terminate()
        proc.wait(30)


def test_the_cli_verbs_with_a_client_configuration_and_without(site):
    daemon, folder, pem = site
    url = f"https://{daemon.http}"
    r = run_cli("nodes", "--json", "--daemon", url, "--http-config-file", str(folder / "client.yml"))
    assert r.returncode == 0 and json.loads(r.stdout)[0]["node"] == "n1", r.stderr
    r = run_cli("nodes", "--json", "--daemon", url, env={"CAUSEWATCH_HTTP_CONFIG": str(folder / "client.yml")})
    assert r.returncode == 0 and json.loads(r.stdout)[0]["hostname"] == "host-n1", r.stderr
    r = run_cli("nodes", "--daemon", url)
    assert r.returncode == 2 and "certificate is not trusted here; give its CA as tls_config" in r.stderr, r.stderr
    (folder / "ca-only.yml").write_text(f"tls_config: {{ca_file: {pem['ca']}}}\n")
    r = run_cli("anomalies", "--daemon", url, "--http-config-file", str(folder / "ca-only.yml"))
    assert r.returncode == 2 and "the daemon asks for a user and password" in r.stderr, r.stderr
    assert "--http-config-file FILE or $CAUSEWATCH_HTTP_CONFIG" in r.stderr
    (folder / "bad.yml").write_text("basic_auth:\n  username: x\n  pasword_file: password\n")
    r = run_cli("nodes", "--daemon", url, "--http-config-file", str(folder / "bad.yml"))
    assert r.returncode == 2 and "bad.yml:3: basic_auth.pasword_file: unknown key" in r.stderr, r.stderr


def test_the_agents_port_names_the_api_over_https(site):
    daemon, _, _ = site
    port = daemon.endpoint.removeprefix("tcp://")
    r = run_cli("nodes", "--daemon", port)
    assert r.returncode == 2 and f"{port} is the agents' ZeroMQ port; the HTTP API is on https://{daemon.http} " \
        in r.stderr, r.stderr


def test_https_to_a_plain_http_daemon_says_to_give_http(tmp_path):
    plain = Daemon(DaemonConfig(db=str(tmp_path / "p.duckdb"), bind="tcp://127.0.0.1:0", http="127.0.0.1:0"),
                   jobs=[]).start()
    try:
        r = run_cli("nodes", "--daemon", f"https://{plain.http.address}")
        assert r.returncode == 2 and "the daemon does not speak HTTPS there: give http://" in r.stderr, r.stderr
    finally:
        plain.stop()


def test_several_daemons_over_https_answer_as_one(site):
    daemon, folder, _ = site
    seed_node(folder / "b.duckdb", "n2")
    other = Daemon(DaemonConfig(db=str(folder / "b.duckdb"), bind="tcp://127.0.0.1:0", http="127.0.0.1:0",
                                web_config_file=str(folder / "web.yml")), jobs=[]).start()
    try:
        both = f"https://{daemon.http},https://{other.http.address}"
        r = run_cli("nodes", "--json", "--daemons", both, "--http-config-file", str(folder / "client.yml"))
        assert r.returncode == 0 and [n["node"] for n in json.loads(r.stdout)] == ["n1", "n2"], r.stderr
        assert "PARTIAL" not in r.stderr
    finally:
        other.stop()


@pytest.mark.parametrize("web, words", [
    ("tls_server_config:\n  cert_file: gone.pem\n  key_file: gone.key\n",
     "web.yml:2: tls_server_config.cert_file: gone.pem: no such readable file"),
    ("basic_auth_users:\n  ops: hunter2\n", "web.yml:2: basic_auth_users.ops: not a bcrypt hash"),
])
def test_a_bad_web_config_stops_the_start_with_exit_2(tmp_path, web, words):
    (tmp_path / "web.yml").write_text(web)
    (tmp_path / "daemon.toml").write_text(f'[daemon]\nweb_config_file = "{tmp_path / "web.yml"}"\n')
    start = ["daemon", "--db", str(tmp_path / "cw.duckdb"), "--bind", "tcp://127.0.0.1:0",
             "--http", f"127.0.0.1:{free_port()}"]
    for how in (["--web-config-file", str(tmp_path / "web.yml")], ["--config", str(tmp_path / "daemon.toml")]):
        r = run_cli(*start, *how, timeout=60)
        assert r.returncode == 2 and words in r.stderr, r.stderr
        assert not (tmp_path / "cw.duckdb").exists()     # stopped before the store was opened


@needs_curl
def test_sighup_rereads_the_web_config_and_keeps_it_when_the_new_one_is_bad(site):
    daemon, folder, pem = site
    url, ca = f"https://{daemon.http}/metrics", ["--cacert", str(pem["ca"])]
    original = (folder / "web.yml").read_text()

    def status(user: str, password: str) -> str:
        return _curl(*ca, "-u", f"{user}:{password}", url).stdout[9:12]
    try:
        (folder / "web.yml").write_text(_web_yml(folder, pem, {"grafana": "other-s3cret"}))
        daemon.proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: status("grafana", "other-s3cret") == "200", timeout=20)
        assert status(USER, PASSWORD) == "401"
        (folder / "web.yml").write_text("basic_auth_users:\n  grafana: plain\n")   # broken: the last good one stays
        daemon.proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: "web configuration not reloaded" in _stderr_so_far(daemon), timeout=20)
        assert status("grafana", "other-s3cret") == "200" and daemon.proc.poll() is None
    finally:
        (folder / "web.yml").write_text(original)
        daemon.proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: status(USER, PASSWORD) == "200", timeout=20)


_seen: list[str] = []


def _stderr_so_far(daemon) -> str:
    """What the daemon child wrote to stderr so far (read without blocking)."""
    os.set_blocking(daemon.proc.stderr.fileno(), False)
    chunk = daemon.proc.stderr.read()
    if chunk:
        _seen.append(chunk)
    return "".join(_seen)
