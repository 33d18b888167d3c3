"""`causewatch broker condor` under HTCondor's own ClassAd language (PyPI htcondor's classad2, no daemons):
its output parses as one ad per slot, and the deploy/ recipe's Requirements and Rank, evaluated as the
negotiator does against slot ads merged with that output, pick causewatch's best node; unprobed and
stale slots fail the Requirements (or, with the softer recipe, rank last)."""

import json
import re
import time
from pathlib import Path

import duckdb
import pytest

from causewatch.cli import main
from causewatch.daemon.store import create_views, migrate
from causewatch.daemon.store.results import register_kit
from causewatch.probe.registry import kit_row

classad = pytest.importorskip("classad2", reason="classad2 missing — `pip install -e '.[test]'` (PyPI's htcondor)")

RECIPE = Path(__file__).resolve().parents[2] / "deploy/htcondor/causewatch-job.sub"
KIT = {"format": "causewatch-probe-kit/1", "app": "mw", "kit": "k1", "tasks": 40, "reference": {"node": "ref"},
       "worker": {"callable": "causewatch.probe.workloads.masterworker:run_task"}, "reference_seconds": 10.0,
       "phases": [{"phase": 0, "weight": 1.0, "input": {"id": "t", "type": "dict", "size": 100, "seed": 1},
                   "ref_seconds": 0.01, "ref_se": 0.001}]}
NODES = ("fast", "slow", "stale", "unprobed")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Probe results: `fast` the best, `slow` 3 times slower, `stale` fastest of all but 3 days old."""
    path = str(tmp_path_factory.mktemp("condor") / "cw.duckdb")
    now = time.time()
    with duckdb.connect(path) as con:
        migrate(con)
        create_views(con)
        register_kit(con, kit_row(KIT))
        for i, (node, ts, seconds) in enumerate((("fast", now - 60, 8.0), ("slow", now - 60, 24.0),
                                                 ("stale", now - 3 * 86400, 4.0))):
            con.execute("INSERT INTO probe_results (node, boot, seq, ts, app, kit, predicted_seconds, lo, hi, ratio, "
                        "probe_seconds, phases) VALUES (?, 'b', ?, ?, 'mw', 'k1', ?, ?, ?, 1.0, 1.0, NULL)",
                        [node, i, ts, seconds, seconds * 0.9, seconds * 1.1])
    return path


def cron_output(capsys, store, node, *extra) -> str:
    assert main(["broker", "condor", "mw", "--node", node, "--slots", "2", "--db", store, *extra]) == 0
    return capsys.readouterr().out


def startd_ads(text: str) -> list:
    """The startd's reading of cron output: an ad ends at a line starting with '-' (its tag after it)."""
    ads, lines = [], []
    for line in text.splitlines():
        if line.startswith("-"):
            ads.append(classad.parseOne("\n".join(lines), classad.ParserType.Old))
            lines = []
        elif line.strip():
            lines.append(line)
    assert not lines, f"output after the last ad's '-' line: {lines}"
    return ads


def slot_ads(capsys, store) -> list:
    """Each node's two slot ads as the startd advertises them: its own attributes, the cron ad merged in."""
    slots = []
    for node in NODES:
        for ad in startd_ads(cron_output(capsys, store, node)):
            slot = classad.ClassAd({"Name": f"slot{ad['SlotId']}@{node}", "Machine": node, "SlotId": ad["SlotId"],
                                    "Requirements": True})
            slot.update({k: v for k, v in ad.items() if k != "SlotId"})   # the startd keeps SlotId its own
            slots.append(slot)
    return slots


def recipe_job(softer: bool = False):
    """A job ad with the deploy/ recipe's requirements and rank (the softer rank from its comment)."""
    text = RECIPE.read_text()
    requirements = re.search(r"^requirements\s*=\s*(.+)$", text, re.M).group(1)
    rank = re.search(r"^# rank\s*=\s*(.+)$" if softer else r"^rank\s*=\s*(.+)$", text, re.M).group(1)
    return classad.ClassAd({"Requirements": classad.ExprTree("true" if softer else requirements),
                            "Rank": classad.ExprTree(rank)})


def negotiate(job, slots):
    """The matching slots, best Rank first; a Rank that is not a number counts as 0.0, as the negotiator's."""
    def rank(slot):
        value = job.lookup("Rank").eval(scope=job, target=slot)
        # classad2.Value (Undefined, Error) is an IntEnum: not a number here
        number = isinstance(value, (int, float)) and not isinstance(value, (bool, classad.Value))
        return float(value) if number else 0.0
    matching = [s for s in slots if job.lookup("Requirements").eval(scope=job, target=s) is True]
    return sorted(((rank(s), s["Name"]) for s in matching), reverse=True)


def test_the_output_is_one_ad_per_slot_with_each_attribute_absent_when_unknown(capsys, store):
    fast = startd_ads(cron_output(capsys, store, "fast"))
    assert [ad["SlotId"] for ad in fast] == [1, 2]
    attrs = {k: v for k, v in fast[0].items() if k != "SlotId"}
    assert set(attrs) == {"causewatch_mw_seconds", "causewatch_mw_seconds_hi", "causewatch_mw_tasks_per_hour",
                          "causewatch_mw_probe_time"}
    assert attrs["causewatch_mw_seconds"] == pytest.approx(8.0 / 40, rel=1e-5)      # a run over the kit's tasks
    assert attrs["causewatch_mw_seconds_hi"] == pytest.approx(8.8 / 40, rel=1e-5)
    assert attrs["causewatch_mw_tasks_per_hour"] == pytest.approx(3600 * 40 / 8.0, rel=1e-5)
    assert 0 < time.time() - attrs["causewatch_mw_probe_time"] < 3600
    unprobed = startd_ads(cron_output(capsys, store, "unprobed"))
    assert [dict(ad) for ad in unprobed] == [{"SlotId": 1}, {"SlotId": 2}]    # never 0: absent
    assert main(["broker", "condor", "mw", "other-app", "--node", "fast", "--slots", "1", "--db", store,
                 "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["node"] == "fast" and answer["attributes"] == pytest.approx(attrs)


def test_the_recipes_rank_picks_causewatchs_best_and_keeps_off_unprobed_and_stale_slots(capsys, store):
    slots = slot_ads(capsys, store)
    assert main(["rank", "mw", "--db", store, "--json"]) == 0
    fresh = [n["node"] for n in json.loads(capsys.readouterr().out)["nodes"] if n["age_seconds"] < 86400]
    chosen = negotiate(recipe_job(), slots)
    assert {name.split("@")[1] for _, name in chosen} == {"fast", "slow"}        # stale, unprobed: Requirements
    assert chosen[0][1].endswith("@" + fresh[0]) and fresh[0] == "fast"
    softer = negotiate(recipe_job(softer=True), slots)
    assert len(softer) == 8 and softer[0][1].endswith("@fast")
    assert {name.split("@")[1] for score, name in softer if score == 0.0} == {"stale", "unprobed"}
    assert all(score > 0 for score, name in softer if name.split("@")[1] in ("fast", "slow"))
    # the trap the recipe avoids: ranking by seconds (lower is better, negated) makes unprobed slots win
    naive = classad.ClassAd({"Requirements": True, "Rank": classad.ExprTree("-TARGET.causewatch_mw_seconds")})
    assert negotiate(naive, slots)[0][1].split("@")[1] in ("stale", "unprobed")
