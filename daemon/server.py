"""The causewatch daemon: store, ingest, scheduler and HTTP wired together.

`Daemon(cfg).start()` returns once it is serving; `stop()` commits and acks what it has taken,
then closes the DuckDB file. `serve()` runs until SIGTERM/SIGINT (systemd: READY=1 on start).
"""

from __future__ import annotations

import logging
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

from causewatch.config import DaemonConfig
from causewatch.daemon.exporter import Exporter
from causewatch.daemon.httpapi import HttpApi
from causewatch.daemon.ingest import Ingest
from causewatch.daemon.jobs import Job, JobContext
from causewatch.daemon.remote import ANALYSIS, Host, RemoteJob
from causewatch.daemon.scheduler import Scheduler
from causewatch.daemon.store import Store
from causewatch.daemon.worker import AnalysisWorker
from causewatch.systemd import sd_notify

log = logging.getLogger("causewatch.daemon")
ROUTES = "causewatch.daemon.routes:answer"
API_NICE = 0   # the API worker: the priority routes had in the daemon (SCHED_IDLE would starve it under load)


class Daemon:
    """The process that ingests. Its analyses (`jobs`: analysis.default_jobs unless given) and its HTTP
    API routes run in two spawned children, the analysis worker and the API worker, which read and
    write the store through this process (remote.Host): it never imports pandas, scipy, numba or the
    analytics, and a long re-learn never holds up an API answer."""

    def __init__(self, cfg: DaemonConfig, jobs: list[Job] | None = None):
        self.cfg = cfg
        self.exporter = Exporter()
        self.store = Store(cfg.db, cfg.store_memory_bytes)
        self.ingest = Ingest(cfg, self.store, self.exporter)
        host = Host(self.store.cursor, self.ingest.call, self.ingest.send, self.exporter)
        # While frames wait for the writer the worker is paused (a re-learn's cache and memory traffic slows
        # ingest even at SCHED_IDLE), for at most analysis_pause_max s at a stretch: it still finishes.
        backlog = (lambda: self.ingest.backlog_bytes() > 0) if cfg.analysis_pause_max else None
        self.worker = AnalysisWorker(cfg.analysis_nice, busy=backlog, max_pause=cfg.analysis_pause_max, host=host,
                                     setup=(f"{ANALYSIS}:install", (cfg, jobs)) if jobs != [] else None)
        self.api_worker = AnalysisWorker(API_NICE, host=host, name="causewatch-api")
        self._ctx = JobContext(read=self.store.cursor, write=self.ingest.call, send=self.ingest.send,
                               exporter=self.exporter)
        self.scheduler: Scheduler | None = None
        # One long-lived thread calls the API worker: the child's death signal (PR_SET_PDEATHSIG) follows
        # the thread that spawned it, and the HTTP server's threads end with their request.
        self._api_thread = ThreadPoolExecutor(1, thread_name_prefix="api")
        self.http = HttpApi(cfg.http, self.exporter, self._answer, cfg.api_token) if cfg.http else None
        self.endpoint: str | None = None

    def _answer(self, *request) -> tuple[int, bytes, str]:
        return self._api_thread.submit(self.api_worker, ROUTES, *request).result()

    def start(self) -> "Daemon":
        """Builds the jobs in the analysis worker (a bad config, e.g. fuzzy_terms, raises ConfigError here),
        then serves."""
        jobs = [] if self.worker.setup is None else [RemoteJob(name, interval, self.worker)
                                                      for name, interval in self.worker.start()]
        self.scheduler = Scheduler(self._ctx, jobs)
        self.ingest.on_hello = self.scheduler.hello
        self.endpoint = self.ingest.start()
        self.scheduler.start()
        if self.http:
            self._api_thread.submit(self.api_worker.start)   # its imports now, not in the first request
            self.http.start()
        log.info("serving %s (db %s, http %s)", self.endpoint, self.cfg.db, self.http and self.http.address)
        return self

    def stop(self) -> None:
        if self.http:
            self.http.stop()
        self.api_worker.stop()
        self._api_thread.shutdown()
        if self.scheduler is not None:
            self.scheduler.stop(interrupt=self.worker.stop)
        else:
            self.worker.stop()
        self.ingest.stop()
        self.store.close()

    def serve(self) -> None:
        done = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: done.set())
        signal.signal(signal.SIGHUP, lambda *_: self.ingest.reload_keys())   # systemd ExecReload=
        self.start()
        sd_notify("READY=1")
        print(f"causewatch daemon: {self.endpoint}  db={self.cfg.db}  "
              f"http={self.http.address if self.http else 'off'}", flush=True)
        done.wait()
        sd_notify("STOPPING=1")
        self.stop()
