"""Phase analysis against SimPoint 3.2: per conformance input our k, ARI vs the planted truth, CPU
seconds of the whole command (start-up included, median of --runs) and peak RSS, next to SimPoint's.

With SIMPOINT=/path/to/simpoint (built from the public SimPoint 3.2 source), SimPoint is also timed
here, alternating with causewatch, so the time ratio comes from one run on one machine; without it the
ratio is against the seconds recorded in the inputs' summary.json (another machine). --seeds N also
clusters every input with N projection seeds and prints the ARI spread and k range next to SimPoint's
recorded spread (summary.json's other_seed_pairs). Our RSS is shown above an idle interpreter that
imported the same modules (the floor no Python tool gets under), next to SimPoint's peak RSS.
Inputs: the shared set's real/ and synthetic/ and the interpreter recordings in
tests/analytics/phases/interp/.
Usage: python bench/phases.py [--runs 3] [--seeds 0] [--inputs DIR] [NAME ...]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from causewatch.analytics.phases import SimPoint, adjusted_rand_index, read_frequency_vectors, read_labels

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_INPUTS = ROOT.parent / "shared" / "conformance" / "phases"
INTERP = ROOT / "tests" / "analytics" / "phases" / "interp"
CW = [sys.executable, "-m", "causewatch.cli"]
# what `causewatch phases FILE` imports (its sys.modules after a run): the idle floor imports the same
IMPORTS = ("numpy, causewatch.cli, causewatch.commands.phases, causewatch.analytics.phases.simpoint, "
           "causewatch.analytics.phases.formats, causewatch.analytics.phases.centroids")


def timed(cmd: list[str]) -> tuple[float, int]:
    """(CPU seconds, user + system, and peak RSS in KB) of one child run, from wait4's rusage: CPU, not
    wall, as the machine is shared and loaded."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = usage.ru_utime + usage.ru_stime
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.read().decode()[-300:]}")
    proc.stderr.close()
    return seconds, usage.ru_maxrss


def floor_rss() -> int:
    """Peak RSS (KB) of an interpreter that only imports what the command imports: no Python tool gets under."""
    return timed([sys.executable, "-c", f"import {IMPORTS}"])[1]


def inputs(folder: Path, names: set[str]):
    for where in (folder / "real", folder / "synthetic", INTERP):
        for bb_gz in sorted(where.glob("*.bb.gz")):
            name = bb_gz.name[:-len(".bb.gz")]
            if not names or name in names:
                yield where, name, bb_gz


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=0, help="also report the ARI spread over N projection seeds")
    parser.add_argument("--inputs", type=Path, default=DEFAULT_INPUTS)
    parser.add_argument("names", nargs="*")
    args = parser.parse_args()
    simpoint = os.environ.get("SIMPOINT")
    if simpoint and not shutil.which(simpoint):
        raise SystemExit(f"SIMPOINT={simpoint} is not an executable")
    floor = floor_rss()
    print(f"idle interpreter with the command's imports: {floor / 1024:.0f} MB peak RSS; SimPoint timed here: "
          f"{'yes (CPU seconds)' if simpoint else 'no (SP s: its recorded wall seconds, another machine)'}")
    head = ["input", "n", "SP k", "k", "SP ARI", "ARI", "SP s", "s", "s-SP", "s/SP", "RSS+ MB", "SP MB"]
    print("{:<17}{:>6}{:>5}{:>4}{:>7}{:>7}{:>7}{:>7}{:>7}{:>6}{:>8}{:>7}".format(*head))
    chosen = list(inputs(args.inputs, set(args.names)))
    for folder, name, bb_gz in chosen:
        truth, scored = read_truth(folder, name)
        summary = json.loads((folder / "simpoint" / "summary.json").read_text()).get(name, {})
        sp_labels, _ = read_labels(folder / "simpoint" / f"{name}.labels")
        with tempfile.TemporaryDirectory(prefix="bench-phases-") as tmp:
            bb = decompressed(bb_gz, tmp)
            ours = CW + ["phases", str(bb), "--max-k", "30", "--save-labels", f"{tmp}/cw.labels"]
            cw_runs, sp_runs = [], []
            for _ in range(args.runs):   # alternate, so both see the same machine load
                cw_runs.append(timed(ours))
                if simpoint:
                    sp_runs.append(timed(simpoint_cmd(simpoint, bb, f"{tmp}/sp.labels")))
            labels, _ = read_labels(f"{tmp}/cw.labels")
        cw_s = statistics.median(s for s, _ in cw_runs)
        sp_s = statistics.median(s for s, _ in sp_runs) if sp_runs else summary.get("simpoint_seconds_median")
        rss = (max(r for _, r in cw_runs) - floor) / 1024
        sp_rss = f"{max(r for _, r in sp_runs) / 1024:.0f}" if sp_runs else "-"
        print("{:<17}{:>6}{:>5}{:>4}{:>7.3f}{:>7.3f}{:>7.2f}{:>7.2f}{:>+7.2f}{:>6.2f}{:>8.0f}{:>7}".format(
            name, len(truth), len(set(sp_labels)), len(set(labels)),
            adjusted_rand_index(truth[scored], sp_labels[scored]), adjusted_rand_index(truth[scored], labels[scored]),
            sp_s, cw_s, cw_s - sp_s, cw_s / sp_s, rss, sp_rss), flush=True)
    if args.seeds:   # after the timed runs: children forked from a grown process would report its RSS
        seed_spread(chosen, args.seeds, simpoint)


def seed_spread(chosen, seeds: int, simpoint: str | None) -> None:
    """ARI vs truth and k over `seeds` seeds: ours (projection and k-means starts), next to the spread
    summary.json records for SimPoint's 10 other -seedkm/-seedproj pairs (ARI min and mean, k range) and,
    when it is at hand, SimPoint run here with the first `seeds` of those pairs."""
    pairs = [(1000 + 17 * i, 2000 + 31 * i) for i in range(seeds)]
    print(f"\nARI vs truth over {seeds} seeds: ours min / median / max (k range); SimPoint's 10 recorded "
          f"seed pairs min / mean (k range){'; SimPoint here min / median / max' if simpoint else ''}")
    for folder, name, bb_gz in chosen:
        truth, scored = read_truth(folder, name)
        recorded = json.loads((folder / "simpoint" / "summary.json").read_text()).get(name, {}).get("other_seed_pairs")
        with tempfile.TemporaryDirectory(prefix="bench-phases-") as tmp:
            bb = decompressed(bb_gz, tmp)
            X = read_frequency_vectors(bb)
            models = [SimPoint(max_k=30, seed=proj).fit(X) for _, proj in pairs]
            ours = [adjusted_rand_index(truth[scored], m.labels_[scored]) for m in models]
            ks = [len(set(m.labels_.tolist())) for m in models]
            theirs = []
            for km, proj in pairs if simpoint else ():
                subprocess.run(simpoint_cmd(simpoint, bb, f"{tmp}/sp.labels")
                               + ["-seedkm", str(km), "-seedproj", str(proj)], check=True, stdout=subprocess.DEVNULL)
                theirs.append(adjusted_rand_index(truth[scored], read_labels(f"{tmp}/sp.labels")[0][scored]))
        line = (f"{name:<17} ours {min(ours):.3f} / {statistics.median(ours):.3f} / {max(ours):.3f} "
                f"(k {min(ks)}-{max(ks)})")
        if recorded:
            line += (f"   SimPoint recorded {recorded['ari_vs_truth_min']:.3f} / {recorded['ari_vs_truth_mean']:.3f}"
                     f" (k {recorded['k_min']}-{recorded['k_max']})")
        if theirs:
            line += f"   SimPoint here {min(theirs):.3f} / {statistics.median(theirs):.3f} / {max(theirs):.3f}"
        print(line, flush=True)


def read_truth(folder: Path, name: str):
    truth = np.array([line.strip() for line in open(folder / f"{name}.truth") if line.strip()])
    return truth, truth != "-"


def decompressed(bb_gz: Path, tmp: str) -> Path:
    bb = Path(tmp) / bb_gz.name[:-len(".gz")]
    with gzip.open(bb_gz, "rb") as src, open(bb, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return bb


def simpoint_cmd(simpoint: str, bb: Path, labels: str) -> list[str]:
    return [simpoint, "-loadFVFile", str(bb), "-maxK", "30", "-saveLabels", labels]


if __name__ == "__main__":
    main()
