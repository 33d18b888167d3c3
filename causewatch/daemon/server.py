"""The causewatch daemon: store, ingest, scheduler and HTTP wired together.

`Daemon(cfg).start()` returns once it is serving; `stop()` commits and acks what it has taken,
then closes the DuckDB file. `serve()` runs until SIGTERM/SIGINT (systemd: READY=1 on start); SIGHUP
reloads the agents' keys and the web configuration.
"""

from __future__ import annotations

import importlib
import logging
import signal
import threading

from causewatch.config import DaemonConfig
from causewatch.daemon import memory, webconfig
from causewatch.daemon.calls import Entry
from causewatch.daemon.cluster import Cluster
from causewatch.daemon.exporter import Exporter
from causewatch.daemon.httpapi import Api, HttpApi
from causewatch.daemon.ingest import Ingest
from causewatch.daemon.jobs import Job, JobContext
from causewatch.daemon.scheduler import LocalJobs, Runner, Scheduler, WorkerJobs
from causewatch.daemon.store import Store
from causewatch.daemon.store.lake import folder_for as lake_folder
from causewatch.daemon.store.units import running_units
from causewatch.daemon.worker import ENTRYPOINTS, Host, Worker
from causewatch.errors import ConfigError
from causewatch.systemd import sd_notify

log = logging.getLogger("causewatch.daemon")
API_NICE = 0   # the API worker: the priority routes had in the daemon (SCHED_IDLE would starve it under load)
TRIM_SECONDS = 30.0   # how often a serving daemon gives its free memory back (memory.trim), at most


class Daemon:
    """The process that ingests. Its analyses (`jobs`: entrypoints.default_jobs unless given; [] for none) and
    its HTTP API routes run in two worker processes, the jobs worker and the API worker, forked from a fork
    server that loaded the analysis stack once (worker.py); they read and write the store through this
    process (worker.Host): it never imports pandas, scipy, numba or the analytics, and a long re-learn
    never holds up an API answer. The API worker ends after cfg.api_idle_seconds without a request.
    With cfg.jobs_here (debugging) the jobs run on the scheduler's thread in this process instead."""

    def __init__(self, cfg: DaemonConfig, jobs: list[Job] | None = None):
        web = webconfig.load(cfg.web_config_file)   # a bad file stops the start before the store is opened
        if not cfg.jobs_here:   # jobs here read their rows into pandas in this process
            memory.arrow_without_pandas()
        memory.arrow_from_malloc()
        memory.few_arenas()
        self.cfg = cfg
        self.exporter = Exporter(cfg.shard)
        self.store = Store(cfg.db, cfg.store_memory_bytes, cfg.store_lake, cfg.shard)
        self.exporter.nodes.units.seed(self.store.run(running_units))   # units that run on across a restart
        self.ingest = Ingest(cfg, self.store, self.exporter)
        host = Host(self.store.cursor, self.ingest.call, self.ingest.send, self.exporter)
        # While frames wait for the writer the jobs worker is paused (a re-learn's cache and memory traffic slows
        # ingest even at SCHED_IDLE), for at most analysis_pause_max s at a stretch: it still finishes.
        backlog = (lambda: self.ingest.backlog_bytes() > 0) if cfg.analysis_pause_max else None
        self.jobs_worker = Worker(cfg.analysis_nice, busy=backlog, max_pause=cfg.analysis_pause_max, host=host,
                                  setup=(Entry.INSTALL_JOBS, (cfg, jobs)), name="causewatch-jobs",
                                  starved_after=cfg.analysis_starved_seconds, starved_nice=cfg.analysis_starved_nice)
        self.api_worker = Worker(API_NICE, host=host, name="causewatch-api")
        runner = self._local_jobs(jobs) if cfg.jobs_here else WorkerJobs(self.jobs_worker)
        self.scheduler = Scheduler(runner, self.exporter.job_errors, self.exporter.job_runs,
                                   self.exporter.job_lag, self.exporter.job_overruns) if jobs != [] else None
        root = lake_folder(cfg.db, cfg.store_lake)   # the shared lake's root: a down shard's history
        cluster = (Cluster(cfg.shard, cfg.peer_urls(), self._answer, cfg.api_token, cfg.peer_timeout,
                           str(root or "")) if cfg.peers else None)
        self.api = Api(self.exporter, self._answer, cfg.api_token, cluster, web)
        self.http = HttpApi(cfg.http, self.api, web) if cfg.http else None
        self.endpoint: str | None = None

    def _local_jobs(self, jobs: list[Job] | None) -> Runner:
        """The jobs on the scheduler's thread, reading the store and writing through ingest's writer as the
        jobs worker's do through Host. The registry is imported by name, as a worker does (worker.resolve):
        only this debugging switch loads the analysis stack into the ingesting process."""
        if jobs is None:
            jobs = importlib.import_module(ENTRYPOINTS).default_jobs(self.cfg)
        ctx = JobContext(read=self.store.cursor, write=self.ingest.call, send=self.ingest.send, exporter=self.exporter)
        return LocalJobs(jobs, ctx)

    def _answer(self, *request) -> tuple[int, bytes, str]:
        """On the HTTP request's thread: the API worker takes one request at a time (its lock)."""
        return self.api_worker(Entry.ANSWER, *request)

    def reload_web(self) -> None:
        """The web configuration read again (a renewed certificate, a changed user): new connections get
        it; a file that no longer loads is logged and the one in use kept."""
        if not self.cfg.web_config_file:
            return
        try:
            web = webconfig.load(self.cfg.web_config_file)
        except ConfigError as e:
            log.error("web configuration not reloaded, the one in use is kept: %s", e)
            return
        self.api.web = web
        if self.http:
            self.http.use(web)
        log.info("web configuration reloaded from %s", self.cfg.web_config_file)

    def start(self) -> "Daemon":
        """Builds the jobs in the jobs worker (a bad config, e.g. fuzzy_terms, raises ConfigError here),
        then serves."""
        if self.scheduler is not None:
            self.scheduler.start()
            self.ingest.on_hello = self.scheduler.hello
        self.endpoint = self.ingest.start(self.http.url if self.http else "")
        if self.http:
            self.http.start()
        log.info("serving %s (db %s, http %s)", self.endpoint, self.cfg.db, self.http and self.http.address)
        return self

    def stop(self) -> None:
        if self.http:
            self.http.stop()
        self.api_worker.stop()
        if self.scheduler is not None:
            self.scheduler.stop(interrupt=self.jobs_worker.stop)
        else:
            self.jobs_worker.stop()
        self.ingest.stop()
        self.store.close()

    def serve(self) -> None:
        done, hup, wake = threading.Event(), threading.Event(), threading.Event()
        # the handlers only set flags: the reload runs in the loop below, never inside a handler
        for sig, event in ((signal.SIGTERM, done), (signal.SIGINT, done), (signal.SIGHUP, hup)):  # HUP: ExecReload=
            signal.signal(sig, lambda *_, event=event: (event.set(), wake.set()))
        self.start()
        sd_notify("READY=1")
        print(f"causewatch daemon: {self.endpoint}  db={self.cfg.db}  "
              f"http={self.http.address if self.http else 'off'}", flush=True)
        while not done.is_set():
            if wake.wait(min(TRIM_SECONDS, self.cfg.api_idle_seconds / 2)):
                wake.clear()
                if hup.is_set():
                    hup.clear()
                    self.ingest.reload_keys()
                    self.reload_web()
                continue
            self.api_worker.retire(self.cfg.api_idle_seconds)
            memory.trim()
        sd_notify("STOPPING=1")
        self.stop()
