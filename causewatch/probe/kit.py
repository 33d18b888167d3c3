"""Probe kits: the worker a kit runs, timing one task input, and the kit's manifest on disk.

A worker is a Python callable ("module:function", called with the task input) or a command (argv
with "{input}" replaced by a file holding the task input as JSON). Run as a module, it calls a
callable worker on one input file, which is how valgrind runs a callable worker as a command.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from causewatch.errors import InputError
from causewatch.probe import quality

FORMAT = "causewatch-probe-kit/1"
MANIFEST = "manifest.json"
# The instrument's OFF switch (causewatch.agent.instrument.OFF, not imported: a timing interpreter would pay
# for zmq): a kit's runs of an instrumented worker measure its tasks and send no records of them.
INSTRUMENT_OFF = {"CAUSEWATCH_INSTRUMENT": "off"}


@dataclass(frozen=True)
class Worker:
    """How to run one task: exactly one of `callable` ("module:function") or `command` (argv)."""
    callable: str | None = None
    command: tuple[str, ...] | None = None

    def __post_init__(self):
        if (self.callable is None) == (self.command is None):
            raise InputError("a worker is either a callable 'module:function' or a command, not both or neither")
        if self.callable is not None and ":" not in self.callable:
            raise InputError(f"worker callable {self.callable!r}: expected 'module:function'")
        if self.command is not None and not any("{input}" in a for a in self.command):
            raise InputError(f"worker command {list(self.command)}: needs an '{{input}}' argument")

    @classmethod
    def from_json(cls, obj: dict) -> "Worker":
        if not isinstance(obj, dict):
            raise InputError(f"manifest worker: expected a map, got {type(obj).__name__}")
        command = obj.get("command")
        return cls(obj.get("callable"), tuple(command) if command is not None else None)

    def to_json(self) -> dict:
        return {"callable": self.callable} if self.callable else {"command": list(self.command)}

    def function(self):
        module, _, name = self.callable.partition(":")
        try:
            found = importlib.import_module(module)
        except ImportError as e:
            raise InputError(f"worker callable {self.callable!r} cannot be loaded ({e}): its module must be "
                             "importable here: install it, or put its folder on PYTHONPATH (on a node: in the "
                             "agent's environment)") from None
        try:
            return getattr(found, name)
        except AttributeError:
            raise InputError(f"worker callable {self.callable!r}: module {module!r} ({found.__file__}) has no "
                             f"{name!r}") from None

    def module_file(self) -> str | None:
        """The file a callable worker's module is loaded from here (None for a command or a namespace package)."""
        if self.callable is None:
            return None
        self.function()
        return getattr(sys.modules[self.callable.partition(":")[0]], "__file__", None)

    def argv(self, input_path: str) -> list[str]:
        """The command line for one input; a callable worker runs through `python -m causewatch.probe.kit`."""
        if self.command:
            return [a.replace("{input}", input_path) for a in self.command]
        return [sys.executable, "-m", "causewatch.probe.kit", self.callable, input_path]

    def timed(self, task_input) -> tuple[float, float]:
        """Run once; return (wall seconds, CPU seconds of the worker)."""
        if self.callable:
            fn = self.function()
            w0, c0 = time.perf_counter(), self.cpu_clock()
            fn(task_input)
            return time.perf_counter() - w0, self.cpu_clock() - c0
        env = quiet_environment()
        with input_file(task_input) as path:
            w0, c0 = time.perf_counter(), self.cpu_clock()
            done = subprocess.run(self.argv(path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
            wall, cpu = time.perf_counter() - w0, self.cpu_clock() - c0
        if done.returncode:
            raise InputError(f"worker command {self.argv(path)} exited with {done.returncode}: "
                             f"{done.stderr.decode(errors='replace')[-300:]}")
        return wall, cpu

    def settle(self) -> None:
        """Before the first timing: a callable worker's imports, and the threads they start, settle."""
        if self.callable:
            self.function()
            wait_until_quiet()

    def cpu_clock(self) -> float:
        """CPU seconds the worker has used so far: this process for a callable, finished children for a command."""
        if self.callable:
            return time.process_time()
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime


def quiet_environment() -> dict:
    """This process's environment with the instrument turned off, for a child that runs the worker."""
    return {**os.environ, **INSTRUMENT_OFF}


@contextlib.contextmanager
def instrument_off():
    """While a kit is built: the worker's records, in this process and the children it starts, go nowhere."""
    before = {key: os.environ.get(key) for key in INSTRUMENT_OFF}
    os.environ.update(INSTRUMENT_OFF)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def input_file(task_input):
    """A temporary file holding one task input as JSON (its path), removed afterwards."""
    fd, path = tempfile.mkstemp(prefix="causewatch-task-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(task_input, f)
        yield path
    finally:
        os.unlink(path)


def measure(worker: Worker, task_input, warmup: int, repeats: int, first: bool = False) -> dict:
    """Warm up, then time `repeats` back-to-back runs: mean, sd, median, min and max of wall and CPU seconds,
    and the span: wall and CPU seconds of the whole block, warm-up included (for the `first` block of
    a probe, after its first warm-up run: it follows idle time, and a CPU quota's budget is full then).

    The mean is the estimate: on a time-sliced node (CPU quota, shared core) single runs are either
    unthrottled or throttled, and the median of such a two-valued sample misses the throughput. The
    spans of adjacent blocks tile the probe, so their wall per CPU second counts every throttle once.
    """
    w0, c0 = time.perf_counter(), worker.cpu_clock()
    for i in range(warmup):
        worker.timed(task_input)
        if first and i == 0:
            w0, c0 = time.perf_counter(), worker.cpu_clock()
    runs = np.array([worker.timed(task_input) for _ in range(repeats)])
    span = (time.perf_counter() - w0, worker.cpu_clock() - c0)
    wall, cpu = runs[:, 0], runs[:, 1]
    ddof = 1 if repeats > 1 else 0
    return {"seconds": float(wall.mean()), "sd": float(wall.std(ddof=ddof)), "median": float(np.median(wall)),
            "lo": float(wall.min()), "hi": float(wall.max()), "cpu_seconds": float(cpu.mean()),
            "cpu_sd": float(cpu.std(ddof=ddof)), "cpu_lo": float(cpu.min()), "cpu_hi": float(cpu.max()),
            "span_seconds": span[0], "span_cpu_seconds": span[1], "repeats": int(repeats)}


def measure_all(worker: Worker, inputs: list, warmup: int, repeats: int, progress=None) -> list[dict]:
    """`measure` each input in turn; a callable worker runs in one fresh interpreter
    (`python -m causewatch.probe.kit --measure`), so the build and every probe run time the phases
    from the same starting state (imports, heap, caches), whatever program asks for the timing. A
    spawned multiprocessing child would import the asking program's main module first: up to 0.4 s
    and a heap that differs between the CLI, an agent and a benchmark."""
    if worker.command:
        return [_tick(progress, measure(worker, x, warmup, repeats, i == 0)) for i, x in enumerate(inputs)]
    jobs = "".join(json.dumps({"worker": worker.to_json(), "input": x, "warmup": warmup, "repeats": repeats,
                               "first": i == 0}) + "\n" for i, x in enumerate(inputs))
    with tempfile.TemporaryFile("w+") as errors:  # a file, not a pipe: a chatty worker cannot fill it and stall
        child = subprocess.Popen([sys.executable, "-m", "causewatch.probe.kit", "--measure"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=errors, text=True, env=quiet_environment())
        child.stdin.write(jobs)
        child.stdin.close()
        results = [_tick(progress, json.loads(line)) for line in child.stdout]
        if child.wait() or len(results) != len(inputs):
            errors.seek(0)
            raise _failed(f"timing worker {worker.callable!r}", child.returncode, errors.read())
    return results


def _tick(progress, value):
    if progress:
        progress()
    return value


def load_manifest(kit) -> dict:
    """Read and check a kit's manifest from a kit directory or a manifest file."""
    path = Path(kit)
    if path.is_dir():
        path = path / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except OSError as e:
        raise InputError(f"{path}: cannot read the kit manifest ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: the kit manifest is not JSON ({e})") from None
    check_manifest(manifest, str(path))
    return manifest


def check_manifest(manifest, where: str = "manifest") -> None:
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise InputError(f"{where}: not a probe kit manifest (expected format {FORMAT!r})")
    for key in ("app", "kit", "worker", "phases", "reference_seconds"):
        if key not in manifest:
            raise InputError(f"{where}: the manifest lacks {key!r}")
    for phase in manifest["phases"]:
        for key in ("weight", "input", "ref_seconds"):
            if key not in phase:
                raise InputError(f"{where}: phase {phase.get('phase')!r} lacks {key!r}")
    # kits built before the build measured its machine have no quality; rankings say so
    q = manifest.get("quality")
    if q is not None and not (isinstance(q, dict) and set(quality.FIELDS) <= q.keys()):
        raise InputError(f"{where}: the manifest's quality needs {', '.join(quality.FIELDS)}")


# `--measure`'s and `--check`'s exit status when the worker cannot be loaded: its last stderr line says why
MEASURE_REFUSED = 2


def _measure_main() -> int:
    """`--measure`: one JSON job per stdin line, one JSON result per stdout line. The worker's own
    output to fd 1 goes to stderr, so it cannot corrupt the results."""
    results = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for i, line in enumerate(sys.stdin):
        job = json.loads(line)
        worker = Worker.from_json(job["worker"])
        if i == 0:
            try:
                worker.settle()
            except InputError as e:
                print(e, file=sys.stderr)
                return MEASURE_REFUSED
        results.write(json.dumps(measure(worker, job["input"], job["warmup"], job["repeats"], job["first"])) + "\n")
        results.flush()
    return 0


def wait_until_quiet(limit: float = 1.0, tick: float = 0.01) -> None:
    """Wait (at most `limit` s) until this process burns no CPU while its main thread sleeps.

    numpy's OpenBLAS threads spin for about 0.1 s after it loads: timed then, the first phase would
    share its core with them and count their CPU time as its own."""
    end = time.perf_counter() + limit
    while time.perf_counter() < end:
        c0 = time.process_time()
        time.sleep(tick)
        if time.process_time() - c0 < 0.1 * tick:
            return


def check_loadable(worker: Worker) -> None:
    """Raise InputError now when a timing interpreter (this one's environment, the instrument off) cannot
    load a callable worker: before a wait for an idle node, not after it."""
    if worker.callable is None:
        return
    done = subprocess.run([sys.executable, "-m", "causewatch.probe.kit", "--check", worker.callable],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=quiet_environment())
    if done.returncode:
        raise _failed(f"checking worker {worker.callable!r}", done.returncode, done.stderr)


def _failed(what: str, code: int, said: str) -> InputError:
    """The error of a timing interpreter that exited `code` having said `said` on stderr: the worker's own
    mistake (MEASURE_REFUSED) is its last line; anything else, the end of what it said."""
    lines = said.strip().splitlines()
    if code == MEASURE_REFUSED and lines:
        return InputError(lines[-1])
    return InputError(f"{what} failed (exit {code}): {said[-500:]}")


def _check_main(callable_: str) -> int:
    """`--check module:function`: load the worker; its mistake, if any, in one stderr line."""
    try:
        Worker(callable=callable_).function()
    except InputError as e:
        print(e, file=sys.stderr)
        return MEASURE_REFUSED
    return 0


def _call_main(argv: list[str]) -> int:
    if argv == ["--measure"]:
        return _measure_main()
    if len(argv) == 2 and argv[0] == "--check":
        return _check_main(argv[1])
    if len(argv) != 2:
        print("usage: python -m causewatch.probe.kit module:function INPUT.json | --measure | --check module:function",
              file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        Worker(callable=argv[0]).function()(json.load(f))
    return 0


if __name__ == "__main__":
    sys.exit(_call_main(sys.argv[1:]))
