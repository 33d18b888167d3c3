"""bench/storage.py's own logic: the OpenMetrics text it hands promtool reads back as the stored
samples, and the replayed recording keeps counters monotone and values at their recorded precision."""

import shutil
import sys

import numpy as np
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from support import ROOT

from causewatch import wire
from causewatch.daemon.store import Store

sys.path.insert(0, str(ROOT / "bench"))
import storage  # bench/ is no package: its folder goes on the path above

AWKWARD = [1939.3200000000002, 1e-05, 1.3e10, 0.9949238578679074, 3.71728515625, 0.0, 25325268992.0]


def samples(node, t, names, values, scope="node", seq=1):
    return wire.Frame("samples", node, "b", seq, float(t[-1]), wire.samples_body(t, names, values, scope=scope))


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "s.duckdb"))
    t = storage.T0 + np.array([0.0004, 1.0016, 2.4996])
    names = ["cpu_user_seconds_total", "cpu_user_seconds_total.cpu1", "load1", "context_switches"]
    values = np.array([AWKWARD[:4], AWKWARD[3:7], [2.0, np.nan, 7.0, 8.0]])
    s.commit_frames([samples("n1", t, names, values), samples("n2", t, names[:3], values[:, :3] * 2, "cmd:x")])
    yield s
    s.close()


def test_openmetrics_reads_back_as_the_stored_samples(store, tmp_path):
    om = tmp_path / "s.om"
    storage.write_openmetrics(store.con, om)
    text = om.read_text()
    assert text.endswith("# EOF\n")
    read = {}
    for family in text_string_to_metric_families(text):   # raises on a family split or out of order
        for s in family.samples:
            read[(s.name, tuple(sorted(s.labels.items())), int(s.timestamp.sec * 1000 + s.timestamp.nsec // 10**6))] \
                = (family.type, s.value)
    names = dict((m, (f, sample, kind, cpu)) for m, f, sample, kind, cpu in storage.om_names(
        [m for (m,) in store.con.execute("SELECT DISTINCT metric FROM samples").fetchall()]))
    expected = {}
    for node, scope, metric, ts, value in store.con.execute(
            "SELECT node, scope, metric, ts, value FROM samples WHERE value IS NOT NULL").fetchall():
        family, sample, kind, cpu = names[metric]
        labels = {"node": node, "scope": scope, **({"cpu": cpu} if cpu else {})}
        expected[(sample, tuple(sorted(labels.items())), round(ts * 1000))] = (kind, value)
    assert read == expected and len(read) == 19
    assert names["context_switches"] == ("context_switches", "context_switches_total", "counter", "")
    assert names["cpu_user_seconds_total.cpu1"] == ("cpu_user_seconds", "cpu_user_seconds_total", "counter", "1")


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool missing")
def test_promtool_blocks_hold_every_value(store, tmp_path):
    storage.write_openmetrics(store.con, tmp_path / "s.om")
    blocks = storage.prometheus_blocks(tmp_path / "s.om", tmp_path / "prometheus")
    assert blocks["samples"] == 19 and blocks["series"] == 7 and blocks["bytes"] > blocks["chunks_bytes"] > 0


def test_quantum_finds_each_recorded_precision():
    assert storage.quantum(np.array([4096.0 * 3, 4096.0 * 1000, np.nan])) == (4096.0, 0)
    assert storage.quantum(np.array([3.71728515625, 4.5])) == (2.0 ** -11, None)      # load averages
    assert storage.quantum(np.array([1939.3200000000002, 12.5, 0.01])) == (0.01, 2)  # psutil's sums
    assert storage.quantum(np.array([0.9949238578679074, 1.0])) == (0.0, None)       # a full-precision ratio
    assert storage.quantum(np.array([7.0, 7.0])) == (0.0, None)                      # constant


def recording() -> dict:
    """Two stretches of a node: a 2-decimal counter, a perf count at 10 Hz, a page-aligned gauge, a load
    average and a full-precision ratio; the second stretch's counters start again from 0."""
    rng = np.random.default_rng(1)
    stretches = []
    for k, start in enumerate([1e9, 1e9 + 100]):
        frames, seq, faults = [], 0, 0
        for s in range(0, 20, 5):
            t = start + s + np.arange(5.0) + rng.uniform(0, 0.01, 5)
            cpu = np.round(np.cumsum(rng.uniform(0, 2, 5)) + s * 2 + 100 * (1 - k), 2)
            values = np.column_stack([cpu, 4096.0 * rng.integers(1000, 2000, 5), rng.integers(0, 9000, 5) / 2048,
                                      rng.uniform(0, 1, 5)])
            seq += 1
            frames.append(samples("rec", t, ["cpu_user_seconds_total", "memory_used_bytes", "load1", "ratio"],
                                  values, seq=seq))
            fast = start + s + np.arange(0, 5, 0.1)
            counts = faults + np.cumsum(rng.integers(0, 50, 50))
            faults = counts[-1]
            seq += 1
            frames.append(samples("rec", fast, ["page_faults"], counts[:, None], "cmd:x", seq))
        stretches.append({"load": f"s{k}", "frames": frames})
    return {"stretches": stretches}


@pytest.mark.parametrize("exact", [False, True])
def test_replayed_series_keep_counters_monotone_and_values_at_their_precision(exact):
    stretches, series = storage.prepare(recording())
    span = 0.1 * 3600
    counts = []
    for k in range(3):
        rows: dict[tuple[str, str], list] = {}
        for f in storage.node_frames(k, 3, 0.1, stretches, series, exact=exact):
            t, names, values, _ = wire.samples_arrays(f.body)
            for j, name in enumerate(names):
                rows.setdefault((f.body["scope"], name), []).extend(zip(t, values[:, j]))
        assert set(rows) == {("node", "cpu_user_seconds_total"), ("node", "memory_used_bytes"), ("node", "load1"),
                             ("node", "ratio"), (storage.TARGET_SCOPE, "page_faults")}
        for key, tv in rows.items():
            t, v = np.array(tv).T
            assert np.all(np.diff(t) > 0.002) and storage.T0 <= t[0] < storage.T0 + 5 and t[-1] < storage.T0 + span
            if key[1] in ("cpu_user_seconds_total", "page_faults"):
                assert np.all(np.diff(v) >= 0), key
                rise = max(st.last[key] - st.first[key] for st in stretches)
                assert v[-1] - v[0] > 8 * rise, key       # ~17 copies, each continuing from the last
        cpu = np.array(rows[("node", "cpu_user_seconds_total")])[:, 1]
        counts.append(set(cpu))
        assert np.array_equal(np.round(cpu, 2), cpu)
        memory = np.array(rows[("node", "memory_used_bytes")])[:, 1]
        assert np.all(memory % 4096 == 0)
        load = np.array(rows[("node", "load1")])[:, 1] * 2048
        assert np.array_equal(load, np.rint(load))
        ratio = np.array(rows[("node", "ratio")])[:, 1]
        assert np.all((0 <= ratio) & (ratio <= 1))
        repeats = len(ratio) - len(np.unique(ratio))
        assert (repeats > len(ratio) // 2) if exact else (repeats == 0)   # moved levels: no repeated loop
    # each node's counters start at a level of their own: no two nodes replay the same values
    shared = len(counts[0] & counts[1]) / len(counts[1])   # both start in the first stretch
    assert shared > 0.8 if exact else shared < 0.2


def test_node_blocks_hold_every_row_and_hot_layouts_measure_each(store, tmp_path):
    con = store.con
    con.execute(f"CREATE TEMP TABLE rows AS {storage.ROWS}")
    con.execute(f"CREATE TEMP TABLE t AS {storage.NODE_BLOCKS.format(ms=60_000)}")
    blocks = con.execute("SELECT series, ts, vals FROM t").fetchall()
    unpacked = sorted((sid, t, vals[i * len(ts) + j]) for series, ts, vals in blocks
                      for i, sid in enumerate(series) for j, t in enumerate(ts))
    rows = sorted(con.execute("SELECT series_id, ts, value FROM rows").fetchall())
    assert unpacked == rows and len(rows) == 21   # 3 times x (4 + 3) series, the null kept
    assert len(blocks) == 2                       # one per node: its series share their times
    work = tmp_path / "layouts"
    work.mkdir()
    sizes = storage.hot_layouts(con, work)
    assert set(sizes) == set(storage.HOT_LAYOUTS) and all(b > 0 for b in sizes.values())
    assert list(work.iterdir()) == []             # no file left behind
