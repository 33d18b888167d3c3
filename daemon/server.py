"""The causewatch daemon: store, ingest, scheduler and HTTP wired together.

`Daemon(cfg).start()` returns once it is serving; `stop()` commits and acks what it has taken,
then closes the DuckDB file. `serve()` runs until SIGTERM/SIGINT (systemd: READY=1 on start).
"""

from __future__ import annotations

import logging
import signal
import threading

from causewatch.analytics.fuzzy.terms import TermsError, load_terms
from causewatch.config import DaemonConfig
from causewatch.daemon.exporter import Exporter
from causewatch.daemon.httpapi import HttpApi
from causewatch.daemon.ingest import Ingest
from causewatch.daemon.job_causal import CausalJob
from causewatch.daemon.job_fuzzy import FuzzyJob
from causewatch.daemon.job_probe import ProbeJob
from causewatch.daemon.job_retention import RetentionJob
from causewatch.daemon.jobs import Job, JobContext
from causewatch.daemon.scheduler import Scheduler
from causewatch.daemon.store import Store
from causewatch.daemon.worker import AnalysisWorker
from causewatch.errors import ConfigError
from causewatch.systemd import sd_notify

log = logging.getLogger("causewatch.daemon")


def default_jobs(cfg: DaemonConfig) -> list[Job]:
    """The daemon's analyses: causal models of tasks, fuzzy bottleneck scores, software probes, retention."""
    try:
        termsets = load_terms(cfg.fuzzy_terms)
    except (OSError, TermsError) as e:
        raise ConfigError("fuzzy_terms", f"cannot load the term sets {cfg.fuzzy_terms!r} ({e})") from None
    causal = CausalJob(min_new=cfg.causal_min_new, confirm=cfg.causal_confirm, interval=cfg.causal_interval)
    return [causal, FuzzyJob(termsets), ProbeJob(cfg.reprobe_after), RetentionJob.from_config(cfg)]


class Daemon:
    def __init__(self, cfg: DaemonConfig, jobs: list[Job] | None = None, routes: dict | None = None):
        self.cfg = cfg
        self.exporter = Exporter()
        self.store = Store(cfg.db, cfg.store_memory_bytes)
        self.ingest = Ingest(cfg, self.store, self.exporter)
        # While frames wait for the writer the worker is paused (a re-learn's cache and memory traffic slows
        # ingest even at SCHED_IDLE), for at most analysis_pause_max s at a stretch: it still finishes.
        backlog = (lambda: self.ingest.backlog_bytes() > 0) if cfg.analysis_pause_max else None
        self.worker = AnalysisWorker(cfg.analysis_nice, busy=backlog, max_pause=cfg.analysis_pause_max)
        ctx = JobContext(read=self.store.cursor, write=self.ingest.call, send=self.ingest.send,
                         exporter=self.exporter, compute=self.worker)
        self.scheduler = Scheduler(ctx, default_jobs(cfg) if jobs is None else jobs)
        self.ingest.on_hello = self.scheduler.hello
        self.http = HttpApi(cfg.http, self.exporter, self.store.cursor, self.ingest.call, routes,
                            cfg.api_token) if cfg.http else None
        self.endpoint: str | None = None

    def start(self) -> "Daemon":
        self.endpoint = self.ingest.start()
        self.scheduler.start()
        if self.http:
            self.http.start()
        log.info("serving %s (db %s, http %s)", self.endpoint, self.cfg.db, self.http and self.http.address)
        return self

    def stop(self) -> None:
        if self.http:
            self.http.stop()
        self.scheduler.stop(interrupt=self.worker.stop)
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
