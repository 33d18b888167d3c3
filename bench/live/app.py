"""The application bench/anomaly_live.py watches, and the local TCP service it calls.

`run`: a master hands tasks to spawned workers without end, until a stop file exists. A task has a
kind and a size (its parameters, as causewatch's task API records them) and does four things, each an
instrumented region: compute (a Python loop), memory (numpy copies of an array), write (small
fsync'd appends to the worker's file) and service (one request to the service), the kind weighting
the first three. Once a shift file exists the master draws from the shifted mix (bigger inputs,
another mix of kinds): a change the parameters explain.

`serve`: the service, one thread per connection, answering each line after its base delay plus the
seconds written in a delay file (the slow-service fault writes there; absent: none).

Usage: python bench/live/app.py serve --port-file F --delay-file D
       python bench/live/app.py run --app live --port P --dir DIR --until STOP --shift SHIFT
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import multiprocessing
import os
import socket
import socketserver
import sys
import threading
import time
from multiprocessing.util import Finalize
from pathlib import Path

import numpy as np

from causewatch.agent import instrument

# (kinds, their weights, sizes drawn uniformly between) before and after the shift
MIXES = {"base": (("compute", "memory", "write"), (0.4, 0.3, 0.3), (40, 160)),
         "shifted": (("compute", "memory", "write"), (0.15, 0.3, 0.55), (100, 240))}
LOOP = {"compute": 5000, "memory": 800, "write": 800}        # Python loop iterations per unit of size
DOUBLES = {"compute": 4000, "memory": 16_000, "write": 4000}   # doubles copied per unit of size
PASSES = {"compute": 1, "memory": 4, "write": 1}               # ...this many times
WRITES = {"compute": 1, "memory": 1, "write": 3}               # fsync'd 4 KiB appends per 40 units of size
BLOCK = b"x" * 4096
BASE_DELAY = 0.002     # the service's own time per request, seconds
AHEAD = 2              # tasks handed out per worker beyond those it runs


def _compute(n: int) -> float:
    total = 0
    for i in range(n):
        total += i * i % 7
    return float(total)


def _memory(n: int, passes: int) -> float:
    a = np.full(n, 1.5)
    b = np.empty(n)
    for _ in range(passes):
        np.multiply(a, 1.0001, out=b)
        a, b = b, a
    return float(a[::4096].sum())


def _write(path: str, count: int) -> None:
    with open(path, "ab") as f:
        for _ in range(count):
            f.write(BLOCK)
            f.flush()
            os.fsync(f.fileno())
    if os.path.getsize(path) > 64 * 2**20:   # the file stays small: appends, not a growing disk
        os.truncate(path, 0)


class _Service:
    """A worker's connection to the service, opened on its first call."""
    sock: socket.socket | None = None
    reader = None


def _call(port: int) -> None:
    if _Service.sock is None:
        _Service.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        _Service.reader = _Service.sock.makefile("rb")
    _Service.sock.sendall(b"get\n")
    _Service.reader.readline()


def run_task(task: dict, app: str, port: int, folder: str) -> None:
    """One task, measured by the task API with a region per part."""
    kind, n = task["kind"], task["size"]
    with instrument.task(app, params={"kind": kind, "size": n}, task_id=task["id"]):
        with instrument.region("compute", app=app):
            _compute(n * LOOP[kind])
        with instrument.region("memory", app=app):
            _memory(n * DOUBLES[kind], PASSES[kind])
        with instrument.region("write", app=app):
            _write(os.path.join(folder, f"writes-{os.getpid()}"), max(1, n * WRITES[kind] // 40))
        with instrument.region("service", app=app):
            _call(port)


def tasks(seed: int, until: str, shift: str, ahead: threading.Semaphore):
    """Tasks without end, from the base mix until `shift` exists, then the shifted one; none once
    `until` exists. Each is handed out once `ahead` allows (the pool's feeder reads as fast as it can)."""
    rng = np.random.default_rng(seed)
    n = 0
    while True:
        ahead.acquire()
        if os.path.exists(until):
            return
        kinds, weights, (lo, hi) = MIXES["shifted" if os.path.exists(shift) else "base"]
        yield {"id": f"t{n:06d}", "kind": str(rng.choice(kinds, p=weights)), "size": int(rng.integers(lo, hi + 1))}
        n += 1


def _worker_start() -> None:
    Finalize(None, instrument.flush, exitpriority=10)   # pool workers end without atexit


def run(args) -> int:
    ahead = threading.Semaphore(AHEAD * args.workers)
    work = functools.partial(run_task, app=args.app, port=args.port, folder=args.dir)
    with multiprocessing.get_context("spawn").Pool(args.workers, initializer=_worker_start) as pool:
        for _ in pool.imap(work, tasks(args.seed, args.until, args.shift, ahead)):
            ahead.release()
        pool.close()
        pool.join()
    return 0


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        with contextlib.suppress(ConnectionError):   # a worker that ends drops its connection
            for _ in self.rfile:
                time.sleep(BASE_DELAY + _extra(self.server.delay_file))
                self.wfile.write(b"ok\n")


def _extra(path: str) -> float:
    try:
        return float(Path(path).read_text() or 0)
    except (OSError, ValueError):
        return 0.0


def serve(args) -> int:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.delay_file = args.delay_file
    Path(args.port_file + ".tmp").write_text(str(server.server_address[1]))
    os.replace(args.port_file + ".tmp", args.port_file)   # whole, or not there yet
    server.serve_forever()
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("serve", help="the TCP service")
    s.add_argument("--port-file", required=True, help="where its port is written once it listens")
    s.add_argument("--delay-file", required=True, help="seconds each request takes more, while this file says so")
    r = sub.add_parser("run", help="the master and its workers")
    r.add_argument("--app", default="live", help="the task records' app (default live)")
    r.add_argument("--port", type=int, required=True, help="the service's port on 127.0.0.1")
    r.add_argument("--dir", required=True, help="folder of the workers' written files")
    r.add_argument("--until", required=True, help="hand out tasks until this file exists")
    r.add_argument("--shift", required=True, help="draw from the shifted mix once this file exists")
    r.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    r.add_argument("--seed", type=int, default=0, help="seed of the task stream")
    args = ap.parse_args(argv)
    return serve(args) if args.what == "serve" else run(args)


if __name__ == "__main__":
    sys.exit(main())
