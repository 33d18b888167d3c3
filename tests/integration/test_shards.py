"""Daemons as shards, real processes on loopback: agents spread over the shards by rendezvous hashing;
a third shard added to the agents' list: only the nodes it now owns move, the frames they had spooled
still go to their old shard, a query spanning the change returns every row once; one shard SIGKILLed:
a global query meanwhile is partial and names it (JSON, header, CLI line), its agents backfill when it
returns; every frame stored exactly once across the shards (audited per (node, boot, seq) in the DuckDB
files). Each shard exports its nodes with a `shard` label."""

import json
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from causewatch import shards
from causewatch.agent import shard
from causewatch.agent.sender import Sender
from causewatch.config import AgentConfig
from causewatch.daemon import cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support import free_port, query, run_cli

TOKEN = "peer-secret"
NODES = [f"host{i:02d}" for i in range(12)]
APP = "sharded"
SENDERS: dict[str, Sender] = {}   # each node's sender to its shard among a, b, c, from the first test on
CHILD = Path(__file__).with_name("shard_child.py")


class Shard:
    """`causewatch daemon --config` of one shard, restartable on the same ports and file."""

    def __init__(self, folder: Path, name: str, ports: dict, peers: str):
        self.name, self.db = name, folder / f"{name}.duckdb"
        self.endpoint = f"tcp://127.0.0.1:{ports[name][0]}"
        self.url = f"http://127.0.0.1:{ports[name][1]}"
        self.peers = [p for p in peers if p != name]
        peers = [f"{p}=http://127.0.0.1:{ports[p][1]}" for p in self.peers]
        self.config = folder / f"{name}.toml"
        self.config.write_text(f'[daemon]\ndb = "{self.db}"\nbind = "{self.endpoint}"\n'
                               f'http = "127.0.0.1:{ports[name][1]}"\nshard = "{name}"\npeers = {json.dumps(peers)}\n'
                               f'store_lake = "{folder / "lake"}"\napi_token = "{TOKEN}"\npeer_timeout = 60.0\n')
        self.proc = None

    def launch(self) -> "Shard":
        self.proc = subprocess.Popen([sys.executable, str(CHILD), str(self.config)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return self

    def ready(self, warm: bool = True) -> "Shard":
        line = self.proc.stdout.readline()
        if not line.startswith("causewatch daemon:"):
            self.proc.kill()
            raise RuntimeError(f"shard {self.name} did not start: {line}{self.proc.stderr.read()}")
        if warm:
            self.warm()
        return self

    def warm(self) -> None:
        """Its API worker's first request starts the fork server (the analysis stack): not under a fan-out."""
        get(f"{self.url}/api/stats", peer=next(iter(self.peers)))

    def stop(self, sig=signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(60)


def get(url: str, peer: str | None = None) -> tuple[dict, object]:
    """(headers, JSON) of a GET; as peer `peer` (with the token) when given."""
    headers = {cluster.PEER: peer, "Authorization": f"Bearer {TOKEN}"} if peer else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as r:
            return dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return dict(e.headers), json.loads(e.read())


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shards")
    ports = {name: (free_port(), free_port()) for name in "abc"}
    site = {name: Shard(folder, name, ports, "abc") for name in "abc"}
    for name in "abc":
        site[name].launch()
    try:
        for name in "abc":
            site[name].ready(warm=False)
        warming = [threading.Thread(target=site[name].warm) for name in "abc"]   # the three at once
        for t in warming:
            t.start()
        for t in warming:
            t.join()
        yield site, folder
    finally:
        for s in site.values():
            s.stop()


def daemons(site, members: str) -> tuple[str, ...]:
    return tuple(f"{m}={site[m].endpoint}" for m in members)


def sender(folder: Path, site, node: str, members: str, start: bool = True) -> tuple[Sender, str, list]:
    """A node's sender to the shard it hashes to among `members`, its spool handed over as the agent does."""
    cfg, name = shard.choose(AgentConfig(node=node, spool=str(folder / "spool" / node), daemons=daemons(site, members)))
    drains = [shard.Drain(c).start() for c in shard.hand_over(cfg, name)] if start else []
    return (Sender(cfg).start() if start else Sender(cfg)), name, drains


def send_tasks(s: Sender, node: str, n: int, first: int) -> None:
    for k in range(first, first + n):
        s.send("task", {"app": APP, "task_id": f"{node}-{k}", "start": float(k), "duration": 1.0,
                        "params": {"node": node, "k": k}})


def global_tasks(site, via: str = "a") -> tuple[dict, dict]:
    return get(f"{site[via].url}/api/tasks?app={APP}")


def test_a_shard_added_moves_only_its_nodes_and_spooled_frames_stay(site):
    """Agents first know two shards, then three: only the nodes c now owns move, the frames they had
    spooled still go to their old shard, and the global answer holds every row once."""
    site, folder = site
    before = {n: shards.owner(n, "ab") for n in NODES}
    after = {n: shards.owner(n, "abc") for n in NODES}
    moved = [n for n in NODES if before[n] != after[n]]
    assert moved and all(after[n] == "c" for n in moved) and len(moved) < len(NODES) / 2
    for n in NODES:
        s, name, _ = sender(folder, site, n, "ab")
        assert name == before[n]
        send_tasks(s, n, 5, 0)
        assert s.flush(60)
        s.close()
        idle, _, _ = sender(folder, site, n, "ab", start=False)   # stopped mid-way: three frames stay spooled
        send_tasks(idle, n, 3, 5)
        idle.close()
    drains = []
    for n in NODES:
        s, name, d = sender(folder, site, n, "abc")
        assert name == after[n] and len(d) == (n in moved)
        send_tasks(s, n, 2, 8)
        SENDERS[n], drains = s, drains + d
    assert all(s.flush(60) for s in SENDERS.values())
    assert all(d.done.wait(60) for d in drains)
    for d in drains:
        d.close()
    assert not list((folder / "spool").glob("*/to-*"))   # drained folders removed
    headers, body = global_tasks(site)
    assert body["cluster"] == {"shards": list("abc"), "missing": {}, "partial": False}
    assert headers[cluster.ANSWERED] == "a,b,c" and cluster.PARTIAL not in headers
    assert len(body["records"]) == 10 * len(NODES)
    # each shard holds exactly its nodes' frames of their time (asked as a peer: that shard alone)
    for name in "abc":
        _, mine = get(f"{site[name].url}/api/tasks?app={APP}", peer="a" if name != "a" else "b")
        node, k = (next(c for c, v in mine["attrs"]["params"].items() if v == key) for key in ("node", "k"))
        held = sorted((r[node], int(r[k])) for r in mine["records"])
        assert held == sorted((n, k) for n in NODES for k in range(10) if (before, after)[k >= 8][n] == name)
    # a peer request without the token, or from a shard this one was not told about, is refused
    for peer_headers, why in (({cluster.PEER: "b"}, "api_token"), ({cluster.PEER: "zz"}, "not a peer")):
        req = urllib.request.Request(f"{site['a'].url}/api/nodes", headers=peer_headers)
        with pytest.raises(urllib.error.HTTPError, match="403") as refused:
            urllib.request.urlopen(req, timeout=30)
        assert why in refused.value.read().decode()


def test_a_killed_shard_is_named_and_its_agents_backfill(site):
    site, folder = site
    owners = {n: shards.owner(n, "abc") for n in NODES}
    site["c"].stop(signal.SIGKILL)
    for n, s in SENDERS.items():
        send_tasks(s, n, 5, 10)
    assert all(SENDERS[n].flush(30) for n in NODES if owners[n] != "c")
    headers, body = global_tasks(site)
    assert body["cluster"]["partial"] and list(body["cluster"]["missing"]) == ["c"]
    assert headers[cluster.PARTIAL].startswith("c: ")
    assert len(body["records"]) < 15 * len(NODES)
    cli = run_cli("nodes", "--daemon", site["b"].url)
    assert cli.returncode == 0 and "PARTIAL" in cli.stderr and "c:" in cli.stderr, cli.stderr
    # c is back on the same file: its agents backfill, nothing lost or doubled
    site["c"].launch().ready()
    assert all(s.flush(60) for s in SENDERS.values())
    for s in SENDERS.values():
        s.close()
    headers, body = global_tasks(site, via="c")
    assert not body["cluster"]["partial"] and len(body["records"]) == 15 * len(NODES)
    # the exporter labels each shard's nodes
    with urllib.request.urlopen(f"{site['b'].url}/metrics", timeout=30) as r:
        metrics = r.read().decode()
    b_node = next(n for n in NODES if owners[n] == "b")
    assert f'causewatch_node_frames_stored_total{{node="{b_node}",shard="b"}}' in metrics
    for s in site.values():
        s.stop()
    # the audit: every frame of every node once across the three files, each where it was promised
    before = {n: shards.owner(n, "ab") for n in NODES}
    rows = [(name, *r) for name, s in site.items()
            for r in query(s.db, "SELECT node, boot, seq, json_extract_string(t.params, '$.k')::INT FROM ingest_log "
                                 "JOIN tasks t USING (node, boot, seq)")]
    keys = [(node, boot, seq) for _, node, boot, seq, _ in rows]
    assert len(keys) == len(set(keys)) == 15 * len(NODES)
    for name, node, _, _, k in rows:
        assert name == (before if k < 8 else owners)[node], (name, node, k)
