"""A shared lake: a shard compacts under shard=NAME/, lists only its own files, and publishes a manifest
other shards read; a file not yet committed (still being written, or left by a crashed move) is never
in a manifest, so no reader counts it."""

import functools
import json
import sys
from pathlib import Path

import duckdb
import pyarrow as pa

from causewatch.daemon import cluster, routes, store, verbs
from causewatch.daemon.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support import free_port
from test_lake import T0, frames


def test_shards_share_a_lake_and_read_each_others_committed_files(tmp_path):
    lake = tmp_path / "lake"
    stores = {name: Store(str(tmp_path / f"{name}.duckdb"), lake=str(lake), shard=name) for name in "ab"}
    try:
        for k, (name, s) in enumerate(stores.items()):
            s.commit_frames(frames(nodes=2, days=1.0, seed=k))
            s.run(functools.partial(store.lake.compact, lake=str(s.lake), cutoff_ms=int((T0 + 86400) * 1000)))
            s.run(functools.partial(store.lake.publish, lake=s.lake))
            assert s.lake == lake / f"shard={name}"
            assert all(p.startswith("samples/day=") for (p,) in s.con.execute("SELECT path FROM lake_files").fetchall())
        # a move in progress at b: a complete-looking file that b has not listed
        stray = lake / "shard=b/samples/day=2026-01-01/unlisted.parquet"
        stray.parent.mkdir(parents=True)
        stray.write_bytes(b"PAR1 half written")
        seen = store.lake.shard_files(lake)
        assert set(seen) == {"a", "b"} and str(stray) not in seen["b"]
        assert store.lake.shard_files(lake, skip="a").keys() == {"b"}
        with duckdb.connect() as con:
            n = con.execute(f"SELECT count(*) FROM read_parquet({seen['a'] + seen['b']})").fetchone()[0]
        hot = sum(s.con.execute("SELECT count(*) FROM samples").fetchone()[0] for s in stores.values())
        assert n == hot   # everything moved: the manifests name every value once
        # each shard lists only its own files, and its sweep does not touch the others'
        stores["a"].run(functools.partial(store.lake.compact, lake=str(stores["a"].lake), cutoff_ms=0))
        assert stray.exists()
        manifest = json.loads((lake / "shard=a" / store.lake.MANIFEST).read_text())
        assert sum(f["rows"] for f in manifest["files"]) == stores["a"].con.execute(
            "SELECT sum(rows) FROM lake_files").fetchone()[0]
        # b does not answer: a global samples query through a reads b's history from the lake, and says so
        def local(method, path, params, raw, accept):
            with stores["a"].cursor() as cur:
                return routes.answer(method, path, params, raw, cur, stores["a"].run, accept)
        c = cluster.Cluster("a", {"b": f"http://127.0.0.1:{free_port()}"}, local, timeout=2.0, lake=str(lake))
        code, data, _, headers = c.answer("GET", "/api/samples", {"metric": ["cpu"]}, b"", verbs.ARROW)
        table = pa.ipc.open_stream(data).read_all()
        about = json.loads(table.schema.metadata[cluster.META])
        assert about["partial"] and about["missing"]["b"].endswith("its lake history read, not its hot window")
        with stores["b"].cursor() as cur:
            b_rows = cur.execute("SELECT count(*) FROM samples WHERE metric = 'cpu'").fetchone()[0]
        with stores["a"].cursor() as cur:
            a_rows = cur.execute("SELECT count(*) FROM samples WHERE metric = 'cpu'").fetchone()[0]
        assert table.num_rows == a_rows + b_rows and set(table.column("node").to_pylist()) == {"n0", "n1"}
        assert table.column("ts").to_pylist() == sorted(table.column("ts").to_pylist())
    finally:
        for s in stores.values():
            s.close()


def test_a_lone_daemon_keeps_todays_layout(tmp_path):
    s = Store(str(tmp_path / "x.duckdb"))
    try:
        assert s.lake == tmp_path / "x.lake" and not (s.lake / store.lake.MANIFEST).exists()
    finally:
        s.close()
