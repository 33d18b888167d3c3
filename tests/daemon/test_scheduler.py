"""The scheduler: jobs found by file name, a broken or failing job never stops the others."""

import logging

from causewatch import daemon as daemon_pkg
from causewatch.config import DaemonConfig
from causewatch.daemon.metrics import LatestState
from causewatch.daemon.scheduler import JobContext, Scheduler, discover_jobs


class Counting:
    def __init__(self, name, fail=False):
        self.name, self.interval, self.fail, self.calls = name, 5.0, fail, []

    def run(self, ctx):
        self.calls.append("run")
        if self.fail:
            raise RuntimeError("boom")

    def on_hello(self, ctx, node, body):
        self.calls.append(("hello", node))


def ctx():
    return JobContext(read=None, write=None, send=None, metrics=LatestState())


def test_failing_job_is_counted_and_others_run():
    bad, good = Counting("bad", fail=True), Counting("good")
    s = Scheduler(ctx(), [bad, good])
    due = {}
    s.run_due(100.0, due)
    s.run_due(101.0, due)  # not due again before 105
    s.run_due(105.0, due)
    assert bad.calls == good.calls == ["run", "run"]
    assert s.ctx.metrics.registry.get_sample_value("causewatch_job_errors_total", {"job": "bad"}) == 2


def test_hello_reaches_jobs():
    job = Counting("j")
    s = Scheduler(ctx(), [job])
    s.start()
    s.hello("node-9", {})
    s.stop()
    assert ("hello", "node-9") in job.calls


def test_module_that_cannot_load_is_left_out(tmp_path, monkeypatch, caplog):
    (tmp_path / "job_broken.py").write_text("import no_such_module_anywhere\n")
    (tmp_path / "job_tiny.py").write_text(
        "class Job:\n    name, interval = 'tiny', 1.0\n    def __init__(self, db=None):\n        self.db = db\n"
        "    @classmethod\n    def from_config(cls, cfg):\n        return cls(cfg.db)\n    def run(self, ctx):\n"
        "        pass\n")
    monkeypatch.setattr(daemon_pkg, "__path__", [*daemon_pkg.__path__, str(tmp_path)])
    with caplog.at_level(logging.ERROR):
        jobs = {j.name: j for j in discover_jobs(DaemonConfig(db="x.duckdb"))}
    assert "tiny" in jobs and jobs["tiny"].db == "x.duckdb"
    assert any("job_broken cannot load" in r.getMessage() for r in caplog.records)
