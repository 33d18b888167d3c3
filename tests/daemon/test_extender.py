"""The Kubernetes scheduler extender's prioritize route: ExtenderArgs in (NodeNames or Nodes.items, any
field case, the app from the pod's label), HostPriorityList out (Host, Score 0-10, unknown nodes lowest);
hostile bodies get a 400 naming what is wrong, and the daemon answers the next request as before."""

import http.client
import io
import json
import time

import pytest

from causewatch import wire
from causewatch.daemon import remote
from causewatch.daemon.exporter import Exporter
from causewatch.daemon.httpapi import MAX_BODY, Api, HttpApi
from causewatch.daemon.store import Store
from causewatch.daemon.store.results import register_kit
from causewatch.daemon.worker import Host
from causewatch.probe.registry import kit_row

KIT = {"format": "causewatch-probe-kit/1", "app": "mw", "kit": "k1", "tasks": 10,
       "worker": {"callable": "causewatch.probe.workloads.masterworker:run_task"}, "reference_seconds": 10.0,
       "phases": [{"phase": 0, "weight": 1.0, "input": {"id": "t", "type": "dict", "size": 100, "seed": 1},
                   "ref_seconds": 0.01, "ref_se": 0.001}]}
PATH = "/api/k8s/prioritize"


def fill(path) -> None:
    """mw results: fast 5 s per run, slow 20 s, stale 1 s but 3 days old; `unknown` has none."""
    store = Store(str(path))
    register_kit(store.con, kit_row(KIT))
    now = time.time()
    store.commit_frames([wire.Frame("probe_result", node, "b", i, ts, {
        "app": "mw", "kit": "k1", "predicted_seconds": s, "lo": s * 0.9, "hi": s * 1.1, "ratio": 1.0,
        "probe_seconds": 0.2}) for i, (node, ts, s) in enumerate(
            [("fast", now, 5.0), ("slow", now, 20.0), ("stale", now - 3 * 86400, 1.0)], 1)])
    store.close()


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    path = tmp_path_factory.mktemp("extender") / "cw.duckdb"
    fill(path)
    store = Store(str(path))
    yield Host(store.cursor, store.run, lambda *a: False, Exporter())
    store.close()


def prioritize(host, body, raw=None, **params):
    raw = json.dumps(body).encode() if raw is None else raw
    code, data, ctype = remote.answer("POST", PATH, {k: [str(v)] for k, v in params.items()}, raw, "", call=host)
    assert ctype == "application/json"
    return code, json.loads(data)


def pod(app=None, where="labels"):
    return {"metadata": {"name": "p", where: {"causewatch/app": app} if app else {}}}


HOSTS = ["unknown", "slow", "stale", "fast"]


def test_scores_follow_the_ranking_in_the_documented_shape(host):
    code, answer = prioritize(host, {"Pod": pod("mw"), "NodeNames": HOSTS})
    assert code == 200 and [set(h) for h in answer] == [{"Host", "Score"}] * 4
    scores = {h["Host"]: h["Score"] for h in answer}
    assert [h["Host"] for h in answer] == HOSTS                         # each candidate once, in order
    assert all(isinstance(s, int) and 0 <= s <= 10 for s in scores.values())
    assert scores == {"fast": 10, "slow": 2, "stale": 0, "unknown": 0}   # 10 x 5/20 rounds to 2; unknown lowest
    # Nodes.items (nodeCacheCapable: false), lower-case field names, the app from an annotation or ?app=
    items = {"items": [{"metadata": {"name": h}} for h in HOSTS]}
    for body, params in (({"pod": pod("mw", "annotations"), "nodes": items}, {}),
                         ({"Pod": pod(), "Nodes": items}, {"app": "mw"})):
        assert prioritize(host, body, **params) == (200, answer)
    # the stale node counts again when the caller's max_age lets it
    assert {h["Host"]: h["Score"] for h in prioritize(host, {"Pod": pod("mw"), "NodeNames": HOSTS},
                                                        max_age=4 * 86400)[1]}["stale"] == 10


def test_a_pod_without_an_app_or_an_app_without_results_scores_every_node_0(host):
    for body in ({"Pod": pod(), "NodeNames": HOSTS}, {"Pod": pod("nothing-probed"), "NodeNames": HOSTS},
                 {"NodeNames": HOSTS}):
        code, answer = prioritize(host, body)
        assert code == 200 and [h["Score"] for h in answer] == [0] * 4
    assert prioritize(host, {"Pod": pod("mw"), "NodeNames": []}) == (200, [])


@pytest.mark.parametrize("raw, names", [
    (b"{not json", "body: not JSON"),
    (b"[" * 100_000, "body: not JSON"),                                   # deeper than the parser goes
    (b"", "body (ExtenderArgs): expected an object, got NoneType"),
    (b"[1, 2]", "body (ExtenderArgs): expected an object, got list"),
    (json.dumps({"Pod": pod("mw")}).encode(), "needs NodeNames"),
    (json.dumps({"NodeNames": "fast"}).encode(), "NodeNames: expected a list"),
    (json.dumps({"NodeNames": ["fast", 7]}).encode(), "NodeNames[1]: expected a list of node names"),
    (json.dumps({"Nodes": []}).encode(), "Nodes: expected an object"),
    (json.dumps({"Nodes": {"items": {}}}).encode(), "Nodes.items: expected a list"),
    (json.dumps({"Nodes": {"items": [{"metadata": {"name": "a"}}, {"kind": "Node"}]}}).encode(),
     "Nodes.items[1].metadata.name: expected a node name"),
    (json.dumps({"Nodes": {"items": [7]}}).encode(), "Nodes.items[0]: expected an object"),
])
def test_hostile_bodies_get_a_400_naming_the_field(host, raw, names):
    code, answer = prioritize(host, None, raw=raw)
    assert code == 400 and names in answer["error"]


def test_a_bad_max_age_is_named(host):
    code, answer = prioritize(host, {"NodeNames": HOSTS}, max_age="soon")
    assert code == 400 and "max_age" in answer["error"]
    code, answer = prioritize(host, {"NodeNames": HOSTS}, max_age=-1)
    assert code == 400 and "max_age" in answer["error"]


def test_the_scheduler_may_ask_from_any_host_while_writes_stay_loopback_only():
    seen = []
    api = Api(Exporter(), lambda *a: seen.append(a[:2]) or (200, b"[]", "application/json"))

    def post(path, length=2):
        environ = {"REQUEST_METHOD": "POST", "PATH_INFO": path, "REMOTE_ADDR": "10.1.2.3",
                   "CONTENT_LENGTH": str(length), "wsgi.input": io.BytesIO(b"{}")}
        status = []
        api(environ, lambda s, headers: status.append(s))
        return status[0]
    assert post(PATH).startswith("200") and seen == [("POST", PATH)]
    assert post("/api/kits").startswith("403") and len(seen) == 1
    assert post(PATH, MAX_BODY + 1).startswith("413") and len(seen) == 1


def test_the_http_server_answers_the_extender_and_survives_hostile_requests(host):
    """The daemon's WSGI app on its threading HTTP server, answering through the route path (the daemon's
    API worker runs the same remote.answer; tests/integration starts whole daemons)."""
    server = HttpApi("127.0.0.1:0", Api(Exporter(), lambda *a: remote.answer(*a, call=host)))
    server.start()
    address, port = server.address.split(":")

    def post(data: bytes, length: int | None = None):
        con = http.client.HTTPConnection(address, int(port), timeout=60)
        try:
            con.putrequest("POST", PATH)
            con.putheader("Content-Type", "application/json")
            con.putheader("Content-Length", str(len(data) if length is None else length))
            con.endheaders(data)
            reply = con.getresponse()
            return reply.status, json.loads(reply.read())
        finally:
            con.close()
    try:
        good = json.dumps({"Pod": pod("mw"), "NodeNames": HOSTS}).encode()
        assert post(good)[1] == [{"Host": "unknown", "Score": 0}, {"Host": "slow", "Score": 2},
                                 {"Host": "stale", "Score": 0}, {"Host": "fast", "Score": 10}]
        assert post(b"{oops")[0] == 400
        status, answer = post(b"", length=MAX_BODY + 1)       # announced, never sent: refused unread
        assert status == 413 and "body over" in answer["error"]
        assert post(b"[" * 200_000)[0] == 400
        assert post(good)[0] == 200                           # and the server answers as before
    finally:
        server.stop()
