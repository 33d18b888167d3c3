"""The demo's story on a real store: its report under a pinned hog (each anomaly timed against the
hog with the first of the causes its evidence ranks, the story's anomaly's ranked causes, the verdict
and the last line), and its stretches moved on by what the store holds, with real hog processes. No
clocks: the stretches' bounds are set to none or to zero."""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pytest
from support import StoreVerbs

from causewatch import wire
from causewatch.commands.demo import causes, report
from causewatch.commands.demo.causes import WAIT
from causewatch.commands.demo.hog import HOG_JUDGE, Hog
from causewatch.commands.demo.parts import SCOPE
from causewatch.commands.demo.story import HOG_SECONDS, Story
from causewatch.daemon import verbs
from causewatch.daemon.store import Store, results

ORIGIN = 1_000.0          # the workload's start, unix seconds
HOG = (35.0, 72.0)        # the pinned hog's stretch, seconds after it
CPU = 0.05                # each task's CPU seconds


def _ratio(t: float) -> float:
    """Seconds a task started at `t` waits for a CPU per CPU second: calm, the hog, calm, other work."""
    return 4.0 if HOG[0] <= t < HOG[1] else 2.0 if t >= 80 else 0.5


@pytest.fixture
def store(tmp_path):
    st = Store(str(tmp_path / "cw.duckdb"))
    yield st
    st.close()


def _tasks(st: Store, times, origin: float = ORIGIN, ratio=_ratio, seq: int = 0) -> None:
    st.commit_frames([wire.Frame("task", "demo-node-1", "b", seq + i, origin + t, {
        "app": "demo", "task_id": f"t{seq + i}", "start": origin + t, "duration": CPU * (1 + ratio(t)),
        "cpu_seconds": CPU, "params": {"type": "float"}, "counters": {WAIT: CPU * ratio(t)}})
        for i, t in enumerate(times)])


def _model(st: Store, learned: float, origin: float = ORIGIN, lag: float = 1.0,
           nodes=("cpu_seconds", WAIT, "duration")) -> int:
    """A model version of `nodes` learnt `learned` s after `origin` from the tasks up to `lag` s before."""
    edges = [e for e in [("cpu_seconds", "duration", 0.9), (WAIT, "duration", 0.4)] if e[0] in nodes]
    graph = {"nodes": list(nodes), "edges": [
        {"src": s, "dst": d, "directed": True, "strength": v} for s, d, v in edges]}
    return st.run(lambda con: results.insert_model(
        con, SCOPE, (origin, origin + learned - lag), int(2 * learned), origin + learned, graph,
        pa.Table.from_pylist([dict(src=s, dst=d, strength=v, directed=True) for s, d, v in edges])))


def _raised_on(lo: float, hi: float, origin: float = ORIGIN) -> dict:
    """The causal job's evidence of the rows an anomaly was raised on: tasks started `lo`-`hi` s in."""
    return {"rows": 40, "first_start": origin + lo, "last_start": origin + hi}


HOG_UNIT = Hog().unit("demo-node-1")   # the hog as the agent watching the workload reports its processes
NODE_UNIT = "node demo-node-1: other processes' CPU"


def _causes(*ranked: tuple[str, float]) -> dict:
    """An anomaly's ranked causes as the causal job stores them in its evidence."""
    return {"causes": [{"unit": u, "score": s, "evidence": f"{u}'s cpu_cores rose"} for u, s in ranked],
            "causes_ranked": {"units": 20}}


def _anomaly(st: Store, kind: str, src: str, dst: str, opened: float, judged: tuple[float, float],
             resolved: float | None = None, causes: dict | None = None) -> None:
    def write(con):
        raised = results.raise_anomaly(con, {"scope": SCOPE, "kind": kind, "src": src, "dst": dst,
                                             "opened": ORIGIN + opened, "baseline_id": 2, "model_id": 1,
                                             "score": 1.43, "threshold": 1.06,
                                             "evidence": {"rows": 40, "raised_on": _raised_on(*judged),
                                                          **(causes or {})}})
        if resolved is not None:
            results.resolve_anomaly(con, raised, ORIGIN + resolved)
    st.run(write)


def _story(**hog):
    story = Story(ORIGIN, "http://127.0.0.1:9", seconds=30, wait=120)   # no daemon: nothing is pinned
    story.hog.started, story.hog.stopped = hog.get("started"), hog.get("stopped")
    return story


def _report(st: Store, story, folder) -> dict:
    return json.loads(json.dumps(report.report(StoreVerbs(st), 100.0, folder, story)))


def test_the_report_gives_each_anomaly_its_cause_and_says_the_story_was_shown(store, tmp_path):
    """Under the pinned hog the wait's mechanism change is raised, resolves after it, and the causal job
    ranks the hog first: shown, with its ranked causes. Two more are not the hog's, and the report says
    what they had first: one raised after it on the node's other processes, one an edge raised before
    causes were ranked; the last line counts them."""
    _tasks(store, [t / 2 for t in range(200)])
    for learned in (10, 20, 30, 40, 50, 60, 70, 78, 86, 94):
        _model(store, learned)
    store.run(lambda con: results.set_baseline(con, SCOPE, 2, "pinned", ORIGIN + 21))
    _anomaly(store, "mechanism_changed", "(time)", WAIT, opened=45.0, judged=(19, 39), resolved=78.0,
             causes=_causes((HOG_UNIT, 2.75), (NODE_UNIT, 2.42), (WAIT, 1.85), ("duration", 0.4)))
    _anomaly(store, "markov_violation", "cpu_seconds", "duration", opened=55.0, judged=(29, 49), resolved=78.0,
             causes=_causes((HOG_UNIT, 2.1)))
    _anomaly(store, "mechanism_changed", "(time)", WAIT, opened=94.5, judged=(77, 93), causes=_causes((NODE_UNIT, 2.0)))
    _anomaly(store, "edge_appeared", "cpu_seconds", WAIT, opened=30.5, judged=(0, 29), resolved=40.5)
    rep = _report(store, _story(started=HOG[0], stopped=HOG[1]), tmp_path)
    by_open = {a["opened_s"]: a for a in rep["anomalies"]}
    assert by_open[45.0]["when"] == "raised +10.0 s from the hog's start, resolved +6.0 s from its stop"
    # raised on the tasks the causal job's evidence names (here the checks of the versions learnt at 30 and 40 s)
    assert by_open[45.0]["under_hog"] and by_open[45.0]["first_cause"] == HOG_UNIT
    assert by_open[45.0]["cause"] == f"the hog: {HOG_UNIT} (score 2.75): {HOG_UNIT}'s cpu_cores rose"
    assert by_open[55.0]["cause"].startswith("the hog: ")
    assert by_open[94.5]["cause"] == f"{NODE_UNIT} (score 2.00): {NODE_UNIT}'s cpu_cores rose"
    assert not by_open[94.5]["under_hog"]
    assert by_open[30.5]["cause"] == "not ranked: raised before causes were ranked"
    # the story's anomaly's causes, as the job ranked them
    assert [(c["rank"], c["unit"], c["score"], c["hog"]) for c in rep["causes"]] == [
        (1, HOG_UNIT, 2.75, True), (2, NODE_UNIT, 2.42, False), (3, WAIT, 1.85, False), (4, "duration", 0.4, False)]
    (hog,) = rep["contention_hog"]
    assert hog["shown"].startswith("yes: a mechanism_changed on cpu_wait_seconds")
    assert hog["shown"].endswith("its first cause: the hog")
    assert (hog["wait_per_cpu_s_before"], hog["wait_per_cpu_s_during"]) == (0.5, 4.0)
    assert rep["story"]["shown"] == "yes"
    assert rep["story"]["line"] == (
        "story shown: mechanism_changed on cpu_wait_seconds raised 10.0 s into the hog, resolved 6.0 s after it "
        "stopped, first cause the hog; 2 anomalies whose first cause is not the hog (node metrics 1, not ranked 1: "
        "causes in the report)")
    # the alerts they would page with: deploy/'s rules, newest of each; the edge is a ticket
    page = {p["alert"]: p for p in rep["page"]}
    assert set(page) == {"CausewatchMechanismChanged", "CausewatchAnomalousDependency"}
    mechanism = page["CausewatchMechanismChanged"]
    assert (mechanism["severity"], mechanism["for_s"], mechanism["src"], mechanism["dst"]) == \
        ("page", 120, "(time)", WAIT)
    assert mechanism["evidence"] == \
        "cpu_wait_seconds given its causes: 1.430 bits > 1.060 on 40 rows"
    assert mechanism["picture"] == "http://127.0.0.1:9/api/model?scope=app%3Ademo&format=svg"
    markov = page["CausewatchAnomalousDependency"]
    assert markov["open_s"] == 23 and markov["sent"] is False   # resolved before its 2 minutes' hold
    assert markov["summary"] == "duration in app:demo depends on cpu_seconds, which the causal model says it should not"
    assert mechanism["receiver"] == "pager" if shutil.which("amtool") else mechanism["receiver"].startswith("unknown")
    # the wait here is an exact copy of the task time: no model to diff, and the section says why
    assert [d["change"] for d in rep["model_diff"]] == ["not judged"]
    assert "need at least 2 variables" in rep["model_diff"][0]["why"]


def test_the_model_diff_names_the_waits_mechanism_under_the_hog(store, tmp_path):
    """Tasks whose CPU time and wait vary apart, the wait eight times longer under the hog, their time
    the sum: the diff of the baseline model's tasks and the hog's names the wait's mechanism, and draws
    it, and not the task time's: its fit is unchanged, though its causes' values under the hog lie outside
    the baseline's (anomalies.changed_mechanisms judges those rows by the baseline fit's residuals)."""
    rng = np.random.default_rng(0)
    times = np.arange(0, 100, 0.25)
    cpu = 0.05 * rng.uniform(0.5, 1.5, len(times))
    wait = 0.05 * np.array([_ratio(t) for t in times]) * rng.uniform(0.5, 1.5, len(times))
    store.commit_frames([wire.Frame("task", "demo-node-1", "b", i, ORIGIN + t, {
        "app": "demo", "task_id": f"t{i}", "start": ORIGIN + t, "duration": c + w + 0.002 * rng.standard_normal(),
        "cpu_seconds": c, "params": {"type": "float"}, "counters": {WAIT: w}})
        for i, (t, c, w) in enumerate(zip(times, cpu, wait))])
    base = _model(store, 31.0)
    store.run(lambda con: results.set_baseline(con, SCOPE, base, "pinned", ORIGIN + 31))
    rep = _report(store, _story(started=HOG[0], stopped=HOG[1]), tmp_path)
    changed = [d for d in rep["model_diff"] if d["change"] == "mechanism"]
    assert WAIT in [d["variable"] for d in changed], json.dumps(rep["model_diff"], indent=1)
    assert "duration" not in [d["variable"] for d in changed], json.dumps(rep["model_diff"], indent=1)
    wait = next(d for d in changed if d["variable"] == WAIT)
    assert wait["given"] == "" and wait["fit"].startswith(f"{WAIT} = 0.02") and f"-> {WAIT} = 0.1" in wait["fit"]
    assert "mechanism" in (tmp_path / "model-diff.svg").read_text()


def test_anomalies_without_the_hog_are_explained_and_the_last_line_says_why_not(store, tmp_path):
    """The issue's loaded run: the hog never ran, yet anomalies opened. The calm start's bound ran out
    without a baseline (here a bound of nothing, and no model came); the last line says so, and says
    what the anomalies had first instead of the hog."""
    _tasks(store, [t / 2 for t in range(200)])   # from 35 s on, other work made them wait (_ratio's "hog")
    story = Story(ORIGIN, "http://127.0.0.1:9", seconds=0, wait=0)
    assert story.step(StoreVerbs(store), stored=200) is False   # the story is over, and the tasks are in
    assert not story.hog.running and story.hog.started is None
    for learned in (30, 40, 50):
        _model(store, learned)
    store.run(lambda con: results.set_baseline(con, SCOPE, 1, "first stable", ORIGIN + 31))
    _anomaly(store, "mechanism_changed", "(time)", WAIT, opened=50.5, judged=(29, 49), causes=_causes((NODE_UNIT, 2.3)))
    _anomaly(store, "edge_appeared", "cpu_seconds", "duration", opened=30.5, judged=(0, 29),
             causes=_causes(("duration", 0.6)))
    rep = _report(store, story, tmp_path)
    assert [a["when"] for a in rep["anomalies"]] == ["the hog never ran"] * 2
    assert sorted(a["cause"] for a in rep["anomalies"]) == [
        f"{NODE_UNIT} (score 2.30): {NODE_UNIT}'s cpu_cores rose",
        "none beyond the cut: duration (score 0.60): duration's cpu_cores rose"]
    assert rep["causes"] == []   # no story's anomaly
    assert rep["contention_hog"][0]["shown"].startswith("no: the hog never ran (no baseline model within")
    assert rep["story"]["shown"] == "no"
    assert rep["story"]["line"] == (
        "story NOT shown: the hog never ran; no baseline model within the calm start's 0 s: the causal job "
        f"had learnt no model yet (200 tasks stored), load {story.loads[0][1]:.1f}; 2 anomalies whose first cause "
        "is not the hog (node metrics 1, none beyond the cut 1: causes in the report)")


def _contended_story(store) -> Story:
    """A story whose hog ran over HOG, with the variable and reasons `contended` finds in the store."""
    story, api = _story(started=HOG[0], stopped=HOG[1]), StoreVerbs(store)
    waits = causes.task_waits(api, ORIGIN)
    story.contended, story.why, story.held = causes.contended(api, api.read(verbs.MODELS, scope=SCOPE), waits,
                                                              ORIGIN)
    return story


def test_a_wait_the_model_left_out_shows_in_duration(store, tmp_path):
    """On a loaded machine a task's wait is most of its time, and the model leaves the wait out as a
    linear copy of duration: the story's anomaly is then one on duration, and the last line says so.
    Without one, the story was not shown, and the last line says what the wait did."""
    _tasks(store, [t / 2 for t in range(200)])   # duration = CPU + wait: a linear copy
    for learned in (10, 20, 30, 40, 50, 60, 70, 78, 86, 94):
        _model(store, learned, nodes=["cpu_seconds", "duration"])
    store.run(lambda con: results.set_baseline(con, SCOPE, 2, "first stable", ORIGIN + 21))
    story = _contended_story(store)
    assert story.contended == "duration" and story.why == (
        "cpu_wait_seconds is not a variable of the baseline model, so the hog shows in duration (on the baseline's "
        "tasks the two moved together, r = 1.0000: the wait was most of a task's time)")
    rep = _report(store, story, tmp_path)
    assert rep["story"]["shown"] == "no" and rep["story"]["line"] == (
        "story NOT shown: no anomaly on duration in 0 model versions under the hog (wait per CPU second 0.5 before, "
        "4.0 during) (cpu_wait_seconds is not in the model: duration holds it)")
    assert rep["contention_hog"][0]["shown"].startswith("no: no anomaly on duration while the hog ran")
    _anomaly(store, "mechanism_changed", "(time)", "duration", opened=45.0, judged=(19, 39), resolved=78.0,
             causes=_causes(("region float", 2.5), (HOG_UNIT, 2.4)))
    rep = _report(store, story, tmp_path)
    # raised, resolved after, but the job ranked another unit first: in part, and the line says which
    assert rep["anomalies"][0]["cause"].startswith("region float (score 2.50)")
    assert rep["story"]["shown"] == "in part" and rep["story"]["line"] == (
        "story shown in part: mechanism_changed on duration raised 10.0 s into the hog, resolved 6.0 s after it "
        "stopped, first cause region float, not the hog (cpu_wait_seconds is not in the model: duration holds it); "
        "1 anomaly whose first cause is not the hog (the app's own 1: causes in the report)")
    store.run(lambda con: con.execute("DELETE FROM anomalies"))
    _anomaly(store, "mechanism_changed", "(time)", "duration", opened=45.0, judged=(19, 39), resolved=78.0,
             causes=_causes((HOG_UNIT, 2.4)))
    rep = _report(store, story, tmp_path)
    assert rep["anomalies"][0]["cause"].startswith("the hog: ")
    assert rep["story"]["shown"] == "yes" and rep["story"]["line"] == (
        "story shown: mechanism_changed on duration raised 10.0 s into the hog, resolved 6.0 s after it stopped, "
        "first cause the hog (cpu_wait_seconds is not in the model: duration holds it)")
    assert rep["contention_hog"][0]["variable"] == "duration" and rep["contention_hog"][0]["why"] == story.why


def test_a_model_that_orients_duration_to_the_wait_shows_the_hog_in_duration(store, tmp_path):
    """A baseline with duration -> wait judges the wait's change given the task time that holds it, and
    so misses it (a quiet-machine run lost the story so): the story's variable is then duration."""
    _tasks(store, [t / 2 for t in range(200)])
    graph = {"nodes": ["cpu_seconds", WAIT, "duration"], "edges": [
        {"src": "duration", "dst": WAIT, "directed": True, "strength": 0.9},
        {"src": "duration", "dst": "cpu_seconds", "directed": True, "strength": 1.1}]}
    store.run(lambda con: results.insert_model(con, SCOPE, (ORIGIN, ORIGIN + 20), 40, ORIGIN + 21, graph,
                                               pa.Table.from_pylist([{**e} for e in graph["edges"]])))
    store.run(lambda con: results.set_baseline(con, SCOPE, 1, "first stable", ORIGIN + 21))
    for learned in (30, 40, 50, 60, 70, 78, 86, 94):
        _model(store, learned)
    story = _contended_story(store)
    assert story.contended == "duration" and story.why == (
        "the baseline model has duration -> cpu_wait_seconds: the wait's change is judged given the task time, "
        "which holds it, so the hog shows in duration")
    _anomaly(store, "mechanism_changed", "(time)", "duration", opened=45.0, judged=(19, 39), resolved=78.0,
             causes=_causes((HOG_UNIT, 3.0)))
    assert _report(store, story, tmp_path)["story"]["line"] == (
        "story shown: mechanism_changed on duration raised 10.0 s into the hog, resolved 6.0 s after it stopped, "
        "first cause the hog (the model has duration -> cpu_wait_seconds: duration shows it)")


def test_the_stretches_follow_the_store(store):
    """Calm until the scope has its baseline, then real hog processes, sized on the calm tasks' wait
    and grown when the first tasks under them wait too little more, until an anomaly on the wait is
    raised and they ran HOG_SECONDS, then calm until it resolves; the workload may stop once its tasks
    are in. Bounds of nothing would end each stretch at once: these have none."""
    origin = time.time() - 100   # the workload started 100 s ago
    story = Story(origin, "http://127.0.0.1:9", seconds=30, wait=float("inf"))
    con = StoreVerbs(store)
    assert story.step(con, stored=story.calm_tasks) and story.stretch == "calm"   # no model, no baseline
    _tasks(store, range(50), origin, ratio=lambda t: 0.5)   # calm: half a second per CPU second
    _model(store, 10, origin)
    store.run(lambda con: results.set_baseline(con, SCOPE, 1, "first stable", time.time()))
    try:
        assert story.step(con, stored=story.calm_tasks - 1) and story.stretch == "calm"   # too few calm tasks
        assert story.step(con, stored=story.calm_tasks) and story.stretch == "hog" and story.hog.running
        assert story.hog.per_cpu == 1 and story.hog.sized is None   # ceil(0.5)
        # its first 20 tasks waited 1.0 s per CPU second: one per CPU added 0.5, three reach 4 x 0.5 = 2.0
        _tasks(store, [story.hog.started + 1 + i / 10 for i in range(HOG_JUDGE)], origin,
               ratio=lambda t: 1.0, seq=50)
        assert story.step(con, stored=story.calm_tasks + 10) and story.hog.running   # no anomaly yet
        assert story.hog.per_cpu == 3 and story.hog.sized.startswith(
            "1 per CPU: its first 20 tasks waited 1 s per CPU second, the calm ones 0.5; grown to 3 per CPU at ")
        pids = [p.pid for p in story.hog.procs]
        assert len(pids) == story.hog.per_cpu * len(story.hog.cpus)
        assert {frozenset(os.sched_getaffinity(pid)) for pid in pids} == {frozenset({c}) for c in story.hog.cpus}
        _model(store, time.time() - origin, origin, lag=0)   # a version on tasks that ran under the hog
        under = {"raised_on": _raised_on(story.hog.started, time.time() - origin, origin)}
        raised = store.run(lambda con: results.raise_anomaly(con, {
            "scope": SCOPE, "kind": "mechanism_changed", "src": "(time)", "dst": WAIT,
            "opened": time.time(), "baseline_id": 1, "model_id": 1, "score": 1.0, "threshold": 0.5, "evidence": under}))
        edge = store.run(lambda con: results.raise_anomaly(con, {
            "scope": SCOPE, "kind": "edge_appeared", "src": "cpu_seconds", "dst": WAIT,
            "opened": time.time(), "baseline_id": 1, "model_id": 1, "score": 1.0, "threshold": 0.5, "evidence": under}))
        assert story.step(con, stored=story.calm_tasks + 45) and story.stretch == "hog"   # raised, but too soon
        story.hog.started -= HOG_SECONDS   # as if it had run that long
        assert story.step(con, stored=story.calm_tasks + 50) and story.stretch == "end" and not story.hog.running
        assert story.step(con, stored=story.calm_tasks + 60) and story.stretch == "end"   # still open
        # an edge on the wait that resolves first does not end it: the change on the rows is the subject
        store.run(lambda con: results.resolve_anomaly(con, edge, time.time()))
        assert story.step(con, stored=story.calm_tasks + 65) and story.stretch == "end"
        store.run(lambda con: results.resolve_anomaly(con, raised, time.time()))
        assert story.step(con, stored=story.calm_tasks + 70) is False and story.stretch == "done"
        assert story.short == []
    finally:
        story.finish()


def test_the_report_times_each_anomaly_against_the_hog(store, tmp_path):
    """A new dependency on the CPU wait raised while the hog ran and resolved after it stopped, and a
    model edge still open, timed against the hog; the newest model's edges with the versions holding
    them (either way round; weak ones are not stable), other scopes' versions not counted."""
    row = {"scope": SCOPE, "baseline_id": 3, "model_id": 7, "score": 1.43, "threshold": 1.06}

    def write(con):
        raised = results.raise_anomaly(con, dict(row, kind="markov_violation", src="cpu_seconds", dst=WAIT,
                                               opened=ORIGIN + 41.0,
                                               evidence={"rows": 44, "raised_on": _raised_on(0, 39),
                                                         "related": [{"kind": "mechanism_changed", "src": "(time)",
                                                                      "dst": "duration", "score": 0.3,
                                                                      "threshold": 0.1}],
                                                         **_causes((HOG_UNIT, 2.0))}))
        results.resolve_anomaly(con, raised, ORIGIN + 82.5)
        results.raise_anomaly(con, dict(row, kind="edge_appeared", src="cpu_seconds", dst=WAIT,
                                      opened=ORIGIN + 50.0, evidence={"strength_bits": 0.2}))
    store.run(write)
    graph = lambda *edges: {"nodes": ["a", "b", "c", "d"], "edges": [   # noqa: E731
        {"src": s, "dst": d, "directed": True, "strength": v} for s, d, v in edges]}
    for scope, edges in ((SCOPE, [("a", "b", 0.9), ("b", "c", 0.3)]), ("app:other", [("a", "b", 1.0)]),
                         (SCOPE, [("b", "a", 0.8), ("c", "d", 0.05)])):
        store.run(lambda con: results.insert_model(con, scope, (ORIGIN, ORIGIN + 39), 100, ORIGIN + 40, graph(*edges),
                                                 pa.Table.from_pylist([dict(src=s, dst=d, strength=v, directed=True)
                                                                       for s, d, v in edges])))
    rep = _report(store, _story(started=35.0, stopped=72.0), tmp_path)
    first, second = rep["anomalies"]
    assert first == {"anomaly_id": 1, "scope": SCOPE, "kind": "markov_violation", "src": "cpu_seconds", "dst": WAIT,
                     "state": "resolved", "opened_s": 41.0, "resolved_s": 82.5, "score": 1.43, "threshold": 1.06,
                     "rows": 44, "when": "raised +6.0 s from the hog's start, resolved +10.5 s from its stop",
                     "under_hog": True, "first_cause": HOG_UNIT, "related": ["duration"],
                     "cause": f"the hog: {HOG_UNIT} (score 2.00): {HOG_UNIT}'s cpu_cores rose"}
    assert second["state"] == "open" and second["resolved_s"] is None and second["when"].endswith("still open")
    # one voice: an anomaly of another variable with the wait among its related findings is the hog's too
    story = _story(started=35.0, stopped=72.0)
    led = {"src": "(time)", "dst": "region.compute", "opened_s": 41.0}
    assert causes.opened_under_hog(dict(led, related=[WAIT]), story) and not causes.opened_under_hog(led, story)
    assert rep["causal_edges"] == [
        {"src": "b", "dst": "a", "strength_bits": 0.8, "directed": True, "held_by": 2, "versions": 2, "stable": True},
        {"src": "c", "dst": "d", "strength_bits": 0.05, "directed": True, "held_by": 1, "versions": 2, "stable": False}]
    (shown,) = rep["contention_hog"]
    assert (shown["started_s"], shown["stopped_s"]) == (35.0, 72.0) and shown["shown"].startswith("yes:")


def test_a_hog_stops_by_itself_when_the_demo_is_killed(tmp_path):
    """However the demo goes (here SIGKILL, where no `finally` runs), its busy processes go too."""
    code = ("import time\nfrom causewatch.commands.demo.hog import Hog\nhog = Hog()\nhog.start(0.0, 1.0, 0.5)\n"
            "print(' '.join(str(p.pid) for p in hog.procs), flush=True)\ntime.sleep(600)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    pids = [int(pid) for pid in parent.stdout.readline().split()]
    assert pids
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 120   # a safety bound, not a figure: each goes at its next look at its parent
    try:
        for pid in pids:
            while os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split()[2] != "Z":
                assert time.monotonic() < deadline, f"hog {pid} outlived the demo"
                time.sleep(0.1)
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
