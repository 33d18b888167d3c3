"""Phase stability on fresh recordings of compiled loop kernels: per recording, ARI vs the planted kernels
over 10 projection seeds, ours against SimPoint 3.2's method (and SimPoint itself with SIMPOINT=path).

Each recording is a C program of 3-5 loop kernels drawn from a pool (deterministic control flow, short
bodies: the hard case) in a random schedule, compiled -O1 or -O2 and run under valgrind's
exp-bbv at 20 k-100 k-instruction intervals with a fixed argv and environment; an interval's planted
phase is the kernel it spends >= 95 % of its instructions in (else not scored). "SimPoint's method" is
ours with init="samp", variance_floor=0: uniform k-means starts and SimPoint's unfloored BIC.
Usage: python bench/phase_kernels.py [--recordings 10] [--seeds 10] [--first 1]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from causewatch.analytics.phases import SimPoint, adjusted_rand_index
from causewatch.analytics.phases import formats as fm

POOL = {   # name: one repetition's loop; every kernel runs it `reps` times
    "k_sum": "for (unsigned i = 0; i < 1000; i++) s += i * 3u;",
    "k_xor": "for (unsigned i = 0; i < 1000; i++) s = (s << 1) ^ (s >> 3) ^ i;",
    "k_branch": "for (unsigned i = 0; i < 1000; i++) { if (i & 4) s += i; else s ^= i; }",
    "k_mul": "for (unsigned i = 0; i < 700; i++) s = s * 31u + i;",
    "k_arr": "for (unsigned i = 0; i < 1300; i++) arr[i & 255] += i ^ s;",
    "k_div": "for (unsigned i = 1; i < 400; i++) s += (s + 12345u) / i;",
    "k_call": "for (unsigned i = 0; i < 300; i++) s = k_call_step(s, i);",
    "k_nest": "for (unsigned i = 0; i < 40; i++) for (unsigned j = 0; j < 25; j++) s += i * j;",
    "k_fp": "for (unsigned i = 0; i < 500; i++) f = f * 0.999 + (double)i;",
}
INTERVALS = (20_000, 30_000, 50_000, 100_000)
METHODS = {"ours": {}, "SimPoint's method": {"init": "samp", "variance_floor": 0.0}}


def program(seed: int, interval: int) -> tuple[str, list[str]]:
    """C source of recording `seed` and its kernels; repetitions scale with the interval so every
    recording has a few hundred intervals."""
    rng = random.Random(seed)
    kernels = rng.sample(sorted(POOL), rng.randint(3, 5))
    lines = ["static volatile unsigned sink; static volatile double fsink; static unsigned arr[256];",
             "__attribute__((noinline)) static unsigned k_call_step(unsigned s, unsigned i) "
             "{ return (s ^ i) * 7u + (i >> 2); }"]
    for name in kernels:
        lines.append(f"__attribute__((noinline)) static void {name}(int reps) {{ unsigned s = 1; double f = 1.0;"
                     f" for (int r = 0; r < reps; r++) {POOL[name]} sink = s; fsink = f; }}")
    scale = interval // 20_000
    calls = [f"{rng.choice(kernels)}({rng.randint(40, 160) * scale});" for _ in range(rng.randint(8, 14))]
    lines.append("int main(void) { " + " ".join(calls) + " return 0; }")
    return "\n".join(lines), kernels


def record(seed: int, tmp: Path) -> tuple[str, Path, np.ndarray]:
    """(description, .bb path, planted kernel per interval with -1 = not scored) of recording `seed`."""
    interval, opt = INTERVALS[seed % len(INTERVALS)], ("-O1", "-O2")[seed % 2]
    source, kernels = program(seed, interval)
    (tmp / "kern.c").write_text(source)
    subprocess.run(["cc", opt, "-o", str(tmp / "kern"), str(tmp / "kern.c")], check=True)
    subprocess.run(["valgrind", "--tool=exp-bbv", f"--interval-size={interval}", "--bb-out-file=kern.bb",
                    "--pc-out-file=kern.pc", "./kern"], check=True, capture_output=True, cwd=tmp,
                   env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
    # a kernel's blocks are its function's and its helpers' (k_call_step belongs to k_call)
    owner = {c: kernels.index(f.rsplit("_step", 1)[0]) for c, f in fm.read_pc_functions(tmp / "kern.pc").items()
             if f.rsplit("_step", 1)[0] in kernels}
    X = fm.read_frequency_vectors(tmp / "kern.bb").toarray()
    cols = np.array(sorted(c for c in owner if c < X.shape[1]), dtype=np.int64)
    share = np.stack([X[:, cols[[owner[c] == k for c in cols]]].sum(axis=1) for k in range(len(kernels))], axis=1)
    share /= X.sum(axis=1, keepdims=True)
    truth = np.where(share.max(axis=1) >= 0.95, share.argmax(axis=1), -1)
    return f"{seed}: {interval // 1000}k {opt} {len(set(truth[truth >= 0]))} kernels", tmp / "kern.bb", truth


def spread(aris: list[float]) -> str:
    return f"{min(aris):.3f} / {statistics.median(aris):.3f} / {max(aris):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recordings", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=10, help="projection seeds per recording")
    parser.add_argument("--first", type=int, default=1, help="seed of the first recording's program")
    args = parser.parse_args()
    missing = [tool for tool in ("valgrind", "cc") if shutil.which(tool) is None]
    if missing:
        print(f"skipped: recordings need {' and '.join(missing)}")
        return
    simpoint = os.environ.get("SIMPOINT")
    methods = list(METHODS) + (["SimPoint 3.2"] if simpoint else [])
    pairs = [(1000 + 17 * i, 2000 + 31 * i) for i in range(args.seeds)]   # as summary.json's other_seed_pairs
    print(f"ARI vs planted kernels over {args.seeds} seeds (min / median / max; k min-max)")
    print(f"{'recording':<24}{'n':>5}{'scored':>7}  " + "".join(f"{m:<30}" for m in methods))
    below = dict.fromkeys(methods, 0)
    for seed in range(args.first, args.first + args.recordings):
        with tempfile.TemporaryDirectory(prefix="bench-kernels-") as tmp:
            name, bb, truth = record(seed, Path(tmp))
            scored = truth >= 0
            X, cells = fm.read_frequency_vectors(bb), []
            for method in methods:
                runs = []
                for km, proj in pairs:
                    if method == "SimPoint 3.2":
                        subprocess.run([simpoint, "-loadFVFile", str(bb), "-maxK", "30",
                                        "-saveLabels", f"{tmp}/sp.labels", "-seedkm", str(km), "-seedproj", str(proj)],
                                       check=True, stdout=subprocess.DEVNULL)
                        labels = fm.read_labels(f"{tmp}/sp.labels")[0]
                    else:
                        labels = SimPoint(max_k=30, seed=proj, **METHODS[method]).fit(X).labels_
                    runs.append((adjusted_rand_index(truth[scored], labels[scored]), len(set(labels.tolist()))))
                aris, ks = [a for a, _ in runs], [k for _, k in runs]
                below[method] += sum(a < 0.95 for a in aris)
                cells.append(f"{spread(aris)}; {min(ks)}-{max(ks)}")
        print(f"{name:<24}{len(truth):>5}{scored.sum():>7}  " + "".join(f"{c:<30}" for c in cells), flush=True)
    total = args.recordings * args.seeds
    print("runs below ARI 0.95: " + ", ".join(f"{m} {below[m]} of {total}" for m in methods))


if __name__ == "__main__":
    main()
