"""Tests of causewatch.analytics.causal.drawing: the model's SVG from Graphviz and from the built-in
layered layout (well-formed, every node and edge, widths by strength, anomalies marked)."""

import re
import shutil
import xml.etree.ElementTree as ET

import networkx as nx
import pytest

from causewatch.analytics.causal import drawing
from causewatch.analytics.causal.ci import DSeparationOracle, oracle_dataset
from causewatch.analytics.causal.model import CausalModel
from causewatch.analytics.causal.pc import PCLearner

SVG = "{http://www.w3.org/2000/svg}"
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="dot missing")
ENGINES = ["builtin", pytest.param("dot", marks=needs_dot)]


def _model():
    return CausalModel.from_search(
        nodes=["A", "B", "C", "D"], arcs=[("A", "B"), ("D", "B")], undirected=[frozenset(("B", "C"))],
        strengths={frozenset(("A", "B")): 0.5, frozenset(("D", "B")): 0.25, frozenset(("B", "C")): 1.0},
        sepsets={}, equivalences=[])


def _groups(svg: str) -> dict[str, dict[str, ET.Element]]:
    """Parse (raises on malformed XML) and index the node and edge groups by their <title>."""
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    out = {"node": {}, "edge": {}}
    for g in root.iter(f"{SVG}g"):
        kind = (g.get("class") or "").split()
        if kind and kind[0] in out and "legend" not in kind:
            out[kind[0]][g.find(f"{SVG}title").text] = g
    return out


def _undirected(groups) -> str:
    return next(t for t in groups["edge"] if set(t.split("->")) == {"B", "C"})


def _stroke(group: ET.Element) -> dict:
    path = group.find(f"{SVG}path")
    return {"colour": path.get("stroke"), "width": float(path.get("stroke-width", 1.0)),
            "dashed": bool(path.get("stroke-dasharray")), "arrow": path.get("marker-end") is not None}


@pytest.mark.parametrize("engine", ENGINES)
def test_every_node_and_edge_is_drawn_and_anomalies_are_marked(engine):
    svg = drawing.model_svg(_model(), anomalous={("C", "B"), ("A", "C")}, engine=engine, title="app:mw <v2>")
    groups = _groups(svg)
    assert set(groups["node"]) == {"A", "B", "C", "D"}
    # B - C is undirected (drawn as the DAG extension runs it), and ("C", "B") marks it either way;
    # A -> C is no edge of the model: drawn as one it lacks
    bc = _undirected(groups)
    assert set(groups["edge"]) == {"A->B", "D->B", bc, "A->C"}
    anomalous = {t for t, g in groups["edge"].items() if "anomalous" in g.get("class")}
    assert anomalous == {bc, "A->C"}
    assert "app:mw &lt;v2&gt;" in svg


@pytest.mark.parametrize("engine", ENGINES)
def test_notes_are_red_lines_under_the_legend(engine):
    """Each open anomaly's first cause, as the daemon's picture names it, in the anomalies' colour."""
    note = "markov_violation A -> C: first cause node n1: other processes' CPU (score 2.10)"
    root = ET.fromstring(drawing.model_svg(_model(), anomalous={("A", "C")}, engine=engine, notes=[note]))
    texts = {"".join(t.itertext()): t for t in root.iter(f"{SVG}text")}
    assert note in texts
    assert drawing.ANOMALY_COLOUR in ET.tostring(texts[note], encoding="unicode")
    assert "first cause" not in "".join(ET.fromstring(drawing.model_svg(_model(), engine=engine)).itertext())


def test_builtin_strokes_by_strength_arrowheads_and_dashes():
    groups = _groups(drawing.model_svg(_model(), anomalous={("A", "C")}, engine="builtin"))
    s = {t: _stroke(g) for t, g in groups["edge"].items()}
    s["B->C"] = s[_undirected(groups)]
    assert s["B->C"]["width"] == drawing.MAX_WIDTH > s["A->B"]["width"] > s["D->B"]["width"] > 1.0
    assert s["A->B"]["arrow"] and not s["B->C"]["arrow"]          # undirected: no arrowhead
    assert s["A->C"]["dashed"] and s["A->C"]["colour"] == drawing.ANOMALY_COLOUR
    assert s["A->B"]["colour"] == drawing.EDGE_COLOUR and not s["A->B"]["dashed"]


@needs_dot
def test_dot_strokes_by_strength():
    groups = _groups(drawing.model_svg(_model(), engine="dot"))
    width = {t: float(g.find(f"{SVG}path").get("stroke-width", 1.0)) for t, g in groups["edge"].items()}
    width["B->C"] = width[_undirected(groups)]
    assert width["B->C"] == pytest.approx(drawing.MAX_WIDTH) and width["B->C"] > width["A->B"] > width["D->B"]


def _centres(svg: str) -> dict[str, tuple[float, float]]:
    out = {}
    for title, g in _groups(svg)["node"].items():
        text = g.find(f"{SVG}text")
        out[title] = (float(text.get("x")), float(text.get("y")))
    return out


def test_builtin_layers_follow_the_longest_path_and_long_edges_bend_through_their_layers():
    model = CausalModel.from_search(["a", "b", "c", "d"], arcs=[("a", "b"), ("b", "c"), ("c", "d"), ("a", "d")],
                                    undirected=[], strengths={}, sepsets={}, equivalences=[])
    svg = drawing.model_svg(model, engine="builtin")
    y = {v: c[1] for v, c in _centres(svg).items()}
    assert y["a"] < y["b"] < y["c"] < y["d"]
    long_edge = _groups(svg)["edge"]["a->d"].find(f"{SVG}path").get("d")
    assert long_edge.count("Q") == 2                               # through the dummies on b's and c's layers


def test_barycentre_ordering_removes_avoidable_crossings():
    dag = nx.DiGraph()
    dag.add_nodes_from(["a", "b", "y", "x"])                      # first order: a b / y x, one crossing
    dag.add_edges_from([("a", "x"), ("b", "y")])
    rows, _, down = drawing._with_dummies(dag, drawing.layers(dag))
    assert drawing._crossings(rows, down) == 1
    assert drawing._crossings(drawing.order(rows, down), down) == 0
    model = CausalModel(nx.DiGraph(), data=None)
    model.graph.add_nodes_from(["a", "b", "y", "x"])
    model.graph.add_edge("a", "x", directed=True, strength=0.1)
    model.graph.add_edge("b", "y", directed=True, strength=0.1)
    x = {v: c[0] for v, c in _centres(drawing.model_svg(model, engine="builtin")).items()}
    assert (x["a"] < x["b"]) == (x["x"] < x["y"])


@pytest.mark.parametrize("engine", ENGINES)
def test_a_learned_model_with_awkward_names_is_drawn_whole(engine):
    dag = nx.DiGraph([("cpu<0>", 'io "wait"'), ("cpu<0>", "a&b"), ('io "wait"', "task"), ("a&b", "task"),
                      ("task", "z"), ("x", "task"), ("x", "y")])
    model = PCLearner(ci_test=DSeparationOracle(dag)).fit(oracle_dataset(sorted(dag))).model_
    groups = _groups(drawing.model_svg(model, engine=engine))
    assert set(groups["node"]) == set(dag)
    drawn = {tuple(t.split("->")) for t in groups["edge"]}
    assert {(e.src, e.dst) if e.directed else frozenset((e.src, e.dst)) for e in model.edges()} == \
        {pair if model.graph[pair[0]][pair[1]]["directed"] else frozenset(pair) for pair in drawn}


def test_auto_uses_dot_when_on_the_path_and_the_builtin_layout_otherwise(monkeypatch):
    if shutil.which("dot"):
        assert "Generated by graphviz" in drawing.model_svg(_model())
    monkeypatch.setenv("PATH", "")
    svg = drawing.model_svg(_model())
    assert "graphviz" not in svg and set(_groups(svg)["node"]) == {"A", "B", "C", "D"}


def test_an_empty_model_and_an_unknown_engine():
    empty = CausalModel(nx.DiGraph())
    for engine in ["builtin"] + (["dot"] if shutil.which("dot") else []):
        assert _groups(drawing.model_svg(empty, engine=engine)) == {"node": {}, "edge": {}}
    with pytest.raises(ValueError, match="drawing engine 'neato'"):
        drawing.model_svg(_model(), engine="neato")


def test_dot_text_quotes_names():
    model = _model()
    nodes, edges = drawing.drawn_edges(model, {("A", "B")}, model.dag_extension())
    dot = drawing.to_dot(nodes + ['say "hi"\\'], edges)
    assert re.search(r'"A" -> "B" \[label="0.50", penwidth=3.50, color="#d62728"', dot)
    assert '"say \\"hi\\"\\\\";' in dot


def _issue_29_model():
    """The demo's task variables with a 0.001-bit edge, and the anomalies of a CPU hog: two mechanism
    changes (drawn from `(time)`) and two dependencies the model does not hold."""
    strengths = {frozenset(("size", "cpu_seconds")): 1.2, frozenset(("cpu_seconds", "duration")): 0.8,
                 frozenset(("cpu_wait_seconds", "duration")): 0.6, frozenset(("size", "code_phase")): 0.9,
                 frozenset(("code_phase", "duration")): 0.001}
    model = CausalModel.from_search(
        nodes=["size", "code_phase", "cpu_seconds", "cpu_wait_seconds", "duration"],
        arcs=[("size", "cpu_seconds"), ("cpu_seconds", "duration"), ("cpu_wait_seconds", "duration"),
              ("code_phase", "duration")], undirected=[frozenset(("size", "code_phase"))],
        strengths=strengths, sepsets={}, equivalences=[])
    return model, {("(time)", "cpu_wait_seconds"), ("(time)", "duration"), ("code_phase", "cpu_wait_seconds"),
                   ("size", "cpu_wait_seconds")}


def _text_boxes(svg: str) -> tuple[list, list]:
    """(label boxes, node-name boxes) from each <text>'s position, anchor and font size (inherited from
    its group), at 0.6 em per character: what a renderer would cover, give or take the font."""
    root = ET.fromstring(svg)
    labels, names = [], []

    def walk(el, size, where):
        size = float(el.get("font-size", size))
        cls = (el.get("class") or "").split()
        where = "label" if "labels" in cls or "edge" in cls else "node" if "node" in cls else \
            "legend" if "legend" in cls else where
        if el.tag == f"{SVG}text" and el.text:
            w, x, y = 0.6 * size * len(el.text), float(el.get("x")), float(el.get("y"))
            x0 = {"middle": x - w / 2, "end": x - w}.get(el.get("text-anchor"), x)
            box = (el.text, (x0, y - 0.8 * size, x0 + w, y + 0.2 * size))
            (labels if where == "label" else names if where == "node" else []).append(box)
        for child in el:
            walk(child, size, where)
    walk(root, 14.0, "")
    return labels, names


@pytest.mark.parametrize("engine", ENGINES)
def test_issue_29_picture_has_a_legend_no_zero_bit_edge_and_no_overlapping_labels(engine):
    model, anomalous = _issue_29_model()
    svg = drawing.model_svg(model, anomalous=anomalous, engine=engine, title="app:demo")
    groups = _groups(svg)
    assert "code_phase->duration" not in groups["edge"] and "0.00" not in re.findall(r">([0-9.]+)<", svg)
    assert {"(time)->cpu_wait_seconds", "(time)->duration", "code_phase->cpu_wait_seconds",
            "size->cpu_wait_seconds"} <= set(groups["edge"])
    for line in ("red: an open anomaly", "dashed: a dependency the model does not hold",
                 "(time): the window of the newest rows", "1 edge under 0.005 bits not drawn"):
        assert line in svg
    labels, names = _text_boxes(svg)
    assert sorted(t for t, _ in labels) == sorted(["0.60", "0.80", "0.90", "1.20", "mechanism changed",
                                                   "mechanism changed", "not in model", "not in model"])
    assert {t for t, _ in names} >= {"(time)", "duration", "size"}
    overlaps = [(a[0], b[0]) for i, a in enumerate(labels) for b in labels[i + 1:] + names
                if drawing._overlap(a[1], b[1]) > 0]
    assert not overlaps, f"labels overlap: {overlaps}"
