"""The analytics libraries' public APIs: each of causal, fuzzy and phases re-exports with `__all__` exactly
the names its docstring lists (`    name — what it is`), every one of them imports from the package, and
the re-exports are lazy: importing one light module loads none of its siblings' heavy libraries."""

import importlib
import json
import re
import subprocess
import sys

import pytest

LIBRARIES = ["causewatch.analytics.causal", "causewatch.analytics.fuzzy", "causewatch.analytics.phases"]
DOCUMENTED = re.compile(r"^    (\w+) — \S", re.MULTILINE)


def documented(package) -> list[str]:
    return DOCUMENTED.findall(package.__doc__ or "")


@pytest.mark.parametrize("name", LIBRARIES)
def test_all_is_what_the_docstring_lists(name):
    package = importlib.import_module(name)
    names = documented(package)
    assert names, f"{name}'s docstring lists no public name"
    assert len(names) == len(set(names)), f"documented twice: {sorted(n for n in names if names.count(n) > 1)}"
    public = getattr(package, "__all__", [])
    assert not set(names) - set(public), f"documented but not in __all__: {sorted(set(names) - set(public))}"
    assert not set(public) - set(names), f"in __all__ but not documented: {sorted(set(public) - set(names))}"


@pytest.mark.parametrize("name", LIBRARIES)
def test_every_documented_name_imports_from_the_package(name):
    package = importlib.import_module(name)
    for public in documented(package):
        exec(f"from {name} import {public}", {})
    assert not hasattr(package, "no_such_name")   # what lets `from package import submodule` fall through


def test_the_names_issue_26_found_missing():
    from causewatch.analytics.fuzzy import Bottleneck, Membership, bottleneck_search

    found = bottleneck_search([0.5, 0.95], Bottleneck(0.7, {"high": Membership("s", (0.7, 1.0))}))
    assert list(found["bottleneck"]) == [False, True]


@pytest.mark.slow   # fresh interpreters load each part
def test_first_use_in_a_fresh_interpreter():
    """Other tests have imported the submodules by now; a fresh interpreter resolves every name through
    the package's lazy look-up, `import *` included."""
    code = ("import importlib, json\nout = {}\n"
            f"for name in {LIBRARIES!r}:\n"
            "    package, star = importlib.import_module(name), {}\n"
            "    exec(f'from {name} import *', star)\n"
            "    out[name] = [n for n in package.__all__ if n not in star or n not in dir(package)]\n"
            "print(json.dumps(out))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {name: [] for name in LIBRARIES}


@pytest.mark.parametrize("module, heavy", [("causewatch.analytics.fuzzy.summaries", "numba"),
                                           ("causewatch.analytics.causal.features", "numba"),
                                           ("causewatch.analytics.phases.tracker", "scipy")])
def test_a_light_module_loads_no_sibling_kernels(module, heavy):
    code = f"import sys, {module}; print({heavy!r} in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "False", f"importing {module} loads {heavy}"
