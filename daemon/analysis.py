"""The analysis worker's side of the daemon's jobs: it builds them (analysis stack and all) and runs
them on request, each run with a remote.context() whose reads and writes the daemon answers.

The daemon never imports this module: it names its functions ("causewatch.daemon.analysis:run").
"""

from __future__ import annotations

from causewatch.analytics.fuzzy import TermsError, load_terms
from causewatch.config import DaemonConfig
from causewatch.daemon import remote
from causewatch.daemon.job_causal import CausalJob
from causewatch.daemon.job_fuzzy import FuzzyJob
from causewatch.daemon.job_probe import ProbeJob
from causewatch.daemon.job_retention import RetentionJob
from causewatch.daemon.jobs import Job
from causewatch.errors import ConfigError

_jobs: dict[str, Job] = {}   # this child's jobs by name; their state lives as long as the child


def default_jobs(cfg: DaemonConfig) -> list[Job]:
    """The daemon's analyses: causal models of tasks, fuzzy bottleneck scores, software probes, retention."""
    try:
        termsets = load_terms(cfg.fuzzy_terms)
    except (OSError, TermsError) as e:
        raise ConfigError("fuzzy_terms", f"cannot load the term sets {cfg.fuzzy_terms!r} ({e})") from None
    causal = CausalJob(min_new=cfg.causal_min_new, confirm=cfg.causal_confirm, interval=cfg.causal_interval,
                       baseline_rows=cfg.causal_baseline_rows)
    return [causal, FuzzyJob(termsets), ProbeJob(cfg.reprobe_after), RetentionJob.from_config(cfg)]


def install(cfg: DaemonConfig, jobs: list[Job] | None) -> list[tuple[str, float]]:
    """This child's jobs: `jobs` (a test's, pickled) or the defaults; returns their (name, interval)."""
    _jobs.clear()
    _jobs.update((job.name, job) for job in (default_jobs(cfg) if jobs is None else jobs))
    return [(job.name, job.interval) for job in _jobs.values()]


def run(name: str) -> None:
    _jobs[name].run(remote.context())


def hello(name: str, node: str, body: dict) -> None:
    _jobs[name].on_hello(remote.context(), node, body)
