"""Every data verb reads a running daemon through its HTTP API and a stopped daemon's store file alike:
the same answer either way; the daemon keeps its file (kits and baselines go through the API), and
a verb that can reach neither says so."""

import json
import time

import numpy as np
import pandas as pd
import pytest
from support import run_cli

from causewatch import wire
from causewatch.cli import main
from causewatch.config import DaemonConfig
from causewatch.daemon.exporter import Exporter
from causewatch.daemon.job_causal import CausalJob
from causewatch.daemon.jobs import JobContext
from causewatch.daemon.server import Daemon
from causewatch.daemon.store import Store

KIT = {"format": "causewatch-probe-kit/1", "app": "mw", "kit": "k9",
       "worker": {"callable": "causewatch.probe.workloads.masterworker:run_task"}, "reference_seconds": 10.0,
       "phases": [{"phase": 0, "weight": 1.0, "input": {"id": "t", "type": "dict", "size": 100, "seed": 1},
                   "ref_seconds": 0.01, "ref_se": 0.001}]}


def _fill(path) -> None:
    """A store with every kind of row a verb reads, and a learnt model with a baseline."""
    store = Store(str(path))
    rng = np.random.default_rng(5)
    n = 240
    size = rng.integers(10, 100, n)
    instr = size * 1000.0 * rng.uniform(0.9, 1.1, n)
    tasks = pd.DataFrame({"node": "n1", "boot": "b", "seq": np.arange(n), "app": "lu", "task_id": "t",
                          "t_start": 1000.0 + np.arange(n), "duration": instr * 1e-6 + rng.normal(0, 1e-3, n),
                          "cpu_seconds": instr * 1e-6,
                          "params": [json.dumps({"size": int(s), "it's": "a"}) for s in size],
                          "counters": [json.dumps({"instructions": v}) for v in instr]})

    def write(con):
        con.register("t", tasks)
        con.execute("INSERT INTO tasks (node, boot, seq, app, task_id, t_start, duration, cpu_seconds, params, "
                    "counters) SELECT node, boot, seq, app, task_id, t_start, duration, cpu_seconds, params, "
                    "counters FROM t")
        con.execute("INSERT INTO ingest_log SELECT node, boot, seq, 'task', t_start, t_start FROM t")
        con.executemany("INSERT INTO regions VALUES ('n1', 'b', ?, 'lu', ?, ?, 2.0, 1, 1.0, ?, NULL, NULL)",
                        [(1000 + i, f"r{i % 4}", time.time() - 30,
                          json.dumps({"cycles": 900 + i, "instructions": 1000})) for i in range(20)])
        con.execute("INSERT INTO probe_results (node, boot, seq, ts, app, kit, predicted_seconds, lo, hi, ratio, "
                    "probe_seconds, phases) VALUES ('n1', 'b', 3000, 1.0, 'mw', 'k1', 5.0, 4.5, 5.5, 0.5, 0.2, NULL)")
        con.execute("INSERT INTO anomalies (anomaly_id, scope, kind, src, dst, opened, updated, score, threshold, "
                    "evidence) VALUES (1, 'app:lu', 'edge_appeared', 'size', 'duration', 1.0, 2.0, 0.4, 0.1, '{}')")
        con.execute("INSERT INTO nodes (node, hostname, cores, memory_bytes, agent_version, boot, first_seen, "
                    "last_seen) VALUES ('n1', 'h1', 4, 8000000000, 't', 'b', 1.0, 2.0)")
    # phase vectors and samples as the writer stores them (their tables are views over id-keyed ones)
    vectors = [wire.decode(wire.encode("bbv", "n1", "b", 2000 + i, {
        "target": "app:lu", "kind": "python", "start": float(i), "end": i + 1.0,
        "vector": wire.sparse({k: 5 + i % 3 for k in (("a.py:f", "a.py:g") if i < 6 else ("b.py:h",))})}))
        for i in range(12)]
    t = np.arange(60.0)
    samples = wire.samples_body(t, ["a", "b"], np.column_stack([t % 7, (t % 7) ** 2]))
    job = {"unit": "job:7", "kind": "job", "start": 1000.0, "job_id": "7", "user": "ann", "cpus": 2.0,
           "memory_bytes": 2**30}
    units = [{**job, "event": "start"}, {**job, "event": "end", "end": 1060.0, "totals": {
                 "unit_cpu_seconds_total": 90.0, "unit_memory_peak_bytes": 2.0**29}},
             {"unit": "step:7.batch", "kind": "step", "event": "end", "start": 1000.5, "end": 1059.0, "job_id": "7",
              "step": "batch", "parent": "job:7"},
             {"unit": "service:a.service", "kind": "service", "event": "start", "start": 0.0, "user": "root"},
             {"unit": "service:a.service", "kind": "service", "event": "end", "start": 0.0, "end": 60.0}]
    running = wire.samples_body(t, ["unit_cpu_seconds_total", "unit_memory_bytes"], np.column_stack([t, 1e6 + t]),
                                scope="service:a.service")
    store.commit_frames([*vectors, wire.decode(wire.encode("samples", "n1", "b", 3001, samples)),
                         *(wire.decode(wire.encode("unit", "n1", "b", 4000 + i, u)) for i, u in enumerate(units)),
                         wire.decode(wire.encode("samples", "n1", "b", 4010, running))])
    store.run(write)
    job = CausalJob(min_rows=50, min_new=20)
    ctx = JobContext(read=store.cursor, write=store.run, send=lambda *a: True, exporter=Exporter())
    job.run(ctx)
    store.close()


VERBS = [
    ["query", "(time_share is high)", "--top", "3"],
    ["bottlenecks", "--top", "5"],
    ["phases", "--target", "app:lu", "--kind", "python", "--k", "2"],
    ["learn", "tasks", "--app", "lu", "--estimator", "fisher-z"],
    ["learn", "samples", "--estimator", "fisher-z"],
    ["rank", "mw"],
    ["nodes"],
    ["model", "--scope", "app:lu"],
    ["model", "--history"],
    ["anomalies", "--all"],
    ["probe", "status"],
    ["diagnose", "--baseline-window", "0,40", "--incident-window", "40,60", "--step", "5"],
    ["diff", "--scope", "app:lu", "--baseline-window", "1000,1119", "--incident-window", "1120,1239"],
]


def _answers(capsys, where: list[str]) -> list:
    out = []
    for verb in VERBS:
        code = main([*verb, "--json", *where])
        captured = capsys.readouterr()
        assert code == 0, (verb, captured.err)
        out.append(json.loads(captured.out))
    return out


def _daemon(db) -> Daemon:
    return Daemon(DaemonConfig(db=str(db), bind="tcp://127.0.0.1:0", http="127.0.0.1:0"), jobs=[]).start()


def test_every_verb_gives_the_same_answer_live_and_from_the_stopped_store(tmp_path, capsys):
    db = tmp_path / "cw.duckdb"
    _fill(db)
    daemon = _daemon(db)
    try:
        live = _answers(capsys, ["--daemon", f"http://{daemon.http.address}"])
    finally:
        daemon.stop()
    stored = _answers(capsys, ["--db", str(db)])
    for verb, a, b in zip(VERBS, live, stored):
        if verb[0] == "rank":       # a probe's age grows between the two asks
            assert 0 < a["nodes"][0].pop("age_seconds") <= b["nodes"][0].pop("age_seconds")
        assert a == b, verb
    query, bottlenecks, phases, tasks, samples, rank, nodes, model, history, anomalies, status, diagnose, diff = live
    assert query and bottlenecks and phases["intervals"] == 12 and tasks["edges"] and samples["edges"]
    assert rank["nodes"][0]["node"] == "n1" and nodes[0]["hostname"] == "h1" and model["edges"] and history
    assert [(r["node"], r["kit"], r["state"]) for r in status] == [("n1", "k1", "done")]
    # a unit per node and per node and scope the store has samples of: the node, the service it ran
    assert sorted(c["unit"] for c in diagnose["causes"]) == ["n1", "n1/service:a.service"]
    # two halves of one app's tasks: a model learnt on each, the same process
    assert diff["rows"] == {"before": 120, "after": 120} and not diff["changed"], diff


def test_kits_and_baselines_go_through_the_daemon_that_holds_the_store(tmp_path, capsys):
    db = tmp_path / "cw.duckdb"
    _fill(db)
    (tmp_path / "kit").mkdir()
    (tmp_path / "kit" / "manifest.json").write_text(json.dumps(KIT))
    daemon = _daemon(db)
    url = f"http://{daemon.http.address}"
    try:
        assert main(["probe", "register", str(tmp_path / "kit"), "--daemon", url]) == 0
        assert main(["model", "--scope", "app:lu", "--pin", "1", "--daemon", url]) == 0
        said = capsys.readouterr().out
        assert "registered kit k9 for mw" in said and "baseline of app:lu: model 1" in said
        assert main(["model", "--scope", "app:lu", "--pin", "99", "--daemon", url]) == 2
        assert "has no model 99" in capsys.readouterr().err
        locked = run_cli("probe", "register", str(tmp_path / "kit"), "--db", str(db))   # another process
        assert locked.returncode == 2 and "read it through the daemon's HTTP API" in locked.stderr
    finally:
        daemon.stop()
    assert main(["model", "--scope", "app:lu", "--json", "--db", str(db)]) == 0
    assert json.loads(capsys.readouterr().out)["baseline"]["how"] == "pinned"
    from causewatch.daemon import readers
    con = readers.shared.open_store(str(db))
    assert [k["kit"] for k in readers.probes.registered_kits(con)] == ["k9"]
    con.close()


def test_what_is_not_there_exits_2_naming_what_is_live_and_stored(tmp_path, capsys):
    db = tmp_path / "cw.duckdb"
    store = Store(str(db))
    store.commit_frames([wire.Frame("probe_result", "n1", "b", 1, time.time(), {
        "app": "mw", "kit": "k1", "predicted_seconds": 5.0, "lo": 4.5, "hi": 5.5, "ratio": 1.0, "probe_seconds": 0.2})])
    store.close()
    asked = (["rank", "nosuchapp"], ["rank", "nosuchapp", "--json"], ["model"])

    def errors(where: list[str]) -> list[str]:
        codes = [main([*verb, *where]) for verb in asked]
        said = capsys.readouterr().err.splitlines()
        assert codes == [2, 2, 2] and len(said) == 3, said
        return said

    daemon = _daemon(db)
    try:
        live = errors(["--daemon", f"http://{daemon.http.address}"])
    finally:
        daemon.stop()
    for said in (live, errors(["--db", str(db)])):
        assert all("no probe results for app 'nosuchapp'; apps with results: mw" in e for e in said[:2])
        assert "no model learnt yet" in said[2]


def test_a_verb_that_reaches_neither_daemon_nor_store_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)   # no causewatch.duckdb here to fall back on
    assert main(["nodes", "--daemon", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert "cannot reach the daemon at http://127.0.0.1:9" in err and "--db FILE" in err
    assert main(["anomalies", "--daemon", "ftp://x"]) == 2
    assert "expected http://HOST:PORT" in capsys.readouterr().err


@pytest.mark.parametrize("path,code,message", [
    ("/api/bbv", 400, "needs ?target=NAME&kind=native|python"),
    ("/api/model", 404, "no model learnt yet"),
    ("/api/rank?app=nosuchapp", 404, "no probe results for app 'nosuchapp'; no app has any yet"),
    ("/api/anomalies?limit=x", 400, "limit: expected a count"),
    ("/api/tasks?app=lu&limit=-2", 400, "limit: expected a count, got '-2'"),
    ("/api/nothing", 404, "no route GET /api/nothing"),
])
def test_bad_api_requests_are_named(tmp_path, path, code, message):
    import urllib.error
    import urllib.request
    db = tmp_path / "cw.duckdb"
    daemon = Daemon(DaemonConfig(db=str(db), bind="tcp://127.0.0.1:0", http="127.0.0.1:0"), jobs=[]).start()
    try:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://{daemon.http.address}{path}", timeout=10)
        assert e.value.code == code and message in json.load(e.value)["error"]
    finally:
        daemon.stop()


# every GET verb, with parameters that find rows in _fill's store (a verb added without one fails below)
EXAMPLES = {
    "stats": {}, "nodes": {}, "query": {"q": "(time_share is high)"}, "bottlenecks": {}, "rank": {"app": "mw"},
    "probe-status": {},
    "regions": {}, "tasks": {"app": "lu"}, "task-apps": {}, "samples": {"metric": ["a"]}, "bbv-targets": {},
    "bbv": {"target": "app:lu", "kind": "python"}, "models": {}, "model": {"scope": "app:lu"}, "anomalies": {},
    "learn": {"data": "tasks", "app": "lu", "estimator": "fisher-z"},
    "range": {"metric": ["a"], "start": 0.0, "end": 60.0, "step": 10.0, "fn": "count"},
    "v1/query_range": {"query": "count_over_time(a[10s])", "start": "0", "end": "60", "step": "10s"},
    "counts": {}, "overview": {}, "jobs": {"kind": "service"}, "job": {"id": "7"},
    "v1/query": {"query": "count_over_time(a[30s])", "time": "59"}, "v1/labels": {},
    "v1/label/values": {"name": "__name__"}, "v1/series": {"match": ["a"]},
}


def _size(verb, answer) -> int | dict:
    """What a cluster of two copies of one store doubles in the verb's answer (or keeps, for one record)."""
    kind = verb.merge.kind
    if kind in ("tables", "records"):
        return len(answer)
    if kind == "summed":
        return answer["tables"]
    if kind == "ranked":
        return len(answer["nodes"])
    if kind == "partials":   # counts over time, which two copies double
        if isinstance(answer, pd.DataFrame):
            return list(answer["value"])
        return [float(v) for s in answer["data"]["result"] for _, v in s.get("values", [s.get("value")])]
    return {k: v for k, v in answer.items() if k != "shard"}


def _doubled(verb, one, two) -> bool:
    kind = verb.merge.kind
    if kind == "summed":
        return two == {t: 2 * n for t, n in one.items()}
    if kind in ("tables", "records", "ranked"):
        return two == 2 * one
    if kind == "partials":
        return two == [2 * x for x in one]
    return two == one


def _rows(df: pd.DataFrame) -> list[dict]:
    return df.astype(object).where(df.notna(), None).to_dict("records")


def _two_shards(verb, query: dict, mine, url: str):
    """The cluster's answer of this store (`mine`, through the routes) and the daemon at `url`, asked as the
    CLI's --daemons asks (a lone daemon refuses a peer it was not told about)."""
    from causewatch.daemon import cluster, verbs
    accept = f"{verbs.ARROW}, application/json"
    if verb.merge.kind == "local":   # answered here, the peers never asked
        return cluster.Cluster("a", {"b": url}, mine).answer("GET", verb.path, query, b"", accept)
    asked = cluster.asked(verb, query)
    replies = cluster.ask_all({"b": url}, "GET", verb.path, asked, b"", accept, "", None, 30.0,
                              lambda: cluster.Reply("a", *mine("GET", verb.path, asked, b"", accept)))
    return cluster.merge(verb, query, replies, accept)


def test_every_get_verb_answers_alike_by_route_both_sources_and_a_cluster(tmp_path):
    from causewatch.commands import source
    from causewatch.daemon import routes, verbs
    gets = {v.name: v for v in verbs.VERBS.values() if v.method == "GET"}
    assert set(EXAMPLES) == set(gets)
    db, copy = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    _fill(db)
    copy.write_bytes(db.read_bytes())
    daemon = _daemon(copy)
    url = f"http://{daemon.http.address}"
    try:
        with source.StoreSource(str(db)) as stored, source.DaemonSource(url) as live:
            def mine(method, path, params, raw, accept):
                return routes.answer(method, path, params, raw, stored.con, None, accept)
            for name, params in EXAMPLES.items():
                verb = gets[name]
                here, there = stored.read(verb, **params), live.read(verb, **params)
                if isinstance(here, pd.DataFrame):   # a null is None or NaN by dtype, either way a null
                    assert _rows(here) == _rows(there), name
                else:
                    if name == "rank":   # a probe's age grows between the two asks
                        [n.pop("age_seconds") for n in (*here["nodes"], *there["nodes"])]
                    assert here == there, name
                query = {k: [str(x) for x in (v if isinstance(v, list) else [v])]
                         for k, v in verb.query(**params).items()}
                code, data, ctype, _ = _two_shards(verb, query, mine, url)
                merged, about = source._answer(data, ctype)
                assert code == 200 and about["shards"] == (["a"] if verb.merge.kind == "local" else ["a", "b"]), name
                if name == "rank":
                    [n.pop("age_seconds") for n in merged["nodes"]]
                assert _size(verb, here) and _doubled(verb, _size(verb, here), _size(verb, merged)), (name, merged)
    finally:
        daemon.stop()
