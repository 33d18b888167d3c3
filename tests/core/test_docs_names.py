"""The maps name real things: every backticked path in CONTRIBUTING.md, docs/architecture.md, docs/causal.md,
docs/causal-measured.md, docs/design.md and docs/references.md exists, and every backticked dotted name
whose first part is a causewatch module or class resolves to an attribute.

Which spans are names (the rest is prose, config keys, metric names, other libraries'):
- a path: `causewatch/…`, `tests/…`, `bench/…`, `deploy/…`, `systemd/…`, `docs/…`, a package-relative
  `store/schema.py` (a file under causewatch/ ending so), or a bare `job_causal.py`; of a pattern
  (`tests/agent/test_NAME.py`), its folder; of a command line (`bench/causal.py --seeds 10`), its script;
- `a.b.c` (call arguments cut off): `a` a module relative to causewatch (`daemon.server`), the
  package itself, a module basename only one module under causewatch/ has (`verbs`, `calls`, `store`;
  not `nodes`, also a table), or a class defined at the top of a causewatch module (`CausalJob.run`);
  then getattr down, a submodule imported;
- in a list item that opens with a file and a colon (the walk's files to read), each backticked name
  after the colon is an attribute of that module or of one of its classes.

Walk (b)'s file list is counted: as many files, none twice, as its heading says, and every file one of its
steps names is in the list.
"""

from __future__ import annotations

import ast
import importlib
import re
from functools import cache

import pytest
from support import PACKAGE, ROOT

# each checked page, and how many backticked spans it has at least (a page that lost them is not checked)
DOCS = {"CONTRIBUTING.md": 50, "docs/architecture.md": 50, "docs/causal.md": 50, "docs/causal-measured.md": 50,
        "docs/design.md": 20, "docs/references.md": 40}
SPAN = re.compile(r"`([^`]+)`")   # a span may go on over a line break
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
PATH_ROOTS = ("causewatch/", "tests/", "bench/", "deploy/", "systemd/", "docs/")
DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
CODE = ("causewatch", "tests", "bench")
FILE_ITEM = re.compile(r"^\s*(?:\d+\.|-)\s+`([\w/]+\.py)`:(.*)$")
WALK = re.compile(r"^\*\*\(b\).*?(?=^#|^\*\*\(|\Z)", re.S | re.M)
STATED = re.compile(r"^Files walk \(b\) opens, (\d+) \((\d+) outside the analytics\):$", re.M)


def spans(text: str) -> list[str]:
    return [" ".join(span.split()) for span in SPAN.findall(FENCE.sub("", text))]


@cache
def modules() -> dict[str, list[str]]:
    """Basename -> the dotted modules under causewatch/ of that name (a package by its folder's)."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found.setdefault(parts[-1], []).append(".".join(parts))
    return found


@cache
def classes() -> dict[str, list[str]]:
    """Class name -> the dotted modules under causewatch/ that define it at their top level."""
    found: dict[str, list[str]] = {}
    for names in modules().values():
        for module in names:
            tree = ast.parse(_source_file(module).read_text())
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    found.setdefault(node.name, []).append(module)
    return found


def _source_file(module: str):
    path = ROOT.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def path_exists(span: str) -> bool:
    """A repository path, a package-relative one (`store/schema.py`), or a bare basename (`wire.py`,
    `test_routes.py`) of a file under causewatch/, tests/ or bench/."""
    if "NAME" in span:   # a pattern (`tests/agent/test_NAME.py`): its folder is real
        return (ROOT / span).parent.is_dir()
    if (ROOT / span).exists():
        return True
    if "/" not in span:
        return any(next((ROOT / tree).rglob(span), None) for tree in CODE)
    return any(p.as_posix().endswith("/" + span.rstrip("/")) for p in PACKAGE.rglob("*"))


def is_path(span: str) -> bool:
    return span.startswith(PATH_ROOTS) or (re.fullmatch(r"[\w/]+\.py", span) is not None)


def owners(first: str) -> list[str]:
    """The module `first` stands for: causewatch-relative, else a basename one module has; [] for none."""
    if first == "causewatch":
        return ["causewatch"]
    if _source_file(f"causewatch.{first}").exists():
        return [f"causewatch.{first}"]
    named = modules().get(first, [])
    return named if len(named) == 1 else []


def _attr(obj, name: str):
    """obj.name, a submodule imported when obj is a package, or a field a class sets on its instances."""
    if hasattr(obj, name):
        return getattr(obj, name)
    if hasattr(obj, "__path__"):
        try:
            return importlib.import_module(f"{obj.__name__}.{name}")
        except ModuleNotFoundError:
            pass
    if isinstance(obj, type) and _instance_field(obj, name):
        return ...   # an instance's attribute: nothing further below it to resolve
    raise AttributeError(name)


def _instance_field(cls: type, name: str) -> bool:
    """A field of a dataclass or named tuple, or an attribute its methods assign (`self.code = …`)."""
    fields = getattr(cls, "_fields", ())
    if name in getattr(cls, "__dataclass_fields__", {}) or (isinstance(fields, tuple) and name in fields):
        return True
    assigned = re.compile(rf"\bself\.{name}\b[^=\n]*=")
    return any(assigned.search(_source_file(k.__module__).read_text()) for k in cls.__mro__
               if k.__module__.startswith("causewatch"))


def resolves(start, names: list[str]) -> bool:
    obj = start
    for name in names:
        if obj is ...:
            return False
        try:
            obj = _attr(obj, name)
        except AttributeError:
            return False
    return True


def dotted_failure(span: str) -> str | None:
    """Why the dotted name `span` does not resolve; None when it does or is not ours."""
    name = span.split("(")[0]
    if not DOTTED.fullmatch(name) or name.endswith(".py"):
        return None
    first, *rest = name.split(".")
    starts = [importlib.import_module(m) for m in owners(first)]
    starts += [getattr(importlib.import_module(m), first) for m in classes().get(first, [])]
    if not starts:
        return None   # not ours: prose, a config key, another library
    return None if any(resolves(s, rest) for s in starts) else f"`{span}`: no such attribute"


def item_failures(line: str) -> list[str]:
    """A 'file: names' list item: each name after the colon in that module or one of its classes."""
    m = FILE_ITEM.match(line)
    if not m or not (ROOT / m[1]).is_file():
        return []
    module = importlib.import_module(m[1][:-3].replace("/", "."))
    kinds = [module, *(v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module.__name__)]
    failed = []
    for span in SPAN.findall(m[2]):
        name = span.split("(")[0]
        if DOTTED.fullmatch(name) or not name.isidentifier():
            continue   # dotted names are checked on their own
        if not any(resolves(k, [name]) for k in kinds):
            failed.append(f"`{span}` (in {m[1]}): no such name")
    return failed


def failures(text: str) -> list[str]:
    found = []
    for span in spans(text):
        if is_path(span):
            if not path_exists(span.split(" ")[0]):
                found.append(f"`{span}`: no such file")
        elif (why := dotted_failure(span)) is not None:
            found.append(why)
    for line in FENCE.sub("", text).splitlines():
        found += item_failures(line)
    return found


def walk_failures(text: str) -> list[str]:
    """Walk (b)'s file list against the counts its heading states and the files its steps name."""
    walk = WALK.search(text)
    stated = STATED.search(walk[0]) if walk else None
    if stated is None:
        return ["walk (b) or its 'Files walk (b) opens, N (M outside the analytics):' line is missing"]
    steps, listed = walk[0][:stated.start()], walk[0][stated.end():]
    files = [m[1] for line in listed.splitlines() if (m := FILE_ITEM.match(line))]
    outside = [f for f in files if not f.startswith("causewatch/analytics/")]
    found = [f"{f} is listed twice" for f in sorted(set(files)) if files.count(f) > 1]
    if (len(set(files)), len(set(outside))) != (int(stated[1]), int(stated[2])):
        found.append(f"the walk says {stated[1]} files ({stated[2]} outside the analytics), "
                     f"its list has {len(set(files))} ({len(set(outside))})")
    for span in spans(steps):
        if span.endswith(".py") and not any(f == span or f.endswith("/" + span) for f in files):
            found.append(f"`{span}`: a step names it, the file list does not")
    return found


def test_walk_b_lists_the_files_it_walks_as_many_as_it_says():
    assert walk_failures((ROOT / "docs/architecture.md").read_text()) == []


def test_a_walk_whose_count_or_list_drifted_is_caught():
    walk = ("**(b) A task.**\n| 1 | `Sender.send` (`sender.py`), `wire.py`, `store/frames.py` |\n\n"
            "Files walk (b) opens, {} ({} outside the analytics):\n1. `causewatch/agent/sender.py`: `Sender.send`.\n"
            "2. `causewatch/wire.py`: `decode`.\n3. `causewatch/analytics/causal/pc.py`: `PCLearner`.\n{}\n## Next\n")
    assert walk_failures(walk.format(3, 2, "")) == ["`store/frames.py`: a step names it, the file list does not"]
    assert walk_failures(walk.format(4, 3, "4. `causewatch/daemon/store/frames.py`: `Store`.")) == []
    assert walk_failures(walk.format(12, 3, "4. `causewatch/daemon/store/frames.py`: `Store`.\n"
                                             "5. `causewatch/wire.py`: `encode`.")) == [
        "causewatch/wire.py is listed twice",
        "the walk says 12 files (3 outside the analytics), its list has 4 (3)"]
    assert walk_failures("**(b) A task.**\nFiles to read, twelve:\n") == [
        "walk (b) or its 'Files walk (b) opens, N (M outside the analytics):' line is missing"]


@pytest.mark.parametrize("doc", DOCS)
def test_every_name_the_map_gives_is_real(doc):
    text = (ROOT / doc).read_text()
    assert len(spans(text)) > DOCS[doc]
    assert failures(text) == []


def test_a_wrong_name_or_path_is_caught_and_prose_is_not():
    assert failures("`verbs.Merge`, `calls.Entry.RUN_JOB`, `cluster.merge`, `daemon.server`, `Store.run`, "
                    "`store.results.insert_model`, `WireError.code`, `causewatch/daemon/verbs.py`, "
                    "`store/schema.py`, `wire.py`, `tests/core/test_walls.py`, `deploy/prometheus/`, "
                    "`pa.array`, `tls_config.ca_file`, `nodes.last_seen`, `test_routes.py`, "
                    "`tests/agent/test_NAME.py`, `@verbs.NAME.handles`, `source.open_source(args)`, "
                    "`analysis_scheduler = \"tcp://host:8786\"`, `bench/causal.py --seeds 10`") == []
    assert failures("`verbs.Merj`, `calls.Entry.RUN`, `Store.runn`, `causewatch/daemon/verb.py`, `tests/x.py`, "
                    "`store/schema2.py`, `wiire.py`, `tests/nowhere/test_NAME.py`, `bench/causl.py --seeds 10`") == [
        "`verbs.Merj`: no such attribute", "`calls.Entry.RUN`: no such attribute", "`Store.runn`: no such attribute",
        "`causewatch/daemon/verb.py`: no such file", "`tests/x.py`: no such file",
        "`store/schema2.py`: no such file", "`wiire.py`: no such file", "`tests/nowhere/test_NAME.py`: no such file",
        "`bench/causl.py --seeds 10`: no such file"]
    assert failures("3. `causewatch/daemon/job_causal.py`: `CausalJob.run`, `_plan`, `_nowhere`.") == [
        "`_nowhere` (in causewatch/daemon/job_causal.py): no such name"]
