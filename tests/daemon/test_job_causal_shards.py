"""A scope's model on a sharded site (daemon/job_causal_shards.py), over real DuckDB stores and a real
HTTP peer: the app's tasks split over two shards give one model, on the scope's owner, equal to the
model one daemon learns from the union of the rows; the other shard learns none; new rows on the peer
extend it once (each shard read from where it was last read)."""

import sys
from pathlib import Path

import pytest

from causewatch import shards
from causewatch.daemon import routes
from causewatch.daemon.cluster import Cluster
from causewatch.daemon.exporter import Exporter
from causewatch.daemon.httpapi import Api, HttpApi
from causewatch.daemon.job_causal import CausalJob
from causewatch.daemon.job_causal_shards import ShardCausalJob
from causewatch.daemon.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support import free_port
from test_job_causal import _ctx, _ingest, _tasks

pytestmark = pytest.mark.slow   # a causal learn on each shard and one on their union

APP = next(f"lu{i}" for i in range(100) if shards.owner(f"app:lu{i}", ["a", "b"]) == "a")
SCOPE = f"app:{APP}"


def served(store: Store, shard: str, peer: str) -> HttpApi:
    """The store's HTTP API as shard `shard`, taking peer requests from `peer` (routes on the file)."""
    def answer(method, path, params, raw, accept):
        with store.cursor() as cur:
            return routes.answer(method, path, params, raw, cur, store.run, accept)
    http = HttpApi("127.0.0.1:0", Api(Exporter(), answer, cluster=Cluster(shard, {peer: "http://127.0.0.1:9"}, answer)))
    http.start()
    return http


def edges(store: Store) -> tuple[list, list]:
    with store.cursor() as cur:
        return (cur.execute("SELECT scope, n_rows FROM models ORDER BY model_id").fetchall(),
                cur.execute("SELECT src, dst, directed, strength FROM edges ORDER BY model_id, src, dst").fetchall())


@pytest.fixture
def stores(tmp_path):
    out = {name: Store(str(tmp_path / f"{name}.duckdb")) for name in ("a", "b", "union")}
    yield out
    for s in out.values():
        s.close()


def test_one_model_from_both_shards_equals_the_union_model(stores):
    rows = _tasks(0, 0, 300).assign(app=APP)
    rows.loc[150:, "node"] = "node-2"
    _ingest(stores["a"], rows[:150])
    _ingest(stores["b"], rows[150:])
    _ingest(stores["union"], rows)
    http_b = served(stores["b"], "b", peer="a")
    try:
        owner = ShardCausalJob("a", {"b": f"http://{http_b.address}"}, min_rows=50, min_new=20, confirm=1)
        other = ShardCausalJob("b", {"a": f"http://127.0.0.1:{free_port()}"}, min_rows=50, min_new=20, confirm=1)
        lone = CausalJob(min_rows=50, min_new=20, confirm=1)
        owner.run(_ctx(stores["a"]))
        other.run(_ctx(stores["b"]))
        lone.run(_ctx(stores["union"]))
        assert owner.missing_ == {} and list(other.missing_) == ["a"]
        models, learnt = edges(stores["a"])
        assert models == [(SCOPE, 300)] and learnt
        assert edges(stores["b"]) == ([], [])                      # not the owner: no model there
        assert (models, learnt) == edges(stores["union"])

        more = _tasks(1, 300, 30).assign(app=APP, node="node-2")
        _ingest(stores["b"], more)
        _ingest(stores["union"], more)
        owner.run(_ctx(stores["a"]))
        lone.run(_ctx(stores["union"]))
        assert edges(stores["a"])[0][-1] == (SCOPE, 330)            # each row learnt from once
        assert edges(stores["a"]) == edges(stores["union"])
    finally:
        http_b.stop()
