"""An anomaly's ranked candidate causes, on a real store: the causal job ranks them at the opening over the
units the store has (task variables, node metrics, other processes), keeps them through a restart, ranks
again while the anomaly stays open and keeps the exported `cause` label as it was at the opening; the
picture and `causewatch anomalies` name the first."""

import html
import json
import re
import time

import numpy as np
import pandas as pd
import pytest
from support import StoreVerbs
from task_rows import ingest_tasks, waiting_tasks

from causewatch import wire
from causewatch.analytics.causal import CausalModel
from causewatch.cli import main
from causewatch.daemon import culprits, verbs
from causewatch.daemon.culprit_units import Windows, at_typical_causes, read
from causewatch.daemon.exporter import Exporter
from causewatch.daemon.job_causal import CAUSES_EVERY, FOLLOW_SECONDS, CausalJob
from causewatch.daemon.jobs import JobContext
from causewatch.daemon.store import Store
from causewatch.daemon.store.results import set_baseline

CONTENDED = (1438.0, 1575.0)   # the starts of the three contended batches (seq 438-575)
OTHER_CPU = "other processes' CPU"


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "cw.duckdb"))
    yield s
    s.close()


def _node_samples(store, node: str, runnable, processes=lambda t: {}, seed: int = 0) -> None:
    """A node's samples each second of 990-1700 s: busy CPU counters, processes runnable (`runnable(t)`
    on average), and every 5 s the agent's look at its busiest other processes (`processes(t)`: command ->
    CPU seconds per second)."""
    rng = np.random.default_rng(seed)
    t = np.arange(990.0, 1700.0)
    cpu = {(str(c), m, lo, hi) for c in (0, 1) for m, lo, hi in (("user", 0.4, 0.5), ("idle", 0.4, 0.6))}
    rows = {**{wire.labelled("node_cpu_seconds_total", {"cpu": c, "mode": m}): np.cumsum(rng.uniform(lo, hi, len(t)))
               for c, m, lo, hi in sorted(cpu)},
            "node_memory_MemTotal_bytes": np.full(len(t), 16e9),
            "node_memory_MemAvailable_bytes": 8e9 + rng.normal(0, 1e7, len(t)),
            "node_procs_running": np.array([runnable(x) for x in t]) + rng.normal(0, 0.5, len(t))}
    frames = [wire.Frame("samples", node, "b", 1, t[-1], wire.samples_body(t, list(rows), np.column_stack(list(
        rows.values()))))]
    for i, x in enumerate(t[::5]):
        looked = {wire.labelled("top_process_cpu_ratio", {"command": c}): v + rng.uniform(0, 0.01)
                  for c, v in {"sshd": 0.03, **processes(x)}.items()}
        frames.append(wire.Frame("samples", node, "b", 2 + i, x, wire.samples_body([x], list(looked),
                                                                                   [list(looked.values())])))
    store.commit_frames(frames)


def _contended(t: float) -> bool:
    return CONTENDED[0] <= t <= CONTENDED[1]


def _run(store, planted: dict, clock=time.time, batches=range(7)):
    """The causal job over a pinned calm baseline, then three contended batches (4x the wait per CPU
    second) and calm ones after; `planted` {node: (runnable, processes)} are the nodes' samples.
    Returns the job, its context and the mechanism change's evidence after each batch (None: not open)."""
    for k, (node, (runnable, processes)) in enumerate(planted.items()):
        _node_samples(store, node, runnable, processes, seed=k)
    ctx = JobContext(read=store.cursor, write=store.run, send=lambda *a: True, exporter=Exporter())
    job = CausalJob(min_rows=50, min_new=40, max_rows=1000, interval=10.0, quiet_intervals=10 ** 6, clock=clock)
    ingest_tasks(store, waiting_tasks(0, 0, 300, 0.4, task_clock=False))
    job.run(ctx)
    first = store.cursor().execute("SELECT model_id FROM models").fetchone()[0]
    store.run(lambda con: set_baseline(con, "app:mw", first, how="pinned", now=time.time()))
    seq, seen = 300, []
    for i in batches:
        wait = 1.6 if 3 <= i < 6 else 0.4
        ingest_tasks(store, waiting_tasks(10 + i, seq, 46, wait, task_clock=False))
        seq += 46
        job.run(ctx)
        rows = store.cursor().execute("SELECT evidence FROM anomalies WHERE kind = 'mechanism_changed' "
                                      "AND dst = 'cpu_wait_seconds' AND resolved IS NULL").fetchall()
        seen.append(json.loads(rows[0][0]) if rows else None)
    return job, ctx, seen


def _calm(t):
    return 3.0


def test_a_planted_change_of_the_node_s_runnable_processes_ranks_it_first(store):
    """Processes runnable on node-1, which ran the tasks, tripled while they waited: that unit is the first
    cause, with its evidence; the same change on node-2, where no task ran, is not; the gauge carries it."""
    busy = (lambda t: 9.0 if _contended(t) else 3.0, lambda t: {})
    job, ctx, seen = _run(store, {"node-1": busy, "node-2": busy}, batches=range(4))
    evidence = seen[3]
    assert evidence is not None and seen[2] is None   # opened on the first contended batch (sure)
    first = evidence["causes"][0]
    assert first["unit"] == f"node node-1: {OTHER_CPU}" and first["score"] >= 1
    said = re.match(rf"node node-1: {OTHER_CPU}'s cpu_runnable rose from ([0-9.]+) to ([0-9.]+)", first["evidence"])
    assert said and 2.5 < float(said[1]) < 3.5 and 8.5 < float(said[2]) < 9.5, first["evidence"]
    units = [c["unit"] for c in evidence["causes"]]
    assert "cpu_wait_seconds" in units and units.index(f"node node-2: {OTHER_CPU}") > 0
    assert len(evidence["causes"]) == culprits.TOP and evidence["cause"] == first["unit"]
    ranked = evidence["causes_ranked"]
    # the contended batch's span and TAIL s on (the job's clock is long past it), from LEAD s before it
    width = (45 + culprits.TAIL) / culprits.INCIDENT_ROWS
    assert ranked["nodes"] == ["node-1"] and ranked["units"] >= 5 and ranked["round"] == 1
    assert ranked["row_seconds"] == pytest.approx(width, abs=1e-3)
    assert ranked["incident"] == pytest.approx([1438.0 - culprits.LEAD, 1483.0 + culprits.TAIL], abs=1e-3)
    assert ranked["baseline"][1] == 1299.0
    assert f'cause="node node-1: {OTHER_CPU}",dst="cpu_wait_seconds"'.encode() in ctx.exporter.exposition()
    # the CPU beside the app's: the busy modes of both CPUs (0.9 s a second) less the tasks' (0.1 s)
    around = Windows(tuple(ranked["baseline"]), tuple(ranked["incident"]), ranked["row_seconds"])
    rows = read(store.cursor(), "app:mw", job.scopes["app:mw"].baseline, around).rows
    other = rows[f"node node-1: {OTHER_CPU}/cpu_other_cores"]
    assert 0.7 < other[other.index < 0].median() < 0.9
    assert rows["node node-1: memory/memory_used_bytes"].median() == pytest.approx(8e9, rel=0.01)


def test_without_a_planted_change_the_symptom_itself_is_first(store):
    """The same contention with calm nodes: nothing beside the tasks changed, and the ranking says so."""
    _, _, seen = _run(store, {"node-1": (_calm, lambda t: {})}, batches=range(4))
    first = seen[3]["causes"][0]
    assert first["unit"] == "cpu_wait_seconds" and first["score"] >= 1
    assert all(c["score"] < 1 for c in seen[3]["causes"][1:] if c["unit"].startswith("node "))


def test_the_causes_survive_a_restart_and_the_label_stays_while_the_ranking_moves(store):
    """Opened with node-1's runnable processes first; a neighbour process then takes the CPU while the
    runnable count is calm again: the ranking CAUSES_EVERY intervals later names the process, the label
    (and so the series and the alert) keeps the first; a restarted job reloads both."""
    offset = [0.0]

    def clock():
        offset[0] += CAUSES_EVERY * 10.0 / 2   # two runs a ranking
        return time.time() + offset[0]

    def runnable(t):
        return 9.0 if CONTENDED[0] <= t <= 1483 else 3.0

    def processes(t):
        return {"stress --cpu 2": 1.8} if 1484 <= t <= CONTENDED[1] else {}

    job, ctx, seen = _run(store, {"node-1": (runnable, processes)}, clock=clock, batches=range(6))
    label = f"node node-1: {OTHER_CPU}"
    assert seen[3]["cause"] == seen[3]["causes"][0]["unit"] == label
    assert [e["cause"] for e in seen[3:]] == [label] * 3
    assert seen[5]["causes"][0]["unit"] == "process stress --cpu 2 on node-1"
    span = CONTENDED[1] + culprits.TAIL - CONTENDED[0]
    lead = max(culprits.LEAD, span / culprits.INCIDENT_ROWS)
    assert seen[5]["causes_ranked"]["incident"] == pytest.approx([1438.0 - lead, CONTENDED[1] + culprits.TAIL],
                                                                abs=1e-3)
    assert [e["causes_ranked"]["round"] for e in seen[3:]] == [1, 2, 3]   # the next evaluation, then each 10
    assert seen[5]["causes_ranked"]["at"] > seen[3]["causes_ranked"]["at"]
    assert f'cause="{label}",dst="cpu_wait_seconds"'.encode() in ctx.exporter.exposition()
    restarted, ctx2 = CausalJob(), JobContext(read=store.cursor, write=store.run, send=lambda *a: True,
                                              exporter=Exporter())
    restarted.run(ctx2)   # no new task: the stored open anomalies are exported as they were
    assert f'cause="{label}",dst="cpu_wait_seconds"'.encode() in ctx2.exporter.exposition()
    st = restarted.scopes["app:mw"]
    key = ("mechanism_changed", "(time)", "cpu_wait_seconds")
    assert st.cause[key] == label and st.causes[key]["causes"] == seen[5]["causes"]


@pytest.mark.parametrize("tick, rounds", [(1.5, [1, 2, 3]), (6.0, [1, 2, 2])])
def test_an_open_anomaly_is_ranked_at_each_evaluation_while_its_fault_s_samples_come_in(store, tick, rounds):
    """Evaluations 4.5 s or 18 s apart (the job reads its clock three times a run): the opening's ranking,
    then one at each evaluation while the last came less than FOLLOW_SECONDS after the opening (a node's
    samples of the fault's first seconds reach the daemon in the agents' frames, seconds late), then none
    until CAUSES_EVERY intervals have passed."""
    now = [time.time()]

    def clock():
        now[0] += tick
        return now[0]

    busy = (lambda t: 9.0 if _contended(t) else 3.0, lambda t: {})
    _, _, seen = _run(store, {"node-1": busy}, clock=clock, batches=range(6))
    ranked = [e["causes_ranked"] for e in seen[3:]]
    assert [r["round"] for r in ranked] == rounds
    assert all(r["first"] == ranked[0]["at"] for r in ranked)
    again = [b["round"] == a["round"] + 1 for a, b in zip(ranked, ranked[1:])]
    assert again == [a["at"] - a["first"] < FOLLOW_SECONDS for a in ranked[:-1]]


def test_the_picture_and_the_table_name_the_first_cause(store, tmp_path, capsys):
    busy = (lambda t: 9.0 if _contended(t) else 3.0, lambda t: {})
    _run(store, {"node-1": busy}, batches=range(4))
    svg = html.unescape(str(StoreVerbs(store).read(verbs.MODEL, scope="app:mw", format="svg")))
    assert f"mechanism_changed (time) -> cpu_wait_seconds: first cause node node-1: {OTHER_CPU} (score " in svg
    store.close()
    assert main(["anomalies", "--db", str(tmp_path / "cw.duckdb")]) == 0
    table = capsys.readouterr().out
    assert re.search(rf"mechanism_changed .* open \d+ s +node node-1: {OTHER_CPU} \([0-9.]+\)", table), table
    assert main(["anomalies", "--db", str(tmp_path / "cw.duckdb"), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert all(len(a["evidence"]["causes"]) == culprits.TOP for a in found if "causes" in a["evidence"])


def test_a_variable_at_its_baseline_s_typical_causes_moves_only_when_its_mechanism_does():
    """A task time that only follows its CPU time stays put when the CPU time doubles; one that rises
    beyond it moves by that much."""
    rng = np.random.default_rng(1)
    cpu = rng.uniform(1, 2, 400)
    df = pd.DataFrame({"cpu": np.r_[cpu[:200], 2 * cpu[200:]], "kind": rng.choice(["a", "b"], 400)})
    df["duration"] = 3 * df["cpu"] + np.where(df["kind"] == "b", 1.0, 0.0) + rng.normal(0, 0.01, 400)
    base = df.iloc[:200]
    same = at_typical_causes(df, base, "duration", ["cpu", "kind"], {"kind"})
    assert abs(same.iloc[200:].median() - same.iloc[:200].median()) < 0.05
    moved = at_typical_causes(df.assign(duration=df["duration"] + np.r_[np.zeros(200), np.full(200, 2.0)]), base,
                              "duration", ["cpu", "kind"], {"kind"})
    assert moved.iloc[200:].median() - moved.iloc[:200].median() == pytest.approx(2.0, abs=0.05)


def test_windows_are_cut_after_the_baseline_and_a_short_incident_is_widened():
    w = culprits.windows((1000.0, 1299.0), {"first_start": 1200.0, "last_start": 1302.0})
    # MIN_SPAN back from the last start, then LEAD before; the baseline ends where the incident starts,
    # BASELINE_ROWS long
    start = 1302.0 - culprits.MIN_SPAN - culprits.LEAD
    assert w.incident == (start, 1302.0) and w.width == culprits.MIN_WIDTH
    assert w.baseline == (start - culprits.BASELINE_ROWS, start)
    assert culprits.windows((1000.0, 1001.0), {"first_start": 1400.0, "last_start": 1480.0}) is None
    assert culprits.windows(None, {"first_start": 1.0, "last_start": 2.0}) is None
    assert culprits.rank(None, "app:x", None, "v", None)["causes_ranked"]["why"].startswith("no baseline window")
    assert list(Windows((0.0, 10.0), (20.0, 30.0), 2.0).rows([5.0, 15.0, 21.0])[[0, 2]]) == [-8.0, 0.0]


def test_no_samples_and_no_tasks_are_a_reason_not_an_error(store):
    model = CausalModel.from_json({"nodes": ["duration"], "edges": []})
    around = Windows((0.0, 100.0), (100.0, 110.0), 1.0)
    assert read(store.cursor(), "app:none", model, around).units == {}
    out = culprits.rank(store.cursor(), "app:none", model, "duration", around)
    assert out["causes"] == [] and "empty" in out["causes_ranked"]["why"]
    assert culprits.label(out["causes"]) == culprits.UNRANKED
    assert culprits.label([{"unit": "x", "score": 0.5}]) == culprits.NONE
