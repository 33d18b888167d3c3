"""Daemon analysis job: per app, a causal model of task parameters, counters, duration and code phase,
re-learnt incrementally (PCLearner.partial_fit) and checked for Markov violations on the newest tasks.

Stores a `models` row with its `edges`, `anomalies` for violated variables, and exports the gauges
causewatch_edge_strength_bits{scope,src,dst} and causewatch_markov_violation_bits{scope,variable}.
"""

from __future__ import annotations

import json
import logging
import time

import pandas as pd
from causewatch.analytics.causal.background import Background
from causewatch.analytics.causal.pc import PCLearner
from causewatch.analytics.phases.tracker import PhaseTracker

log = logging.getLogger("causewatch.daemon.job_causal")

EDGE_GAUGE = "causewatch_edge_strength_bits"
EDGE_HELP = "Strength of a learned causal edge: the weakest conditional mutual information seen, bits"
MARKOV_GAUGE = "causewatch_markov_violation_bits"
MARKOV_HELP = ("Information between a variable and its non-descendants given its parents on the newest "
               "tasks, bits (above the test threshold = the model's independence no longer holds)")


def submodels(model) -> dict:
    """Each variable with parents as its MDL-fitted function of them (kind, formula, bits), from
    CausalModel.fit_submodels; a fit that fails costs the model its formulas, not its storage."""
    try:
        fitted = model.fit_submodels()
    except ValueError as e:  # MDLError and pandas' own
        log.info("causal model: no submodels (%s)", e)
        return {}
    return {v: {"kind": sub.kind, "formula": sub.formula, "bits": round(sub.bits, 1)}
            for v, sub in fitted.items() if sub.parents}


def task_frame(con, app: str | None = None, since: float | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Tasks as a wide frame: duration, cpu_seconds, one column per params/counters key (JSON
    unpacked inside DuckDB), plus `received` (when the daemon stored the row) and `bbv` (the task's
    code vector, JSON). Returns the frame and the parameter columns (the inputs of the model)."""
    where, params = "TRUE", []
    if app is not None:
        where, params = "t.app = ?", [app]
    if since is not None:
        where, params = f"{where} AND l.received > ?", params + [since]
    joined = "tasks t JOIN ingest_log l USING (node, boot, seq)"
    pkeys, ckeys = (_keys(con, column, joined, where, params) for column in ("params", "counters"))
    names = {k: k for k in pkeys}
    names.update({k: (k if k not in names and k not in ("duration", "cpu_seconds") else f"counter.{k}") for k in ckeys})
    cols = [f"json_extract_string(t.params, {_path(k)}) AS {_ident(names[k])}" for k in pkeys]
    cols += [f"TRY_CAST(json_extract_string(t.counters, {_path(k)}) AS DOUBLE) AS {_ident(names[k])}" for k in ckeys]
    sql = (f"SELECT l.received, t.t_start, t.bbv, t.duration, t.cpu_seconds{''.join(', ' + c for c in cols)} "
           f"FROM {joined} WHERE {where} ORDER BY l.received, t.node, t.seq")
    frame = con.execute(sql, params).df()
    for k in pkeys:  # numeric parameters become numbers, the rest stay text (discrete)
        numeric = pd.to_numeric(frame[names[k]], errors="coerce")
        if numeric.notna().sum() == frame[names[k]].notna().sum():
            frame[names[k]] = numeric
    return frame, [names[k] for k in pkeys]


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _path(key: str) -> str:
    """A JSON path literal for one key (keys come from agents: quote, never trust)."""
    inner = '$."' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return "'" + inner.replace("'", "''") + "'"


def _keys(con, column, joined, where, params) -> list[str]:
    rows = con.execute(f"SELECT DISTINCT unnest(json_keys(t.{column})) FROM {joined} "
                       f"WHERE t.{column} IS NOT NULL AND {where}", params).fetchall()
    return sorted(r[0] for r in rows)


BOOKKEEPING = ["received", "t_start", "bbv"]   # task_frame columns that are not variables


def model_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """The variables a model is learnt over: no bookkeeping columns, none that never vary or are
    mostly missing, and only complete rows."""
    data = frame.drop(columns=BOOKKEEPING, errors="ignore")
    data = data.loc[:, data.notna().mean() >= 0.8].dropna()
    return data.loc[:, [c for c in data.columns if data[c].nunique() > 1]].reset_index(drop=True)


def with_code_phase(frame: pd.DataFrame, tracker: PhaseTracker, seen_until: float = 0.0) -> pd.DataFrame:
    """`code_phase`: the online tracker's phase of each task's code vector, a discrete variable for the
    model (absent when no task carries a vector). Rows received up to `seen_until` taught the tracker
    before (they were read and left for later), so they are only looked up: none teaches it twice."""
    if "bbv" not in frame or frame["bbv"].isna().all():
        return frame
    ids = []
    for text, seen in zip(frame["bbv"], frame["received"] <= seen_until):
        if not isinstance(text, str):
            ids.append(None)
            continue
        vector = json.loads(text)
        phase = tracker.predict(vector) if seen else tracker.update(vector)
        ids.append(f"phase-{phase}" if phase >= 0 else None)
    return frame.assign(code_phase=ids)


class _Scope:
    def __init__(self):
        self.learner: PCLearner | None = None
        self.columns: list[str] = []
        self.received = 0.0
        self.n_rows = 0
        self.window_start = 0.0
        self.violations: pd.DataFrame | None = None
        self.tracker = PhaseTracker()
        self.tracked_until = 0.0   # rows received up to here have taught the tracker already


class Job:
    name = "causal"
    interval = 60.0

    def __init__(self, min_rows: int = 50, max_rows: int = 2000, min_new: int = 20, max_depth: int = 2,
                 clock=time.time):
        self.min_rows, self.max_rows, self.min_new, self.max_depth = min_rows, max_rows, min_new, max_depth
        self.clock = clock
        self.scopes: dict[str, _Scope] = {}

    def run(self, ctx) -> None:
        cur = ctx.read()
        try:
            apps = [r[0] for r in cur.execute("SELECT DISTINCT app FROM tasks ORDER BY app").fetchall()]
            fresh = {app: task_frame(cur, app, self.scopes.get(f"app:{app}", _Scope()).received or None)
                     for app in apps}
        finally:
            cur.close()
        for app, (frame, inputs) in fresh.items():
            self._update(ctx, f"app:{app}", frame, inputs)
        self._publish(ctx)

    def _publish(self, ctx) -> None:
        """Republish every scope's gauges, so edges that disappeared stop being exported."""
        ctx.metrics.clear(EDGE_GAUGE)
        ctx.metrics.clear(MARKOV_GAUGE)
        for scope, st in self.scopes.items():
            if st.learner is None:
                continue
            for e in st.learner.model_.edges():
                ctx.metrics.set_gauge(EDGE_GAUGE, EDGE_HELP, {"scope": scope, "src": e.src, "dst": e.dst}, e.strength)
            if st.violations is not None:
                for row in st.violations.itertuples():
                    ctx.metrics.set_gauge(MARKOV_GAUGE, MARKOV_HELP, {"scope": scope, "variable": row.variable},
                                          row.bits)

    def _update(self, ctx, scope: str, frame: pd.DataFrame, inputs: list[str]) -> None:
        st = self.scopes.setdefault(scope, _Scope())
        if frame.empty:
            return
        frame = with_code_phase(frame, st.tracker, st.tracked_until)
        st.tracked_until = max(st.tracked_until, float(frame["received"].max()))
        if st.learner is not None and set(st.columns) <= set(frame.columns):
            data = frame[st.columns].dropna().reset_index(drop=True)  # the model's variables, as they are
        else:
            data = model_columns(frame)
        grown = st.learner is not None and list(data.columns) == st.columns
        if grown and len(data) < self.min_new:
            return  # too few new rows to be worth a refit; they are read again next time
        if not grown and st.learner is None and len(data) < self.min_rows:
            return
        violations = None
        if grown:
            violations = st.learner.model_.markov_violations(data, ci_test=st.learner.ci_test)
            if st.n_rows + len(data) > self.max_rows:
                grown = False  # the window is full: start a new one from the newest rows
        if grown:
            st.learner.partial_fit(data)
            st.n_rows += len(data)
        else:
            if st.learner is not None and list(data.columns) != st.columns:
                log.info("causal model %s: columns changed, learning a new model", scope)
            bg = Background(tiers={"inputs": [c for c in inputs if c in data.columns]})
            st.learner = PCLearner(max_depth=self.max_depth, background=bg).fit(data.tail(self.max_rows))
            st.columns, st.n_rows = list(data.columns), min(len(data), self.max_rows)
            st.window_start = float(frame["t_start"].min())
        st.received = float(frame["received"].max())
        if violations is not None:
            st.violations = violations
        self._store(ctx, scope, st, float(frame["t_start"].max()), violations)

    def _store(self, ctx, scope, st: _Scope, window_end: float, violations) -> None:
        model = st.learner.model_
        now = self.clock()
        edges = model.edges()
        graph = {**model.to_dict(), "submodels": submodels(model)}

        def write(con):
            model_id = con.execute("SELECT coalesce(max(model_id), 0) + 1 FROM models").fetchone()[0]
            con.execute("INSERT INTO models VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [model_id, scope, st.window_start, window_end, st.n_rows, now, json.dumps(graph)])
            if edges:
                rows = pd.DataFrame({"model_id": model_id, "src": [e.src for e in edges],
                                     "dst": [e.dst for e in edges], "strength": [e.strength for e in edges],
                                     "directed": [e.directed for e in edges]})
                _insert(con, "edges", rows)
            if violations is not None and violations.violated.any():
                bad = violations[violations.violated]
                rows = pd.DataFrame({"ts": now, "scope": scope, "model_id": model_id, "variable": bad.variable,
                                     "score": bad.bits,
                                     "detail": [json.dumps({"threshold": t, "kind": "markov_violation"})
                                                for t in bad.threshold]})
                _insert(con, "anomalies", rows)
        ctx.write(write)


def _insert(con, table: str, rows: pd.DataFrame) -> None:
    con.register("causal_batch", rows)
    try:
        con.execute(f"INSERT INTO {table} ({', '.join(rows.columns)}) SELECT * FROM causal_batch")
    finally:
        con.unregister("causal_batch")
