"""Where a probe build gets one basic block vector per task: exact (valgrind exp-bbv), sampled (the
agent's IP sampler) or profiled (cProfile).

A source has `name`, `kind` (the wire's 'native' or 'python') and `record(worker, task_input) ->
{key: count}`. Sources are looked up by name in SOURCES; `register_source` adds more.
"""

from __future__ import annotations

import cProfile
import glob
import os
import pstats
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from causewatch.agent.ipsampler import BBVCollector
from causewatch.errors import InputError
from causewatch.probe.kit import Worker, input_file


class CProfileSource:
    """In-process, for callable workers: seconds per function (microseconds as counts), folded by name.

    Not instructions, but the same shape of information (where the task spends its work), at a few
    per cent overhead instead of valgrind's fifty-fold.
    """
    name, kind = "cprofile", "python"

    def record(self, worker: Worker, task_input) -> dict[str, int]:
        if worker.callable is None:
            raise InputError("the cprofile BBV source needs a callable worker; use --bbv valgrind for commands")
        fn = worker.function()
        if not getattr(self, "_warm", False):
            fn(task_input)  # the first call pays for lazy imports and caches, which no later task does
            self._warm = True
        profile = cProfile.Profile()
        profile.runcall(fn, task_input)
        vector: Counter = Counter()
        for (file, line, func), (_, _, tottime, _, _) in pstats.Stats(profile).stats.items():
            if func == "<method 'disable' of '_lsprof.Profiler' objects>":
                continue
            vector[f"{Path(file).name}:{line}:{func}"] += int(round(tottime * 1e6))
        return {k: v for k, v in vector.items() if v > 0}


class ValgrindSource:
    """Exact: the worker runs under `valgrind --tool=exp-bbv`, every process (children too) into its
    own file; all intervals are summed into one vector per task, basic blocks folded to their function
    (the .pc file names them), so vectors of different processes share keys.
    """
    name, kind = "valgrind", "native"

    def __init__(self, interval_size: int = 1_000_000, valgrind: str = "valgrind"):
        self.interval_size, self.valgrind = interval_size, valgrind

    def record(self, worker: Worker, task_input) -> dict[str, int]:
        if shutil.which(self.valgrind) is None:
            raise InputError(f"{self.valgrind!r} is not on PATH (the valgrind BBV source needs valgrind >= 3.5)")
        out = tempfile.mkdtemp(prefix="causewatch-bbv-")
        try:
            with input_file(task_input) as path:
                argv = [self.valgrind, "--tool=exp-bbv", "--trace-children=yes",
                        f"--interval-size={self.interval_size}", f"--bb-out-file={out}/bb.%p",
                        f"--pc-out-file={out}/pc.%p", "--", *worker.argv(path)]
                done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if done.returncode:
                raise InputError(f"valgrind run of {worker.argv(path)} exited with {done.returncode}: "
                                 f"{done.stderr.decode(errors='replace')[-300:]}")
            return fold_exp_bbv(out)
        finally:
            shutil.rmtree(out, ignore_errors=True)


def fold_exp_bbv(folder: str) -> dict[str, int]:
    """Sum every exp-bbv output in `folder` (bb.<pid>[.<thread>] with pc.<pid>) into {function: instructions}."""
    vector: Counter = Counter()
    for bb in glob.glob(os.path.join(folder, "bb.*")):
        pid = Path(bb).name.split(".")[1]
        names = _pc_names(os.path.join(folder, f"pc.{pid}"))
        counts: Counter = Counter()
        with open(bb) as f:
            for line in f:
                if line.startswith("T"):
                    for token in line[1:].split():
                        _, block, count = token.split(":")
                        counts[int(block)] += int(count)
        for block, count in counts.items():
            vector[names.get(block, f"bb{block}@{pid}")] += count
    return dict(vector)


def _pc_names(path: str) -> dict[int, str]:
    """Block id -> function name (or its address when valgrind has no symbol) from an exp-bbv .pc file."""
    names = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.rstrip("\n").split(":", 3)
                if len(parts) == 4 and parts[0] == "F":
                    names[int(parts[1])] = parts[3] or f"0x{parts[2]}"
    except FileNotFoundError:
        pass
    return names


class AgentSampledSource:
    """Sampled: the agent's perf_event_open IP sampler (causewatch.agent.ipsampler) on the worker while it
    runs, samples folded to 'module:function'. A callable runs on a thread of this process, a command
    as a child (the first milliseconds before the sampler attaches are missed)."""
    name, kind = "agent", "native"

    def __init__(self, frequency: int = 10_000, poll: float = 0.01):
        self.frequency, self.poll = frequency, poll

    def record(self, worker: Worker, task_input) -> dict[str, int]:
        if worker.callable:
            fn = worker.function()
            if not getattr(self, "_warm", False):
                fn(task_input)  # as for cProfile: keep first-call imports out of the first vector
                self._warm = True
            with ThreadPoolExecutor(1) as pool:
                collector = self._open(os.getpid())
                future = pool.submit(fn, task_input)
                vector = self._drain(collector, lambda: not future.done())
                future.result()
            return vector
        with input_file(task_input) as path:
            proc = subprocess.Popen(worker.argv(path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            vector = self._drain(self._open(proc.pid), lambda: proc.poll() is None)
            _, err = proc.communicate()
        if proc.returncode:
            raise InputError(f"worker command {worker.argv(path)} exited with {proc.returncode}: "
                             f"{err.decode(errors='replace')[-300:]}")
        return vector

    def _open(self, pid: int):
        collector = BBVCollector("probe-build", pid=pid, frequency=self.frequency, interval_cpu=0.05, min_samples=1)
        status = collector.open()
        if status != "ok":
            raise InputError(f"the agent's IP sampler cannot run here ({status}); use --bbv cprofile or valgrind")
        return collector

    def _drain(self, collector, running) -> dict[str, int]:
        """Read the sampler until `running()` turns false (the ring buffer is small), then sum the vectors."""
        vector: Counter = Counter()
        try:
            while True:
                alive = running()
                for body in collector.collect(final=not alive):
                    vector.update(dict(zip(body["vector"]["keys"], body["vector"]["counts"])))
                if not alive:
                    return dict(vector)
                time.sleep(self.poll)
        finally:
            collector.close()


SOURCES = {"cprofile": CProfileSource, "valgrind": ValgrindSource, "agent": AgentSampledSource}


def register_source(name: str, factory) -> None:
    """Make a BBV source available to `probe build --bbv NAME` (e.g. the agent's sampled vectors)."""
    SOURCES[name] = factory


def source_for(name: str, worker: Worker):
    """The named source; 'auto' is cprofile for a callable worker and valgrind for a command."""
    if name == "auto":
        name = "cprofile" if worker.callable else "valgrind"
    try:
        return SOURCES[name]()
    except KeyError:
        raise InputError(f"unknown BBV source {name!r} (known: auto, {', '.join(SOURCES)})") from None
