"""The demo's story as a state machine: a calm start until app:demo has a baseline model, a CPU hog
until an anomaly on the tasks' CPU wait is raised, a calm end until it resolves, each stretch moved on
by what the daemon's API says and bounded by its share of --seconds plus --wait."""

from __future__ import annotations

import math
import os
import sys
import time

from causewatch.commands.demo import causes
from causewatch.commands.demo.hog import HOG_JUDGE, Hog
from causewatch.commands.demo.parts import SCOPE
from causewatch.config import DaemonConfig
from causewatch.daemon import verbs
from causewatch.errors import CausewatchError

RATE = 20                   # tasks a second the workload runs on an idle machine (--seconds x RATE tasks at least)
BASELINE_ROWS = DaemonConfig().causal_baseline_rows   # the fewest rows a baseline is learnt from
# The story's three stretches, each ended by what it needs, within its share of --seconds plus --wait:
SHARES = {"calm": 0.35, "hog": 0.40, "end": 0.25}
WAIT_MORE = 180.0           # --wait's default: what a stretch may take beyond its share under load (at
                            # load 10-30 on two cores a stretch took 95-127 s)
FINISH = 120.0              # the workload's own tasks may take this much longer than --seconds under load
HOG_CYCLES = 6              # model versions learnt under the hog at most: its first batch is part calm, and a
                            # finding is raised on the 2nd check in a row that sees it, or the 1st when sure
HOG_SECONDS = 20.0          # the hog runs this long at least: the agents send node samples every 5 s and look
                            # at their busiest processes every 2-5 s, and its culprit needs more than a row or
                            # two of the incident to be ranked (docs/perf-log.md, "The culprit above its symptom")
END_CYCLES = 2              # model versions of the calm end when no anomaly on the wait is left to resolve


class Story:
    """The demo's three stretches, each ended by what it needs rather than by the clock:

    1. `calm`: until the calm share of the tasks is stored and app:demo has a baseline: the causal
       job's, by analytics.causal.baseline's rule, or, only once the stretch's bound ran out without
       one, the newest learnt from BASELINE_ROWS tasks at least, pinned through the API as an operator
       would (the report says which);
    2. `hog`: until an anomaly on the CPU wait is raised and the hog ran HOG_SECONDS, or HOG_CYCLES
       model versions were learnt under it;
    3. `end`: until the first change on the wait judged on rows raised under the hog (else any
       anomaly on the wait raised then) is resolved (none was raised: END_CYCLES more versions).

    Each may take its share of `seconds` plus `wait` at most (`bounds`, stated before the workload
    starts); one that runs out is noted in `short`. A calm start that runs out without a baseline ends
    the story there, and the workload then runs until `tasks` are stored (its idle-machine length).
    All of it takes `bound` s at most: the stretches' bounds, or --seconds and FINISH if more.
    `step` reads through `api`, a source of commands/source.py (`read(verb, ...)`, `write(verb, ...)`)."""

    def __init__(self, origin: float, url: str, seconds: float, wait: float):
        self.origin = origin                 # wall-clock time the workload started
        self.url = url                       # the daemon's HTTP API, which the page's picture links to
        self.tasks = int(seconds * RATE)
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
        self.contended, self.why, self.held = causes.WAIT, None, ""
        self.short: list[str] = []           # the bounds that ran out, and what was missing then
        self.loads: list[tuple[float, float]] = []   # (seconds after the origin, 1-minute load average)

    def plan(self) -> str:
        """The story and its bounds in words, said before the workload starts."""
        b = self.bounds
        return (f"the story: a calm start until {SCOPE} has a baseline model (at most {b['calm']:.0f} s), a CPU "
                f"hog until an anomaly on the tasks' CPU wait is raised ({HOG_SECONDS:.0f} s at least, "
                f"{b['hog']:.0f} s at most), a calm end until it resolves (at most {b['end']:.0f} s): at least "
                f"{self.tasks} tasks, about {self.tasks / RATE:.0f} s on an idle machine, at most "
                f"{self.bound:.0f} s under load")

    def now(self) -> float:
        return time.time() - self.origin

    def step(self, api, stored: int) -> bool:
        """Move the story on, `stored` being the workload's tasks stored so far; False once the
        workload may stop."""
        now, load = self.now(), os.getloadavg()[0]
        self.loads.append((round(now, 1), load))
        models = api.read(verbs.MODELS, scope=SCOPE)
        if self.stretch == "calm":
            self._calm(api, models, stored, now, load)
        elif self.stretch == "hog":
            self._hogging(api, models, now)
        elif self.stretch == "end":
            self._ending(api, models, now)
        done = self.stretch == "done" and (self.hog.started is not None or stored >= self.tasks)
        return not done and now < self.bound

    def _next(self, stretch: str, now: float, models: list) -> None:
        self.stretch = stretch
        self.began[stretch] = now
        self.versions[stretch] = len(models)

    def _calm(self, api, models: list, stored: int, now: float, load: float) -> None:
        baseline = causes.baseline_of(models)
        over = now - self.began["calm"] >= self.bounds["calm"]
        if baseline is None and over and models and models[0]["n_rows"] >= BASELINE_ROWS:
            self._pin(api, models[0]["model_id"])
            baseline = None if self.pinned is None else {"model_id": self.pinned}
            models = api.read(verbs.MODELS, scope=SCOPE)   # with the one pinned as the baseline
        if baseline is not None and (stored >= self.calm_tasks or over):
            self.baseline_s = now
            self._next("hog", now, models)
            tasks = causes.task_waits(api, self.origin)
            self.contended, self.why, self.held = causes.contended(api, models, tasks, self.origin)
            self.hog.start(now, load, causes.median(tasks, -math.inf, now))
        elif over:
            self.short.append(f"no baseline model within the calm start's {self.bounds['calm']:.0f} s: " + (
                f"the newest of {len(models)} model versions was learnt from {models[0]['n_rows']} tasks, a "
                f"baseline needs {BASELINE_ROWS}" if models else
                f"the causal job had learnt no model yet ({stored} tasks stored)") + f", load {load:.1f}")
            self.stretch = "done"

    def _hogging(self, api, models: list, now: float) -> None:
        if self.hog.sized is None:
            tasks = causes.task_waits(api, self.origin)
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
        raised = self.hog_anomalies(api, rows_only=True) and now - self.hog.started >= HOG_SECONDS
        if raised or self.hog_versions >= HOG_CYCLES or over:
            self.hog.stop(now)
            self._next("end", now, models)

    def _ending(self, api, models: list, now: float) -> None:
        from causewatch.analytics.causal.anomalies import ROW_KINDS
        ours = self.hog_anomalies(api)
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

    def hog_anomalies(self, api, rows_only: bool = False) -> list[dict]:
        """The anomalies the hog caused (the report's own): on the contended variable, opened while it ran,
        raised on tasks that ran under it; only those judged on rows, if `rows_only`."""
        from causewatch.analytics.causal.anomalies import ROW_KINDS
        return [a for a in api.read(verbs.ANOMALIES, scope=SCOPE, limit=10_000)
                if (a["kind"] in ROW_KINDS or not rows_only)
                and causes.opened_under_hog(dict(a, opened_s=a["opened"] - self.origin), self)
                and causes.by_hog(causes.judged(a, self.origin), self.hog)]

    def _pin(self, api, model_id: int) -> None:
        """POST /api/baseline, as an operator pins a model they trust (the calm start's newest); an
        answer that does not come in time is asked again at the next step."""
        try:
            api.write(verbs.BASELINE, scope=SCOPE, model_id=model_id)
        except CausewatchError as e:   # unreached, a timeout: the API worker is slow on a loaded machine
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
