"""The node's busiest processes besides the watched one, grouped by command, as labelled node samples:
`top_process_cpu_ratio{command}` (CPU seconds per second of the group's processes since the last look)
and `top_process_count{command}`, so the daemon can name a co-located process as an anomaly's cause.

A look reads /proc/PID/stat of every process (utime, stime, ppid, start time) and the command line of
those that used CPU since the last look, once per `interval`; the watched target and the processes
under it are left out. A command is the program's name and its first few arguments, each cut short,
up to an assignment or a flag naming a secret (a command line may hold one). Like the psutil collectors it never
raises: what it cannot read is left out, the reason kept in `unavailable`.
"""

from __future__ import annotations

import os
import re
import time
from typing import Callable

from causewatch import wire
from causewatch.agent.node import files

TOP = 8                # groups reported per look, busiest first
MIN_RATIO = 0.02       # CPU seconds per second a group needs to be reported: an idle daemon is no neighbour
INTERVAL = 2.0         # seconds between looks: a short incident has a few
ARGS, ARG_CHARS = 3, 24   # arguments of a command shown, and the characters of each
COMMAND_CHARS = 60     # of a command in all: its label, escaped, stays within wire.MAX_NAME
CPU_RATIO, COUNT = "top_process_cpu_ratio", "top_process_count"
# where a command's words stop: an assignment (`--password=x`, `TOKEN=x`) or a flag that names a secret
_SECRET = re.compile(r"-*[\w.-]+=|-+[\w-]*(pass|token|secret|key|auth)", re.IGNORECASE)


def command(argv: list[str], comm: str) -> str:
    """A process's command as the samples name it: `python3 -m pytest -q`; a kernel thread `[kthreadd]`;
    one that named itself (prctl PR_SET_NAME, as the daemon's workers do) by that name and its program,
    `causewatch-jobs (python3)`: its command line is its parent's."""
    if not argv or not argv[0]:
        return f"[{comm}]"
    program = os.path.basename(argv[0])
    if not program.startswith(comm):   # the kernel keeps 15 bytes of a name
        return f"{comm} ({program[:ARG_CHARS]})"[:COMMAND_CHARS]
    words = [program[:ARG_CHARS]]
    for arg in argv[1:1 + ARGS]:
        if _SECRET.match(arg):
            break
        words.append(_cut(" ".join(arg.split())))
    return " ".join(w for w in words if w)[:COMMAND_CHARS]


def _cut(text: str) -> str:
    """At most ARG_CHARS characters of an argument, ending at a word where one ends in the last third of
    them (else where they end: `from multiprocessing.for`, not `from`, which every such child begins with)."""
    if len(text) <= ARG_CHARS:
        return text
    cut = text[:ARG_CHARS + 1]
    end = cut.rfind(" ")
    return cut[:end].rstrip() if end >= 2 * ARG_CHARS // 3 else text[:ARG_CHARS]


def _stat(text: str) -> tuple[str, int, int, int]:
    """(comm, ppid, CPU ticks, start ticks) of a /proc/PID/stat line (comm may hold spaces and parentheses)."""
    comm, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
    return comm, int(rest[1]), int(rest[11]) + int(rest[12]), int(rest[19])


class TopProcesses:
    """The busiest `top` command groups of the node at each look, without `exclude`'s process tree."""

    def __init__(self, exclude: int | None = None, top: int = TOP, interval: float = INTERVAL, proc: str = "/proc",
                 clock: Callable[[], float] = time.monotonic, ticks_per_second: int | None = None):
        self.exclude, self.top, self.interval, self.proc, self.clock = exclude, top, interval, proc, clock
        self.ticks = ticks_per_second or os.sysconf("SC_CLK_TCK")
        self.unavailable: dict[str, str] = {}
        self._due = 0.0
        self._last: tuple[float, dict[int, tuple[int, int]]] | None = None   # (when, pid -> (start, ticks))
        self._commands: dict[tuple[int, int], str] = {}   # (pid, start) -> command

    def collect(self) -> dict[str, float]:
        """The groups' samples when a look is due and an earlier one is there to compare with, else {}."""
        now = self.clock()
        if now < self._due:
            return {}
        self._due = now + self.interval
        try:
            procs = self._read()
        except OSError as e:
            self.unavailable["processes"] = f"{type(e).__name__}: {e}"
            return {}
        self.unavailable.pop("processes", None)
        last, self._last = self._last, (now, {pid: (start, ticks) for pid, (_, _, ticks, start) in procs.items()})
        if last is None or now <= last[0]:
            return {}
        return self._groups(procs, last[1], now - last[0])

    def _read(self) -> dict[int, tuple[str, int, int, int]]:
        procs = {}
        for name in os.listdir(self.proc):
            if name.isdigit():
                try:
                    procs[int(name)] = _stat(files.read(f"{self.proc}/{name}/stat"))
                except (OSError, ValueError, IndexError):   # gone since the listing, or unreadable
                    continue
        return procs

    def _left_out(self, procs: dict) -> set[int]:
        """The excluded process and every process under it."""
        if self.exclude is None:
            return set()
        children: dict[int, list[int]] = {}
        for pid, (_, ppid, _, _) in procs.items():
            children.setdefault(ppid, []).append(pid)
        out, todo = set(), [self.exclude]
        while todo:
            pid = todo.pop()
            if pid not in out:
                out.add(pid)
                todo += children.get(pid, [])
        return out

    def _groups(self, procs: dict, before: dict, seconds: float) -> dict[str, float]:
        skip, groups = self._left_out(procs), {}
        for pid, (comm, _, ticks, start) in procs.items():
            was = before.get(pid)
            used = ticks - (was[1] if was is not None and was[0] == start else 0)
            if pid in skip or used <= 0:
                continue
            cmd = self._command(pid, start, comm)
            ratio, count = groups.get(cmd, (0.0, 0))
            groups[cmd] = (ratio + used / self.ticks / seconds, count + 1)
        alive = {(pid, start) for pid, (_, _, _, start) in procs.items()}
        self._commands = {key: c for key, c in self._commands.items() if key in alive}
        busiest = sorted(((r, n, c) for c, (r, n) in groups.items() if r >= MIN_RATIO), key=lambda g: (-g[0], g[2]))
        out = {}
        for ratio, count, cmd in busiest[:self.top]:
            out[wire.labelled(CPU_RATIO, {"command": cmd})] = round(ratio, 4)
            out[wire.labelled(COUNT, {"command": cmd})] = float(count)
        return out

    def _command(self, pid: int, start: int, comm: str) -> str:
        key = (pid, start)
        if key not in self._commands:
            try:
                with open(os.path.join(self.proc, str(pid), "cmdline"), "rb") as f:
                    argv = f.read().decode(errors="replace").split("\0")
            except OSError:
                argv = []
            self._commands[key] = command([a for a in argv if a] if any(argv) else [], comm)
        return self._commands[key]
