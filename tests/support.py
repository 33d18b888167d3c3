"""Helpers for tests: free ports, a daemon child process, test certificates, reading DuckDB files,
running the CLI, the checkout folder of each package.

Import as `from support import ...` (tests/ is on pytest's pythonpath).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import duckdb
import numpy as np
import pytest

from causewatch import wire
from causewatch.config import AgentConfig

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "causewatch"
SHARED = ROOT.parent / "shared"   # the project's shared data: beside a checkout, in no clone


def product_files():
    """(path relative to the checkout, path) of every product source file, each once."""
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), path


def package_folders() -> dict[str, Path]:
    """Each package of the distribution and its checkout folder (causewatch.analytics.causal ->
    causewatch/analytics/causal): every folder under causewatch/ with an __init__.py."""
    return {".".join(init.parent.relative_to(ROOT).parts): init.parent for init in sorted(PACKAGE.rglob("__init__.py"))}


def shared_data(name: str) -> Path:
    """The folder of the project's shared data `name` (conformance recordings, papers); a test that reads
    it goes through here, and is skipped, saying why, where the data is absent."""
    path = SHARED / name
    if not path.is_dir():
        pytest.skip(f"shared data {name!r} missing — it lies beside a checkout, not in a clone")
    return path


def _port_slice() -> range:
    """This test process's share of 20000-32767, below the kernel's ephemeral range (32768-60999 here):
    a port the kernel hands out for bind(0) is also handed to outgoing connections, which took one
    between the pick and a daemon's bind in a CI run ("tcp://127.0.0.1:44623 is in use"). Each xdist
    worker has its own slice, so two workers never pick the same port."""
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:])
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    size = (32768 - 20000) // workers
    return range(20000 + worker * size, 20000 + (worker + 1) * size)


_ports = _port_slice()
_next_port = random.randrange(len(_ports))


def free_port() -> int:
    """A port free now that this process has not handed out before: a daemon's --bind and --http came
    out the same in a CI run (the HTTP server took it first: "--bind ... is in use")."""
    global _next_port
    for _ in range(len(_ports)):
        port = _ports[_next_port % len(_ports)]
        _next_port += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_ports}")


class DaemonProcess:
    """`causewatch daemon` as a child process on a fixed port, so it can be killed and restarted."""

    def __init__(self, db: Path, port: int | None = None, extra: list[str] | None = None, checkout: Path | None = None):
        """`checkout`: run another checkout's daemon (its .venv, from its folder) instead of this one's."""
        self.db, self.port = db, port or free_port()
        self.endpoint = f"tcp://127.0.0.1:{self.port}"
        self.extra = extra or []
        self.proc: subprocess.Popen | None = None
        self.http: str | None = None
        self.python, self.cwd = (str(checkout / ".venv/bin/python"), checkout) if checkout else (sys.executable, None)

    def start(self) -> "DaemonProcess":
        self.http = f"127.0.0.1:{free_port()}"
        # another checkout's daemon and its workers import that checkout, not a PYTHONPATH naming this one
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} if self.cwd else None
        self.proc = subprocess.Popen(
            [self.python, "-m", "causewatch.cli", "daemon", "--db", str(self.db), "--bind", self.endpoint,
             "--http", self.http, *self.extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=self.cwd, env=env)
        line = self.proc.stdout.readline()
        if not line.startswith("causewatch daemon:"):
            self.proc.kill()
            raise RuntimeError(f"daemon did not start: {line}{self.proc.stderr.read()}")
        return self

    def kill(self, sig=signal.SIGKILL) -> None:
        self.proc.send_signal(sig)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.kill(signal.SIGTERM)


def certificates(folder: Path) -> dict[str, Path]:
    """A test CA and, signed by it, a server's certificate for localhost and 127.0.0.1 and a client's
    (SAN DNS:client-a), made by the openssl command: {"ca", "server", "server_key", "client", "client_key"}
    (each a PEM file in `folder`)."""
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=folder)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=causewatch-test-ca")
    for name, san, usage in (("server", "DNS:localhost,IP:127.0.0.1", "serverAuth"),
                             ("client", "DNS:client-a", "clientAuth")):
        (folder / f"{name}.ext").write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n"
                                            f"keyUsage=digitalSignature\nextendedKeyUsage={usage}\n"
                                            "authorityKeyIdentifier=keyid,issuer\n")
        openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext")
    return {"ca": folder / "ca.pem", "server": folder / "server.pem", "server_key": folder / "server.key",
            "client": folder / "client.pem", "client_key": folder / "client.key"}


def seed_node(db: Path, node: str) -> None:
    """Give the store file `db` a node that said hello (hostname host-NODE), for the data verbs to find."""
    from causewatch.daemon.store import Store  # the daemon's writer, which most tests never load
    store = Store(str(db))
    store.run(lambda con: con.execute(
        "INSERT INTO nodes (node, hostname, cores, memory_bytes, agent_version, boot, first_seen, last_seen) "
        "VALUES (?, ?, 2, 4000000000, 't', 'b', 1.0, 2.0)", [node, f"host-{node}"]))
    store.close()


def probe_daemon(db: Path, manifest: dict):
    """A started in-process daemon whose store `db` has the kit `manifest` registered and whose one job
    is the ProbeJob (stop it with `.stop()`)."""
    # the daemon's parts, which most tests never load
    from causewatch.config import DaemonConfig
    from causewatch.daemon.job_probe import ProbeJob
    from causewatch.daemon.server import Daemon
    from causewatch.daemon.store import create_views, migrate
    from causewatch.daemon.store.results import register_kit
    from causewatch.probe.registry import kit_row
    with duckdb.connect(str(db)) as con:
        migrate(con)
        create_views(con)
        register_kit(con, kit_row(manifest))
    return Daemon(DaemonConfig(db=str(db), bind="tcp://127.0.0.1:0", http="127.0.0.1:0"), jobs=[ProbeJob()]).start()


def agent_config(tmp_path: Path, endpoint: str, node: str = "node-1", **kw) -> AgentConfig:
    return AgentConfig(daemon=endpoint, node=node, spool=str(tmp_path / f"spool-{node}"), **kw)


class StoreVerbs:
    """The API's verbs on a store's own cursor (`read(verb, **params)`, as commands/source.py's sources
    read): for code that reads through the API, on a Store a test also writes to (the read-only handle
    `source.StoreSource` opens is refused beside the store's own)."""

    def __init__(self, store):
        from causewatch.daemon import routes  # noqa: F401 (binds the verbs' handlers)
        self.con = store.cursor()

    def read(self, verb, **params):
        return verb.call(self.con, **params)


def query(db: Path | str, sql: str, params=None) -> list[tuple]:
    """Read a DuckDB file that no daemon holds open."""
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql, params or []).fetchall()


def lost_cpu_seconds() -> float:
    """The machine's irq, softirq and steal time so far, all CPUs (/proc/stat). perf's task-clock counts
    the time a task is scheduled in, so also the time its CPU served interrupts or its vCPU was taken by
    the hypervisor; a task's CPU time (/proc, CLOCK_*_CPUTIME_ID) leaves both out: a CI run saw
    task-clock 1.10 s against 1.00. The difference over an interval is bounded by this one's growth."""
    with open("/proc/stat") as f:
        cpu = f.readline().split()
    return sum(int(v) for v in cpu[6:9]) / os.sysconf("SC_CLK_TCK")


def wait_for(predicate, timeout: float = 10.0, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    return predicate()


def run_cli(*args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    """Run `causewatch ARGS` as a child process; capture text output."""
    env = dict(os.environ, **kw.pop("env", {}))
    return subprocess.run([sys.executable, "-m", "causewatch.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, **kw)


def samples(i: int, n_t: int = 5, names=("cpu", "mem", "io")) -> dict:
    """Frame i of a test stream: timestamps i*n_t .. i*n_t+n_t-1, every value i."""
    return wire.samples_body(np.arange(n_t) + i * n_t, list(names), np.full((n_t, len(names)), float(i)))


def bbv_frames(rows) -> list[wire.Frame]:
    """The bbv frames whose stored rows are `rows`, long form as the `bbv` view shows them: (node, boot,
    seq, target, kind, t_start, t_end, key, count), a vector per (node, boot, seq)."""
    vectors: dict[tuple, dict] = {}
    for node, boot, seq, target, kind, t_start, t_end, key, count in rows:
        body = vectors.setdefault((node, boot, seq), {"target": target, "kind": kind, "start": float(t_start),
                                                      "end": float(t_end), "vector": {"keys": [], "counts": []}})
        body["vector"]["keys"].append(key)
        body["vector"]["counts"].append(int(count))
    return [wire.decode(wire.encode("bbv", node, boot, seq, body)) for (node, boot, seq), body in vectors.items()]


_LU_STARTS = itertools.count()   # the lu tasks' starts, 0.1 s apart: rows in time to rank causes over


def lu_task_stream(sender, rng, count: int, changed: bool) -> None:
    """`count` tasks of app lu sent: duration from instructions (~ n^2) and misses (~ the dtype's size),
    and with `changed` also from n directly (a changed dependency the causal job raises)."""
    for _ in range(count):
        n = int(rng.integers(50, 300))
        dtype = str(rng.choice(["int", "double"]))
        instructions = n ** 2 * rng.uniform(0.5, 1.5)
        misses = (4 if dtype == "int" else 8) * rng.uniform(50, 150)
        duration = instructions * 1e-5 + misses * 1e-3 + (0.03 * n if changed else 0.0) + rng.normal(0, 0.1)
        start = 1e9 + 0.1 * next(_LU_STARTS)
        sender.send("task", {"app": "lu", "task_id": "t", "start": start, "duration": float(duration),
                             "params": {"n": n, "dtype": dtype},
                             "counters": {"instructions": float(instructions), "l2_misses": float(misses)}})


def lu_cycle(daemon, sender, rng, count: int, changed: bool) -> list[dict]:
    """`count` lu tasks sent and stored, one analysis cycle of the daemon over them; its open anomalies."""
    lu_task_stream(sender, rng, count, changed)
    assert sender.flush(60)
    daemon.scheduler.run_all()
    with urllib.request.urlopen(f"http://{daemon.http.address}/api/anomalies?open=1", timeout=10) as reply:
        return json.load(reply)


# a unit record as an agent sends it
UNIT = {"unit": "job:42", "kind": "job", "event": "start", "start": 100.0}
# a unit record's every field refused by name: (what is wrong, the field named, the code)
HOSTILE_UNITS = [
    ({"kind": "vm"}, "body.kind", "range"), ({"event": "resume"}, "body.event", "range"),
    ({"kind": ["job"]}, "body.kind", "range"),
    ({"unit": "service:x.service"}, "body.unit", "name"), ({"unit": "job:"}, "body.unit", "name"),
    ({"unit": "job:1\n2"}, "body.unit", "name"), ({"unit": "j" * 300}, "body.unit", "name"),
    ({"start": math.nan}, "body.start", "nonfinite"), ({"start": "yesterday"}, "body.start", "type"),
    ({"event": "end"}, "body.end", "missing"), ({"end": 99.0}, "body.end", "range"),
    ({"uid": -1}, "body.uid", "range"), ({"uid": 1.5}, "body.uid", "type"), ({"cpus": -2.0}, "body.cpus", "range"),
    ({"cpus": math.inf}, "body.cpus", "nonfinite"), ({"memory_bytes": -1}, "body.memory_bytes", "range"),
    ({"gpus": True}, "body.gpus", "type"), ({"user": ""}, "body.user", "name"), ({"job_id": 42}, "body.job_id", "type"),
    ({"totals": {"unit cpu": 1.0}}, "body.totals key", "name"),
    ({"totals": {"unit_cpu_seconds_total": None}}, "body.totals.unit_cpu_seconds_total", "type"),
    ({"counted": {"cpu": 1}}, "body.counted.cpu", "type"), ({"extra": {"a": [1]}}, "body.extra.a", "type"),
    ({"owner": "ann"}, "body.owner", "field"),
]
