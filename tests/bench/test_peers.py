"""bench/peers.py's ingest mode: its hand-made remote write (protobuf WriteRequest in a snappy block of
literals) reads back as the samples it encodes, Prometheus stores it, and the agents' feed frames the
same samples the peers are sent."""

import json
import shutil
import struct
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import msgpack
import numpy as np
import pytest
from support import ROOT, free_port

from causewatch import wire

sys.path.insert(0, str(ROOT / "bench"))
import peers  # bench/ is no package: its folder goes on the path above

PROMETHEUS = shutil.which("prometheus")


def read_varint(data: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = data[i]
        n |= (b & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if not b & 0x80:
            return n, i


def unsnappy(block: bytes) -> bytes:
    """A snappy block's bytes, for blocks of literals only (a copy element fails the test)."""
    n, i = read_varint(block, 0)
    out = bytearray()
    while i < len(block):
        tag = block[i]
        assert tag & 3 == 0, "not a literal"
        length, i = tag >> 2, i + 1
        if length >= 60:
            width = length - 59
            length, i = int.from_bytes(block[i:i + width], "little"), i + width
        out += block[i:i + length + 1]
        i += length + 1
    assert len(out) == n
    return bytes(out)


def fields(data: bytes):
    """(field number, wire type, value) of one protobuf message."""
    i = 0
    while i < len(data):
        key, i = read_varint(data, i)
        number, kind = key >> 3, key & 7
        if kind == 2:
            n, i = read_varint(data, i)
            yield number, kind, data[i:i + n]
            i += n
        elif kind == 1:
            yield number, kind, data[i:i + 8]
            i += 8
        else:
            assert kind == 0
            value, i = read_varint(data, i)
            yield number, kind, value


def decoded(body: bytes) -> dict:
    """{(sorted labels): [(ms, value)]} of a WriteRequest."""
    out = {}
    for number, _, ts in fields(body):
        assert number == 1
        labels, samples = [], []
        for n, _, part in fields(ts):
            if n == 1:
                label = {k: v.decode() for k, _, v in fields(part)}
                labels.append((label[1], label[2]))
            else:
                sample = {k: v for k, _, v in fields(part)}
                samples.append((sample[2], struct.unpack("<d", sample[1])[0]))
        out[tuple(labels)] = samples
    return out


@pytest.fixture
def grid():
    return peers.Grid(nodes=3, series=4, command=2, seconds=10, t0=1_700_000_000.0)


def test_the_remote_write_reads_back_as_the_samples(grid):
    series = [s for n in range(grid.nodes) for s in peers._series_of(grid, n, 0, 5)]
    back = decoded(unsnappy(peers.snappy_literals(peers.write_request(series), chunk=1000)))
    assert len(back) == grid.nodes * (grid.series + grid.command)
    for metric, node, scope, t, v in series:
        labels = (("__name__", metric), ("node", node), ("scope", scope))
        assert back[labels] == list(zip((t * 1000).round().astype(int).tolist(), v.tolist()))


@pytest.mark.parametrize("size", [1, 59, 60, 61, 255, 256, 257, 65536, 70000])
def test_snappy_literals_of_every_tag_width(size):
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    assert unsnappy(peers.snappy_literals(data)) == data


def test_the_agents_frames_hold_the_peers_samples(grid):
    feed = peers.GridFeed(grid)
    node, frames = 1, []
    for tick in range(feed.ticks):   # each body valid as the daemon decodes it
        for packed in feed.payloads(node)(tick):
            frames.append(wire.decode(wire.encode("samples", grid.node_name(node), "b", len(frames) + 1,
                                                  msgpack.unpackb(packed))))
    got = {}
    for f in frames:
        t, names, values, _ = wire.samples_arrays(f.body)
        for j, name in enumerate(names):
            got.setdefault(name, []).extend(zip(t.tolist(), values[:, j].tolist()))
    expected = {m: list(zip(t.tolist(), v.tolist())) for m, _, _, t, v in peers._series_of(grid, node, 0, grid.seconds)}
    assert {m: sorted(x) for m, x in got.items()} == expected
    assert len(frames) == feed.frames(1) and sum(len(x) for x in got.values()) == feed.values(1)


@pytest.mark.service
@pytest.mark.skipif(PROMETHEUS is None, reason="Debian's prometheus is not installed")
def test_prometheus_stores_the_remote_write(tmp_path):
    now = time.time()
    grid = peers.Grid(nodes=2, series=3, command=0, seconds=5, t0=float(int(now) - 10))
    port = free_port()
    (tmp_path / "p.yml").write_text("global: {}\n")
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={tmp_path / 'p.yml'}", f"--storage.tsdb.path={tmp_path}/t",
                             f"--web.listen-address=127.0.0.1:{port}", "--web.enable-remote-write-receiver",
                             "--log.level=error"])
    base = f"http://127.0.0.1:{port}"
    try:
        peers.wait_http(f"{base}/-/ready")
        body = peers.snappy_literals(peers.write_request(
            [s for n in range(grid.nodes) for s in peers._series_of(grid, n, 0, grid.seconds)]))
        urllib.request.urlopen(urllib.request.Request(f"{base}/api/v1/write", data=body, headers={
            "Content-Type": "application/x-protobuf", "Content-Encoding": "snappy"}), timeout=30).read()
        q = urllib.parse.urlencode({"query": 'metric_001{node="agent-0001"}[1m]', "time": f"{time.time():.3f}"})
        with urllib.request.urlopen(f"{base}/api/v1/query?{q}", timeout=30) as r:
            result = json.load(r)["data"]["result"]
    finally:
        proc.terminate()
        proc.wait(30)
    t, v = grid.node_rows(1, 0, grid.seconds)
    assert [(float(x), float(y)) for x, y in result[0]["values"]] == list(zip(t.tolist(), v[:, 1].tolist()))
    assert np.isfinite(v).all()
