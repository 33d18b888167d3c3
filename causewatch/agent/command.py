"""The scope label of a launched command: `cmd:NAME`, NAME being what an operator knows it by.

`causewatch agent -- python3 train.py --epochs 3` is `cmd:train.py`, not `cmd:python3`: for a known
interpreter (Python, the shells, node, perl, ruby, php, Rscript, lua, java) NAME is the file name of the
script it runs (`java -jar app.jar`: `app.jar`), or the module (`python -m pkg.mod`: `cmd:pkg.mod`); with
inline code (`python -c`, `bash -c`, `node -e`), standard input or no script at all, it is the
interpreter's own name (`cmd:python3`). Wrappers are looked through: `env VAR=1 …`, `env -S '…'`,
`nice -n 5 …`, `timeout 60 …`, `taskset -c 0 …`, `numactl -N 0 …`, `stdbuf`, `nohup`, `setsid`,
`time`, `chrt`, `ionice`.

The name becomes a Prometheus label value, a DuckDB key and a `--target` argument, so it is kept short
and plain: letters and digits of any script (NFC), `_.-+@=,`, every other run of characters one `_`, at
most MAX_NAME characters (a longer name keeps its start and a hash of the whole: two stay apart).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import unicodedata
from dataclasses import dataclass

MAX_NAME = 48               # characters after `cmd:`
_KEEP = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-+@=,")
_HASH = 7                   # hex digits of the hash that ends a shortened name
_NESTING = 8                # wrappers looked through at most (env nice env nice …)


@dataclass(frozen=True)
class Options:
    """How the arguments before a program's operand read: options that take a value (the next argument,
    or attached: `-Wx`, `--opt=x`); options whose value is inline code (no script follows), a module,
    or the program's file (`java -jar`, `php -f`); whether short flags cluster (`-uO`); whether `+x` is
    an option (shells); and a wrapper's own operands before its command (timeout's DURATION)."""
    valued: frozenset = frozenset()
    inline: frozenset = frozenset()
    module: frozenset = frozenset()
    file: frozenset = frozenset()
    clusters: bool = True
    plus: bool = False
    operands: int = 0


def _options(valued="", inline="", module="", file="", **kw) -> Options:
    return Options(*(frozenset(s.split()) for s in (valued, inline, module, file)), **kw)


# program name (a regular expression over the file name) -> how its arguments read
INTERPRETERS: dict[str, Options] = {
    r"(python|pypy)[0-9.]*[dmt]?": _options("-W -X --check-hash-based-pycs", "-c", "-m"),
    r"(ba|da|z|k|mk|a|fi|c|tc)?sh": _options("-o -O --rcfile --init-file", "-c -s", plus=True),
    r"node(js)?": _options("-r --require --import --loader --experimental-loader -C --conditions --env-file "
                           "--title --input-type --stack-size", "-e --eval -p --print", clusters=False),
    r"perl[0-9.]*": _options("", "-e -E"),
    r"ruby[0-9.]*": _options("-I -r -C -E --encoding", "-e"),
    r"php[0-9.]*": _options("-c -d -z", "-r -R -B -E", file="-f"),
    r"Rscript": _options("", "-e", clusters=False),
    r"lua(jit|[0-9.]*)": _options("-l", "-e"),
    r"java": _options("-cp -classpath --class-path -p --module-path --add-modules", "", "-m --module", "-jar",
                      clusters=False),
}
WRAPPERS: dict[str, Options] = {
    "env": _options("-u --unset -C --chdir -S --split-string"),
    "nice": _options("-n --adjustment"),
    "nohup": _options(),
    "setsid": _options(),
    "stdbuf": _options("-i -o -e --input --output --error"),
    "timeout": _options("-s --signal -k --kill-after", operands=1),
    "taskset": _options(operands=1),   # `-c 0-3`: -c is a flag, the list its one operand
    "time": _options("-o --output -f --format"),
    "chrt": _options("-T --sched-runtime -P --sched-period -D --sched-deadline", operands=1),
    "ionice": _options("-c --class -n --classdata -t"),
    "numactl": _options("-C --physcpubind -N --cpunodebind -m --membind -i --interleave -p --preferred"),
}


def command_name(cmd: list[str]) -> str:
    """`cmd:NAME` for a launched command's argv (see the module docstring)."""
    for name in _names(list(cmd), _NESTING):
        if safe := safe_name(name):
            return "cmd:" + safe
    return "cmd:unnamed"


def safe_name(text: str) -> str:
    """`text` as a short, plain label value (see the module docstring); "" when nothing of it is left."""
    text = unicodedata.normalize("NFC", text)
    kept, previous = [], "_"
    for c in text:
        previous = c if _kept(c, previous) else "_"
        kept.append(previous)
    out = re.sub("_+", "_", "".join(kept))
    if not out.strip("_"):
        return ""
    if len(out) > MAX_NAME:
        digest = hashlib.sha1(text.encode("utf-8", "surrogateescape")).hexdigest()[:_HASH]
        out = out[:MAX_NAME - _HASH - 1] + "~" + digest
    return out


def _kept(c: str, previous: str) -> bool:
    if c.isascii():
        return c in _KEEP
    if unicodedata.category(c) in ("Mn", "Mc"):   # a mark (an Indic vowel sign) on a kept letter, not alone
        return (previous.isalnum() and not previous.isascii()) or unicodedata.category(previous) in ("Mn", "Mc")
    return c.isalnum()


def _names(cmd: list[str], nesting: int) -> list[str]:
    """Candidate names, best first: the script or module, then the program itself."""
    if not cmd:
        return []
    program = _file_name(cmd[0])
    if nesting > 0 and program in WRAPPERS:
        kind, rest = _operand(program, WRAPPERS[program], cmd[1:])
        return (_names(rest, nesting - 1) if kind == "command" else []) + [program]
    for pattern, options in INTERPRETERS.items():
        if re.fullmatch(pattern, program):
            kind, rest = _operand(program, options, cmd[1:])
            if kind == "module":
                return [rest[0], program]
            return ([_file_name(rest[0])] if kind == "command" else []) + [program]
    return [program]


def _file_name(path: str) -> str:
    return os.path.basename(path.rstrip("/")) or path


def _operand(program: str, o: Options, args: list[str]) -> tuple[str, list[str]]:
    """("command", [operand, …]): the arguments from the program's first operand on (an interpreter's
    script, a wrapper's command); ("module", [name]); ("none", []): inline code, standard input, or
    nothing to run."""
    skip, i = o.operands, 0
    while i < len(args):
        arg = args[i]
        if program == "env" and (arg == "-" or ("=" in arg and not arg.startswith(("-", "=")))):
            i += 1         # `env -` is `env -i`; VAR=value
            continue
        if arg == "--":
            i += 1
            break
        if arg == "-" or not (arg.startswith("-") or (o.plus and arg.startswith("+") and len(arg) > 1)):
            if skip:       # a wrapper's own operand: a duration, a CPU list, a priority
                skip, i = skip - 1, i + 1
                continue
            break
        name, attached = arg.split("=", 1) if arg.startswith("--") and "=" in arg else (arg, None)
        if name in o.inline:
            return "none", []
        if name in o.module | o.file | o.valued:
            value = attached if attached is not None else (args[i + 1] if i + 1 < len(args) else None)
            if name in o.module or name in o.file:
                return ("none", []) if not value else ("module" if name in o.module else "command", [value])
            if name in ("-S", "--split-string") and value is not None:   # env -S 'python3 -u': one argument, split
                return _operand(program, o, _split(value) + args[i + (1 if attached is None else 0) + 1:])
            i += 1 if attached is not None else 2
            continue
        i += 1
        if not o.clusters or arg.startswith("--") or len(arg) == 2:
            continue
        # a cluster of short flags (`-uO`, `-uc code`, `-Wignore`, `-mpkg`): one that takes a value ends it
        for at in range(1, len(arg)):
            flag, attached = arg[0] + arg[at], arg[at + 1:] or None
            if flag in o.inline:
                return "none", []
            if flag in o.module | o.file | o.valued:
                value = attached if attached is not None else (args[i] if i < len(args) else None)
                if flag in o.module or flag in o.file:
                    return ("none", []) if not value else ("module" if flag in o.module else "command", [value])
                i += 1 if attached is None else 0
                break
    rest = args[i:]
    if not rest or (program not in WRAPPERS and rest[0] == "-"):   # `-`: the script is standard input
        return "none", []
    return "command", rest


def _split(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:   # an unbalanced quote
        return text.split()
