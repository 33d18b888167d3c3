"""bench/instrument.py at a tiny size: every record reaches its sink whole, and no vector is left watched."""

import json
import os
import subprocess
import sys

from support import ROOT


def test_the_bench_runs_and_every_record_arrives():
    r = subprocess.run([sys.executable, str(ROOT / "bench/instrument.py"), "--sizes", "100", "--repeats", "0",
                        "--task-ms", "0.5", "--json"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert [s["tasks"] for s in result["sizes"]] == [100]
    assert result["records_received"] == result["records_sent"] == 200
    assert result["vectors_with_mismatched_counts"] == result["vectors_left_watched"] == 0
