"""`causewatch demo`: the whole system on embedded defaults, end to end, with a report.

A daemon on a DuckDB file under the demo folder, a local agent watching a phased master-worker
workload, live progress while data arrives, then what was stored and what the analyses made of it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from causewatch import config
from causewatch.commands import demo_shards
from causewatch.config import DaemonConfig
from causewatch.errors import ConfigError, InputError

MARK = ".causewatch-demo"   # written into a folder the demo made, so a later run may empty it
SEED = 1                    # the workload's and the probe kit's seeds: the same tasks run to run
PROBE_WAIT = 60.0           # seconds the workload waits for the agents' probes at most
KIT_STOP = 10.0             # seconds an interrupted kit build may take to stop its workers before all are killed
RATE = 20                   # tasks a second the workload runs on an idle machine (--seconds x RATE tasks at least)
# The watched command waits for a file before it becomes the workload (exec: the agent's counters follow):
# the agents' probes run at their hello and must not share the cores with the workload they predict.
WAIT_THEN_EXEC = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.1)\n" \
                 "os.execv(sys.argv[2], sys.argv[2:])"
# The contention hog: busy processes, each pinned to one of the CPUs the workload may use; each stops
# by itself once the demo is gone, however it went (a killed demo must not leave busy processes behind).
HOG = "import os, sys\nwhile os.getppid() == int(sys.argv[1]):\n    for _ in range(1_000_000): pass"
# The causal job learns every few seconds here (a daemon's default is a minute): the baseline is set
# in the calm start, and the hog's departure is confirmed, raised and resolved within the run.
# Its jobs worker runs at normal priority and is never paused for ingest: the workload keeps both
# cores of a small demo machine busy, and at the daemon's defaults (SCHED_IDLE, paused while frames wait
# for the writer) the models would only be learnt after it ends.
# Each check of new dependencies judges at least 40 new tasks: fewer are a run or two of one task type.
# An app's anomalies resolve after 30 s without a task, not 9: ingest under the hog may pause that long.
CAUSAL = {"causal_interval": 3.0, "causal_min_new": 40, "causal_confirm": 2, "causal_quiet_intervals": 10,
          "analysis_nice": 0, "analysis_pause_max": 0.0}
BASELINE_ROWS = DaemonConfig().causal_baseline_rows   # the fewest rows a baseline is learnt from
# The story's three stretches, each ended by what it needs, within its share of --seconds plus --wait:
SHARES = {"calm": 0.35, "hog": 0.40, "end": 0.25}
WAIT_MORE = 180.0           # --wait's default: what a stretch may take beyond its share under load (at
                            # load 10-30 on two cores a stretch took 95-127 s)
FINISH = 120.0              # the workload's own tasks may take this much longer than --seconds under load
# Samples older than 20 s move to the Parquet lake (a daemon's default is an hour), so the demo's store
# shows both tiers and what a value costs in each.
STORE = {"store_hot_seconds": 20.0, "compaction_interval": 5.0}
HOG_CYCLES = 6              # model versions learnt under the hog at most: its first batch is part calm, and a
                            # finding is raised on the 2nd check in a row that sees it, or the 1st when sure
HOG_FACTOR = 4              # the wait the hog aims at, times the calm tasks' (see hog_size)
HOG_JUDGE = 20              # tasks started under the hog that judge its size, once: short of HOG_FACTOR, it grows
HOG_MAX = 3                 # ...to at most this many times its first size
END_CYCLES = 2              # model versions of the calm end when no anomaly on the wait is left to resolve
SCOPE = "app:demo"
STABLE = 0.8                # an edge held by this share of the run's model versions (and not weak) is stable
WAIT = "cpu_wait_seconds"   # the contended resource's variable in each task record
DURATION = "duration"       # ...which a model may hold instead (the wait as most of a task's time)
MOVED = 1.25                # tasks waiting this factor more (or less) for a CPU than the baseline's, or this
                            # factor more (fewer) processes runnable on the machine: other work moved

EPILOG = """The story: a calm start until app:demo has a baseline model, then a CPU hog until an anomaly on
the tasks' CPU wait is raised, then a calm end until it resolves. Each stretch ends when what it needs
has come, within its share of --seconds plus --wait; under load the demo waits longer, and says up
front how long at most. Its last line says whether the story was shown, and if not, why.
Exit status: 0 the story was shown, 3 the demo ran but could not show it, 1 a part failed, 130
interrupted (Ctrl-C, in any step: a line says what it had done; no report of the cut run).

examples:
  causewatch demo                      # about 80 s on an idle machine, files under ./demo-out
  causewatch demo --seconds 60 --dir /tmp/cw-demo
  causewatch demo --wait 300           # a busy machine: give each stretch up to 5 min more
  causewatch demo --json               # the final report as JSON (the last line on stderr)
  causewatch demo --analysis-scheduler tcp://127.0.0.1:8786   # the causal learns on a Dask cluster
  causewatch demo --shards 2           # then two daemons as shards over one lake, asked as one
"""


def add_arguments(p):
    p.add_argument("--dir", default="demo-out",
                   help="demo folder (DuckDB file, spool, kits): a new or empty one, or one an earlier demo made")
    p.add_argument("--seconds", type=float, default=30.0,
                   help=f"how long the workload runs on an idle machine, {RATE} tasks a second (default 30: a calm "
                        "start, the hog, a calm end)")
    p.add_argument("--wait", type=float, default=WAIT_MORE,
                   help="seconds each stretch may run beyond its share of --seconds, waiting for what it needs "
                        "(a baseline model, the anomaly, its resolution) on a loaded machine "
                        f"(default {WAIT_MORE:.0f})")
    p.add_argument("--json", action="store_true", help="print the final report as JSON")
    p.add_argument("--shards", type=int, default=1, metavar="N",
                   help="after the story, N daemons as shards over one lake with agents spread by hashing, "
                        "asked as one (default 1: no such section; 2-8)")
    p.add_argument("--analysis-scheduler", default="", metavar="tcp://HOST:PORT",
                   help="a running dask.distributed scheduler to run the causal learns on (default: the "
                        "daemon's jobs worker; docs/cluster.md)")


def _build_kit(folder: Path, quiet: bool) -> None:
    """A probe kit for the demo app (registered once the daemon runs, so new agents get probed on hello)."""
    if not quiet:
        print("building the probe kit for app 'demo' (reference runs of the workload)…", flush=True)
    # Its own process group: a terminal's Ctrl-C reaches the demo alone, which passes exactly one SIGINT on,
    # so the build stops its own pool of workers (killed, it would leave them to die of broken pipes).
    build = subprocess.Popen([sys.executable, "-m", "causewatch.cli", "probe", "build", "demo", "--workload",
                              "masterworker", "--tasks", "40", "--task-seed", str(SEED), "--seed", str(SEED),
                              "--out", str(folder / "kit"),
                              # a demo runs wherever it is started: it keeps a noisy kit (its manifest's quality
                              # says so)
                              "--max-spread", "1", "--max-other-cpu", "1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL if quiet else None, process_group=0)
    try:
        code = build.wait()
    except KeyboardInterrupt:
        build.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            build.wait(KIT_STOP)
        with contextlib.suppress(ProcessLookupError):   # whatever of its group is left: workers, timing child
            os.killpg(build.pid, signal.SIGKILL)
        build.wait()
        raise
    if code:
        raise subprocess.CalledProcessError(code, build.args)


def _register_kit(folder: Path, url: str, quiet: bool) -> None:
    """Register the kit with the running daemon through its HTTP API (the daemon keeps its store)."""
    subprocess.run([sys.executable, "-m", "causewatch.cli", "probe", "register", str(folder / "kit"), "--daemon", url],
                   check=True, stdout=subprocess.DEVNULL if quiet else None)


def _tasks(seconds: float) -> int:
    return int(seconds * RATE)


NODES = (("demo-node-1", True), ("demo-node-2", False))   # (node, watches the workload)


def _agent(folder: Path, endpoint: str, node: str, watch: bool) -> subprocess.Popen:
    """An agent for `node`; demo-node-1 watches the instrumented master-worker workload, which starts
    once `folder/go` exists and runs until `folder/stop` does, demo-node-2 its node only."""
    cfg = folder / f"{node}.toml"
    # its probe waits for an idle moment a little only: the workload waits PROBE_WAIT s for it at most
    cfg.write_text(f'[agent]\ndaemon = "{endpoint}"\nnode = "{node}"\nspool = "{folder / node}-spool"\n'
                   f'ipc = "ipc://{folder / node}.sock"\nprobe_idle_wait = {PROBE_WAIT / 6:g}\n')
    cmd = [sys.executable, "-m", "causewatch.cli", "agent", "--config", str(cfg)]
    if watch:
        cmd += ["--", sys.executable, "-c", WAIT_THEN_EXEC, str(folder / "go"),
                sys.executable, "-m", "causewatch.probe.workloads.masterworker", "--app", "demo",
                "--until", str(folder / "stop"), "--seed", str(SEED), "--workers", "2"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(folder / f"{node}.log", "w"),
                            env=dict(os.environ, CAUSEWATCH_CONFIG=str(cfg)))


def _await_probe(con, node: str, agent: subprocess.Popen, quiet: bool) -> None:
    """Wait until `node`'s probe result is stored (at most PROBE_WAIT s)."""
    from causewatch.daemon import readers
    if not quiet:
        print(f"probing {node} (one node at a time, before the workload starts: a probe sharing the cores "
              "with it or with another probe would rank this machine slower than itself)…", flush=True)
    t0 = time.monotonic()
    while time.monotonic() - t0 < PROBE_WAIT and agent.poll() is None:
        if node in {r["node"] for r in readers.probes.latest_probes(con, "demo")}:
            if not quiet:
                print(f"probed in {time.monotonic() - t0:.1f} s", flush=True)
            return
        time.sleep(0.2)
    print(f"{node}'s probe did not come back within {PROBE_WAIT:.0f} s: going on without it", file=sys.stderr)


def prepare(folder: Path) -> None:
    """Make `folder`, or empty it if an earlier demo made it; a folder with anything else is refused."""
    if folder.exists() and not folder.is_dir():
        raise InputError(f"--dir {folder}: is a file; give a folder")
    if folder.exists() and any(folder.iterdir()):
        if not (folder / MARK).exists():
            raise InputError(f"--dir {folder}: not empty and not made by causewatch demo; "
                             "give a new or empty folder (nothing was deleted)")
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARK).write_text("made by causewatch demo: a later demo empties this folder\n")


def runnable() -> int:
    """Processes runnable on the machine now (/proc/stat's procs_running), this one left out; 0 unread."""
    try:
        with open("/proc/stat") as f:
            return next(int(line.split()[1]) - 1 for line in f if line.startswith("procs_running "))
    except (OSError, StopIteration, ValueError):
        return 0


def hog_size(calm_wait: float | None) -> int:
    """Busy processes per CPU for the hog to start with: the seconds the calm tasks waited for a CPU per
    CPU second (about the others sharing a task's CPU), rounded up, at least one: beside that many busy
    processes one per CPU would add a fraction of the wait they cause, too little for the mechanism
    test to see (docs/perf-log.md, "The demo's hog size"). `grown_size` aims at HOG_FACTOR, once
    HOG_JUDGE tasks have run under it."""
    return max(1, math.ceil(calm_wait or 0))


def grown_size(per_cpu: int, calm_wait: float | None, under: float) -> int:
    """Busy processes per CPU for the wait per CPU second to reach HOG_FACTOR times the calm one, from
    what `per_cpu` of them did (`under`: the median of the tasks started under them), linearly; at
    most HOG_MAX times as many, and never fewer."""
    if not calm_wait or under >= HOG_FACTOR * calm_wait:
        return per_cpu
    added = max(under - calm_wait, 1e-9) / per_cpu   # wait per CPU second each one added
    return max(per_cpu, min(math.ceil((HOG_FACTOR - 1) * calm_wait / added), HOG_MAX * per_cpu))


class Hog:
    """CPU contention for the workload: `per_cpu` busy processes pinned to each CPU it may use, from
    `start` to `stop` (always, by `stop`, on the way out)."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []
        self.cpus = sorted(os.sched_getaffinity(0))
        self.per_cpu = 0
        self.load: float | None = None       # the 1-minute load average when it started
        self.calm_wait: float | None = None  # the calm tasks' median wait per CPU second then
        self.started = self.stopped = None   # seconds after the workload started
        self.sized: str | None = None        # how its size was judged on the tasks under it

    def start(self, at: float, load: float, calm_wait: float | None) -> None:
        self.load, self.calm_wait, self.started = load, calm_wait, at
        self._add(hog_size(calm_wait))

    def _add(self, per_cpu: int) -> None:
        for cpu in self.cpus:
            for _ in range(per_cpu - self.per_cpu):
                self.procs.append(subprocess.Popen([sys.executable, "-c", HOG, str(os.getpid())]))
                os.sched_setaffinity(self.procs[-1].pid, {cpu})
        self.per_cpu = per_cpu

    def judge(self, under: float, tasks: int, at: float) -> None:
        """Grow to `grown_size` (once), `under` being the median wait per CPU second of the first
        `tasks` started under the hog."""
        first, calm = self.per_cpu, self.calm_wait
        self._add(grown_size(first, calm, under))
        self.sized = (f"{first} per CPU: its first {tasks} tasks waited {under:.3g} s per CPU second, the calm "
                      f"ones {calm if calm is None else f'{calm:.3g}'}" + (
                          f"; grown to {self.per_cpu} per CPU at {at:.0f} s to reach {HOG_FACTOR} times"
                          if self.per_cpu > first else ""))

    @property
    def running(self) -> bool:
        return bool(self.procs)

    def stop(self, at: float) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()
        if self.procs:
            self.stopped = at
        self.procs = []


class Story:
    """The demo's three stretches, each ended by what it needs rather than by the clock:

    1. `calm`: until the calm share of the tasks is stored and app:demo has a baseline: the causal
       job's, by analytics.causal.baseline's rule, or, only once the stretch's bound ran out without
       one, the newest learnt from BASELINE_ROWS tasks at least, pinned through the API as an operator
       would (the report says which);
    2. `hog`: until an anomaly on the CPU wait is raised, or HOG_CYCLES model versions were learnt
       under it;
    3. `end`: until the first change on the wait judged on rows raised under the hog (else any
       anomaly on the wait raised then) is resolved (none was raised: END_CYCLES more versions).

    Each may take its share of `seconds` plus `wait` at most (`bounds`, stated before the workload
    starts); one that runs out is noted in `short`. A calm start that runs out without a baseline ends
    the story there, and the workload then runs until `tasks` are stored (its idle-machine length).
    All of it takes `bound` s at most: the stretches' bounds, or --seconds and FINISH if more."""

    def __init__(self, origin: float, url: str, seconds: float, wait: float):
        self.origin = origin                 # wall-clock time the workload started
        self.url = url                       # the daemon's HTTP API, where an operator pins a baseline
        self.tasks = _tasks(seconds)
        self.calm_tasks = int(SHARES["calm"] * self.tasks)
        self.bounds = {name: share * seconds + wait for name, share in SHARES.items()}
        self.bound = max(sum(self.bounds.values()), seconds + FINISH)
        self.stretch = "calm"
        self.began = {"calm": 0.0}           # seconds after the origin each stretch began
        self.hog = Hog()
        self.pinned: int | None = None       # the model the demo pinned, if no stable one came
        self.baseline_s: float | None = None  # when the calm start had its baseline
        self.versions = {}                   # model versions when each stretch began
        self.hog_versions = 0                # model versions learnt under the hog
        # the model variable the hog shows in; why not the wait, and the verdict's short form of it
        self.contended, self.why, self.held = WAIT, None, ""
        self.short: list[str] = []           # the bounds that ran out, and what was missing then
        # (seconds after the origin, 1-minute load average, processes runnable then: the demo and its hog left out)
        self.loads: list[tuple[float, float, int]] = []

    def plan(self) -> str:
        """The story and its bounds in words, said before the workload starts."""
        b = self.bounds
        return (f"the story: a calm start until {SCOPE} has a baseline model (at most {b['calm']:.0f} s), a CPU "
                f"hog until an anomaly on the tasks' CPU wait is raised (at most {b['hog']:.0f} s), a calm end until "
                f"it resolves (at most {b['end']:.0f} s): at least {self.tasks} tasks, about "
                f"{self.tasks / RATE:.0f} s on an idle machine, at most {self.bound:.0f} s under load")

    def now(self) -> float:
        return time.time() - self.origin

    def step(self, con, stored: int) -> bool:
        """Move the story on, `stored` being the workload's tasks stored so far; False once the
        workload may stop."""
        from causewatch.daemon import readers
        now, load = self.now(), os.getloadavg()[0]
        self.loads.append((round(now, 1), load, runnable() - len(self.hog.procs)))
        models = readers.models.models(con, SCOPE)
        if self.stretch == "calm":
            self._calm(con, models, stored, now, load)
        elif self.stretch == "hog":
            self._hogging(con, models, now)
        elif self.stretch == "end":
            self._ending(con, models, now)
        done = self.stretch == "done" and (self.hog.started is not None or stored >= self.tasks)
        return not done and now < self.bound

    def _next(self, stretch: str, now: float, models: list) -> None:
        self.stretch = stretch
        self.began[stretch] = now
        self.versions[stretch] = len(models)

    def _calm(self, con, models: list, stored: int, now: float, load: float) -> None:
        from causewatch.daemon import readers
        baseline = readers.models.baseline(con, SCOPE)
        over = now - self.began["calm"] >= self.bounds["calm"]
        if baseline is None and over and models and models[0]["n_rows"] >= BASELINE_ROWS:
            self._pin(models[0]["model_id"])
            baseline = None if self.pinned is None else {"model_id": self.pinned}
        if baseline is not None and (stored >= self.calm_tasks or over):
            self.baseline_s = now
            self._next("hog", now, models)
            tasks = _task_waits(con, self.origin)
            self.contended, self.why, self.held = contended(con, tasks, self.origin)
            self.hog.start(now, load, _median(tasks, -math.inf, now))
        elif over:
            self.short.append(f"no baseline model within the calm start's {self.bounds['calm']:.0f} s: " + (
                f"the newest of {len(models)} model versions was learnt from {models[0]['n_rows']} tasks, a "
                f"baseline needs {BASELINE_ROWS}" if models else
                f"the causal job had learnt no model yet ({stored} tasks stored)") + f", load {load:.1f}")
            self.stretch = "done"

    def _hogging(self, con, models: list, now: float) -> None:
        if self.hog.sized is None:
            tasks = _task_waits(con, self.origin)
            under = None if tasks is None else tasks[tasks["t"] >= self.hog.started]["ratio"]
            if under is None:
                self.hog.sized = "no wait in the task records: not judged"
            elif len(under) >= HOG_JUDGE:
                self.hog.judge(float(under.median()), len(under), now)
        self.hog_versions = len(models) - self.versions["hog"]
        over = now - self.began["hog"] >= self.bounds["hog"]
        if over:
            self.short.append(f"the hog's {self.bounds['hog']:.0f} s ran out after {self.hog_versions} model "
                              f"versions under it")
        # a change judged on the newest tasks (it resolves once calm tasks come), not an edge: the model's
        # window keeps the hog's tasks, and an edge waited 100 s for it to move past them
        if self._ours(con, rows_only=True) or self.hog_versions >= HOG_CYCLES or over:
            self.hog.stop(now)
            self._next("end", now, models)

    def _ending(self, con, models: list, now: float) -> None:
        from causewatch.analytics.causal.anomalies import ROW_KINDS
        ours = self._ours(con)
        # the story's subject: the first change judged on rows (the hog stopped on it), else any of ours;
        # an edge on the wait that resolved first once ended the story with the change still open
        rows = [a for a in ours if a["kind"] in ROW_KINDS]
        subjects = [min(rows, key=lambda r: r["opened"])] if rows else ours
        if any(a["resolved"] is not None for a in subjects):
            self.stretch = "done"
        elif not ours and len(models) - self.versions["end"] >= END_CYCLES:
            self.stretch = "done"
        elif now - self.began["end"] >= self.bounds["end"]:
            self.short.append(f"the calm end's {self.bounds['end']:.0f} s ran out before the anomaly on "
                              f"{self.contended} resolved" if ours else
                              f"the calm end's {self.bounds['end']:.0f} s ran out before {END_CYCLES} model versions")
            self.stretch = "done"

    def _ours(self, con, rows_only: bool = False) -> list[dict]:
        """The anomalies on the wait raised under the hog, on tasks that ran under it (the report's own);
        only those judged on rows, if `rows_only`."""
        from causewatch.analytics.causal.anomalies import ROW_KINDS
        from causewatch.daemon import readers
        models = sorted(readers.models.models(con, SCOPE), key=lambda m: m["learned_at"])
        return [a for a in readers.models.anomalies(con, SCOPE, limit=10_000)
                if (a["kind"] in ROW_KINDS or not rows_only)
                and _ours(dict(a, opened_s=a["opened"] - self.origin), self)
                and _by_hog(_judged(a, models, self.origin), self.hog)]

    def _pin(self, model_id: int) -> None:
        """POST /api/baseline, as an operator pins a model they trust (the calm start's newest); an
        answer that does not come in time is asked again at the next step."""
        import urllib.parse
        import urllib.request
        query = urllib.parse.urlencode({"scope": SCOPE, "model_id": model_id})
        try:
            urllib.request.urlopen(urllib.request.Request(f"{self.url}/api/baseline?{query}", method="POST"),
                                   timeout=60)
        except OSError as e:   # URLError, a timeout: the API worker is slow on a loaded machine
            print(f"pinning model {model_id} as the baseline: {e}; asking again", file=sys.stderr)
            return
        self.pinned = model_id

    def finish(self) -> None:
        self.hog.stop(self.now())

    def state(self) -> str:
        """The stretch in a few words, with the time left of its bound (the live bar's)."""
        if self.stretch == "done":
            return "story done" if not self.short else "story cut short"
        left = self.bounds[self.stretch] - (self.now() - self.began[self.stretch])
        what = {"calm": "calm, waiting for the baseline", "hog": f"hog on ({self.hog.per_cpu}/CPU), waiting for "
                "the anomaly", "end": "calm end, waiting for it to resolve"}[self.stretch]
        return f"{what} ({left:.0f} s left)"


def _live(con, bar, story: Story) -> dict:
    from causewatch.daemon import readers
    counts = readers.report.live_counts(con)
    if bar is not None:
        bar.set_postfix_str("  ".join(f"{k} {v:,}" for k, v in counts.items()) + f"  {story.state()}", refresh=False)
    return counts


def report(con, seconds: float, folder: Path, story: Story) -> dict:
    """What is in the store, from the store: ingest figures, then each analysis' latest output, the
    hog's stretch and each anomaly timed against it and given its cause, each scope's newest model
    drawn as SVG in the demo folder (open anomalies in red), and the story's verdict."""
    from causewatch.analytics.causal import CausalModel, model_svg
    from causewatch.analytics.causal.anomalies import MIN_BITS, one_line
    from causewatch.commands.page import would_page
    from causewatch.daemon import readers
    from causewatch.probe.rank import rank_nodes
    rep = readers.report.overview(con)
    hog = story.hog
    rep["store_bytes"] = sum(p.stat().st_size for p in [*folder.glob("causewatch.duckdb*"),
                                                        *folder.glob("causewatch.lake/**/*")] if p.is_file())
    rep["causal_edges"] = [dict(e, stable=e["held_by"] >= STABLE * e["versions"] and e["strength_bits"] >= MIN_BITS)
                           for e in rep["causal_edges"]]
    rep["phases"] = phases(con)
    tasks = _task_waits(con, story.origin)
    models = sorted(readers.models.models(con, SCOPE), key=lambda m: m["learned_at"])
    base = readers.models.baseline(con, SCOPE)
    base_window = next(((m["window_start"] - story.origin, m["window_end"] - story.origin) for m in models
                        if base and m["model_id"] == base["model_id"]), None)
    rep["anomalies"] = [_anomaly(a, story, tasks, models, base_window) for a in reversed(readers.models.anomalies(con))]
    waits = _waits(tasks, hog)
    word, shown, line = verdict(rep["anomalies"], waits, story)
    rep["contention_hog"] = [{"cpus": hog.cpus, "per_cpu": hog.per_cpu, "sized": hog.sized,
                              "load_at_start": _round(hog.load), "calm_wait_per_cpu_s": _round(hog.calm_wait),
                              "pinned_model": story.pinned,
                              "baseline": f"model {story.pinned}, pinned by the demo" if story.pinned
                              else f"model {base['model_id']}, {base['how']}" if base else "none",
                              "baseline_after_s": _round(story.baseline_s), "started_s": _round(hog.started),
                              "stopped_s": _round(hog.stopped), "model_versions": story.hog_versions, **waits,
                              "variable": story.contended, **({"why": story.why} if story.why else {}),
                              "shown": shown}]
    ranking = rank_nodes("demo", readers.probes.latest_probes(con, "demo"), readers.probes.registered_kits(con),
                         time.time())
    rep["probe_ranking"] = [{
        "node": r["node"], "s_per_task": _round(r["task_seconds"]), "lo": _round(r["task_lo"]),
        "hi": _round(r["task_hi"]), "ratio": round(r["ratio"], 3), "age_s": round(r["age_seconds"]),
        "phases": len(r["phases"]), "cpu_bound_phases": sum(bool(p.get("stretched")) for p in r["phases"]),
        "kit": r["quality"]} for r in ranking]
    rep["brokers"] = brokers("demo", ranking)
    pictures = []
    for scope in readers.models.model_scopes(con):
        marked = {(a["src"], a["dst"]) for a in readers.models.anomalies(con, scope, open_only=True)}
        path = folder / f"model-{scope.replace(':', '-')}.svg"
        graph = readers.models.model_graph(con, scope)[1]
        path.write_text(model_svg(CausalModel.from_json(graph), marked, title=scope))
        pictures.append({"scope": scope, "svg": str(path)})
    loads = [v for _, v, _ in story.loads]
    rep["story"] = {"shown": word, "plan": story.plan(), "bound_s": round(story.bound, 1),
                    "ran_s": _round(story.loads[-1][0]) if story.loads else None,
                    "load": [round(min(loads), 1), round(max(loads), 1)] if loads else None,
                    "short": story.short, "line": line}
    page = would_page(readers.models.anomalies(con), story.url.removeprefix("http://"), one_line)
    return dict(rep, ingest_values_per_s=rep["sample_values"] / seconds, model_pictures=pictures, page=page)


def brokers(app: str, ranking: list[dict]) -> dict:
    """What each scheduler would be told from the ranking, as a dry run (docs/brokers.md): the Slurm
    updates of `causewatch broker slurm --dry-run`, each node's HTCondor slot attributes, the extender's scores."""
    from causewatch.probe import broker
    plan = broker.slurm_plan(app, ranking, None, {})
    return {"slurm": [" ".join(c) for c in broker.slurm_updates(app, plan, None)],
            "htcondor": {r["node"]: broker.condor_attributes(app, r) for r in ranking},
            "kubernetes": broker.extender_scores(ranking, sorted(r["node"] for r in ranking))}


def analysis(daemon) -> list[dict]:
    """Where the causal learns ran and how many, from the counters the causal job published."""
    from causewatch.daemon import compute
    counts: dict[tuple[str, str], float] = {}
    for family in daemon.exporter.snapshots.collect():
        if family.name in (compute.TASKS, compute.RETRIED, compute.FALLBACKS):
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    counts[family.name, *sample.labels.values()] = sample.value
    return [{"runs_on": daemon.cfg.analysis_scheduler or "local",
             "learns_local": int(counts.get((compute.TASKS, "local"), 0)),
             "learns_cluster": int(counts.get((compute.TASKS, "cluster"), 0)),
             "fallbacks": int(sum(v for (name, _), v in counts.items() if name == compute.FALLBACKS)),
             "retries": int(sum(v for (name, _), v in counts.items() if name == compute.RETRIED))}]


def phases(con, shown: int = 8) -> list[dict]:
    """The workload's phases, as `causewatch phases --target app:demo --kind python` finds them in its
    tasks' Python-frame vectors: the heaviest `shown`, each with its top functions."""
    from causewatch.analytics.phases import SimPoint
    from causewatch.analytics.phases.keyed import bbv_matrix
    from causewatch.commands.phases import phase_rows, top_functions
    from causewatch.daemon import readers
    X, keys, _ = bbv_matrix(readers.phases.bbv_rows(con, SCOPE, "python"))
    if X.shape[0] < 2:
        return []
    model = SimPoint(seed=SEED).fit(X)
    rows = sorted(phase_rows(model, top_functions(model, X, keys, 2)), key=lambda r: (-r["weight"], r["phase"]))
    out = [{"phase": r["phase"], "weight": round(r["weight"], 3), "intervals": r["intervals"],
            "top_functions": ", ".join(f"{t['key']} {t['share']:.0%}" for t in r["top"][:1] + [
                t for t in r["top"][1:] if t["share"] >= 0.005])}   # not "0%"
           for r in rows[:shown]]
    if len(rows) > shown:
        out.append({"more": f"{len(rows) - shown} lighter phases: causewatch phases --db … --target {SCOPE} "
                            "--kind python"})
    return out


def _task_waits(con, origin: float):
    """The workload's tasks: start (`t`, seconds after `origin`), `duration`, the seconds waited for a
    CPU (`wait`) and per second of CPU used (`ratio`); None if the records carry no wait."""
    from causewatch.daemon import readers
    df, _, counters = readers.tasks.task_df(con, "demo")
    column = next((c for c, key in counters.items() if key == WAIT), None)
    if column is None:
        return None
    return df.assign(t=df["t_start"] - origin, wait=df[column], ratio=df[column] / df["cpu_seconds"])[
        ["t", "duration", "wait", "ratio"]]


def contended(con, tasks, origin: float) -> tuple[str, str | None, str]:
    """The variable of the scope's baseline model the hog's contention shows in, why when it is not the wait and the
    short form the verdict's line gives (else None and ""): on a loaded machine a task's wait is most of its time,
    and the model leaves it out as a linear copy of duration (features.COPY_R), which then carries it; or the model
    orients duration -> wait, so the wait's mechanism is judged given the task time that holds it, which hides the
    change (a quiet-machine test run lost the story so, in 1 of 6)."""
    from causewatch.daemon import readers
    base = readers.models.baseline(con, SCOPE)
    graph = readers.models.model_graph(con, SCOPE, base["model_id"])[1] if base else {}
    nodes = graph.get("nodes", [])
    if any(e["src"] == DURATION and e["dst"] == WAIT and e["directed"] for e in graph.get("edges", [])):
        return DURATION, (f"the baseline model has {DURATION} -> {WAIT}: the wait's change is judged given the "
                          f"task time, which holds it, so the hog shows in {DURATION}"), \
            f"the model has {DURATION} -> {WAIT}: {DURATION} shows it"
    if WAIT in nodes or DURATION not in nodes:
        return WAIT, None, ""
    why = f"{WAIT} is not a variable of the baseline model, so the hog shows in {DURATION}"
    if tasks is not None:
        lo, hi = readers.models.model_window(con, base["model_id"])
        window = tasks[(tasks["t"] >= lo - origin) & (tasks["t"] <= hi - origin)]
        r = window["wait"].corr(window[DURATION]) if len(window) > 2 else float("nan")
        why += f" (on the baseline's tasks the two moved together, r = {r:.4f}: the wait was most of a task's time)"
    return DURATION, why, f"{WAIT} is not in the model: {DURATION} holds it"


def _median(tasks, lo: float, hi: float) -> float | None:
    """The median wait per CPU second of the tasks started in [lo, hi] (seconds after the origin)."""
    if tasks is None:
        return None
    ratio = tasks["ratio"][(tasks["t"] >= lo) & (tasks["t"] <= hi)]
    return _round(ratio.median()) if len(ratio) else None


def _waits(tasks, hog: Hog) -> dict:
    """The contention the tasks met before, during and after the hog: the median of seconds waited
    for a CPU per second of CPU used."""
    if tasks is None or hog.started is None:
        return {}
    inf = float("inf")
    stopped = inf if hog.stopped is None else hog.stopped
    stretches = {"before": (-inf, hog.started), "during": (hog.started, stopped), "after": (stopped, inf)}
    return {f"wait_per_cpu_s_{name}": _median(tasks, lo, hi) for name, (lo, hi) in stretches.items()}


def _ours(a: dict, story: Story) -> bool:
    """An anomaly on the contended resource's variable raised while the hog ran (the story's own when
    the hog is its cause too)."""
    hog = story.hog
    stopped = float("inf") if hog.stopped is None else hog.stopped
    return (story.contended in (a["src"], a["dst"]) and hog.started is not None
            and hog.started <= a["opened_s"] <= stopped)


def _by_hog(span: tuple[float, float] | None, hog: Hog) -> bool:
    """Whether tasks started in `span` (seconds after the origin) ran under the hog."""
    stopped = float("inf") if hog.stopped is None else hog.stopped
    return span is not None and hog.started is not None and span[1] >= hog.started and span[0] <= stopped


def verdict(anomalies: list[dict], waits: dict, story: Story) -> tuple[str, str, str]:
    """Whether the report shows the hog (an anomaly on the contended resource's variable, on tasks that
    ran under the hog, raised while it ran and resolved after it stopped): "yes", "in part" or "no",
    the contention section's words, and the demo's last line, which says why not when it was not, and
    what the anomalies not from the hog were."""
    hog, var = story.hog, story.contended
    ours = sorted((a for a in anomalies if _ours(a, story) and a["cause"].startswith("the hog")),
                  key=lambda a: a["kind"] != "mechanism_changed")
    shown = [a for a in ours if hog.stopped is not None and (a["resolved_s"] or -1) >= hog.stopped]
    cut = "; " + "; ".join(story.short) if story.short else ""
    held = f" ({story.held})" if story.held else ""
    if hog.started is None:
        word, said = "no", "no: the hog never ran" + (f" ({story.short[0]})" if story.short
                                                      else " (the workload ended first)")
        line = "story NOT shown: the hog never ran" + cut
    elif shown:
        a = shown[0]
        word, said = "yes", f"yes: a {a['kind']} on {var} was raised while the hog ran and resolved after it stopped"
        line = (f"story shown: {a['kind']} on {var} raised {a['opened_s'] - hog.started:.1f} s into the hog, "
                f"resolved {a['resolved_s'] - hog.stopped:.1f} s after it stopped{held}")
    elif ours:
        how = "resolved before it stopped" if all(a["resolved_s"] is not None for a in ours) else "is still open"
        word, said = "in part", f"in part: a {ours[0]['kind']} on {var} was raised while the hog ran, but {how}"
        line = f"story shown in part: {ours[0]['kind']} on {var} raised under the hog, but {how}{held}" + cut
    else:
        word = "no"
        said = (f"no: no anomaly on {var} while the hog ran, though tasks waited "
                f"{waits.get('wait_per_cpu_s_before')} s for a CPU per CPU second before it and "
                f"{waits.get('wait_per_cpu_s_during')} s during it")
        line = (f"story NOT shown: no anomaly on {var} in {story.hog_versions} model versions under the hog (wait "
                f"per CPU second {waits.get('wait_per_cpu_s_before')} before, {waits.get('wait_per_cpu_s_during')} "
                f"during){held}" + cut)
    outside = [a["cause"].split(":")[0] for a in anomalies if not a["cause"].startswith("the hog")]
    if outside:
        counts = ", ".join(f"{k} {outside.count(k)}" for k in sorted(set(outside)))
        line += f"; {len(outside)} anomal{'y' if len(outside) == 1 else 'ies'} not from the hog ({counts}: " \
                "causes in the report)"
    return word, said, line


def _anomaly(a: dict, story: Story, tasks, models: list[dict], base_window) -> dict:
    """An anomaly with its evidence, opened and resolved in seconds after the workload started, said
    against the hog's stretch and given its cause."""
    hog = story.hog
    opened = a["opened"] - story.origin
    resolved = None if a["resolved"] is None else a["resolved"] - story.origin
    return {"scope": a["scope"], "kind": a["kind"], "src": a["src"], "dst": a["dst"],
            "state": "open" if resolved is None else "resolved", "opened_s": round(opened, 1),
            "resolved_s": _round(resolved), "when": _when(opened, resolved, hog),
            "cause": _cause(a, story, tasks, models, base_window),
            "score": round(a["score"], 3), "threshold": round(a["threshold"], 3),
            "rows": a["evidence"].get("rows")}


def _judged(a: dict, models: list[dict], origin: float) -> tuple[float, float] | None:
    """The tasks an anomaly was raised on, as (first, last) start in seconds after `origin`: for a
    finding on rows, the newest tasks of the causal_confirm checks in a row that found it (each check
    judges the tasks since the version before), or of the last one for a change sure at its first look
    (as its newest evidence says); for an edge, the raising version's window. `models` in the order
    learnt; None if no version was learnt by the time it was raised."""
    from causewatch.analytics.causal.anomalies import ROW_KINDS
    learnt = [m for m in models if m["learned_at"] <= a["opened"]]
    if not learnt:
        return None
    if a["kind"] not in ROW_KINDS:
        return learnt[-1]["window_start"] - origin, learnt[-1]["window_end"] - origin
    confirm = 1 if a["evidence"].get("sure") else CAUSAL["causal_confirm"]
    first = learnt[-confirm - 1]["window_end"] if len(learnt) > confirm else learnt[0]["window_start"]
    return first - origin, learnt[-1]["window_end"] - origin


def _cause(a: dict, story: Story, tasks, models: list[dict], base_window) -> str:
    """Why an anomaly was raised, as far as the demo can tell: "the hog" when the tasks it was judged on
    ran while the hog did; else "other work" when those tasks waited for a CPU MOVED times more or
    less than the baseline's (the machine's own load moved); else "unexplained"."""
    from causewatch.analytics.causal.anomalies import ROW_KINDS
    hog = story.hog
    span = _judged(a, models, story.origin)
    if span is None:
        return "unexplained: raised before any model version was stored"
    lo, hi = span
    on = f"{'the tasks it judged' if a['kind'] in ROW_KINDS else 'the model window'}, {lo:.0f}-{hi:.0f} s"
    if _by_hog(span, hog):
        if story.contended in (a["src"], a["dst"]):
            return (f"the hog: {on}, ran while it contended for the CPUs, and {story.contended} "
                    + ("is that contention" if story.contended == WAIT else "holds their wait for a CPU"))
        if a["kind"] in ROW_KINDS:
            return f"the hog: {on}, ran while it did (contention moves {a['dst']} too)"
        return f"the hog: {on}, holds tasks that ran under it (edges stay until the window moves past them)"
    if base_window is None:
        return f"unexplained: {on}, outside the hog, and the baseline's window is unknown"
    now, then = _median(tasks, lo, hi), _median(tasks, *base_window)
    running, before = _mean_runnable(story, lo, hi), _mean_runnable(story, *base_window)
    said = f"{on}, outside the hog: they waited {now} s for a CPU per CPU second, the baseline's tasks {then}"
    if running is not None and before is not None:
        said += f"; {running:.1f} processes runnable on the machine, {before:.1f} then"
    if _moved(now, then) or _moved(running, before):
        return f"other work: {said}, so the machine's other work moved the contention"
    return f"unexplained: {said}, so neither the hog nor the machine's load explains it"


def _mean_runnable(story: Story, lo: float, hi: float) -> float | None:
    """The processes runnable on the machine while tasks started in [lo, hi], on average, the hog's
    own left out."""
    counts = [n for t, _, n in story.loads if lo <= t <= hi]
    return sum(counts) / len(counts) if counts else None


def _moved(now: float | None, then: float | None) -> bool:
    return now is not None and then is not None and then > 0 and not 1 / MOVED < now / then < MOVED


def _when(opened: float, resolved: float | None, hog: Hog) -> str:
    if hog.started is None:
        return "the hog never ran"
    said = f"raised {opened - hog.started:+.1f} s from the hog's start"
    if resolved is None:
        return said + ", still open"
    if hog.stopped is None:
        return said + f", resolved {resolved - hog.started:+.1f} s from its start"
    return said + f", resolved {resolved - hog.stopped:+.1f} s from its stop"


def _round(v):
    return None if v is None else round(float(v), 4)


# What each section of the report is, in the words of someone reading it for the first time.
MEANING = {
    "nodes": "the machines whose agents said hello, and which of their counters could be opened (here: "
             "software events only when no hardware PMU is exposed)",
    "phase_vectors": "where programs spent their time, sampled by instruction pointer (native) or Python "
                     "frame (python), per interval: the raw material of phases",
    "top_functions": "the functions those samples landed in most",
    "phases": "the workload's phases: its tasks' vectors clustered as SimPoint does (causewatch phases), "
              "heaviest first, each with its weight (share of the intervals) and top functions (share of the phase)",
    "tasks": "master-worker task records sent by the instrumented workload (instrument.task)",
    "causal_edges": "the newest causal model of the tasks: which variable depends on which, strength in bits; "
                    "held_by of versions: how many of the run's model versions had the edge; stable: held by 80 % "
                    "and at least 0.1 bits (weaker edges sit near the test's threshold and may differ run to run)",
    "causal_submodels": "each variable with parents as the function of them that describes it shortest (MDL)",
    "contention_hog": "once the model had its baseline (baseline: which model and how it was chosen; "
                      "pinned_model: the one the demo pinned when its calm bound ran out without one, else null; "
                      "baseline_after_s seconds after the workload started), "
                      "per_cpu busy processes pinned to each CPU (calm_wait_per_cpu_s, the calm tasks' wait per CPU "
                      f"second, rounded up, grown once the first tasks under it waited less than {HOG_FACTOR} times "
                      "that: the size the anomaly test needs) competed with the workload for its cores, from "
                      "started_s to stopped_s while the causal job learnt model_versions versions; wait_per_cpu_s: "
                      "seconds a task waited for a CPU per second it ran, before, during and after (other work on "
                      "the machine contends too)",
    "anomalies": "departures from the baseline model (the first stable one): a mechanism change is a variable "
                 "whose distribution given its causes and the task parameters moved from the baseline's tasks to "
                 "the newest (src (time)); a Markov violation is a new dependency the baseline says should not be "
                 "there; both are judged on each cycle's newest tasks, so they resolve once those are calm "
                 "again (edges that appeared or changed are the model's, whose window keeps the hog's tasks: "
                 "they stay open until it moves); times are seconds from the hog's start and stop; cause: the hog "
                 "when the tasks it was judged on ran while the hog did, other work when they waited for a CPU "
                 f"{MOVED}x more or less than the baseline's, else unexplained",
    "analysis": "where the causal job's learns ran: in the daemon's jobs worker (local), or on the Dask cluster "
                "of analysis_scheduler (--analysis-scheduler tcp://HOST:8786, docs/cluster.md), and how many; "
                "fallbacks: learns run locally because the cluster could not be used; retries: re-runs after a "
                "cluster worker died or the task raised",
    "page": "the alert each anomaly would page an on-call engineer with: deploy/prometheus's rule for its "
            "kind (severity; for_s, the hold before it is sent; sent: whether the anomaly stayed open that "
            "long), the receiver deploy/alertmanager routes it to (amtool, when installed), the labels the "
            "page carries (picture: the model drawn with it in red, from this daemon while it runs)",
    "model_pictures": "the newest model of each scope drawn as SVG (edge width = strength, anomalies in red)",
    "bottlenecks": "code regions with fuzzy bottleneck severity (Truong & Fahringer): degree per severity term",
    "probe_ranking": "each node's predicted seconds per task of the app from its software probe (run before "
                     "the workload), with the interval, the ratio to the reference node, the probe's age "
                     "and the kit's quality",
}


SHARDS_MEANING = ("--shards: daemons as shards, each its own DuckDB file, all moving old samples into one Parquet "
                  "lake; each agent sends to the shard its node name hashes to (rendezvous hashing); any shard "
                  "told its peers answers for all of them, and says which answered (docs/shards.md)")


def _next_steps(db: Path) -> str:
    return f"""
== next ==
  the demo's daemon has stopped; its store is {db}. Read it with --db, or run a daemon on it and use
  the same verbs live (they read http://127.0.0.1:9464 by default):
    causewatch daemon --db {db} &
    causewatch nodes;  causewatch model --svg model.svg;  causewatch anomalies --all
    causewatch bottlenecks --top 10;  causewatch query "(time_share is high)";  causewatch rank demo
    causewatch phases --target app:demo --kind python     # every phase, each with its top functions
    curl -s localhost:9464/metrics | grep causewatch_
  past one machine, daemons as shards over one lake, any of them answering for all (docs/shards.md):
    causewatch daemon --shard a --peers b=http://HOST_B:9464 …;  causewatch agent --daemons a=tcp://…,b=tcp://…
    causewatch nodes --daemons http://HOST_A:9464,http://HOST_B:9464    # shards without peers, read as one"""


def _print(rep: dict, db: Path) -> None:
    print("\n== stored ==")
    print("frames by type: " + ", ".join(f"{k} {v}" for k, v in sorted(rep["frames_by_type"].items())))
    print(f"sample values: {rep['sample_values']:,}  ({rep['ingest_values_per_s']:,.0f} values/s over the daemon's "
          "run)")
    t = rep["store_tiers"]
    lake = f"{t['cold_bytes_per_value']:.2f} B/value" if t["cold_values"] else "nothing moved yet"
    print(f"store: {t['hot_values']:,} values hot in DuckDB, {t['cold_values']:,} cold in the Parquet lake "
          f"({t['cold_files']} files, {t['cold_bytes']:,} bytes: {lake}); the store's file and lake "
          f"{rep['store_bytes']:,} bytes")
    per_metric = rep["rows_per_metric"]
    print(f"rows per scope/metric ({len(per_metric)} series; the 15 fullest):")
    for metric, n in sorted(per_metric.items(), key=lambda kv: (-kv[1], kv[0]))[:15]:
        print(f"  {metric:<48} {n:>8,}")
    for title, meaning in MEANING.items():
        print(f"\n== {title.replace('_', ' ')} ==\n  ({meaning})")
        print("\n".join("  " + "  ".join(f"{k}={v}" for k, v in r.items()) for r in rep[title]) or "  (none yet)")
    if "shards" in rep:
        print(f"\n== shards ==\n  ({SHARDS_MEANING})")
        print("\n".join(f"  {line}" for line in demo_shards.lines(rep["shards"])))
    print(_next_steps(db))
    print(f"\n== story ==\n  {rep['story']['plan']}\n  ran {rep['story']['ran_s']} s of the workload at load "
          f"{rep['story']['load']} (1-minute load average, least and most)")
    _print_brokers(rep["brokers"])


def _print_brokers(told: dict) -> None:
    print("\n== brokers ==\n  (what a scheduler would be told from the probe ranking, as a dry run: Slurm's "
          "weights, lowest first, and the best node's feature for --prefer; each node's HTCondor slot attributes "
          "for a job's Rank; the Kubernetes extender's scores, 0-10. causewatch broker slurm|condor, "
          "POST /api/k8s/prioritize: docs/brokers.md)")
    for line in told["slurm"] or ["(no node ranked yet)"]:
        print(f"  slurm       {line}")
    for node, attrs in told["htcondor"].items():
        shown = "  ".join(f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}" for k, v in attrs.items())
        print(f"  htcondor    {node}: {shown or '(nothing: unknown stays absent)'}")
    print("  kubernetes  " + ("  ".join(f"{h['Host']}={h['Score']}" for h in told["kubernetes"]) or "(no node)"))


def _terminated(signum, frame):
    raise SystemExit(128 + signum)   # the way out stops the hog, the agents and the daemon


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


def run(args) -> int:
    from causewatch.daemon.server import Daemon
    signal.signal(signal.SIGTERM, _terminated)
    folder = Path(args.dir).resolve()
    db, quiet = folder / "causewatch.duckdb", args.json or args.quiet
    if not 1 <= args.shards <= 8:
        raise InputError(f"--shards {args.shards}: give 1 (no shards section) to 8")
    problem = config.scheduler_problem(args.analysis_scheduler)
    if problem:
        raise ConfigError("analysis_scheduler", problem, "--analysis-scheduler")
    cfg = DaemonConfig(db=str(db), bind="tcp://127.0.0.1:0", http="127.0.0.1:0", **CAUSAL, **STORE,
                       analysis_scheduler=args.analysis_scheduler)
    steps = Steps()
    signal.signal(signal.SIGINT, steps.interrupt)   # even where SIGINT was inherited ignored: Ctrl-C stops it
    try:
        prepare(folder)
        steps.begin("building the probe kit")
        _build_kit(folder, quiet)
        steps.begin("starting the daemon")
        daemon = Daemon(cfg).start()
        try:
            return _tell(args, folder, daemon, quiet, steps)
        finally:
            daemon.stop()
    except (KeyboardInterrupt, Exception):   # each step's own `finally` has stopped what it started
        if not steps.interrupted:
            raise
        print(steps.summary(folder), file=sys.stderr)
        return 130


def _tell(args, folder: Path, daemon, quiet: bool, steps: Steps) -> int:
    """The demo on its running daemon: the kit registered, the agents probed one at a time, the story
    told while the workload runs, then the report and its last line."""
    from tqdm import tqdm
    t0 = time.monotonic()   # every value stored comes after this: the ingest rate's window
    db = Path(daemon.cfg.db)
    if not quiet:
        print(f"daemon {daemon.endpoint}, DuckDB {db}, metrics http://{daemon.http.address}/metrics")
        where = daemon.cfg.analysis_scheduler
        print(f"analysis: causal learns run on the Dask cluster at {where}" if where else
              "analysis: causal learns run in the daemon's jobs worker (local; --analysis-scheduler "
              "tcp://HOST:8786 runs them on a Dask cluster)")
    steps.begin("registering the kit")
    _register_kit(folder, f"http://{daemon.http.address}", quiet)
    con = daemon.store.cursor()
    agents = {}
    try:
        for node, watch in NODES:   # one at a time: two probes at once would share the cores and disagree
            steps.begin(f"probing {node}")
            agents[node] = _agent(folder, daemon.endpoint, node, watch)
            _await_probe(con, node, agents[node], quiet)
        watched = agents["demo-node-1"]
        story = Story(time.time(), f"http://{daemon.http.address}", args.seconds, args.wait)
        if not quiet:
            print(story.plan(), flush=True)
        (folder / "go").touch()
        steps.begin("telling the story")
        bar = None if quiet else tqdm(total=story.tasks, desc="workload tasks stored", dynamic_ncols=True,
                                      bar_format="{desc} {bar:20} {n}/{total} {elapsed}{postfix}")
        try:
            going = True
            while going and watched.poll() is None:
                time.sleep(1.0)
                counts = _live(con, bar, story)
                going = story.step(con, counts["tasks"])
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
    finally:
        for agent in agents.values():
            if agent.poll() is None:
                agent.terminate()
            agent.wait(60)
    elapsed = time.monotonic() - t0
    steps.begin("reporting")
    daemon.scheduler.stop()
    daemon.scheduler.run_due(float("inf"), {})  # one last analysis cycle over everything stored
    rep = report(con, elapsed, folder, story)
    rep["analysis"] = analysis(daemon)
    if args.shards > 1:
        steps.begin(f"running {args.shards} shards")
        rep["shards"] = demo_shards.run(folder / "shards", args.shards, quiet)
    print(json.dumps(rep, default=str)) if args.json else _print(rep, db)
    failed = [f"{node} exited {a.returncode}" for node, a in agents.items() if a.returncode not in (0, -15)]
    if failed:
        print(f"agents failed: {', '.join(failed)}; logs in {folder}", file=sys.stderr)
    print(rep["story"]["line"], file=sys.stderr if args.json else sys.stdout)
    if failed or rep["sample_values"] == 0:
        return 1
    return 0 if rep["story"]["shown"] == "yes" else 3
