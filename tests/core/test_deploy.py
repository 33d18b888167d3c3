"""deploy/: the alert rules pass promtool, and every metric they or the dashboard name is exported by our code."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy/prometheus/causewatch-alerts.yml"
DASHBOARD = ROOT / "deploy/grafana/causewatch-dashboard.json"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (.ci/run installs it)")
def test_alert_rules_pass_promtool():
    r = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("path", [RULES, DASHBOARD], ids=["rules", "dashboard"])
def test_named_metrics_are_exported(path):
    source = "\n".join(p.read_text() for part in ("daemon", "agent") for p in (ROOT / part).glob("*.py"))
    names = set(re.findall(r"causewatch_[a-z_]+", path.read_text()))
    missing = {n for n in names if re.sub(r"_total$", "", n) not in source}
    assert names and not missing, f"{path.name} names metrics no code exports: {sorted(missing)}"
