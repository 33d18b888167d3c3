"""The alert an anomaly would page with: deploy/'s Prometheus rule for its kind (name, severity, hold
time, labels, summary) and, where amtool is installed, the receiver deploy/'s Alertmanager config routes it to.

Read by the demo's report; the rules are matched and their templates filled here the way Prometheus
does for these rules' simple forms (`kind="x"`, `kind!~"a|b"`, `{{ $labels.x }}`, `| urlquery`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import quote_plus

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus/causewatch-alerts.yml"
ALERTMANAGER = DEPLOY / "alertmanager/alertmanager.yml"
_TEMPLATE = re.compile(r"\{\{ \$labels\.(\w+)( \| urlquery)? \}\}")
_DURATION = {"s": 1, "m": 60, "h": 3600}


def rules(text: str) -> list[dict]:
    """The rules on causewatch_dependency_anomaly: {alert, kinds (in), not_kinds, for_s, labels, summary}."""
    found = []
    for block in text.split("- alert: ")[1:]:
        expr = re.search(r"expr: (.*)", block)[1]
        if not expr.startswith("causewatch_dependency_anomaly"):
            continue
        equal, unlike = re.search(r'kind="([^"]+)"', expr), re.search(r'kind!~"([^"]+)"', expr)
        hold = re.search(r"\n\s+for: (\d+)([smh])", block)
        labels = dict(re.findall(r'^\s+(severity|picture): "?(.*?)"?$', block, re.MULTILINE))
        found.append({"alert": block.split()[0], "kinds": [equal[1]] if equal else None,
                      "not_kinds": unlike[1].split("|") if unlike else [],
                      "for_s": int(hold[1]) * _DURATION[hold[2]] if hold else 0, "labels": labels,
                      "summary": re.search(r'summary: "(.*)"', block)[1]})
    return found


def fill(template: str, labels: dict) -> str:
    """A rule's template with the alert's labels, as Prometheus fills these forms."""
    return _TEMPLATE.sub(lambda m: quote_plus(labels.get(m[1], ""), safe="") if m[2] else labels.get(m[1], ""),
                         template)


def receiver(labels: dict) -> str:
    """The receiver deploy/'s Alertmanager config routes `labels` to (amtool), or why it is not known."""
    if not shutil.which("amtool"):
        return "unknown (amtool not installed: Debian's prometheus-alertmanager)"
    done = subprocess.run(["amtool", "config", "routes", "test", f"--config.file={ALERTMANAGER}",
                           *(f"{k}={v}" for k, v in labels.items())], capture_output=True, text=True, timeout=30)
    return done.stdout.strip() or f"unknown (amtool: {done.stderr.strip()[-200:]})"


def would_page(anomalies: list[dict], instance: str, one_line, severity: str = "page", limit: int = 5) -> list[dict]:
    """For each kind, src and dst among `anomalies` (dicts as /api/anomalies gives them), the alert its
    rule makes, for rules of `severity` (at most `limit`): name, severity, hold, whether it lasted the
    hold (and so would have been sent), the receiver, the labels that reach the on-call engineer (the
    first cause among them, as the causal job fixed it at the opening) and the summary. `one_line(kind,
    src, dst, score, threshold, evidence)` gives the evidence label (analytics.causal.anomalies.one_line)."""
    if not RULES.exists():
        return [{"alert": f"none: {RULES} not found (the checkout's deploy/ holds the rules)"}]
    found, seen = [], set()
    for a in anomalies:
        if len(found) >= limit:
            break
        key = (a["kind"], a["src"], a["dst"])
        rule = next((r for r in rules(RULES.read_text()) if (r["kinds"] is None or a["kind"] in r["kinds"])
                     and a["kind"] not in r["not_kinds"]), None)
        if key in seen or rule is None or rule["labels"].get("severity") != severity:
            continue
        seen.add(key)
        labels = {"alertname": rule["alert"], "job": "causewatch", "instance": instance, "scope": a["scope"],
                  "src": a["src"], "dst": a["dst"], "kind": a["kind"],
                  "evidence": one_line(a["kind"], a["src"], a["dst"], a["score"], a["threshold"], a["evidence"]),
                  "cause": a["evidence"].get("cause", "")}
        labels.update({k: fill(v, labels) for k, v in rule["labels"].items()})
        lasted = (a["resolved"] or a["updated"]) - a["opened"]
        found.append({"alert": rule["alert"], "severity": labels["severity"], "for_s": rule["for_s"],
                      "open_s": round(lasted), "sent": lasted >= rule["for_s"],
                      "receiver": receiver({k: labels[k] for k in ("alertname", "severity", "scope")}),
                      **{k: labels[k] for k in ("scope", "src", "dst", "kind", "evidence", "cause", "picture")},
                      "summary": fill(rule["summary"], labels)})
    return found
