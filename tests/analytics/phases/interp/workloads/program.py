"""One interpreter recording's program: segments of pure-Python kernels in a seeded schedule.

usage: python3 -S -s program.py SEED SCHEDULE_OUT KERNEL,KERNEL,... SEGMENTS REPS_MIN REPS_MAX [RARE]

Writes the schedule (one "<kernel> <reps>" line per segment) before running it; every segment starts
with one call of os.getppid(), the marker: it runs C code (libc's getppid) the program calls nowhere
else, so derive_truth.py finds each segment's start through exp-bbv's pc file; one more call ends the last
segment (the interpreter's shutdown after it, several M instructions of freeing, is not a phase).  With RARE, the last
kernel gets only 1 in 8 segments, at half the shortest length: about 3 % of the run."""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import KERNELS


def main():
    seed, out, names, segments, lo, hi = sys.argv[1:7]
    rare = len(sys.argv) > 7
    rng = random.Random(int(seed))
    names = names.split(",")
    schedule = []
    for s in range(int(segments)):
        if rare and s % 8 == 5:
            schedule.append((names[-1], int(lo) // 2))
            continue
        pool = names[:-1] if rare else names
        kernel = rng.choice([k for k in pool if not schedule or k != schedule[-1][0]] or pool)
        schedule.append((kernel, rng.randint(int(lo), int(hi))))
    with open(out, "w") as f:
        f.write("".join(f"{k} {r}\n" for k, r in schedule))
    for kernel, reps in schedule:
        os.getppid()
        KERNELS[kernel](reps)
    os.getppid()   # the end of the last segment: the interpreter's shutdown that follows is no phase


main()
