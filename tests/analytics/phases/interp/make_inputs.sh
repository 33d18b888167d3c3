#!/usr/bin/env bash
# Record the interpreter conformance inputs: CPython running workloads/program.py (segments of
# pure-Python kernels, each started by the marker os.getppid()) under valgrind's exp-bbv, truth from
# derive_truth.py, and store NAME.bb.gz, NAME.truth and NAME.schedule here.  With SIMPOINT=/path/to/simpoint
# (SimPoint 3.2 built from its public source) also refresh simpoint/ with the shared set's
# simpoint_reference.py (the same runs, seeds and summary.json as the compiled inputs).
#
#   usage: ./make_inputs.sh [NAME ...]         SIMPOINT=~/simpoint/bin/simpoint ./make_inputs.sh
#
# Needs valgrind with exp-bbv (3.19 was used), /usr/bin/python3 (Debian's 3.11.2 was used: its own
# blocks are what is recorded, so another build gives similar, not identical, inputs) and gzip.
# Recording is slow (valgrind runs the interpreter at a few M instructions a second): ~10 min for all.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED=${SHARED_CONFORMANCE:-$HERE/../../../../../shared/conformance/phases}
PYTHON=${PYTHON:-/usr/bin/python3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

record() {  # NAME INTERVAL SEED KERNELS SEGMENTS REPS_MIN REPS_MAX [rare]
  local name=$1 interval=$2; shift 2
  case " ${ONLY:-} " in "  ") ;; *" $name "*) ;; *) return 0 ;; esac
  cp "$HERE/workloads/program.py" "$HERE/workloads/kernels.py" "$WORK/"
  # a fixed environment (hash seed included: dict order moves blocks) and relative paths, so the
  # start-up runs the same instructions on every run; -S: no site module, a shorter start-up
  (cd "$WORK" && env -i PATH=/usr/bin:/bin PYTHONHASHSEED=0 valgrind --tool=exp-bbv \
      --interval-size="$interval" --bb-out-file="$name.bb" --pc-out-file="$name.pc" \
      "$PYTHON" -S -s program.py "$1" "$name.schedule" "${@:2}") \
      >"$WORK/$name.log" 2>&1 || { tail "$WORK/$name.log"; exit 1; }
  python3 "$HERE/derive_truth.py" "$WORK/$name.bb" "$WORK/$name.pc" "$WORK/$name.schedule" \
      "$WORK/$name.truth"
  gzip -9 -n -c "$WORK/$name.bb" >"$HERE/$name.bb.gz"
  install -m 644 "$WORK/$name.truth" "$WORK/$name.schedule" "$HERE/"
}

ONLY="$*"
# like the held-out recording: three phases over 16 segments, 10 M-instruction intervals
# (the richer kernels: json, str methods, classes, some 2,000 distinct blocks an interval)
record py3seg 10000000 5 records,text,objects 16 400 800
record py3seg-s9 10000000 9 records,text,objects 16 400 800
# five phases in 30 segments at 1 M instructions: short intervals, more of them
record py5 1000000 12 floats,recur,regex,bytesops,strdict 30 40 110
# four phases, the last in 3 short segments (about 3 % of the run), at 2 M instructions
record py4rare 2000000 23 arith,floats,regex,bytesops 24 80 170 rare

if [ -n "${SIMPOINT:-}" ]; then
  # the shared set's reference script works on the folder it sits in: run a copy of it here
  sed "s|^HERE = .*|HERE = Path(\"$HERE\")|; s|^sys.path.insert(0, str(HERE.parent))|sys.path.insert(0, \"$SHARED\")|" \
      "$SHARED/real/simpoint_reference.py" >"$WORK/simpoint_reference.py"
  python3 "$WORK/simpoint_reference.py" "$SIMPOINT" "$@"
fi
ls -l "$HERE"
