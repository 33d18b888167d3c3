"""Phases on real basic block vectors: a small C program recorded under valgrind's exp-bbv here, and the
shipped conformance recordings (with SimPoint 3.2's answers) through `causewatch phases`."""

import gzip
import json
import shutil
import subprocess

import numpy as np
import pytest
from support import SHARED, shared_data

from causewatch.analytics.phases import formats as fm
from causewatch.analytics.phases.ari import adjusted_rand_index
from causewatch.analytics.phases.simpoint import SimPoint
from causewatch.analytics.phases.tracker import PhaseTracker
from causewatch.cli import main

pytestmark = pytest.mark.slow   # valgrind recordings and the conformance inputs

# Three loop kernels in a fixed schedule; each segment runs one kernel for several 20 k-instruction
# intervals, so an interval's planted phase is the kernel it spends (nearly) all its instructions in.
KERNELS = ("k_sum", "k_xor", "k_branch")
PROGRAM = r"""
static volatile unsigned sink;
__attribute__((noinline)) static void k_sum(int reps) {
    unsigned s = 0;
    for (int r = 0; r < reps; r++) for (unsigned i = 0; i < 1000; i++) s += i * 3u;
    sink = s;
}
__attribute__((noinline)) static void k_xor(int reps) {
    unsigned s = 1;
    for (int r = 0; r < reps; r++) for (unsigned i = 0; i < 1000; i++) s = (s << 1) ^ (s >> 3) ^ i;
    sink = s;
}
__attribute__((noinline)) static void k_branch(int reps) {
    unsigned s = 0;
    for (int r = 0; r < reps; r++) for (unsigned i = 0; i < 1000; i++) { if (i & 4) s += i; else s ^= i; }
    sink = s;
}
int main(void) {
    for (int seg = 0; seg < 4; seg++) { k_sum(150); k_xor(100); k_branch(120); }
    return 0;
}
"""


def _missing_tools():
    missing = [tool for tool in ("valgrind", "cc") if shutil.which(tool) is None]
    if not missing and "exp-bbv" not in subprocess.run(["valgrind", "--tool=exp-bbv", "--help"],
                                                       capture_output=True, text=True).stdout:
        missing.append("valgrind's exp-bbv tool")
    return missing


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    """(path of the gzipped .bb, planted kernel per interval with -1 = mixed) of a fresh recording."""
    missing = _missing_tools()
    if missing:
        pytest.skip(f"{' and '.join(missing)} missing")
    tmp = tmp_path_factory.mktemp("exp-bbv")
    (tmp / "kern.c").write_text(PROGRAM)
    subprocess.run(["cc", "-O1", "-o", str(tmp / "kern"), str(tmp / "kern.c")], check=True)
    # The same argv, environment and folder name every time: their sizes move the start-up's instruction
    # count and so every interval boundary after it, and the test must see one recording, not a family.
    subprocess.run(["valgrind", "--tool=exp-bbv", "--interval-size=20000", f"--bb-out-file={tmp}/kern.bb",
                    f"--pc-out-file={tmp}/kern.pc", "./kern"], check=True, capture_output=True, cwd=tmp,
                   env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
    kernel_of = {c: KERNELS.index(f) for c, f in fm.read_pc_functions(tmp / "kern.pc").items() if f in KERNELS}
    X = fm.read_frequency_vectors(tmp / "kern.bb").toarray()
    per_kernel = np.stack([X[:, [c for c, k in kernel_of.items() if k == kern and c < X.shape[1]]].sum(axis=1)
                           for kern in range(len(KERNELS))], axis=1) / X.sum(axis=1, keepdims=True)
    truth = np.where(per_kernel.max(axis=1) >= 0.95, per_kernel.argmax(axis=1), -1)
    with open(tmp / "kern.bb", "rb") as src, gzip.open(tmp / "kern.bb.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    return tmp / "kern.bb.gz", truth


def _shaped(tmp, n):
    """The saved labels, after checking the three files are shaped as SimPoint writes them."""
    labels, distances = fm.read_labels(tmp / "o.labels")
    simpoints, weights = fm.read_simpoints(tmp / "o.simpoints"), fm.read_weights(tmp / "o.weights")
    assert len(labels) == n and (distances >= 0).all()
    assert sorted(simpoints) == sorted(weights) == sorted(set(labels.tolist()))
    assert all(labels[i] == p for p, i in simpoints.items())
    assert sum(weights.values()) == pytest.approx(1.0)
    return labels


def _run(bb, tmp, capsys):
    code = main(["phases", str(bb), "--max-k", "30", "--json", "--save-labels", str(tmp / "o.labels"),
                 "--save-simpoints", str(tmp / "o.simpoints"), "--save-weights", str(tmp / "o.weights")])
    assert code == 0
    return json.loads(capsys.readouterr().out)


def test_real_recording_phases_match_the_planted_kernels(recording, tmp_path, capsys):
    bb_gz, truth = recording
    scored = truth >= 0
    assert scored.sum() > 300 and set(truth[scored]) == {0, 1, 2}
    out = _run(bb_gz, tmp_path, capsys)             # read gzipped, straight from the .gz
    labels = _shaped(tmp_path, len(truth))
    assert out["intervals"] == len(truth) and 3 <= out["k"] <= 30
    assert adjusted_rand_index(truth[scored], labels[scored]) >= 0.95



def test_real_recording_phases_are_named_by_their_kernels(recording, tmp_path, capsys):
    """Each phase says what it does. With exp-bbv's pc file, every kernel's phase names the
    kernel as its top function, nearly all of the phase; without it, the blocks are named by id."""
    bb_gz, truth = recording
    assert main(["phases", str(bb_gz), "--pc-file", str(bb_gz.parent / "kern.pc"), "--json",
                 "--save-labels", str(tmp_path / "o.labels")]) == 0
    out = json.loads(capsys.readouterr().out)
    labels, _ = fm.read_labels(tmp_path / "o.labels")
    top = {p["phase"]: p["top"][0] for p in out["phases"]}
    for kernel, name in enumerate(KERNELS):   # the phase most of the kernel's intervals fell in
        phase = np.bincount(labels[truth == kernel]).argmax()
        assert top[phase]["key"] == name and top[phase]["share"] >= 0.95, (name, out["phases"][phase])
    assert main(["phases", str(bb_gz), "--json", "--top", "1"]) == 0
    assert all(p["top"][0]["key"].startswith("block ") for p in json.loads(capsys.readouterr().out)["phases"])

def _seed_aris(bb_gz, truth) -> list[float]:
    scored = truth >= 0
    X = fm.read_frequency_vectors(bb_gz)
    return [adjusted_rand_index(truth[scored], SimPoint(max_k=30, seed=seed).fit(X).labels_[scored])
            for seed in range(1, 11)]


def test_real_recording_phases_hold_on_every_projection_seed(recording):
    """The issue's goal: ARI >= 0.95 on each of 10 projection seeds. With SimPoint 3.2's own starts and
    BIC (init="samp", variance_floor=0) 3 of these 10 seeds split k_xor at its loop boundary (0.92)."""
    assert min(_seed_aris(*recording)) >= 0.95


def test_online_tracker_agrees_with_the_offline_clustering(recording):
    bb_gz, _ = recording
    X = fm.read_frequency_vectors(bb_gz)
    offline = SimPoint(max_k=30).fit(X).labels_
    dense = X.toarray()
    online = PhaseTracker().update_many([{str(c): dense[i, c] for c in np.flatnonzero(dense[i])}
                                         for i in range(len(dense))])
    assert adjusted_rand_index(online, offline) >= 0.9


def _conformance_inputs() -> list[str]:
    """The shared conformance inputs as "real/NAME" or "synthetic/NAME"; where the shared data is absent
    one name, whose test is skipped saying so."""
    found = [f"{folder}/{p.name[:-len('.bb.gz')]}" for folder in ("real", "synthetic")
             for p in sorted((SHARED / "conformance" / "phases" / folder).glob("*.bb.gz"))]
    return found or ["absent"]


@pytest.mark.parametrize("input_name", _conformance_inputs())
def test_conformance_input_through_the_cli(input_name, tmp_path, capsys):
    """As the shared conformance set's check.py scores it: ARI vs the planted truth at least SimPoint
    3.2's - 0.02 (and 0.95 on real recordings), SimPoint-shaped outputs, k within --max-k."""
    bb_gz = shared_data("conformance") / "phases" / f"{input_name}.bb.gz"
    name = bb_gz.name[:-len(".bb.gz")]
    truth = np.array([line.strip() for line in open(bb_gz.parent / f"{name}.truth") if line.strip()])
    scored = truth != "-"
    sp_labels, _ = fm.read_labels(bb_gz.parent / "simpoint" / f"{name}.labels")
    out = _run(bb_gz, tmp_path, capsys)
    labels = _shaped(tmp_path, len(truth))
    ari = adjusted_rand_index(truth[scored], labels[scored])
    assert ari >= adjusted_rand_index(truth[scored], sp_labels[scored]) - 0.02
    assert out["k"] <= 30
    if bb_gz.parent.name == "real":
        assert ari >= 0.95
