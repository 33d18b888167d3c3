"""bench/gpu_check.py: nvidia-smi's CSV read by field, compared with the collector's labelled series, and
on this machine (no NVML) one line and exit 0."""

import ctypes.util
import json
import os
import subprocess
import sys

import pytest
from support import ROOT

from causewatch import wire

sys.path.insert(0, str(ROOT / "bench"))
import gpu_check  # bench/ is no package: its folder goes on the path above

UUID = "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"


def test_the_two_readings_are_compared_field_by_field():
    smi = gpu_check.parse_smi(f"0, {UUID}, 40, 20485, 81559, 61.20, 1410, 1593, 41\n"
                              "1, GPU-2, [N/A], 0, 81559, 70.50, 1980, 2619, 33\n")
    labels = {"UUID": UUID, "gpu": "0", "modelName": "H100"}
    agent = {wire.labelled("DCGM_FI_DEV_GPU_UTIL", labels): 37.0, wire.labelled("DCGM_FI_DEV_FB_USED", labels): 20485.0,
             wire.labelled("DCGM_FI_DEV_POWER_USAGE", labels): 61.456, "node_load1": 0.5}
    rows = {(r["gpu"], r["field"]): r for r in gpu_check.compare(gpu_check.by_gpu(agent), smi)}
    assert rows[("0", "utilization.gpu")]["difference"] == -3.0
    assert rows[("0", "memory.used")]["difference"] == 0.0
    assert rows[("0", "power.draw")]["difference"] == pytest.approx(0.256)
    assert rows[("0", "clocks.sm")] == {"gpu": "0", "field": "clocks.sm", "metric": "DCGM_FI_DEV_SM_CLOCK",
                                        "agent": None, "nvidia_smi": 1410.0, "difference": None}
    assert rows[("0", "uuid")]["difference"] is None and rows[("1", "uuid")]["difference"] == "differs"
    assert rows[("1", "utilization.gpu")]["nvidia_smi"] is None   # [N/A]
    with pytest.raises(ValueError, match="3 fields, expected 9"):
        gpu_check.parse_smi("0, GPU-x, 40\n")


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(ROOT / "bench/gpu_check.py"), *args], capture_output=True, text=True,
                          timeout=60, env=env)


def test_without_a_gpu_it_says_so_in_one_line_and_exits_0():
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has libnvidia-ml")
    r = _run()
    assert r.returncode == 0 and r.stdout.startswith("gpu_check: skipped, no GPU to check here (")
    assert len(r.stdout.splitlines()) == 1
    r = _run("--json")
    assert r.returncode == 0 and "skipped" in json.loads(r.stdout)
    r = _run("--help")
    assert r.returncode == 0 and "examples:" in r.stdout and "--json" in r.stdout
    r = _run("--rounds", "0")
    assert r.returncode == 2 and "--rounds 0: give at least 1" in r.stderr


def test_a_round_reads_both_in_the_same_second(monkeypatch, tmp_path, capsys):
    """The fake NVML of tests/agent/test_nvml.py and an nvidia-smi that prints one GPU's line."""
    sys.path.insert(0, str(ROOT / "tests/agent"))
    from test_nvml import fake_pynvml, two_gpus
    gpus = two_gpus()[:1]
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(gpus))
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho '0, {gpus[0].uuid}, 40, 20485, 81920, 61.20, 1410, 1593, 41'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert gpu_check.main(["--json"]) == 0
    [one] = json.loads(capsys.readouterr().out)["rounds"]
    assert one["failing"] == {}
    diffs = {r["field"]: r["difference"] for r in one["fields"]}
    assert diffs == {"uuid": None, "utilization.gpu": -3.0, "memory.used": 0.0, "memory.total": 0.0,
                     "power.draw": 0.256, "clocks.sm": 0.0, "clocks.mem": 0.0, "temperature.gpu": 0.0}
    assert gpu_check.main([]) == 0
    assert "utilization.gpu" in capsys.readouterr().out
