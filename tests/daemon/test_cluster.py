"""The cluster tier (daemon/cluster.py) against real HTTP peers on loopback: answers merge in the verb's
order with each row's shard known, and a hostile or absent peer (truncated Arrow, another schema, not
JSON, an error, a peer slower than the timeout, none listening) makes the answer partial, naming the
shard and why, in the JSON, the Arrow metadata and the headers; nothing raises, nothing waits past it."""

import http.server
import json
import sys
import threading
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from causewatch.daemon import cluster, verbs
from causewatch.daemon.routes import arrow_bytes

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support import free_port

SAMPLES = pd.DataFrame({"node": ["n1", "n1"], "ts": [2.0, 4.0], "scope": ["node"] * 2, "metric": ["cpu"] * 2,
                        "value": [1.0, float("nan")]})
PEER_SAMPLES = pd.DataFrame({"node": ["n2"], "ts": [3.0], "scope": ["node"], "metric": ["cpu"], "value": [7.0]})
RELEASE = threading.Event()   # the slow peer answers only once the test ends


def peer_answer(kind: str, path: str, headers) -> tuple[int, bytes, str]:
    if kind == "slow":
        RELEASE.wait(60)
    if path.startswith("/api/samples"):
        good = arrow_bytes(PEER_SAMPLES)
        return {"good": (200, good, verbs.ARROW), "slow": (200, good, verbs.ARROW),
                "truncated": (200, good[:len(good) // 2], verbs.ARROW),
                "schema": (200, arrow_bytes(pd.DataFrame({"x": [1]})), verbs.ARROW),
                "error": (500, b'{"error": "boom"}', "application/json")}[kind]
    if path.startswith("/api/rank"):
        nodes = [{"rank": 1, "node": "n2", "task_seconds": 1.5}, {"rank": 2, "node": "n4", "task_seconds": 3.0}]
        return 200, json.dumps({"app": "lu", "ratio": "r", "nodes": nodes}).encode(), "application/json"
    if path.startswith("/api/nodes"):
        good = json.dumps([{"node": "n2", "shard_seen_by": headers.get(cluster.PEER)}]).encode()
        return {"good": (200, good, "application/json"), "slow": (200, good, "application/json"),
                "truncated": (200, good[:9], "application/json"),
                "schema": (200, b'{"not": "a list"}', "application/json"),
                "error": (500, b"boom", "text/plain")}[kind]
    return 404, b'{"error": "none"}', "application/json"


def serve(kind: str) -> tuple[str, http.server.ThreadingHTTPServer]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            code, data, ctype = peer_answer(kind, self.path, self.headers)
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except OSError:
                pass   # the slow peer's asker has gone: it was meant to

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            data = json.dumps({"registered": {"app": "lu", "kit": "k1"}}).encode()
            self.send_response(200 if kind == "good" else 500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", server


@pytest.fixture(scope="module")
def peers():
    servers = {kind: serve(kind) for kind in ("good", "slow", "truncated", "schema", "error")}
    yield {kind: url for kind, (url, _) in servers.items()}
    RELEASE.set()
    for _, server in servers.values():
        server.shutdown()


def local(method, path, params, raw, accept):
    if method == "POST":
        return 200, json.dumps({"registered": {"app": "lu", "kit": "k1"}}).encode(), "application/json"
    if path == "/api/rank":
        nodes = [{"rank": 1, "node": "n1", "task_seconds": 2.0}]
        return 200, json.dumps({"app": "lu", "ratio": "r", "nodes": nodes}).encode(), "application/json"
    if path == "/api/samples":
        return 200, arrow_bytes(SAMPLES), verbs.ARROW
    if path == "/api/nodes":
        return 200, json.dumps([{"node": "n1"}]).encode(), "application/json"
    return 400, b'{"error": "bad"}', "application/json"


def test_good_peers_merge_in_the_verbs_order(peers):
    c = cluster.Cluster("a", {"b": peers["good"]}, local, timeout=5.0)
    code, data, ctype, headers = c.answer("GET", "/api/samples", {}, b"", verbs.ARROW)
    table = pa.ipc.open_stream(data).read_all()
    assert (code, ctype) == (200, verbs.ARROW)
    assert table.column("ts").to_pylist() == [2.0, 3.0, 4.0]            # sorted across shards
    assert json.loads(table.schema.metadata[cluster.META]) == {"shards": ["a", "b"], "missing": {}, "partial": False}
    assert dict(headers) == {cluster.ANSWERED: "a,b"}
    code, data, ctype, _ = c.answer("GET", "/api/samples", {"limit": ["2"]}, b"", "application/json")
    body = json.loads(data)
    assert [r["value"] for r in body["records"]] == [1.0, 7.0] and body["cluster"]["partial"] is False
    code, data, _, _ = c.answer("GET", "/api/nodes", {}, b"", "")
    body = json.loads(data)
    assert [(r["node"], r["shard"]) for r in body["records"]] == [("n1", "a"), ("n2", "b")]
    assert body["records"][1]["shard_seen_by"] == "a"                  # asked as peer a
    assert c.answer("GET", "/api/query", {}, b"", "")[0] == 400          # this shard's refusal answers


@pytest.mark.parametrize("kind, why", [("slow", "no answer within"), ("truncated", "Arrow stream"),
                                       ("schema", "schema differs"), ("error", "HTTP 500"),
                                       ("down", "Connection refused")])
def test_a_hostile_or_absent_peer_makes_the_answer_partial(peers, kind, why):
    url = peers.get(kind, f"http://127.0.0.1:{free_port()}")
    c = cluster.Cluster("a", {"b": peers["good"], "x": url}, local, timeout=1.0)
    code, data, ctype, headers = c.answer("GET", "/api/samples", {}, b"", verbs.ARROW)
    table = pa.ipc.open_stream(data).read_all()
    about = json.loads(table.schema.metadata[cluster.META])
    assert code == 200 and about["partial"] and about["shards"] == ["a", "b"], about
    assert list(about["missing"]) == ["x"] and why in about["missing"]["x"], about
    assert table.num_rows == 3
    assert dict(headers)[cluster.PARTIAL].startswith("x: ")
    code, data, _, headers = c.answer("GET", "/api/nodes", {}, b"", "")
    body = json.loads(data)
    assert body["cluster"]["partial"] and "x" in body["cluster"]["missing"]
    assert sorted(r["node"] for r in body["records"]) == ["n1", "n2"]


def test_learn_is_marked_as_one_shards_answer(peers):
    c = cluster.Cluster("a", {"b": peers["good"]}, lambda *a: (200, b'{"edges": []}', "application/json"))
    code, data, _, headers = c.answer("GET", "/api/learn", {}, b"", "")
    body = json.loads(data)
    assert body["cluster"]["missing"]["b"].startswith("learn reads") and dict(headers)[cluster.PARTIAL]


def test_kits_reach_every_shard_and_rankings_merge(peers):
    c = cluster.Cluster("a", {"b": peers["good"], "x": peers["error"]}, local, timeout=5.0)
    code, data, _, headers = c.answer("POST", "/api/kits", {}, b'{"manifest": {}}', "")
    body = json.loads(data)
    assert code == 200 and set(body["shards"]) == {"a", "b"} and body["registered"]["kit"] == "k1"
    assert list(body["cluster"]["missing"]) == ["x"]          # a shard the kit did not reach is named
    c = cluster.Cluster("a", {"b": peers["good"]}, local, timeout=5.0)
    body = json.loads(c.answer("GET", "/api/rank", {"app": ["lu"]}, b"", "")[1])
    ranked = [(r["rank"], r["node"], r["shard"]) for r in body["nodes"]]
    assert ranked == [(1, "n2", "b"), (2, "n1", "a"), (3, "n4", "b")]
