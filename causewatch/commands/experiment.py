"""`causewatch experiment`: the papers' experiment runner (Lemeire et al. §5, §8.1).

Runs a program over uniformly random draws of its parameters, records the parameters and the
counters of every run (perf_event_open counters where available, the child's rusage: CPU time, page
faults, context switches; its peak RSS from /proc; wall time) to CSV, Parquet or DuckDB, then learns
a causal model with the parameters as inputs.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from causewatch.commands import check_output
from causewatch.commands import learn as learn_cmd
from causewatch.errors import InputError

if TYPE_CHECKING:   # for annotations only: numpy and pandas load in the functions, so --help stays light
    import numpy as np
    import pandas as pd

EPILOG = """examples:
  causewatch experiment --param n=5..300 --param dtype=short,int,float,double --runs 200 \\
      --out lu.csv -- python lu.py {n} {dtype}
  causewatch experiment --param size=0.5..8.0 --runs 50 --out duckdb:exp.duckdb:runs --no-learn -- ./app --mb {size}
  causewatch learn lu.csv --tier inputs:n,dtype --submodels      # learn again later, other options

--param NAME=LO..HI draws integers when LO and HI are integers, floats otherwise; NAME=A,B,C picks
one of the values. {NAME} in the command is replaced by the drawn value.
"""

_PARAM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.+)$")


def add_arguments(parser) -> None:
    parser.add_argument("--param", action="append", default=[], metavar="NAME=LO..HI|A,B",
                        help="a parameter and its range or values (repeatable)")
    parser.add_argument("--runs", type=int, default=100, help="number of runs (default 100)")
    parser.add_argument("--out", help="where to record the runs: .csv, .parquet or duckdb:FILE:TABLE")
    parser.add_argument("--seed", type=int, default=0, help="seed of the parameter draws")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one run may take (default 600)")
    parser.add_argument("--no-learn", action="store_true", help="only record the runs")
    learn_cmd.add_learning_arguments(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the program and its arguments")


class ParamSpec:
    """One --param: a uniform integer or float range, or a set of values."""

    def __init__(self, text: str):
        m = _PARAM.match(text)
        if not m:
            raise InputError(f"--param {text!r}: expected NAME=LO..HI or NAME=A,B,C")
        self.name, spec = m.groups()
        lo, sep, hi = spec.partition("..")
        self.values: list[str] | None = None
        if sep:
            try:
                self.lo, self.hi = float(lo), float(hi)
            except ValueError:
                raise InputError(f"--param {text!r}: LO and HI must be numbers") from None
            if self.lo > self.hi:
                raise InputError(f"--param {text!r}: LO is above HI")
            self.integer = _is_int(lo) and _is_int(hi)
        else:
            self.values = [v.strip() for v in spec.split(",") if v.strip()]

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        import numpy as np
        if self.values is not None:
            return rng.choice(np.array(self.values, dtype=object), n)
        if self.integer:
            return rng.integers(int(self.lo), int(self.hi) + 1, n)
        return rng.uniform(self.lo, self.hi, n)


def _is_int(text: str) -> bool:
    return re.fullmatch(r"[+-]?\d+", text.strip()) is not None


def _counters_for(pid: int):
    """perf counters of the child (the agent's perf module), or None where it cannot be used."""
    try:
        from causewatch.agent.perf import CounterCollector
    except ImportError:
        return None
    collector = CounterCollector(scope="process", pid=pid)
    collector.open()
    return collector


def run_once(argv: list[str], timeout: float) -> dict[str, float]:
    """Run argv once. A shell stub signals it is ready and waits before exec'ing the program, so
    the counters are open before the program starts and see all of it (no preexec_fn: the parent
    has threads)."""
    go_r, go_w = os.pipe()
    ready_r, ready_w = os.pipe()
    stub = f'echo >&{ready_w}; exec {ready_w}>&-; read _ <&{go_r}; exec {go_r}<&-; exec "$@"'
    try:
        child = subprocess.Popen(["/bin/sh", "-c", stub, "sh", *argv], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, pass_fds=(go_r, ready_w))
    except OSError as e:
        raise InputError(f"cannot run {shlex.join(argv)}: {e.strerror}") from None
    finally:
        os.close(go_r)
        os.close(ready_w)
    os.read(ready_r, 1)
    os.close(ready_r)
    collector = _counters_for(child.pid)
    start = time.perf_counter()
    os.write(go_w, b"\n")
    os.close(go_w)
    status, usage, peak_rss = _wait(child, timeout)
    wall = time.perf_counter() - start
    record = {"wall_seconds": wall, "user_seconds": usage.ru_utime, "sys_seconds": usage.ru_stime,
              "max_rss_bytes": peak_rss, "minor_faults": usage.ru_minflt,
              "major_faults": usage.ru_majflt, "voluntary_switches": usage.ru_nvcsw,
              "involuntary_switches": usage.ru_nivcsw, "exit_code": os.waitstatus_to_exitcode(status)}
    if collector is not None:
        counts = collector.collect()
        collector.close()
        record.update({f"perf_{_column(k)}": v for k, v in counts.items()
                       if v is not None and "." not in k and "_per_" not in k})
    return record


def _column(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def _peak_rss(pid: int) -> float | None:
    """VmHWM of the program, in bytes (None once it is gone). ru_maxrss would not do: it includes
    the forked copy of this (large) process from before the exec."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return float(line.split()[1]) * 1024.0
    except OSError:
        pass
    return None


def _wait(child: subprocess.Popen, timeout: float):
    """Wait for the child, polling its peak RSS; returns (status, rusage, peak RSS or NaN)."""
    deadline = time.monotonic() + timeout
    peak = float("nan")
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            child.returncode = os.waitstatus_to_exitcode(status)
            return status, usage, peak
        rss = _peak_rss(child.pid)
        peak = peak if rss is None else rss  # the high-water mark only grows: keep the last read
        if time.monotonic() > deadline:
            child.kill()
            _, status, usage = os.wait4(child.pid, 0)
            child.returncode = os.waitstatus_to_exitcode(status)
            return status, usage, peak
        time.sleep(0.002)


def record_runs(specs: list[ParamSpec], command: list[str], runs: int, seed: int, timeout: float,
                progress=None) -> pd.DataFrame:
    import numpy as np
    import pandas as pd
    rng = np.random.default_rng(seed)
    draws = pd.DataFrame({s.name: s.draw(rng, runs) for s in specs})
    rows = []
    for i, values in enumerate(draws.to_dict("records")):
        try:
            argv = [part.format(**values) for part in command]
        except (KeyError, IndexError, ValueError) as e:
            raise InputError(f"command placeholder {e} is not a --param name (have {list(values)})") from None
        rows.append(run_once(argv, timeout))
        if progress:
            progress(i + 1, runs)
    return pd.concat([draws, pd.DataFrame(rows)], axis=1)


def write_runs(df: pd.DataFrame, out: str) -> None:
    if out.startswith("duckdb:"):
        import duckdb
        file, _, table = out[len("duckdb:"):].rpartition(":")
        if not file or not table:
            raise InputError(f"--out {out!r}: expected duckdb:FILE:TABLE")
        with duckdb.connect(file) as con:
            con.register("experiment_runs", df)
            exists = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?",
                                 [table]).fetchone()[0]
            verb = f'INSERT INTO "{table}" BY NAME' if exists else f'CREATE TABLE "{table}" AS'
            con.execute(f"{verb} SELECT * FROM experiment_runs")
        return
    path = Path(out)
    if path.suffix.lower() in (".parquet", ".pq"):
        df.to_parquet(path, index=False)
    else:
        df.to_csv(path, index=False)


def run(args) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise InputError("no command: put the program after --, e.g. -- python lu.py {n}")
    if args.runs < 1:
        raise InputError(f"--runs must be at least 1, got {args.runs}")
    specs = [ParamSpec(p) for p in args.param]
    out_file = args.out[len("duckdb:"):].rpartition(":")[0] if args.out and args.out.startswith("duckdb:") else args.out
    check_output(out_file, "--out")
    check_output(args.dot, "--dot")
    check_output(args.tetrad, "--tetrad")
    from tqdm import tqdm
    with tqdm(total=args.runs, desc="runs", unit="run", disable=args.json or getattr(args, "quiet", False)) as bar:
        df = record_runs(specs, command, args.runs, args.seed, args.timeout, lambda done, total: bar.update())
    failed = int((df.exit_code != 0).sum())
    if failed and not args.json:
        print(f"{failed} of {len(df)} runs exited with a non-zero code", file=sys.stderr)
    if args.out:
        write_runs(df, args.out)
    if args.no_learn:
        if args.json:
            print(df.to_json(orient="records"))
        return 0
    data = df[df.exit_code == 0].drop(columns=["exit_code"])
    return learn_cmd.report(learn_cmd.learn_here(data, args, [s.name for s in specs]), args)
