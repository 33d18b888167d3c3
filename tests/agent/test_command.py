"""Every launched Python program was `scope="cmd:python"`. A launched command's scope now
names what runs (the script an interpreter runs, the module of `python -m`, the command a wrapper
starts), and stays a short, plain label whatever the argv holds."""

from __future__ import annotations

import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import query

from causewatch import wire
from causewatch.agent import runner
from causewatch.agent.command import MAX_NAME, command_name

PY = os.path.basename(sys.executable)   # python3, python3.12, python: whatever runs the tests


def _plain(label: str) -> bool:
    """cmd: then 1 to MAX_NAME letters or digits of any script (a mark only after a letter), or _.-+@=,~"""
    name = label.removeprefix("cmd:")
    return label.startswith("cmd:") and 0 < len(name) <= MAX_NAME and all(
        c in "_.-+@=,~" or (c.isalnum() if c.isascii() or i == 0 else
                            c.isalnum() or unicodedata.category(c) in ("Mn", "Mc"))
        for i, c in enumerate(name))


def _launched(cmd: list[str]) -> str:
    """The scope `causewatch agent -- CMD` gives CMD (the command is held before its exec, then killed)."""
    target = runner.launch(cmd)
    target.child.kill()
    target.child.wait()
    os.close(target._release)
    return target.label


@pytest.mark.parametrize("args,label", [
    (["train.py", "--epochs", "3"], "cmd:train.py"),
    (["-u", "-W", "ignore", "-X", "dev", "./jobs/train.py"], "cmd:train.py"),
    (["-Wignore", "-OO", "train.py"], "cmd:train.py"),
    (["-m", "json.tool", "--indent", "2"], "cmd:json.tool"),
    (["-mjson.tool"], "cmd:json.tool"),
    (["-I", "-um", "http.server"], "cmd:http.server"),
    (["/tmp/a dir/my script.py"], "cmd:my_script.py"),
    (["données.py"], "cmd:données.py"),
    (["--", "-dash.py"], "cmd:-dash.py"),
])
def test_a_launched_python_program_is_named_by_its_script_or_module(args, label):
    assert _launched([sys.executable, *args]) == label


@pytest.mark.parametrize("args", [[], ["-c", "print(1)", "train.py"], ["-uc", "pass"], ["-"], ["-m"], ["-c"],
                                  [""], ["-i"]])
def test_python_with_no_script_to_name_is_the_interpreter(args):
    """Inline code, standard input, a REPL, a missing module: nothing names a program but the interpreter."""
    assert _launched([sys.executable, *args]) == f"cmd:{PY}"


@pytest.mark.parametrize("cmd,label", [
    (["env", "A=1", "-u", "HOME", PY, "-u", "x.py"], "cmd:x.py"),
    (["env", "-", "A=1", PY, "x.py"], "cmd:x.py"),
    (["env", "-S", f"{PY} -u", "x.py"], "cmd:x.py"),
    (["env", f"--split-string={PY} -m pkg.mod", "--flag"], "cmd:pkg.mod"),
    (["env", "A=1"], "cmd:env"),
    (["nice", "-n", "5", "timeout", "-s", "KILL", "60", PY, "t.py"], "cmd:t.py"),
    (["nice", "-10", "./solver", "--size", "4096"], "cmd:solver"),
    (["taskset", "-c", "0-1", PY, "-m", "pkg"], "cmd:pkg"),
    (["numactl", "--cpunodebind=0", "-m", "0", "stdbuf", "-oL", "bash", "run.sh"], "cmd:run.sh"),
    (["bash", "-euo", "pipefail", "scripts/run.sh", "a"], "cmd:run.sh"),
    (["bash", "-lc", f"{PY} x.py"], "cmd:bash"),
    (["sh", "+x", "job.sh"], "cmd:job.sh"),
    (["node", "--inspect", "-r", "ts-node/register", "src/app.ts"], "cmd:app.ts"),
    (["node", "-e", "1"], "cmd:node"),
    (["python3.12", "x.py"], "cmd:x.py"),
    (["pypy3", "-m", "bench"], "cmd:bench"),
    (["perl", "-Ilib", "-w", "s.pl"], "cmd:s.pl"),
    (["perl", "-ne", "print"], "cmd:perl"),
    (["ruby", "-I", "lib", "app.rb"], "cmd:app.rb"),
    (["Rscript", "--vanilla", "fit.R"], "cmd:fit.R"),
    (["java", "-Xmx1g", "-jar", "/opt/app.jar"], "cmd:app.jar"),
    (["java", "-cp", "lib", "Main"], "cmd:Main"),
    (["/usr/bin/sleep", "3"], "cmd:sleep"),
    (["./solver"], "cmd:solver"),
])
def test_other_interpreters_and_wrappers(cmd, label):
    assert command_name(cmd) == label


def test_a_long_name_is_cut_and_keeps_a_hash_of_the_whole():
    a, b = ("x" * 300 + "a.py"), ("x" * 300 + "b.py")
    la, lb = _launched([sys.executable, a]), _launched([sys.executable, b])
    assert len(la) == len("cmd:") + MAX_NAME and la.startswith("cmd:xxxx") and la != lb
    assert command_name([PY, a]) == la       # the same argv, the same name


@pytest.mark.parametrize("name,label", [
    ("bad\nname.py", "cmd:bad_name.py"),       # a control character, refused by the wire as it was
    ('q"uo\\te.py', "cmd:q_uo_te.py"),         # what Prometheus would have to escape
    ("🚀", f"cmd:{PY}"),                        # nothing of it left: the interpreter
    ("\udcff\udcfe.py", "cmd:_.py"),           # undecodable bytes (surrogateescape): msgpack refused them
    ("हिन्दी.py", "cmd:हिन्दी.py"),                  # letters with combining vowel signs stay whole
    ("cafe\u0301.py", "cmd:caf\u00e9.py"),     # NFC
    ("\U000110b0", f"cmd:{PY}"),              # a lone combining mark is no name
])
def test_hostile_names_become_plain_labels(name, label):
    assert command_name([PY, name]) == label


@given(st.lists(st.text(min_size=0, max_size=80), min_size=1, max_size=8))
def test_any_argv_gives_a_short_label_the_wire_and_prometheus_take(argv):
    label = command_name(argv)
    assert _plain(label), label
    assert label.isprintable() and not any(c in label for c in '"\\ \n')
    frame = wire.decode(wire.encode("samples", "n", "b", 1, wire.samples_body([1.0], ["x"], [1.0], label)))
    assert frame.body["scope"] == label


@pytest.mark.service   # an agent and a daemon as processes
def test_a_launched_script_s_samples_and_phase_vectors_carry_its_name(daemon_process, tmp_path):
    """The real agent and daemon: what is stored is scoped by the script's name, not the interpreter's."""
    d = daemon_process()
    cfg = tmp_path / "agent.toml"
    # no units: the machine's cgroups hold other tests' fake services, each a scope of its own
    cfg.write_text(f'[agent]\ndaemon = "{d.endpoint}"\nnode = "n"\nspool = "{tmp_path}/spool"\n'
                   f'ipc = "ipc://{tmp_path}/agent.sock"\nunits = false\n')
    script = tmp_path / "a dir" / "données app.py"
    script.parent.mkdir()
    script.write_text("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5:\n"
                      "    sum(i * i for i in range(1000))\n")
    r = subprocess.run([sys.executable, "-m", "causewatch.cli", "-v", "agent", "--config", str(cfg), "--",
                        sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "cmd:données_app.py exited with 0" in r.stderr
    d.stop()
    assert query(d.db, "SELECT DISTINCT scope FROM samples WHERE scope <> 'node'") == [("cmd:données_app.py",)]
    targets = {t for t, in query(d.db, "SELECT DISTINCT target FROM bbv")}
    assert targets <= {"cmd:données_app.py"}, targets
    assert Path(d.db).exists()


WORDS = ["python3", "env", "nice", "timeout", "taskset", "bash", "node", "java", "php", "perl", "-S", "-m", "-c",
         "-f", "-jar", "-n", "-o", "-W", "-uc", "-mx", "+o", "--", "-", "", "A=1", "=x", "--split-string=",
         "--split-string=python3 -m", "-S'", "x.py", "5", "--unset=B", "-euo", "é.py"]


@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=10))
def test_any_mix_of_wrappers_interpreters_and_options_names_something(argv):
    """No argv, however its options and operands run out, breaks the parse."""
    assert _plain(command_name(argv))
