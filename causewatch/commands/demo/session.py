"""The demo on its running daemon, read through the daemon's API as a user reads it: the kit
registered, the agents probed one at a time, the story told while the workload runs, the jobs' last
runs waited for on /metrics, then the report and its last line."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

from causewatch.commands.demo import parts, report, sections, shards, words
from causewatch.commands.demo.story import Story
from causewatch.commands.source import DaemonSource
from causewatch.daemon import verbs

# The causal job learns every few seconds here (a daemon's default is a minute): the baseline is set
# in the calm start, and the hog's departure is confirmed, raised and resolved within the run.
# Its jobs worker runs at normal priority and is never paused for ingest: the workload keeps both
# cores of a small demo machine busy, and at the daemon's defaults (SCHED_IDLE, paused while frames wait
# for the writer) the models would only be learnt after it ends.
# Each check of new dependencies judges at least 40 new tasks: fewer are a run or two of one task type.
# An app's anomalies resolve after 30 s without a task, not 9: ingest under the hog may pause that long.
CAUSAL = {"causal_interval": 3.0, "causal_min_new": 40, "causal_confirm": 2, "causal_quiet_intervals": 10,
          "analysis_nice": 0, "analysis_pause_max": 0.0}
# Samples older than 20 s move to the Parquet lake (a daemon's default is an hour), so the demo's store
# shows both tiers and what a value costs in each; regions are scored every few seconds (a daemon's
# default is 30 s), so the report's wait for the jobs' last runs is short.
STORE = {"store_hot_seconds": 20.0, "compaction_interval": 5.0, "fuzzy_interval": 5.0}
SETTLED = ("causal", "fuzzy", "compaction")   # the jobs whose output the report shows
SETTLE_MAX = 300.0          # seconds the report waits for their last runs at most (a loaded machine's learns)


class Steps:
    """What the demo is doing and has done, for the line an interrupted demo ends with."""

    def __init__(self):
        self.t0, self.doing, self.done, self.interrupted = time.monotonic(), "preparing its folder", [], False

    def begin(self, doing: str) -> None:
        self.done.append(self.doing)
        self.doing = doing

    def interrupt(self, signum, frame):
        """SIGINT's handler: noted first, as a DuckDB query it cuts short raises its own error instead."""
        self.interrupted = True
        raise KeyboardInterrupt

    def summary(self, folder: Path) -> str:
        return (f"demo interrupted after {time.monotonic() - self.t0:.0f} s, while {self.doing}; done: "
                f"{', '.join(self.done) or 'nothing yet'}. No report: figures over an interrupted run "
                f"would mislead. Its files so far: {folder}")


def tell(args, folder: Path, daemon, quiet: bool, steps: Steps) -> int:
    """The demo on `daemon` (started, its address and settings known; read through its API alone)."""
    t0 = time.monotonic()   # every value stored comes after this: the ingest rate's window
    db, url = Path(daemon.cfg.db), f"http://{daemon.http.address}"
    if not quiet:
        print(f"daemon {daemon.endpoint}, DuckDB {db}, metrics {url}/metrics")
        where = daemon.cfg.analysis_scheduler
        print(f"analysis: causal learns run on the Dask cluster at {where}" if where else
              "analysis: causal learns run in the daemon's jobs worker (local; --analysis-scheduler "
              "tcp://HOST:8786 runs them on a Dask cluster)")
    steps.begin("registering the kit")
    parts.register_kit(folder, url, quiet)
    api = DaemonSource(url)
    agents = {}
    try:
        for node, watch in parts.NODES:   # one at a time: two probes at once would share the cores and disagree
            steps.begin(f"probing {node}")
            agents[node] = parts.agent(folder, daemon.endpoint, node, watch)
            parts.await_probe(api, node, agents[node], quiet)
        story = Story(time.time(), url, args.seconds, args.wait)
        if not quiet:
            print(story.plan(), flush=True)
        (folder / "go").touch()
        steps.begin("telling the story")
        _tell_story(api, story, agents["demo-node-1"], folder, quiet, steps)
    finally:
        for agent in agents.values():
            if agent.poll() is None:
                agent.terminate()
            agent.wait(60)
    elapsed = time.monotonic() - t0
    steps.begin("waiting for the jobs' last runs")
    settle(url)
    steps.begin("reporting")
    rep = report.report(api, elapsed, folder, story)
    rep["analysis"] = sections.analysis(metrics(url), daemon.cfg.analysis_scheduler)
    if args.shards > 1:
        steps.begin(f"running {args.shards} shards")
        rep["shards"] = shards.run(folder / "shards", args.shards, quiet)
    print(json.dumps(rep, default=str)) if args.json else words.print_report(rep, db)
    failed = [f"{node} exited {a.returncode}" for node, a in agents.items() if a.returncode not in (0, -15)]
    if failed:
        print(f"agents failed: {', '.join(failed)}; logs in {folder}", file=sys.stderr)
    print(rep["story"]["line"], file=sys.stderr if args.json else sys.stdout)
    if failed or rep["sample_values"] == 0:
        return 1
    return 0 if rep["story"]["shown"] == "yes" else 3


def _tell_story(api, story: Story, watched: subprocess.Popen, folder: Path, quiet: bool, steps: Steps) -> None:
    """Step the story each second while the watched workload runs, with a live bar of what is stored."""
    from tqdm import tqdm
    bar = None if quiet else tqdm(total=story.tasks, desc="workload tasks stored", dynamic_ncols=True,
                                  bar_format="{desc} {bar:20} {n}/{total} {elapsed}{postfix}")
    try:
        going = True
        while going and watched.poll() is None:
            time.sleep(1.0)
            counts = api.read(verbs.COUNTS)
            if bar is not None:
                bar.set_postfix_str("  ".join(f"{k} {v:,}" for k, v in counts.items()) + f"  {story.state()}",
                                    refresh=False)
            going = story.step(api, counts["tasks"])
            steps.doing = f"telling the story ({story.state()}; {counts['tasks']:,} tasks stored)"
            if bar is not None:
                bar.update(min(counts["tasks"], bar.total) - bar.n)
    finally:
        story.finish()
        (folder / "stop").touch()   # the workload finishes the tasks it handed out; its agent stops with it
        if bar is not None:
            bar.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            watched.wait(60)


def metrics(url: str) -> dict[tuple, float]:
    """The daemon's counters as /metrics shows them: (family, label values...) -> value."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families
    with urllib.request.urlopen(f"{url}/metrics", timeout=60) as reply:
        text = reply.read().decode()
    return {(family.name, *sample.labels.values()): sample.value for family in text_string_to_metric_families(text)
            if family.type == "counter" for sample in family.samples if sample.name.endswith("_total")}


def settle(url: str) -> None:
    """Wait until each job the report shows has finished two more runs (causewatch_job_runs_total): the
    second began after the data stopped, so the report holds everything stored (at most SETTLE_MAX s)."""
    first, t0 = _runs(url), time.monotonic()
    while time.monotonic() - t0 < SETTLE_MAX:
        now = _runs(url)
        if all(now[job] >= first[job] + 2 for job in SETTLED):
            return
        time.sleep(0.5)
    print(f"the jobs' last runs did not finish within {SETTLE_MAX:.0f} s: reporting what is stored", file=sys.stderr)


def _runs(url: str) -> dict[str, float]:
    counted = metrics(url)
    return {job: counted.get(("causewatch_job_runs", job), 0.0) for job in SETTLED}
