"""The demo's shards section (`causewatch demo --shards N`): N daemons as shards over one Parquet lake,
agents sent to the shard their node name hashes to, one answer for all through any shard, and a partial
one, naming the shard, once one is down (docs/shards.md)."""

from __future__ import annotations

import json
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from causewatch import shards

NODES = 6             # agents, each a node name: rendezvous hashing spreads them over the shards
HOT_SECONDS = 2.0     # samples older than this move to the lake (a daemon's default is an hour)
SETTLE = 60.0         # seconds at most for every node to report and every shard to write its lake
ASK_TIMEOUT = 30.0    # seconds an answer through a shard may take (its peers get peer_timeout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Shard:
    """`causewatch daemon --config` as shard `name`, its peers the others, its lake the shared one."""

    def __init__(self, folder: Path, name: str, ports: dict, token: str):
        self.name, self.url, self.log = name, f"http://127.0.0.1:{ports[name][1]}", folder / f"{name}.log"
        self.endpoint = f"tcp://127.0.0.1:{ports[name][0]}"
        peers = [f"{p}=http://127.0.0.1:{http}" for p, (_, http) in ports.items() if p != name]
        config = folder / f"{name}.toml"
        config.write_text(f'[daemon]\ndb = "{folder / name}.duckdb"\nbind = "{self.endpoint}"\n'
                          f'http = "127.0.0.1:{ports[name][1]}"\nshard = "{name}"\npeers = {json.dumps(peers)}\n'
                          f'store_lake = "{folder / "lake"}"\nstore_hot_seconds = {HOT_SECONDS}\n'
                          f'compaction_interval = 1.0\napi_token = "{token}"\npeer_timeout = 10.0\n')
        self.proc = subprocess.Popen([sys.executable, "-m", "causewatch.cli", "daemon", "-q", "--config", str(config)],
                                     stdout=subprocess.PIPE, stderr=open(self.log, "w"), text=True)

    def ready(self) -> None:
        line = self.proc.stdout.readline()
        if not line.startswith("causewatch daemon:"):
            raise RuntimeError(f"shard {self.name} did not start (exit {self.proc.poll()}): see {self.log}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)


def _agent(folder: Path, node: str, daemons: list[str]) -> subprocess.Popen:
    """An agent of `node`; it stops within a second: the stopped shard's agents wait for no ack (what it
    did not take stays in their spools, as after any shard's crash)."""
    config = folder / f"{node}.toml"
    config.write_text(f'[agent]\ndaemons = {json.dumps(daemons)}\nnode = "{node}"\nstop_drain_seconds = 1.0\n'
                      f'spool = "{folder / node}-spool"\nipc = "ipc://{folder / node}.sock"\n')
    return subprocess.Popen([sys.executable, "-m", "causewatch.cli", "agent", "-q", "--config", str(config)],
                            stdout=subprocess.DEVNULL, stderr=open(folder / f"{node}.log", "w"))


def ask(url: str, verb: str) -> tuple[dict, dict]:
    """(headers, JSON) of GET /api/VERB, as any reader asks a shard (an error's JSON body too)."""
    # here, not at import: a third of a verb's start-up (f976bc0), `demo --help` included
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(f"{url}/api/{verb}", timeout=ASK_TIMEOUT) as r:
            return dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return dict(e.headers), json.loads(e.read() or b"{}")


def _lake_files(lake: Path) -> dict[str, int]:
    """Parquet files each shard has written under the shared lake's shard=NAME/ folder."""
    return {p.name.removeprefix("shard="): sum(1 for _ in p.rglob("*.parquet")) for p in sorted(lake.glob("shard=*"))}


def _settled(url: str, lake: Path, names: list[str], nodes: list[str]) -> bool:
    _, answer = ask(url, "nodes")
    seen = {r["node"] for r in answer.get("records", [])}
    return seen >= set(nodes) and all(_lake_files(lake).get(n, 0) for n in names)


def run(folder: Path, n: int, quiet: bool) -> dict:
    """Start N shards and NODES agents under `folder`, ask through the first shard once all have reported
    and moved samples to the lake, then stop the second shard and ask again; everything stopped on return."""
    folder.mkdir(parents=True, exist_ok=True)
    names = [chr(ord("a") + i) for i in range(n)]
    ports = {name: (_free_port(), _free_port()) for name in names}
    token = secrets.token_hex(16)   # the peers' credential: a shard answers cluster queries only with it
    nodes = [f"shard-node-{i}" for i in range(1, NODES + 1)]
    if not quiet:
        print(f"\nstarting {n} shards ({', '.join(names)}) over one lake and {NODES} agents…", flush=True)
    members = {name: _Shard(folder, name, ports, token) for name in names}
    agents = []
    try:
        for shard in members.values():
            shard.ready()
        daemons = [f"{name}={s.endpoint}" for name, s in members.items()]
        agents = [_agent(folder, node, daemons) for node in nodes]
        first, lake = members[names[0]], folder / "lake"
        t0 = time.monotonic()
        while not _settled(first.url, lake, names, nodes) and time.monotonic() - t0 < SETTLE:
            time.sleep(0.25)
        headers, listed = ask(first.url, "nodes")
        _, stats = ask(first.url, "stats")
        members[names[1]].stop()   # as a crash or a restart would: the others answer, and say who did not
        down_headers, down = ask(first.url, "nodes")
    finally:
        for agent in agents:
            agent.terminate()
        for agent in agents:
            agent.wait(60)
        for shard in members.values():
            shard.stop()
    held = {r["node"]: r.get("shard") for r in listed.get("records", []) if r["node"] in nodes}
    return {"shards": names, "asked": f"{first.url} (shard {names[0]})",
            "nodes": {node: {"shard": held.get(node), "hashed_to": shards.owner(node, names)} for node in nodes},
            "answered": listed.get("cluster", {}), "header": headers.get("X-Causewatch-Shards"),
            "frames": stats["tables"]["ingest_log"], "samples": stats["tables"]["samples"],
            "lake_files": _lake_files(lake),
            "stopped": names[1], "then": {"cluster": down.get("cluster", {}),
                                          "header": down_headers.get("X-Causewatch-Partial"),
                                          "nodes": len(down.get("records", []))}}


def lines(rep: dict) -> list[str]:
    """The section's report in words."""
    out = [f"asked {rep['asked']}, with peers: it answered for shards {', '.join(rep['answered'].get('shards', []))}"
           f" (header X-Causewatch-Shards: {rep['header']}); stored across them: {rep['frames']:,} frames, "
           f"{rep['samples']:,} sample values (hot and lake)"]
    for node, where in rep["nodes"].items():
        agree = "as hashed" if where["shard"] == where["hashed_to"] else f"hashed to {where['hashed_to']}"
        out.append(f"{node}: held by shard {where['shard']} ({agree})")
    out.append("lake files per shard (one lake folder, a shard=NAME level each): "
               + ", ".join(f"{k} {v}" for k, v in rep["lake_files"].items()))
    then = rep["then"]
    out.append(f"shard {rep['stopped']} stopped: the same question answered for {then['nodes']} nodes, partial="
               f"{then['cluster'].get('partial')}, missing {then['cluster'].get('missing')} "
               f"(header X-Causewatch-Partial: {then['header']})")
    return out
