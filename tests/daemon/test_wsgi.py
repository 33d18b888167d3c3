"""The daemon's WSGI application called directly, without a socket: /metrics through client_python's
app (gzip, OpenMetrics, name[]), the API's routes through the path the API worker takes (remote.answer
on a worker.Host over a real DuckDB file), and the daemon-side checks (POST's origin, body size, a dead
worker, a web configuration's users and headers)."""

import base64
import functools
import gzip
import io
import json
from wsgiref.util import setup_testing_defaults

import bcrypt
import pytest

from causewatch.daemon import remote, verbs, webconfig
from causewatch.daemon.exporter import Exporter, gauge_family
from causewatch.daemon.httpapi import MAX_BODY, Api
from causewatch.daemon.store import Store
from causewatch.daemon.worker import Host, WorkerError


@pytest.fixture
def exporter():
    e = Exporter()
    e.frames_stored.labels("samples").inc(3)
    e.publish("fuzzy", [gauge_family("causewatch_bottleneck_severity", "severity", ["region"],
                                     [({"region": "r"}, 0.5)])])
    return e


@pytest.fixture
def app(tmp_path, exporter):
    store = Store(str(tmp_path / "w.duckdb"))
    yield Api(exporter, functools.partial(remote.answer, call=Host(store.cursor, store.run, print, exporter)),
              token="s3cret")
    store.close()


def call(app, path, method="GET", query="", body=b"", environ=(), **headers):
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query, "REMOTE_ADDR": "127.0.0.1",
               "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body),
               **{f"HTTP_{k.upper()}": v for k, v in headers.items()}, **dict(environ)}
    setup_testing_defaults(environ)
    started = {}
    data = b"".join(app(environ, lambda status, hdrs: started.update(status=status, headers=dict(hdrs))))
    return started["status"], started["headers"], data


def test_metrics_in_text_gzip_openmetrics_and_filtered_by_name(app):
    status, headers, text = call(app, "/metrics")
    assert status == "200 OK" and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert b'causewatch_frames_stored_total{type="samples"} 3.0' in text and b"causewatch_bottleneck_severity" in text
    _, headers, packed = call(app, "/metrics", Accept_Encoding="gzip")
    assert headers["Content-Encoding"] == "gzip" and gzip.decompress(packed) == text
    _, headers, om = call(app, "/metrics", Accept="application/openmetrics-text; version=1.0.0")
    assert headers["Content-Type"].startswith("application/openmetrics-text") and om.endswith(b"# EOF\n")
    assert om.count(b"# EOF") == 1 and b'causewatch_bottleneck_severity{region="r"} 0.5' in om
    _, _, only = call(app, "/metrics", query="name[]=causewatch_bottleneck_severity")
    assert b"causewatch_bottleneck_severity" in only and b"causewatch_frames_stored" not in only


def test_a_jobs_new_snapshot_replaces_its_rendered_one_in_every_format(app, exporter):
    accepts = ("", "application/openmetrics-text; version=1.0.0")
    before = [call(app, "/metrics", Accept=a)[2] for a in accepts]   # rendered, then kept
    exporter.publish("fuzzy", [gauge_family("causewatch_bottleneck_severity", "severity", ["region"],
                                            [({"region": "s"}, 0.25)])])
    after = [call(app, "/metrics", Accept=a)[2] for a in accepts]
    for old, new in zip(before, after):
        assert b'region="r"' in old and b'region="r"' not in new and b'severity{region="s"} 0.25' in new


def test_api_routes_answer_through_the_worker_path(app):
    status, headers, body = call(app, "/api/stats")
    assert status == "200 OK" and headers["Content-Type"] == "application/json"
    assert json.loads(body)["tables"]["ingest_log"] == 0
    status, _, body = call(app, "/api/nope")
    assert status == "404 Not Found" and "/api/stats" in json.loads(body)["error"]


def test_a_dataframe_is_json_for_curl_and_arrow_when_the_client_accepts_it(app):
    status, headers, body = call(app, "/api/bbv-targets", Accept="*/*")
    assert status == "200 OK" and headers["Content-Type"] == "application/json" and json.loads(body) == []
    _, headers, body = call(app, "/api/bbv-targets", Accept=verbs.ARROW)
    assert headers["Content-Type"] == verbs.ARROW and body.startswith(b"\xff\xff\xff\xff")   # an IPC stream


def test_a_post_from_elsewhere_needs_the_token(app):
    kit = json.dumps({"manifest": {"app": "x"}}).encode()
    elsewhere = {"REMOTE_ADDR": "10.0.0.9"}
    for token in ({}, {"Authorization": "Bearer wrong"}):
        status, _, body = call(app, "/api/kits", "POST", body=kit, environ=elsewhere, **token)
        assert status == "403 Forbidden" and "api_token" in json.loads(body)["error"]
    status, _, body = call(app, "/api/kits", "POST", body=kit, environ=elsewhere, Authorization="Bearer s3cret")
    assert status == "400 Bad Request" and json.loads(body)["error"].startswith("manifest:")


def test_oversized_or_unreadable_bodies_and_other_methods_are_refused(app):
    status, _, body = call(app, "/api/kits", "POST", environ={"CONTENT_LENGTH": str(MAX_BODY + 1)})
    assert status == "413 Request Entity Too Large" and "body over" in json.loads(body)["error"]
    status, _, body = call(app, "/api/kits", "POST", environ={"CONTENT_LENGTH": "lots"})
    assert status == "400 Bad Request" and json.loads(body)["error"] == "Content-Length: not a number ('lots')"
    assert call(app, "/api/stats", "DELETE")[0] == "405 Method Not Allowed"


def test_a_dead_worker_is_a_503(exporter):
    def dead(*request):
        raise WorkerError("causewatch-api ended (exit code -9) during answer")

    status, _, body = call(Api(exporter, dead), "/api/stats")
    assert status == "503 Service Unavailable" and "exit code -9" in json.loads(body)["error"]


def test_with_basic_auth_users_every_request_names_a_user_or_carries_the_token(tmp_path, exporter):
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()
    (tmp_path / "web.yml").write_text(f"basic_auth_users:\n  ops: '{hashed}'\n"
                                      "http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    store = Store(str(tmp_path / "a.duckdb"))
    app = Api(exporter, functools.partial(remote.answer, call=Host(store.cursor, store.run, print, exporter)),
              token="s3cret", web=webconfig.load(str(tmp_path / "web.yml")))
    try:
        for path in ("/metrics", "/api/stats"):   # loopback is asked too, as node_exporter asks it
            status, headers, body = call(app, path)
            assert status == "401 Unauthorized" and headers["WWW-Authenticate"].startswith("Basic")
            assert "basic_auth_users" in json.loads(body)["error"] and headers["X-Frame-Options"] == "deny"
        user = "Basic " + base64.b64encode(b"ops:pw").decode()
        status, headers, _ = call(app, "/metrics", Authorization=user)
        assert status == "200 OK" and headers["X-Frame-Options"] == "deny"
        assert call(app, "/api/stats", Authorization="Bearer s3cret")[0] == "200 OK"   # a peer's request
        assert call(app, "/api/stats", Authorization="Bearer wrong")[0] == "401 Unauthorized"
    finally:
        store.close()
