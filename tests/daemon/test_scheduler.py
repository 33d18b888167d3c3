"""The scheduler and the job contract: a failing job never stops the others, a job that cannot keep up
is counted, exported and said, never queued; the daemon's jobs are listed by name, each a Job, and a bad
term-set file stops the daemon at start."""

import logging
import re
import time
import urllib.request

import pytest
from support import wait_for

from causewatch import config
from causewatch.config import DaemonConfig
from causewatch.daemon.entrypoints import default_jobs
from causewatch.daemon.exporter import Exporter
from causewatch.daemon.jobs import Job, JobContext
from causewatch.daemon.scheduler import LocalJobs, Scheduler
from causewatch.daemon.server import Daemon
from causewatch.errors import ConfigError


class Counting(Job):
    interval = 5.0

    def __init__(self, name, fail=False):
        self.name, self.fail, self.calls = name, fail, []

    def run(self, ctx):
        self.calls.append("run")
        if self.fail:
            raise RuntimeError("boom")

    def on_hellos(self, ctx, hellos):
        self.calls.append(("hellos", [node for node, _ in hellos]))


def scheduler(*jobs, **kw):
    exporter = Exporter()
    ctx = JobContext(read=None, write=None, send=None, exporter=exporter)
    return Scheduler(LocalJobs(list(jobs), ctx), exporter.job_errors, exporter.job_runs, exporter.job_lag,
                     exporter.job_overruns, **kw), exporter


def test_failing_job_is_counted_and_others_run():
    bad, good = Counting("bad", fail=True), Counting("good")
    s, exporter = scheduler(bad, good)
    s.build()
    s.run_due(100.0)
    s.run_due(101.0)  # not due again before 105
    s.run_due(105.0)
    assert bad.calls == good.calls == ["run", "run"]
    assert exporter.registry.get_sample_value("causewatch_job_errors_total", {"analysis": "bad"}) == 2
    # every finished run counts, a failed one too: a reader waits on it for a run that began after its data
    assert [exporter.registry.get_sample_value("causewatch_job_runs_total", {"analysis": job})
            for job in ("bad", "good")] == [2, 2]


class Slow(Job):
    """A job due every 5 s whose run takes `seconds` of the scheduler's clock."""
    interval = 5.0

    def __init__(self, clock, seconds):
        self.name, self.clock, self.seconds = "slow", clock, seconds

    def run(self, ctx):
        self.clock[0] += self.seconds


def test_a_job_that_cannot_keep_up_is_counted_said_once_and_never_queued(caplog):
    clock = [100.0]
    job = Slow(clock, 12.0)   # each run takes more than two intervals
    s, exporter = scheduler(job, clock=lambda: clock[0])

    def value(name):
        return exporter.registry.get_sample_value(name, {"analysis": "slow"})
    s.build()
    assert value("causewatch_job_lag_seconds") == 0.0
    with caplog.at_level(logging.INFO, "causewatch.daemon.scheduler"):
        s.run_due(clock[0])   # at 100, next due at 105, ended at 112
        assert value("causewatch_job_lag_seconds") == 7.0
        s.run_due(clock[0])   # at 112: once, not once per missed interval (105, 110); ended at 124
        assert value("causewatch_job_lag_seconds") == 7.0
        job.seconds = 1.0
        s.run_due(clock[0])   # at 124, ended at 125, next due at 129
    assert value("causewatch_job_lag_seconds") == 0.0
    assert value("causewatch_job_runs_total") == 3 and value("causewatch_job_overruns_total") == 2
    assert caplog.text.count("analysis job slow falls behind: a run ended 7.0 s after the next was due") == 1
    assert caplog.text.count("analysis job slow keeps up again") == 1
    clock[0] = 131.5   # due at 129, another job's run held it up: the gauge says so before it runs
    assert value("causewatch_job_lag_seconds") == 2.5


class Sleepy(Job):
    """A job due every 0.1 s whose run sleeps 0.3 s: each run ends after the next was due."""
    name, interval = "sleepy", 0.1

    def run(self, ctx):
        time.sleep(0.3)


@pytest.mark.service
@pytest.mark.slow
def test_a_daemons_job_that_overruns_is_exported_at_metrics(tmp_path):
    d = Daemon(DaemonConfig(db=str(tmp_path / "cw.duckdb"), bind="tcp://127.0.0.1:0", http="127.0.0.1:0",
                            analysis_nice=0), jobs=[Sleepy()]).start()   # the export, not the worker's priority
    try:
        def series() -> dict:
            text = urllib.request.urlopen(f"http://{d.http.address}/metrics", timeout=30).read().decode()
            return {m[0]: float(m[1]) for m in re.findall(r'^(causewatch_job_\w+)\{analysis="sleepy"\} (\S+)$',
                                                           text, re.M)}
        seen = wait_for(lambda: (v := series()).get("causewatch_job_runs_total", 0) >= 2 and v, timeout=120)
    finally:
        d.stop()
    assert seen["causewatch_job_overruns_total"] >= max(1, seen["causewatch_job_runs_total"] - 1)
    assert "causewatch_job_lag_seconds" in seen


def test_a_jobs_hooks_default_to_doing_nothing():
    job = Job()
    ctx = JobContext(read=None, write=None, send=None, exporter=Exporter())
    assert job.run(ctx) is None and job.on_hellos(ctx, [("n1", {})]) is None


def test_hellos_reach_jobs_in_one_call_per_burst():
    job = Counting("j")
    s, _ = scheduler(job)
    for k in range(5):   # queued before the loop runs: one burst
        s.hello(f"node-{k}", {})
    s.start()
    s.stop()
    assert job.calls[0] == ("hellos", [f"node-{k}" for k in range(5)])


def test_the_daemons_jobs_keep_the_protocol_under_distinct_names():
    jobs = default_jobs(DaemonConfig(db="x.duckdb"))
    assert [j.name for j in jobs] == ["causal", "fuzzy", "probe", "retention", "compaction"]
    assert all(isinstance(j, Job) and j.interval > 0 for j in jobs)
    assert LocalJobs(jobs, None).schedule() == [(j.name, j.interval) for j in jobs]


def test_the_causal_jobs_pace_comes_from_the_config_file(tmp_path):
    f = tmp_path / "d.toml"
    f.write_text('[daemon]\ncausal_interval = 3\ncausal_min_new = 40\ncausal_confirm = 3\n')
    causal = default_jobs(config.load(DaemonConfig, f, "daemon"))[0]
    assert (causal.interval, causal.min_new, causal.confirm) == (3.0, 40, 3)
    f.write_text('[daemon]\ncausal_interval = 0.5\n')
    with pytest.raises(ConfigError, match=f"{f}:2: causal_interval: 0.5 is out of range.*between 1.0 and 86400.0"):
        config.load(DaemonConfig, f, "daemon")


def test_a_term_set_file_that_cannot_load_stops_the_daemon_naming_it(tmp_path):
    with pytest.raises(ConfigError, match="fuzzy_terms: cannot load the term sets '/no/such.toml'"):
        default_jobs(DaemonConfig(db="x.duckdb", fuzzy_terms="/no/such.toml"))
    bad = tmp_path / "terms.toml"
    bad.write_text("[cpi]\nterms = 3\n")
    with pytest.raises(ConfigError, match="fuzzy_terms"):
        default_jobs(DaemonConfig(db="x.duckdb", fuzzy_terms=str(bad)))
