"""Planted truth for an exp-bbv recording of workloads/program.py (CPython running pure-Python kernels).

usage: python3 derive_truth.py RUN.bb RUN.pc RUN.schedule OUT.truth

As the shared conformance set's phases/real/derive_truth.py does for the C workloads: the program calls its
marker (os.getppid(), whose C code, libc's getppid, runs nowhere else) once at the start of every
segment, exp-bbv's pc file names each block's function, and the marker's count in an interval says how
many segments begin there; one more call ends the last segment.  Truth per interval: the segment's
kernel when no segment begins or ends inside it, "-" when one does (it mixes two kernels) or before the
first segment (interpreter start-up and imports) or after the last (the interpreter's shutdown).
The C workloads' purity check (>= 95 % of a scored interval in the kernel's own function) has no
counterpart here: every kernel runs in the interpreter's shared eval loop.  Instead the script checks
that every segment lasts at least 2 intervals."""
import sys
from collections import defaultdict

MARKER = "getppid"


def read_functions(pc_path):
    """Block id -> function name, from the 'F:<id>:<address>:<function>' lines of the pc file."""
    names = {}
    with open(pc_path) as f:
        for line in f:
            fields = line.rstrip("\n").split(":", 3)
            if fields[0] == "F" and len(fields) == 4:
                names[int(fields[1])] = fields[3]
    return names


def marker_and_total(bb_path, marker_blocks):
    """Per interval: (instructions in the marker's blocks, all instructions)."""
    out = []
    with open(bb_path) as f:
        for line in f:
            if line.startswith("T"):
                marker = total = 0
                for item in line[1:].split():
                    _, block, count = item.split(":")
                    total += int(count)
                    if int(block) in marker_blocks:
                        marker += int(count)
                out.append((marker, total))
    return out


def main(bb_path, pc_path, schedule_path, out_path):
    schedule = [line.split() for line in open(schedule_path) if line.strip()]
    kernels = [k for k, _ in schedule]
    marker_blocks = {b for b, name in read_functions(pc_path).items() if name == MARKER}
    if not marker_blocks:
        sys.exit(f"{pc_path}: no block of the marker function {MARKER}")
    counts = marker_and_total(bb_path, marker_blocks)
    marker = [m for m, _ in counts]
    per_call = min((m for m in marker if m), default=0)
    if not per_call or any(m % per_call for m in marker):
        sys.exit(f"{bb_path}: marker counts {sorted(set(marker))} are not multiples of one call")
    calls = [m // per_call for m in marker]
    if sum(calls) != len(kernels) + 1:
        sys.exit(f"{bb_path}: {sum(calls)} marker calls, but the schedule has {len(kernels)} segments "
                 "(one call starts each, one more ends the last)")

    truth, segment, length = [], -1, defaultdict(int)
    for c in calls:
        truth.append(kernels[segment] if c == 0 and 0 <= segment < len(kernels) else "-")
        segment += c
        length[segment] += 1
    if min(length[s] for s in range(len(kernels))) < 2:
        sys.exit(f"{bb_path}: a segment lasts under 2 intervals; raise its reps or shrink the interval")
    with open(out_path, "w") as f:
        f.write("".join(label + "\n" for label in truth))

    first = next(i for i, c in enumerate(calls) if c)
    print(f"{out_path}: {len(truth)} intervals, {len(kernels)} segments, "
          f"start-up {first} intervals ({first / len(truth):.1%}), scored {sum(t != '-' for t in truth)}")
    reps = defaultdict(int)
    for k, r in schedule:
        reps[k] += int(r)
    for k in sorted(reps):
        ins = sum(total for (_, total), t in zip(counts, truth) if t == k)
        print(f"  {k:8s} reps {reps[k]:6d}  scored intervals {truth.count(k):5d}  "
              f"instructions/rep (scored) {ins / reps[k]:10.0f}")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
