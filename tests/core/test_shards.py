"""Rendezvous hashing (causewatch/shards.py) and the shard settings: owners are stable across processes,
adding a member moves only the keys it takes (about 1/N), and bad member lists are named."""

import subprocess
import sys

import pytest

from causewatch import shards
from causewatch.config import AgentConfig, DaemonConfig, load
from causewatch.errors import ConfigError

NODES = [f"node{i:05d}" for i in range(3000)]


def test_owner_is_stable_and_spread():
    members = ["a", "b", "c"]
    owners = {n: shards.owner(n, members) for n in NODES}
    counts = {m: sum(o == m for o in owners.values()) for m in members}
    assert all(800 < c < 1200 for c in counts.values()), counts      # ~1000 each
    # the member list's order does not matter, and another process computes the same owners
    assert {n: shards.owner(n, reversed(members)) for n in NODES} == owners
    code = "from causewatch import shards; print(shards.owner('node00042', ['a', 'b', 'c']))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    assert out.strip() == owners["node00042"]


def test_adding_a_member_moves_only_its_share():
    before = {n: shards.owner(n, ["a", "b", "c"]) for n in NODES}
    after = {n: shards.owner(n, ["a", "b", "c", "d"]) for n in NODES}
    moved = [n for n in NODES if before[n] != after[n]]
    assert all(after[n] == "d" for n in moved)           # nothing moves between the old members
    assert 0.20 < len(moved) / len(NODES) < 0.30         # ~1/4
    removed = {n: shards.owner(n, ["a", "b"]) for n in NODES}
    assert all(removed[n] == before[n] for n in NODES if before[n] != "c")   # only c's nodes move


def test_member_lists_are_checked():
    assert shards.parse_members(["a=tcp://h:1", "b=tcp://h:2"]) == {"a": "tcp://h:1", "b": "tcp://h:2"}
    for bad, word in ((["tcp://h:1"], "NAME=ADDRESS"), (["a=x", "a=y"], "named twice"), (["-a=x"], "shard name")):
        with pytest.raises(ValueError, match=word):
            shards.parse_members(bad)
    with pytest.raises(ValueError):
        shards.owner("n", [])


def test_shard_settings(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[daemon]\nshard = "a"\npeers = ["b=http://127.0.0.1:9465", "c=http://127.0.0.1:9466"]\n'
                   '[agent]\ndaemons = ["a=tcp://127.0.0.1:5555", "b=tcp://127.0.0.1:5556"]\n')
    d = load(DaemonConfig, cfg, "daemon")
    assert d.members() == ["a", "b", "c"] and d.peer_urls()["c"] == "http://127.0.0.1:9466"
    assert load(AgentConfig, cfg, "agent").daemons == ("a=tcp://127.0.0.1:5555", "b=tcp://127.0.0.1:5556")
    cfg.write_text('[daemon]\nshard = "a"\npeers = ["b=tcp://127.0.0.1:9465"]\n')
    with pytest.raises(ConfigError, match=r"c.toml:3: peers.*http://HOST:PORT"):
        load(DaemonConfig, cfg, "daemon")
    with pytest.raises(ConfigError, match="own shard name"):
        load(DaemonConfig, None, peers=["b=http://127.0.0.1:1"])
    with pytest.raises(ConfigError, match="shard name"):
        load(DaemonConfig, None, shard="a/b")
    with pytest.raises(ConfigError, match="daemons"):
        load(AgentConfig, None, daemons=["a=tcp://127.0.0.1"])
