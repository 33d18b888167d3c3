"""The demo's report, read through the API once the story is told: what the store holds, each
analysis' latest output, each anomaly timed against the hog with the first of its causes as the causal
job ranked them, the story's anomaly's ranked causes, and the verdict: whether the story was shown (the
hog's anomaly raised, resolved after it, and the hog its first cause), and the last line that says so
(or why not)."""

from __future__ import annotations

from pathlib import Path

from causewatch.commands.anomalies import related
from causewatch.commands.demo import causes, sections
from causewatch.commands.demo.causes import rounded
from causewatch.commands.demo.parts import APP, SCOPE
from causewatch.daemon import verbs

STABLE = 0.8                # an edge held by this share of the run's model versions (and not weak) is stable


def report(api, seconds: float, folder: Path, story) -> dict:
    """What is in the store, from the daemon's API: ingest figures, then each analysis' latest output,
    the hog's stretch and each anomaly timed against it and given its cause, each scope's newest model
    drawn as SVG in the demo folder (open anomalies in red), and the story's verdict."""
    from causewatch.analytics.causal.anomalies import MIN_BITS, one_line
    from causewatch.commands.page import would_page
    rep = api.read(verbs.OVERVIEW)
    hog = story.hog
    rep["store_bytes"] = sum(p.stat().st_size for p in [*folder.glob("causewatch.duckdb*"),
                                                        *folder.glob("causewatch.lake/**/*")] if p.is_file())
    rep["causal_edges"] = [dict(e, stable=e["held_by"] >= STABLE * e["versions"] and e["strength_bits"] >= MIN_BITS)
                           for e in rep["causal_edges"]]
    rep["phases"] = sections.phases(api)
    tasks = causes.task_waits(api, story.origin)
    models = api.read(verbs.MODELS, scope=SCOPE)
    base = causes.baseline_of(models)
    anomalies = api.read(verbs.ANOMALIES, limit=10_000)   # newest first, read once: the page's too
    rep["anomalies"] = [_anomaly(a, story) for a in reversed(anomalies)]
    subject = story_anomaly(rep["anomalies"], story)
    rep["causes"] = [] if subject is None else ranked_causes(anomalies, subject, story)
    rep["model_diff"] = sections.model_diff(api, base, hog.span(), story.origin, folder)
    waits = causes.waits(tasks, hog)
    word, shown, line = verdict(rep["anomalies"], waits, story)
    how = api.read(verbs.MODEL, scope=SCOPE, model_id=base["model_id"])["baseline"]["how"] if base else None
    rep["contention_hog"] = [{"cpus": hog.cpus, "per_cpu": hog.per_cpu, "sized": hog.sized,
                              "load_at_start": rounded(hog.load), "calm_wait_per_cpu_s": rounded(hog.calm_wait),
                              "pinned_model": story.pinned,
                              "baseline": f"model {story.pinned}, pinned by the demo" if story.pinned
                              else f"model {base['model_id']}, {how}" if base else "none",
                              "baseline_after_s": rounded(story.baseline_s), "started_s": rounded(hog.started),
                              "stopped_s": rounded(hog.stopped), "model_versions": story.hog_versions, **waits,
                              "variable": story.contended, **({"why": story.why} if story.why else {}),
                              "shown": shown}]
    ranked = sections.ranking(api)
    rep["probe_ranking"] = sections.probe_ranking(ranked)
    rep["brokers"] = sections.brokers(APP, ranked)
    loads = [v for _, v in story.loads]
    rep["story"] = {"shown": word, "plan": story.plan(), "bound_s": round(story.bound, 1),
                    "ran_s": rounded(story.loads[-1][0]) if story.loads else None,
                    "load": [round(min(loads), 1), round(max(loads), 1)] if loads else None,
                    "short": story.short, "line": line}
    page = would_page(anomalies, story.url.removeprefix("http://"), one_line)
    return dict(rep, ingest_values_per_s=rep["sample_values"] / seconds,
                model_pictures=sections.pictures(api, folder), page=page)


def hogs(anomalies: list[dict], story) -> list[dict]:
    """The report's anomalies the hog's contention raised: on the contended variable, opened while it ran,
    on tasks that ran under it; the mechanism changes first."""
    return sorted((a for a in anomalies if causes.opened_under_hog(a, story) and a["under_hog"]),
                  key=lambda a: a["kind"] != "mechanism_changed")


def story_anomaly(anomalies: list[dict], story) -> dict | None:
    """The story's anomaly: the first of the hog's judged on rows (the hog stopped on it), else its first."""
    from causewatch.analytics.causal.anomalies import ROW_KINDS
    ours = hogs(anomalies, story)
    rows = [a for a in ours if a["kind"] in ROW_KINDS]
    return min(rows or ours, key=lambda a: a["opened_s"]) if ours else None


def ranked_causes(anomalies: list[dict], subject: dict, story) -> list[dict]:
    """The story's anomaly's candidate causes as the causal job ranked them, best first; `hog`: the hog's."""
    stored = next(a for a in anomalies if a["anomaly_id"] == subject["anomaly_id"])["evidence"]
    hog = story.hog.unit(causes.WATCHED)
    ranked = [{"rank": i + 1, "unit": c["unit"], "score": c["score"], "hog": c["unit"] == hog,
               "evidence": c["evidence"]} for i, c in enumerate(stored.get("causes") or [])]
    return ranked or [{"rank": None, "unit": None, "why": causes.cause(dict(subject, evidence=stored), story)}]


def verdict(anomalies: list[dict], waits: dict, story) -> tuple[str, str, str]:
    """Whether the report shows the hog (an anomaly on the contended resource's variable, on tasks that
    ran under the hog, raised while it ran, resolved after it stopped, with the hog its first cause):
    "yes", "in part" or "no", the contention section's words, and the demo's last line, which says why
    not when it was not, and what the anomalies whose first cause is not the hog had first."""
    hog, var = story.hog, story.contended
    ours = hogs(anomalies, story)
    shown = [a for a in ours if hog.stopped is not None and (a["resolved_s"] or -1) >= hog.stopped]
    named = [a for a in shown if a["first_cause"] == hog.unit(causes.WATCHED)]
    cut = "; " + "; ".join(story.short) if story.short else ""
    held = f" ({story.held})" if story.held else ""
    if hog.started is None:
        word, said = "no", "no: the hog never ran" + (f" ({story.short[0]})" if story.short
                                                      else " (the workload ended first)")
        line = "story NOT shown: the hog never ran" + cut
    elif named or shown:
        a = (named or shown)[0]
        first = "the hog" if named else f"{a['first_cause'] or 'not ranked'}, not the hog"
        word = "yes" if named else "in part"
        said = (f"{word}: a {a['kind']} on {var} was raised while the hog ran and resolved after it stopped; "
                f"its first cause: {first}")
        line = (f"story {'shown' if named else 'shown in part'}: {a['kind']} on {var} raised "
                f"{a['opened_s'] - hog.started:.1f} s into the hog, resolved {a['resolved_s'] - hog.stopped:.1f} s "
                f"after it stopped, first cause {first}{held}")
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
    outside = [_where(a["first_cause"]) for a in anomalies if a["first_cause"] != hog.unit(causes.WATCHED)]
    if outside:
        counts = ", ".join(f"{k} {outside.count(k)}" for k in sorted(set(outside)))
        line += f"; {len(outside)} anomal{'y' if len(outside) == 1 else 'ies'} whose first cause is not the hog " \
                f"({counts}: causes in the report)"
    return word, said, line


def _where(first: str | None) -> str:
    """What a first cause is, for the last line's count: the kind of unit, or why there is none."""
    if first is None:
        return "not ranked"
    if first == causes.NONE or first.startswith("node "):
        return first if first == causes.NONE else "node metrics"
    if first.startswith("process "):
        return "other processes"
    return "watched scopes" if " on " in first else "the app's own"


def _anomaly(a: dict, story) -> dict:
    """An anomaly with its evidence, opened and resolved in seconds after the workload started, said
    against the hog's stretch, and its first cause as the causal job ranked them."""
    opened = a["opened"] - story.origin
    resolved = None if a["resolved"] is None else a["resolved"] - story.origin
    first = causes.first_cause(a)
    if first is not None:
        first = first["unit"] if first["score"] >= 1 else causes.NONE
    return {"anomaly_id": a["anomaly_id"], "scope": a["scope"], "kind": a["kind"], "src": a["src"], "dst": a["dst"],
            "state": "open" if resolved is None else "resolved", "opened_s": round(opened, 1),
            "resolved_s": rounded(resolved), "when": causes.when(opened, resolved, story.hog),
            "under_hog": causes.by_hog(causes.judged(a, story.origin), story.hog),
            "first_cause": first, "cause": causes.cause(a, story),
            "score": round(a["score"], 3), "threshold": round(a["threshold"], 3),
            "rows": a["evidence"].get("rows"), "related": related(a["evidence"])}

