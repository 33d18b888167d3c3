"""`causewatch nodes` on a store an agent's hello reached through the writer: its facts, and its node
collectors at the agent's start (how many fared how, each one not ok with its reason)."""

import json
import time

import pytest

from causewatch import wire
from causewatch.cli import main
from causewatch.daemon.store import Store
from causewatch.errors import WireError

COLLECTORS = {"stat": {"interval": 1.0, "state": "ok"}, "meminfo": {"interval": 1.0, "state": "ok"},
              "conntrack": {"interval": 10.0, "state": "FileNotFoundError: nf_conntrack_count"},
              "netstat": {"interval": 0.0, "state": "off (collector_intervals.netstat = 0)"},
              "nvml": {"interval": 10.0, "state": "unavailable: nvmlInit: NVML Shared Library Not Found"}}


def _store(path, **hellos) -> str:
    store = Store(str(path))
    store.commit_frames([wire.decode(wire.encode("hello", node, "b", 1, {
        "hostname": f"{node}.example", "agent_version": "1", "cores": 2, "memory_bytes": 2**31, **body}))
        for node, body in hellos.items()])
    store.close()
    return str(path)


def test_the_nodes_collectors_are_counted_and_each_not_ok_named(tmp_path, capsys):
    db = _store(tmp_path / "n.duckdb", n1={"collectors": COLLECTORS}, n2={})   # n2: an agent that lists none
    assert main(["nodes", "--db", db]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-1] == "collectors"
    assert lines[1].startswith("n1") and lines[1].endswith("2 ok, 1 off, 1 unavailable, 1 failing")
    assert lines[2:5] == ["  conntrack: FileNotFoundError: nf_conntrack_count",
                          "  netstat: off (collector_intervals.netstat = 0)",
                          "  nvml: unavailable: nvmlInit: NVML Shared Library Not Found"]
    assert lines[5].startswith("n2") and len(lines) == 6
    assert main(["nodes", "--db", db, "--json"]) == 0
    nodes = json.loads(capsys.readouterr().out)
    assert [(n["node"], n["collectors"]) for n in nodes] == [("n1", COLLECTORS), ("n2", {})]
    assert nodes[0]["last_seen"] <= time.time()


def test_a_hello_with_a_malformed_collectors_map_is_refused():
    body = {"hostname": "h", "agent_version": "1", "collectors": {"stat": ["ok"]}}
    with pytest.raises(WireError) as e:
        wire.decode(wire.encode("hello", "n", "b", 1, body))
    assert e.value.field.endswith("collectors.stat")
