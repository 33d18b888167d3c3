"""What the daemon's worker processes run: the jobs they hold (built from the config, each hook run
with a remote.context()) and every entry point, registered once by reference under its calls.Entry key.

Only the workers import this module (worker.resolve): it loads the analysis stack.
"""

from __future__ import annotations

from collections.abc import Callable

from causewatch.analytics.fuzzy import TermsError, load_terms
from causewatch.config import DaemonConfig
from causewatch.daemon import remote
from causewatch.daemon.calls import Entry
from causewatch.daemon.compute import compute_for
from causewatch.daemon.job_causal import CausalJob
from causewatch.daemon.job_causal_shards import ShardCausalJob
from causewatch.daemon.job_compaction import CompactionJob
from causewatch.daemon.job_fuzzy import FuzzyJob
from causewatch.daemon.job_probe import ProbeJob
from causewatch.daemon.job_retention import RetentionJob
from causewatch.daemon.jobs import Job
from causewatch.daemon.scheduler import LocalJobs
from causewatch.errors import ConfigError

_held: list[LocalJobs] = []   # this worker's jobs (one set); their state lives as long as the process


def default_jobs(cfg: DaemonConfig) -> list[Job]:
    """The daemon's analyses: causal models of tasks, fuzzy bottleneck scores, software probes, retention,
    and the compaction that moves old samples to the lake."""
    try:
        termsets = load_terms(cfg.fuzzy_terms)
    except (OSError, TermsError) as e:
        raise ConfigError("fuzzy_terms", f"cannot load the term sets {cfg.fuzzy_terms!r} ({e})") from None
    causal = (ShardCausalJob.from_config(cfg) if cfg.peers else   # a sharded site: the scopes this shard owns
              CausalJob(min_new=cfg.causal_min_new, confirm=cfg.causal_confirm, interval=cfg.causal_interval,
                        baseline_rows=cfg.causal_baseline_rows, quiet_intervals=cfg.causal_quiet_intervals))
    causal.compute = compute_for(cfg.analysis_scheduler)   # where its learns run (docs/cluster.md)
    compaction = CompactionJob.from_config(cfg)
    return [causal, FuzzyJob(termsets, interval=cfg.fuzzy_interval), ProbeJob(cfg.reprobe_after),
            RetentionJob.from_config(cfg), *([compaction] if compaction else [])]


def install(cfg: DaemonConfig, jobs: list[Job] | None) -> list[tuple[str, float]]:
    """This worker's jobs: `jobs` (a test's, pickled) or the defaults; returns their (name, interval)."""
    _held[:] = [LocalJobs(default_jobs(cfg) if jobs is None else jobs, remote.context())]
    return _held[0].schedule()


def run(name: str) -> None:
    _held[0].run(name)


def hello(name: str, hellos: list[tuple[str, dict]]) -> None:
    _held[0].hello(name, hellos)


ENTRY_POINTS: dict[Entry, Callable] = {
    Entry.INSTALL_JOBS: install,
    Entry.RUN_JOB: run,
    Entry.JOB_HELLO: hello,
    Entry.ANSWER: remote.answer,
}
