"""Daemon analysis job: per app, a causal model of task parameters, counters, duration and code phase,
re-learnt incrementally (PCLearner.partial_fit), and dependency anomalies against a baseline model; the
same per Slurm job an app's tasks ran in (scope `app:NAME@job:ID`, from the job id the agent tagged them
with), learnt from that job's tasks alone, let go once the job sent none for quiet_intervals intervals.

Stores a `models` row with its `edges` per version; the baseline of a scope is chosen by the
majority rule of analytics.causal.baseline among the versions learnt from baseline_rows rows at least
(each version stores the rule's decision, `baseline_rule`: what it waits for) unless an operator pins
one. An anomaly (a new dependency on the newest tasks, a mechanism changed since the baseline's own
tasks, at most BEFORE_ROWS of them; an edge that appeared or disappeared, a strength out of its band)
is raised once, updated while it lasts and resolved when gone, or when its app has sent no task for
quiet_intervals intervals (its program ended); one voice: a finding made while another anomaly of its
scope is open, or with a clearer one (_lead), is listed in that one's evidence (`related`), not raised.
Its evidence's `raised_on` names the task rows it was raised on (count, first and last start): the newest
rows of the checks in a row that found it, or for an edge the raising version's window; kept while it
stays open. Its evidence's `causes` are its candidate causes,
ranked at the opening over the units the daemon knows then (daemon/culprits.py), again at each
evaluation until FOLLOW_SECONDS after the opening, then every CAUSES_EVERY intervals while it stays open.
Exports causewatch_edge_strength, causewatch_markov_violation and
causewatch_dependency_anomaly{scope,src,dst,kind,evidence,cause} (1 while open; the evidence in one line
and the best cause as they were at the opening, so the series, and the alert, keep one identity);
and its compute's counters (daemon/compute.py: where the learns ran, re-runs, fall-backs from a Dask
cluster).
"""

from __future__ import annotations

import functools
import logging
import math
import time

import networkx as nx
import numpy as np
import pandas as pd
import pyarrow as pa

from causewatch.analytics.causal import Background, CausalModel, KDEMITest, PCLearner, anomalies, baseline, features
from causewatch.analytics.phases import PhaseTracker
from causewatch.daemon import culprits, readers, store
from causewatch.daemon.compute import LocalCompute
from causewatch.daemon.exporter import gauge_family
from causewatch.daemon.jobs import Job, JobContext

log = logging.getLogger("causewatch.daemon.job_causal")

SUBMODEL_ROWS = 4096
BEFORE_ROWS = 200   # of the baseline's window, against each check's newest tasks (a seeded sample)
CAUSES_EVERY = 10   # intervals between two rankings of an open anomaly's causes
# a finding joins an open anomaly opened at most this long ago (a fault's effects and its recovery come
# within minutes); after it, a finding is a new incident, not the echo of one that stayed open
RELATED_SECONDS = 300.0
FOLLOW_SECONDS = 15.0   # after an opening, an open anomaly's causes are ranked at each evaluation this long:
                        # the nodes' samples of a fault's first seconds reach the daemon in the agents'
                        # frames (5 s apart), its busiest processes in looks averaged over 2-5 s
EDGE_GAUGE = "causewatch_edge_strength"
EDGE_HELP = ("Strength of a learned causal edge: the mutual information between its two ends, in bits of "
             "information (not of data, so no _bytes unit), at most the entropy of either end")
MARKOV_GAUGE = "causewatch_markov_violation"
MARKOV_HELP = ("Information between a variable and its non-descendants given its parents on the newest "
               "tasks, bits (above the test threshold = the model's independence no longer holds)")
ANOMALY_GAUGE = "causewatch_dependency_anomaly"
ANOMALY_HELP = ("1 while a dependency anomaly is open: the newest tasks or model depart from the scope's "
                "baseline model (kind: " + ", ".join(anomalies.KINDS) + "; evidence: at the opening, in one line; "
                "cause: its best candidate cause at the opening)")


def submodels(model) -> dict:
    """Each variable with parents as its MDL-fitted function of them (kind, formula, bits), from
    CausalModel.fit_submodels on at most SUBMODEL_ROWS rows of the window (a seeded sample: MDL chooses
    among forms of a few parameters, which that many rows settle, so a cycle's cost does not grow with
    the window); a fit that fails costs the model its formulas, not its storage."""
    df = model.data
    if df is not None and len(df) > SUBMODEL_ROWS:
        df = df.sample(SUBMODEL_ROWS, random_state=0)
    try:
        fitted = model.fit_submodels(df)
    except ValueError as e:  # MDLError and pandas' own
        log.info("causal model: no submodels (%s)", e)
        return {}
    return {v: {"kind": sub.kind, "formula": sub.formula, "bits": round(sub.bits, 1)}
            for v, sub in fitted.items() if sub.parents}


def learn(learner: PCLearner | None, data: pd.DataFrame, check: bool, tiers: dict, max_depth: int,
          max_rows: int, tested_rows: int) -> tuple[PCLearner, pd.DataFrame | None, dict]:
    """A model update's numeric work (the job's compute runs it: in the jobs worker, or as a task on a Dask
    cluster, so it takes and returns only picklable values and touches no state): where the new rows
    extend the model (`check`), their Markov check against it, then partial_fit on the window slid on to
    its newest max_rows; otherwise a new fit of the newest max_rows; then the MDL submodels. The learner's
    CI tests see tested_rows of the window at most. Returns the learner, the violations and the submodels."""
    violations = learner.model_.markov_violations(data, ci_test=learner.ci_test) if check else None
    if check:
        # slid, not learnt anew: a new fit each check once the window is full cost a whole PC search
        # every interval, and its edges flapped from version to version on unchanged tasks
        learner.partial_fit(data, keep=max_rows)
    else:
        # The KDE test, not learn's AutoTest: its strengths are bits on every kind of data, and
        # they are exported and compared version to version (strength_changed).
        learner = PCLearner(ci_test=KDEMITest(), max_depth=max_depth, background=Background(tiers=tiers),
                            max_rows=tested_rows).fit(data.tail(max_rows))
    return learner, violations, submodels(learner.model_)


def task_variables(cur, app: str, keep: tuple[str, ...] = (), **read) -> tuple[pd.DataFrame, list[str]]:
    """The tasks of `app` that readers.tasks.task_df reads with `read`, their columns named, with their
    seconds in each of the app's main regions (features.with_region_times; `keep`: a model's variables),
    and the inputs."""
    df, inputs = features.name_task_columns(*readers.tasks.task_df(cur, app, **read))
    if df.empty:
        return df, inputs
    spans = readers.regions.region_spans(cur, app, float(df["t_start"].min()),
                                         float((df["t_start"] + df["duration"]).max()))
    return features.with_region_times(df, spans, keep), inputs


def _rows(starts: np.ndarray) -> dict:
    """Task rows judged, as an anomaly's evidence names them: how many, the first and last start."""
    return {"rows": int(len(starts)), "first_start": float(starts.min()), "last_start": float(starts.max())}


def _joined(before: dict | None, now: dict) -> dict:
    """The rows of two evaluations in a row (`before` None: the first)."""
    if before is None:
        return now
    return {"rows": before["rows"] + now["rows"], "first_start": min(before["first_start"], now["first_start"]),
            "last_start": max(before["last_start"], now["last_start"])}


def _related(f: anomalies.Finding) -> dict:
    """A related finding, as its anomaly's evidence lists it."""
    return {"kind": f.kind, "src": f.src, "dst": f.dst, "score": f.score, "threshold": f.threshold}


def _lead(baseline_model: CausalModel, found: list[anomalies.Finding]) -> anomalies.Finding:
    """The finding to raise of those found together: a departure of the rows before an edge's; among
    those, one whose variable is no descendant of another's by the baseline's directed edges (the change
    upstream); then a new dependency (it names what the variable now depends on); then the largest effect
    in sd (a slow call moved its own time by tens of its sds, the task time it lengthens by a few); then
    the largest score over its threshold."""
    dag = nx.DiGraph([(e.src, e.dst) for e in baseline_model.edges() if e.directed])   # known directions only
    changed = {f.dst for f in found if f.kind in anomalies.ROW_KINDS}

    def rank(f: anomalies.Finding) -> tuple:
        below = f.dst in dag and any(f.dst in nx.descendants(dag, v) for v in changed - {f.dst} if v in dag)
        return (f.kind in anomalies.ROW_KINDS, not below, f.kind == "markov_violation",
                f.evidence.get("effect_sd", 0.0), f.score / max(f.threshold, 1e-12))
    return max(found, key=rank)


def _sample(rows: pd.DataFrame | None) -> pd.DataFrame | None:
    return rows if rows is None or len(rows) <= BEFORE_ROWS else rows.sample(BEFORE_ROWS, random_state=0)


class _Scope:
    def __init__(self):
        self.learner: PCLearner | None = None
        self.columns: list[str] = []
        self.inputs: list[str] = []   # the task parameters: the workload's mix, never judged for new dependencies
        self.received = 0.0
        self.last_task: float | None = None   # when the newest task seen was received (None: none seen yet)
        self.n_rows = 0
        self.starts = np.empty(0)   # t_start of each row of the model's window, in its order
        self.window_start = 0.0
        self.violations: pd.DataFrame | None = None
        self.tracker = PhaseTracker()
        self.tracked_until = 0.0   # rows received up to here have taught the tracker already
        self.baseline: CausalModel | None = None
        self.baseline_id: int | None = None
        self.before: pd.DataFrame | None = None   # the baseline's rows, for mechanism changes
        self.decision: baseline.Decision | None = None   # the baseline rule's on the newest version
        self.open: dict[tuple[str, str, str], int] | None = None   # (kind, src, dst) -> anomaly_id
        self.evidence: dict[tuple[str, str, str], str] = {}   # (kind, src, dst) -> one line, at the opening
        self.seen: dict[tuple[str, str, str], int] = {}   # not yet raised: evaluations in a row it was found
        # (kind, src, dst) -> the rows judged ({rows, first_start, last_start}): while not yet raised, of
        # the evaluations in a row that found it; once raised, those it was raised on
        self.judged: dict[tuple[str, str, str], dict] = {}
        self.causes: dict[tuple[str, str, str], dict] = {}   # -> {causes, causes_ranked}: the newest ranking
        self.cause: dict[tuple[str, str, str], str] = {}     # -> the best cause at the opening: its label
        # a finding raised while another was open, or with a clearer one: -> the open anomaly it is related to
        self.related: dict[tuple[str, str, str], tuple[str, str, str]] = {}
        self.missed: dict[tuple[str, str, str], int] = {}   # open, not found: evaluations in a row
        self.opened: dict[tuple[str, str, str], float] = {}   # open: when
        self.baseline_window: tuple[int, tuple[float, float]] | None = None   # (baseline_id, its window)

    def clear_anomalies(self) -> None:
        """Nothing open, nothing pending: all of the scope's anomalies resolved at once."""
        self.open, self.evidence, self.seen, self.judged, self.causes, self.cause = {}, {}, {}, {}, {}, {}
        self.related, self.missed, self.opened = {}, {}, {}


class CausalJob(Job):
    name = "causal"

    def __init__(self, min_rows: int = 50, max_rows: int = 2000, min_new: int = 20, max_depth: int = 2,
                 confirm: int = 2, interval: float = 60.0, baseline_rows: int = 200, quiet_intervals: int = 3,
                 clock=time.time, compute: LocalCompute | None = None, max_new: int = 500, tested_rows: int = 400):
        self.min_rows, self.max_rows, self.min_new, self.max_depth = min_rows, max_rows, min_new, max_depth
        # the CI tests of a learn see a seeded sample of this many of the window's rows at most: the KDE
        # test's cost grows with the square of its rows, and a check every few seconds must stay a small
        # share of a core on a node whose tasks come by the thousand a minute
        self.tested_rows = tested_rows
        # an update reads at most the newest max_new of the tasks since the last (a first fit max_rows): a
        # late check judges the newest tasks, and its cost stays that of a bounded batch
        self.max_new = max_new
        self.interval = interval   # seconds between runs (the scheduler reads it)
        # an app without a task for this many intervals has ended: its open anomalies resolve
        self.quiet_intervals = quiet_intervals
        # evaluations in a row a finding must be seen in before it is raised, or one at alpha**confirm
        # (a mechanism change: anomalies.changed_mechanisms' `sure`)
        self.confirm = confirm
        # A baseline is learnt from this many rows at least: from 100-160 demo tasks the
        # learner lost the task type's effect on CPU time (found from 200), and every later batch of
        # two task types then "violated" the baseline.
        self.baseline_rows = baseline_rows
        self.clock = clock
        # where `learn` runs: here, or on a Dask cluster (daemon/compute.py); the rest of the job stays here
        self.compute = LocalCompute() if compute is None else compute
        self.scopes: dict[str, _Scope] = {}
        self.ended: set[str] = set()   # the scopes of jobs that ended: never learnt again

    def run(self, ctx: JobContext) -> None:
        read_at = self.clock()
        with ctx.read() as cur:
            fresh = {scope: self._fresh(cur, scope, app, job)
                     for scope, (app, job) in self._scopes_now(cur, read_at).items()}
            if not self.scopes:   # a restarted daemon exports the open anomalies at once, not at the next
                self._reload_open(cur)   # model update: a gap would resolve and re-page their alerts
        planned = [(scope, plan) for scope, (df, inputs) in fresh.items()
                   if (plan := self._plan(scope, df, inputs))]
        # every due scope's learn handed over at once: on a cluster they run side by side; a learn that
        # failed costs its scope this run, not the others theirs
        results = self.compute.map(learn, [args for _, (_, args) in planned])
        for (scope, (df, args)), result in zip(planned, results):
            if not isinstance(result, Exception):
                self._apply(ctx, scope, df, args, result)
        self._resolve_quiet(ctx, read_at)
        self._forget_ended_jobs(read_at)
        ctx.exporter.publish(self.name, self._families())
        failed = next((r for r in results if isinstance(r, Exception)), None)
        if failed is not None:
            raise failed

    def _fresh(self, cur, scope: str, app: str, job: str | None) -> tuple[pd.DataFrame, list[str]]:
        """The scope's tasks since the last read, the newest max_new of them (max_rows before a first model),
        their columns named and their region times added (task_variables)."""
        st = self.scopes.get(scope, _Scope())
        last = self.max_rows if st.learner is None else self.max_new
        fresh = task_variables(cur, app, tuple(st.columns), since=st.received or None, last=last, job=job)
        if st.learner is not None and len(fresh[0]) >= last:
            log.info("causal model %s: %d tasks or more since the last check, the newest %d judged (the "
                     "check is late)", scope, last, last)
        return fresh

    def _scopes_now(self, cur, read_at: float) -> dict[str, tuple[str, str | None]]:
        """scope -> (app, Slurm job) of what this run reads: every app, each job followed, and each job
        whose tasks came in the last quiet intervals (so a restarted daemon does not learn every ended job)."""
        out: dict[str, tuple[str, str | None]] = {}
        for app in readers.tasks.task_apps(cur):
            out[readers.tasks.scope_of(app)] = (app, None)
            st = self.scopes.get(readers.tasks.scope_of(app))
            for job, received in readers.tasks.task_jobs(cur, app, st.received if st else None).items():
                scope = readers.tasks.scope_of(app, job)
                if scope not in self.ended and read_at - received <= self.quiet_intervals * self.interval:
                    out[scope] = (app, job)
        return {**{s: readers.tasks.app_and_job(s) for s in self.scopes}, **out}

    def _forget_ended_jobs(self, read_at: float) -> None:
        """A job's scope with nothing open whose job sent no task for quiet_intervals intervals is let go
        (its models stay in the store; its state and its gauges go): jobs come and go by the thousand."""
        quiet = self.quiet_intervals * self.interval
        for scope in [s for s, st in self.scopes.items() if readers.tasks.JOB in s and not st.open
                      and st.last_task is not None and read_at - st.last_task > quiet]:
            del self.scopes[scope]
            self.ended.add(scope)

    def _reload_open(self, cur) -> None:
        """Each scope's open anomalies as the store holds them (after a restart they go on where they were)."""
        by_scope: dict[str, list] = {}
        for a in readers.models.anomalies(cur, open_only=True, limit=10_000):
            by_scope.setdefault(a["scope"], []).append(a)
        for scope, found in by_scope.items():
            st = self.scopes.setdefault(scope, _Scope())
            st.open = {(a["kind"], a["src"], a["dst"]): a["anomaly_id"] for a in found}
            st.opened = {(a["kind"], a["src"], a["dst"]): a["opened"] for a in found}
            st.evidence = {(a["kind"], a["src"], a["dst"]): anomalies.one_line(
                a["kind"], a["src"], a["dst"], a["score"], a["threshold"], a["evidence"]) for a in found}
            st.judged = {(a["kind"], a["src"], a["dst"]): a["evidence"]["raised_on"] for a in found
                         if "raised_on" in a["evidence"]}
            st.causes = {(a["kind"], a["src"], a["dst"]): {k: a["evidence"][k] for k in ("causes", "causes_ranked")}
                         for a in found if "causes_ranked" in a["evidence"]}
            st.cause = {(a["kind"], a["src"], a["dst"]): a["evidence"]["cause"] for a in found
                        if "cause" in a["evidence"]}

    def _resolve_quiet(self, ctx: JobContext, read_at: float) -> None:
        """Resolve the open anomalies of each scope whose app sent no task for quiet_intervals intervals
        before this run read the store (its program ended: an alert must not page for ever)."""
        quiet = self.quiet_intervals * self.interval
        for scope, st in self.scopes.items():
            if st.last_task is None:   # reloaded open, no task of its app stored: quiet from now on
                st.last_task = read_at
            if not st.open or read_at - st.last_task <= quiet:
                continue
            since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(st.last_task))
            reason = f"no tasks since {since} ({self.quiet_intervals} causal intervals of {self.interval:g} s)"
            ctx.write(functools.partial(store.results.record_anomalies, raised=[], updated=[],
                                        resolved=list(st.open.values()), now=self.clock(), reason=reason))
            log.info("anomalies %s: %d resolved, %s", scope, len(st.open), reason)
            st.clear_anomalies()

    def _families(self) -> list:
        """Every scope's gauges, so edges that disappeared stop being exported."""
        edges, markov, open_ = [], [], []
        for scope, st in self.scopes.items():
            open_ += [({"scope": scope, "kind": k, "src": a, "dst": b, "evidence": st.evidence.get((k, a, b), ""),
                        "cause": st.cause.get((k, a, b), "")}, 1.0) for k, a, b in st.open or {}]
            if st.learner is None or readers.tasks.JOB in scope:   # a job's: its open anomalies alone
                continue
            edges += [({"scope": scope, "src": e.src, "dst": e.dst}, e.strength) for e in st.learner.model_.edges()]
            if st.violations is not None:
                markov += [({"scope": scope, "variable": r.variable}, r.bits) for r in st.violations.itertuples()]
        return [gauge_family(EDGE_GAUGE, EDGE_HELP, ["scope", "src", "dst"], edges),
                gauge_family(MARKOV_GAUGE, MARKOV_HELP, ["scope", "variable"], markov),
                gauge_family(ANOMALY_GAUGE, ANOMALY_HELP, ["scope", "src", "dst", "kind", "evidence", "cause"], open_),
                *self.compute.families()]

    def _update(self, ctx, scope: str, df: pd.DataFrame, inputs: list[str]) -> None:
        """One scope on its own: planned, learnt through the compute, taken in (a sharded job's way)."""
        plan = self._plan(scope, df, inputs)
        if plan is not None:
            self._apply(ctx, scope, *plan, self.compute(learn, *plan[1]))

    def _plan(self, scope: str, df: pd.DataFrame, inputs: list[str]) -> tuple[pd.DataFrame, tuple] | None:
        """The scope's new rows and the arguments of its `learn`, or None when it has nothing to learn yet."""
        st = self.scopes.setdefault(scope, _Scope())
        if df.empty:
            return None
        st.last_task = max(st.last_task or 0.0, float(df["received"].max()))
        df = features.with_code_phase(df, st.tracker, st.tracked_until)
        st.tracked_until = max(st.tracked_until, float(df["received"].max()))
        if st.learner is not None and set(st.columns) <= set(df.columns):
            columns = st.columns   # the model's variables, as they are
        else:
            columns = list(features.model_variables(df, drop=tuple(features.BOOKKEEPING)).data.columns)
        # the rows complete in them, as _apply finds them again for their start times
        data = df[columns].dropna().reset_index(drop=True)
        check = st.learner is not None and list(data.columns) == st.columns   # the new rows extend the model
        if check and len(data) < self.min_new:
            return None  # too few new rows to be worth a refit; they are read again next time
        if not check and st.learner is None and len(data) < self.min_rows:
            return None
        if not check and st.learner is not None:
            log.info("causal model %s: columns changed, learning a new model", scope)
        tiers = {"inputs": [c for c in inputs if c in data.columns]}
        st.inputs = tiers["inputs"]
        return df, (st.learner, data, check, tiers, self.max_depth, self.max_rows, self.tested_rows)

    def _apply(self, ctx, scope: str, df: pd.DataFrame, args: tuple, learnt: tuple) -> None:
        """A scope's `learn` result taken in: the state moved on, the model stored, its anomalies judged."""
        st, (_, data, check, *_) = self.scopes[scope], args
        learner, violations, fitted = learnt
        st.learner, st.columns, st.n_rows = learner, list(data.columns), len(learner.model_.data)
        starts = df.loc[df[st.columns].notna().all(axis=1), "t_start"].to_numpy()
        # the window's rows went on (slid past its oldest when full) or started again with the new ones
        st.starts = (np.concatenate([st.starts, starts]) if check else starts)[-st.n_rows:]
        st.window_start = float(st.starts.min())
        st.received = float(df["received"].max())
        if violations is not None:
            st.violations = violations
        st.decision = self._rule(ctx, scope, st) if st.baseline is None else None
        model_id = self._store(ctx, scope, st, float(df["t_start"].max()), fitted)
        self._track(ctx, scope, st, model_id, data if check else None, starts)

    def _store(self, ctx: JobContext, scope: str, st: _Scope, window_end: float, fitted: dict) -> int:
        model = st.learner.model_
        edges = pa.Table.from_pylist([{"src": e.src, "dst": e.dst, "strength": e.strength, "directed": e.directed}
                                      for e in model.edges()])
        graph = {**model.to_dict(), "submodels": fitted}
        if st.decision is not None:
            graph["baseline_rule"] = st.decision.to_dict()
        return ctx.write(functools.partial(store.results.insert_model, scope=scope,
                                           window=(st.window_start, window_end), n_rows=st.n_rows,
                                           learned_at=self.clock(), graph=graph, edges=edges))

    def _rule(self, ctx: JobContext, scope: str, st: _Scope) -> baseline.Decision:
        """The baseline rule over the stored versions and the one about to be stored (model_id None)."""
        with ctx.read() as cur:
            stored, total = readers.models.recent_versions(cur, scope, 2 * baseline.WINDOW, self.baseline_rows)
        versions = [baseline.Version(m, n, baseline.pairs(edges)) for m, n, edges in stored]
        versions.append(baseline.Version(None, st.n_rows, baseline.pairs(st.learner.model_.edges())))
        return baseline.choose(versions, self.baseline_rows, total + (st.n_rows >= self.baseline_rows))

    # ---- anomalies against the baseline ----
    def _track(self, ctx: JobContext, scope: str, st: _Scope, model_id: int, newest: pd.DataFrame | None,
               starts: np.ndarray) -> None:
        """Choose or reload the baseline, then raise, update and resolve the scope's anomalies. The new
        dependencies are judged only on a model update's newest rows (`newest`, started at `starts`), edges
        on every version."""
        model, now = st.learner.model_, self.clock()
        with ctx.read() as cur:
            chosen = readers.models.baseline(cur, scope)
            if st.open is None:   # a scope that had none open at the restart
                st.open = {}
            if chosen is not None and chosen["model_id"] != st.baseline_id:
                st.baseline_id = chosen["model_id"]
                st.baseline = CausalModel.from_json(readers.models.model_graph(cur, scope, st.baseline_id)[1])
                st.before = _sample(self._window_rows(cur, scope, st))
        if st.baseline is None and st.decision is not None and st.decision.chosen:
            chosen_id = model_id if st.decision.model_id is None else st.decision.model_id
            with ctx.read() as cur:
                graph = (model.to_dict() if chosen_id == model_id
                         else readers.models.model_graph(cur, scope, chosen_id)[1])
                st.baseline, st.baseline_id = CausalModel.from_json(graph), chosen_id   # a copy: the learner goes on
                st.before = _sample(model.data) if chosen_id == model_id else _sample(self._window_rows(cur, scope, st))
            ctx.write(functools.partial(store.results.set_baseline, scope=scope, model_id=chosen_id,
                                        how=st.decision.how, now=now))
            log.info("causal model %s: baseline model %d (%s)", scope, chosen_id, st.decision.how)
        if st.baseline is None:
            return
        # the window's newest rows, as many as the baseline's rows at most: each side's test as strong
        tested = self.tested_rows if st.before is None else min(self.tested_rows, len(st.before))
        recent = model.data.tail(tested)
        found = anomalies.shown_edges(anomalies.edge_changes(st.baseline, model, given=tuple(st.inputs)), st.baseline,
                                      model, st.before, recent, st.learner.ci_test)
        judged = newest is not None and set(st.baseline.nodes) <= set(newest.columns)
        if judged:
            found += anomalies.new_dependencies(st.baseline, newest, st.learner.ci_test,
                                                [v for v in st.baseline.nodes if v not in st.inputs], st.before)
        if judged and st.before is not None and len(st.before):
            found += anomalies.changed_mechanisms(st.baseline, st.before, newest, st.learner.ci_test, st.inputs,
                                                  looks=self.confirm)
        # without fresh rows to judge them, open (or related) findings on rows stay as they are
        keep = set() if judged else {k for k in (*st.open, *st.related) if k[0] in anomalies.ROW_KINDS}
        found = {f.key: f for f in found}
        st.seen = {k: st.seen.get(k, 0) + 1 for k in found if k not in st.open}
        sighted = {k: _joined(st.judged.get(k), _rows(starts)) if f.kind in anomalies.ROW_KINDS else _rows(st.starts)
                   for k, f in found.items() if k not in st.open}
        st.judged = {**{k: v for k, v in st.judged.items() if k in st.open}, **sighted}
        confirmed = {k: f for k, f in found.items() if k in st.open or st.seen[k] >= self.confirm or f.sure}
        self._lifecycle(ctx, scope, st, model_id, confirmed, keep, now)

    def _window_rows(self, cur, scope: str, st: _Scope) -> pd.DataFrame | None:
        """The baseline's variables on the tasks of its window, read back from the store (a pinned
        or reloaded baseline), code phases looked up in the tracker; None if some are missing (retention
        may have deleted them): mechanism changes are then not judged, and the log says so once."""
        app, job = readers.tasks.app_and_job(scope)
        nodes = list(st.baseline.nodes)
        df, _ = task_variables(cur, app, tuple(nodes), started=readers.models.model_window(cur, st.baseline_id),
                               job=job)
        df = features.with_code_phase(df, st.tracker, seen_until=float("inf"))
        rows = df[nodes].dropna().reset_index(drop=True) if set(nodes) <= set(df.columns) else None
        if rows is None or rows.empty:
            log.warning("causal model %s: the tasks of baseline model %d are no longer stored (retention?): "
                        "mechanism changes are not judged until a new baseline is pinned", scope, st.baseline_id)
        return rows

    def _lifecycle(self, ctx: JobContext, scope: str, st: _Scope, model_id: int, found: dict, keep: set,
                   now: float) -> None:
        window = [st.window_start, now]
        new = self._group(st, [key for key in found if key not in st.open and key not in st.related], found, now)
        self._rank(ctx, scope, st, [k for k in found if k in new or self._ranking_due(st, k, now)], now)
        evidence = {key: {**f.evidence, "window": window, "threshold": f.threshold, "score": f.score,
                          **({"raised_on": st.judged[key]} if key in st.judged else {}), **st.causes.get(key, {}),
                          **({"cause": st.cause[key]} if key in st.cause else {}),
                          "related": [_related(found[k]) for k, to in st.related.items() if to == key and k in found]}
                    for key, f in found.items() if key in st.open or key in new}
        st.related = {k: lead for k, lead in st.related.items() if k in found or k in keep}
        # resolved once not found in `confirm` evaluations in a row, as it was raised: one miss near a
        # threshold would resolve it and the next look open it again
        absent = set(st.open) - set(found) - keep - set(st.related.values())
        st.missed = {k: st.missed.get(k, 0) + 1 for k in absent}
        gone = {k for k in absent if st.missed[k] >= self.confirm}
        raised = [{"scope": scope, "kind": found[k].kind, "src": found[k].src, "dst": found[k].dst, "opened": now,
                   "baseline_id": st.baseline_id, "model_id": model_id, "score": found[k].score,
                   "threshold": found[k].threshold, "evidence": evidence[k]} for k in new]
        updated = [(st.open[k], model_id, f.score, f.threshold, evidence[k]) for k, f in found.items() if k in st.open]
        ids = ctx.write(functools.partial(store.results.record_anomalies, raised=raised, updated=updated,
                                          resolved=[st.open[k] for k in gone], now=now))
        for key, anomaly_id in zip(new, ids):
            st.open[key], st.opened[key] = anomaly_id, now
            f = found[key]
            st.evidence[key] = anomalies.one_line(f.kind, f.src, f.dst, f.score, f.threshold, evidence[key])
            log.warning("anomaly %s %s: %s -> %s (%.3f bits, threshold %.3f)", scope, f.kind, f.src, f.dst,
                        f.score, f.threshold)
        for key in gone:
            del st.open[key]
            for kept in (st.evidence, st.judged, st.causes, st.cause, st.missed, st.opened):
                kept.pop(key, None)
            log.info("anomaly %s %s: %s -> %s resolved", scope, *key)

    @staticmethod
    def _group(st: _Scope, new: list, found: dict, now: float) -> list:
        """One voice: the new findings to raise, the others made related to an anomaly (`st.related`). While
        the scope has one open that opened within RELATED_SECONDS, every new finding is related to the first
        such; otherwise the findings of one evaluation are raised as one, _lead's, the rest related to it. A
        fault moves several variables at once (a CPU hog the wait, each region's time and the switches):
        one page, its evidence listing what else moved."""
        if not new:
            return []
        recent = (k for k in st.open if now - st.opened.get(k, now) <= RELATED_SECONDS)
        lead = next(recent, None) or _lead(st.baseline, [found[k] for k in new]).key
        st.related.update({k: lead for k in new if k != lead})
        return [] if lead in st.open else [lead]

    def _ranking_due(self, st: _Scope, key: tuple, now: float) -> bool:
        """Whether an open anomaly's causes are to be ranked again: never ranked, ranked last less than
        FOLLOW_SECONDS after its first ranking (on the first rows of a fault: the next evaluation has more,
        and the samples that came after them), or CAUSES_EVERY intervals ago."""
        ranked = st.causes.get(key, {}).get("causes_ranked", {})
        at = ranked.get("at")
        return key in st.open and (at is None or at - ranked.get("first", -math.inf) < FOLLOW_SECONDS
                                   or now - at >= CAUSES_EVERY * self.interval)

    def _rank(self, ctx: JobContext, scope: str, st: _Scope, keys: list, now: float) -> None:
        """Rank the candidate causes of the anomalies `keys` (culprits.rank): a new one's on the rows it is
        raised on, an open one's on those and the newest rows since; a new one's best is its label."""
        keys = [k for k in keys if k in st.judged]
        if not keys:
            return
        tables: dict = {}   # the units read once per windows, for the anomalies of one evaluation
        with ctx.read() as cur:
            if st.baseline_window is None or st.baseline_window[0] != st.baseline_id:
                window = readers.models.model_window(cur, st.baseline_id)
                st.baseline_window = (st.baseline_id, None if window is None else tuple(window))
            for key in keys:
                judged = st.judged[key]
                if key in st.open and len(st.starts):
                    judged = {**judged, "last_start": max(judged["last_start"], float(st.starts.max()))}
                around = culprits.windows(st.baseline_window[1], judged, now)
                before = st.causes.get(key, {}).get("causes_ranked", {}) if key in st.open else {}
                st.causes[key] = culprits.rank(cur, scope, st.baseline, key[2], around, tables)
                st.causes[key]["causes_ranked"].update(at=now, first=before.get("first", now),
                                                       round=before.get("round", 0) + 1)
                if key not in st.open:
                    st.cause[key] = culprits.label(st.causes[key]["causes"])
