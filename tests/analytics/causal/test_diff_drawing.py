"""The causal diff's picture: valid SVG from both engines, each change marked (an added edge in its
colour, a removed one dashed, a strength labelled old → new, a re-oriented one saying what it was, a
changed mechanism's node framed), a legend naming only the marks shown."""

import shutil
import xml.etree.ElementTree as ET

import pytest

from causewatch.analytics.causal import CausalModel, diff_models, diff_svg
from causewatch.analytics.causal.diff import MechanismChange
from causewatch.analytics.causal.drawing import MARK_COLOURS

SVG = "{http://www.w3.org/2000/svg}"
ENGINES = ["builtin"] + (["dot"] if shutil.which("dot") else [])


def _model(arcs, strengths):
    nodes = ["a", "b", "c", "d", "e"]
    return CausalModel.from_search(nodes, arcs, [], {frozenset(p): s for p, s in zip(arcs, strengths)}, {}, [])


@pytest.fixture
def changed():
    """a -> b stronger, b -> c re-oriented, d -> c removed, a -> e added; b's mechanism changed."""
    before = _model([("a", "b"), ("b", "c"), ("d", "c")], [0.3, 0.8, 0.6])
    after = _model([("a", "b"), ("c", "b"), ("a", "e")], [0.9, 0.8, 0.7])
    found = diff_models(before, after)
    found.mechanisms.append(MechanismChange("b", ("a",), 0.4, 0.05, 1.0, 2.0, "b = a", "b = 3*a"))
    return found


def _groups(root, cls):
    return [g for g in root.iter(f"{SVG}g") if cls in g.get("class", "").split()]


def _texts(root):
    return " ".join("".join(t.itertext()) for t in root.iter(f"{SVG}text"))


@pytest.mark.parametrize("engine", ENGINES)
def test_each_change_is_marked_and_named_in_the_legend(changed, engine):
    assert {c.kind for c in changed.edges} == {"added", "removed", "reoriented", "strength_changed"}
    root = ET.fromstring(diff_svg(changed, engine=engine, title="app:x"))
    titles = {cls: ["".join(g.find(f"{SVG}title").itertext()) for g in _groups(root, cls)]
              for cls in ("added", "removed", "reoriented", "strength_changed", "mechanism")}
    assert titles["added"] == ["a->e"] and titles["removed"] == ["d->c"]
    assert titles["strength_changed"] == ["a->b"] and titles["mechanism"] == ["b"]
    assert len(titles["reoriented"]) == 1 and set(titles["reoriented"][0].split("->")) == {"b", "c"}
    removed = _groups(root, "removed")[0]
    assert any(p.get("stroke-dasharray") for p in removed.iter(f"{SVG}path")), "a removed edge is dashed"
    added = _groups(root, "added")[0]
    assert any(MARK_COLOURS["added"] in (p.get("stroke") or "") for p in added.iter(f"{SVG}path"))
    text = _texts(root)
    assert "0.30 → 0.90" in text and "was b -> c" in text and "removed (0.60)" in text
    assert "blue: an edge only the newer" in text and "red frame: a variable's mechanism changed" in text


def test_no_change_says_so_and_marks_nothing():
    model = _model([("a", "b")], [0.5])
    root = ET.fromstring(diff_svg(diff_models(model, model), engine="builtin"))
    assert not any(_groups(root, cls) for cls in ("added", "removed", "reoriented", "strength_changed", "mechanism"))
    assert "no change beyond the bands (mechanisms not judged: no rows)" in _texts(root)


def test_an_unknown_engine_is_refused(changed):
    with pytest.raises(ValueError, match="drawing engine 'png'"):
        diff_svg(changed, engine="png")
