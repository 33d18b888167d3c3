"""A picture of a causal model: SVG of its graph, edge width by strength, anomalous edges in red,
with a legend; edges under MIN_BITS are left out (the legend counts them).

Graphviz's `dot` draws it when installed; otherwise a built-in layered (Sugiyama) layout does, so a
picture is always there; its edge labels are placed where they cover no node and no other label.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

import networkx as nx

from causewatch.analytics.causal.model import CausalModel

log = logging.getLogger("causewatch.analytics.causal.drawing")

ENGINES = ("auto", "dot", "builtin")
ANOMALY_COLOUR = "#d62728"
EDGE_COLOUR = "#555555"
MAX_WIDTH = 6.0          # pen width of the strongest edge; the weakest get 1
# built-in layout, in SVG pixels
FONT, CHAR_W, NODE_H, PAD_X, GAP_X, GAP_Y, MARGIN = 12, 7.2, 30.0, 14.0, 28.0, 70.0, 20.0
DUMMY_W = 16.0          # room a long edge takes in each layer it crosses, so it keeps clear of nodes
LABEL_FONT, LABEL_CHAR_W, LABEL_H = 10, 6.2, 13.0   # edge labels: a generous width per character
MIN_BITS = 0.005         # an edge this weak reads "0.00" and says nothing: not drawn, counted in the legend
TIME = "(time)"          # a mechanism change's source (anomalies.TIME): the window a row comes from
RED = ("anomalous", "note")   # legend lines written in the anomalies' colour
# a causal diff's marks (diff_drawing.py): each kind of change's colour; removed edges are also dashed
MARK_COLOURS = {"added": "#1f77b4", "removed": "#7f7f7f", "strength_changed": "#ff7f0e", "reoriented": "#9467bd",
                "mechanism": ANOMALY_COLOUR}
SWEEPS = 12              # barycentre passes (down and up) before keeping the order with fewest crossings


@dataclass(frozen=True)
class DrawnEdge:
    """One edge to draw: a model edge, or an anomalous pair the model lacks (`in_model` False); a
    diff's edges carry their change (`mark`, a key of MARK_COLOURS) and a label of their own (`text`)."""
    src: str
    dst: str
    directed: bool
    strength: float
    anomalous: bool
    in_model: bool = True
    mark: str | None = None
    text: str | None = None

    @property
    def title(self) -> str:
        return f"{self.src}->{self.dst}"

    @property
    def colour(self) -> str:
        return ANOMALY_COLOUR if self.anomalous else MARK_COLOURS.get(self.mark, EDGE_COLOUR)

    @property
    def dashed(self) -> bool:
        return not self.in_model or self.mark == "removed"

    @property
    def css(self) -> str:
        return "edge anomalous" if self.anomalous else f"edge {self.mark}" if self.mark else "edge"


def model_svg(model: CausalModel, anomalous: Iterable[tuple[str, str]] = (), engine: str = "auto",
              title: str | None = None, notes: Iterable[str] = ()) -> str:
    """SVG text of `model`'s graph; the (src, dst) pairs in `anomalous` are drawn red (an undirected
    edge matches either order; a pair the model has no edge for is drawn dashed, as a dependency
    the model does not hold); `notes` are lines in red under the legend (each anomaly's first cause).
    `engine`: "dot" (Graphviz), "builtin", or "auto" (dot when installed)."""
    if engine not in ENGINES:
        raise ValueError(f"drawing engine {engine!r}: expected one of {', '.join(ENGINES)}")
    dag = model.dag_extension()
    nodes, edges = drawn_edges(model, anomalous, dag)
    legend = (legend_lines(model, edges) if nodes else []) + [("note", text) for text in notes]
    if engine == "dot" or (engine == "auto" and shutil.which("dot")):
        try:
            return dot_svg(nodes, edges, title, legend)
        except (OSError, subprocess.SubprocessError) as e:
            if engine == "dot":
                raise
            log.warning("Graphviz dot failed (%s); drawing with the built-in layout", e)
    return builtin_svg(dag, nodes, edges, title, legend)


def drawn_edges(model: CausalModel, anomalous: Iterable[tuple[str, str]],
                dag: nx.DiGraph) -> tuple[list[str], list[DrawnEdge]]:
    """The nodes (the model's, then any only an anomalous pair names) and the edges to draw; an
    undirected edge runs as `dag` (one DAG of the model's class) has it, so both engines layer alike."""
    marked = {(str(a), str(b)) for a, b in anomalous}
    edges, seen = [], set()
    weak = _weak(model)
    for e in model.edges():
        src, dst = (e.dst, e.src) if not e.directed and dag.has_edge(e.dst, e.src) else (e.src, e.dst)
        pairs = {(src, dst)} if e.directed else {(src, dst), (dst, src)}
        seen |= pairs
        if e.strength < weak and not pairs & marked:
            continue
        edges.append(DrawnEdge(src, dst, e.directed, e.strength, bool(pairs & marked)))
    extra = sorted(marked - seen)
    edges += [DrawnEdge(a, b, True, 0.0, True, in_model=False) for a, b in extra]
    nodes = list(model.nodes)
    nodes += sorted({v for pair in extra for v in pair} - set(nodes))
    return nodes, edges


def _weak(model: CausalModel) -> float:
    """Edges weaker than this are not drawn: MIN_BITS, or 0 for a model without strengths (all 0)."""
    return MIN_BITS if any(e.strength >= MIN_BITS for e in model.edges()) else 0.0


def _width(strength: float, strongest: float) -> float:
    return 1.0 + (MAX_WIDTH - 1.0) * (strength / strongest if strongest > 0 else 0.0)


def _label(e: DrawnEdge) -> str:
    if e.text is not None:
        return e.text
    if e.in_model:
        return f"{e.strength:.2f}"
    return "mechanism changed" if e.src == TIME else "not in model"


def legend_lines(model: CausalModel, edges: list[DrawnEdge]) -> list[tuple[str, str]]:
    """(kind, text) of each legend line: the strokes the drawing uses, and what it left out."""
    lines = [("edge", "edge: width and label by strength, bits"), ("anomalous", "red: an open anomaly")]
    if any(not e.in_model and e.src != TIME for e in edges):
        lines.append(("dashed", "dashed: a dependency the model does not hold"))
    if any(e.src == TIME for e in edges):
        lines.append(("dashed", f"{TIME}: the window of the newest rows (its mechanism changed)"))
    weak = _weak(model)
    hidden = (sum(1 for e in model.edges() if e.strength < weak)
              - sum(1 for e in edges if e.in_model and e.strength < weak))
    if hidden:
        lines.append(("text", f"{hidden} edge{'s' if hidden > 1 else ''} under {MIN_BITS} bits not drawn"))
    return lines


# ---- Graphviz ------------------------------------------------------------------------------------
def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(nodes: list[str], edges: list[DrawnEdge], title: str | None = None, legend=(),
           outlined: Iterable[str] = ()) -> str:
    """DOT with the drawing's attributes: pen width by strength, anomalies red, extra pairs dashed, the
    `outlined` nodes (a diff's changed mechanisms) in a thick red frame."""
    strongest = max((e.strength for e in edges), default=0.0)
    lines = ["digraph causal {", '  graph [fontname="Helvetica", fontsize=12];',
             '  node [shape=box, style="rounded", fontname="Helvetica", fontsize=12];',
             '  edge [fontname="Helvetica", fontsize=10];']
    if title:
        lines.append(f"  label={_dot_quote(title)}; labelloc=t;")
    framed = set(outlined)
    lines += [f"  {_dot_quote(v)}" + (f' [color="{MARK_COLOURS["mechanism"]}", penwidth=3, class="node mechanism"]'
                                      if v in framed else "") + ";" for v in nodes]
    for e in edges:
        attrs = {"label": _dot_quote(_label(e)), "penwidth": f"{_width(e.strength, strongest):.2f}",
                 "color": _dot_quote(e.colour), "fontcolor": _dot_quote(e.colour), "class": _dot_quote(e.css)}
        if not e.directed:
            attrs["dir"] = "none"
        if e.dashed:
            attrs["style"] = "dashed"
        if not e.in_model:
            attrs["constraint"] = "false"   # a pair the model lacks does not shape its layers
            # placed after the layout, clear of nodes and labels (a label of a non-constraint edge covered them)
            attrs["xlabel"] = attrs.pop("label")
        body = ", ".join(f"{k}={v}" for k, v in attrs.items())
        lines.append(f"  {_dot_quote(e.src)} -> {_dot_quote(e.dst)} [{body}];")
    if legend:
        rows = "".join(f'<tr><td align="left"><font color="{_legend_colour(kind)}">'
                       f"{escape(text)}</font></td></tr>" for kind, text in legend)
        lines += ["  forcelabels=true;",
                  f'  "causewatch legend" [shape=plaintext, class="legend", fontsize=9, label=<<table border="0" '
                  f'cellspacing="0">{rows}</table>>];',
                  '  { rank=sink; "causewatch legend"; }']
    return "\n".join(lines + ["}"]) + "\n"


def _legend_colour(kind: str) -> str:
    """A legend line's text colour: the anomalies' red, a diff mark's colour, or black."""
    return ANOMALY_COLOUR if kind in RED else MARK_COLOURS.get(kind, "black")


def dot_svg(nodes: list[str], edges: list[DrawnEdge], title: str | None = None, legend=(),
            outlined: Iterable[str] = ()) -> str:
    done = subprocess.run(["dot", "-Tsvg"], input=to_dot(nodes, edges, title, legend, outlined), capture_output=True,
                          text=True, timeout=30)
    if done.returncode:
        raise subprocess.SubprocessError(f"dot exited with {done.returncode}: {done.stderr.strip()[-300:]}")
    return done.stdout


# ---- built-in layered layout ---------------------------------------------------------------------
def layers(dag: nx.DiGraph) -> dict:
    """Layer of each node by longest path from a source (sources on layer 0)."""
    layer = {}
    for v in nx.topological_sort(dag):
        layer[v] = max((layer[u] + 1 for u in dag.predecessors(v)), default=0)
    return layer


def _with_dummies(dag: nx.DiGraph, layer: dict) -> tuple[list[list], dict, dict]:
    """Rows of nodes per layer, with one dummy node per layer an edge crosses; the chain of points of
    each DAG edge; and the links between adjacent layers (upper -> lower)."""
    rows = [[] for _ in range(max(layer.values(), default=-1) + 1)]
    for v in dag.nodes:
        rows[layer[v]].append(v)
    chains, down = {}, {v: [] for v in dag.nodes}
    for u, v in dag.edges:
        chain = [u] + [("dummy", u, v, k) for k in range(layer[u] + 1, layer[v])] + [v]
        for k, d in enumerate(chain[1:-1], layer[u] + 1):
            rows[k].append(d)
            down[d] = []
        for a, b in zip(chain, chain[1:]):
            down[a].append(b)
        chains[(u, v)] = chain
    return rows, chains, down


def _crossings(rows: list[list], down: dict) -> int:
    total = 0
    for upper, lower in zip(rows, rows[1:]):
        pos = {v: i for i, v in enumerate(lower)}
        links = sorted((i, pos[w]) for i, v in enumerate(upper) for w in down[v])
        total += sum(1 for a in range(len(links)) for b in range(a + 1, len(links))
                     if links[a][0] < links[b][0] and links[a][1] > links[b][1])
    return total


def order(rows: list[list], down: dict) -> list[list]:
    """Barycentre ordering: sweeps down (by the mean position of the neighbours above) and up (below),
    keeping the order with the fewest crossings seen."""
    up = {v: [] for row in rows for v in row}
    for v, ws in down.items():
        for w in ws:
            up[w].append(v)
    rows = [list(r) for r in rows]
    best, best_x = [list(r) for r in rows], _crossings(rows, down)
    for sweep in range(SWEEPS):
        downward = sweep % 2 == 0
        sequence = range(1, len(rows)) if downward else range(len(rows) - 2, -1, -1)
        for k in sequence:
            fixed = {v: i for i, v in enumerate(rows[k - 1 if downward else k + 1])}
            near = up if downward else down
            current = {v: i for i, v in enumerate(rows[k])}

            def centre(v):
                ns = [fixed[w] for w in near[v] if w in fixed]
                return sum(ns) / len(ns) if ns else current[v]
            rows[k].sort(key=lambda v: (centre(v), current[v]))
        x = _crossings(rows, down)
        if x < best_x:
            best, best_x = [list(r) for r in rows], x
    return best


def _node_width(v) -> float:
    return DUMMY_W if isinstance(v, tuple) else len(str(v)) * CHAR_W + 2 * PAD_X


def coordinates(rows: list[list]) -> tuple[dict, float, float]:
    """Centre of each node, every row centred on the widest; the drawing's width and height."""
    widths = [sum(_node_width(v) for v in row) + GAP_X * (len(row) - 1) for row in rows]
    total = max(widths, default=0.0)
    pos = {}
    for k, (row, w) in enumerate(zip(rows, widths)):
        x = MARGIN + (total - w) / 2
        for v in row:
            pos[v] = (x + _node_width(v) / 2, MARGIN + NODE_H / 2 + k * (NODE_H + GAP_Y))
            x += _node_width(v) + GAP_X
    return pos, total + 2 * MARGIN, len(rows) * (NODE_H + GAP_Y) - GAP_Y + 2 * MARGIN


def _mid(a, b) -> tuple[float, float]:
    return (a[0] + b[0]) / 2, (a[1] + b[1]) / 2


def _path(points: list[tuple[float, float]]) -> tuple[str, tuple[float, float]]:
    """A smooth path through `points` (straight for two; else straight to the first midpoint, a
    quadratic curve round each inner point, straight to the end) and the point halfway along it."""
    if len(points) == 2:
        return (f"M{points[0][0]:.1f},{points[0][1]:.1f} L{points[1][0]:.1f},{points[1][1]:.1f}",
                _mid(*points))
    mids = [_mid(a, b) for a, b in zip(points, points[1:])]
    d = f"M{points[0][0]:.1f},{points[0][1]:.1f} L{mids[0][0]:.1f},{mids[0][1]:.1f}"
    for c, end in zip(points[1:-1], mids[1:]):
        d += f" Q{c[0]:.1f},{c[1]:.1f} {end[0]:.1f},{end[1]:.1f}"
    i = len(points) // 2                   # the curve round the middle inner point, at its apex
    (x0, y0), (cx, cy), (x1, y1) = mids[i - 1], points[i], mids[i]
    return d + f" L{points[-1][0]:.1f},{points[-1][1]:.1f}", ((x0 + 2 * cx + x1) / 4, (y0 + 2 * cy + y1) / 4)


def builtin_svg(dag: nx.DiGraph, nodes: list[str], edges: list[DrawnEdge], title: str | None = None,
                legend=(), outlined: Iterable[str] = ()) -> str:
    """Lay out `dag` (the model's DAG extension, which fixes the layers) and draw `edges` on it, each
    label where it covers no node and no other label (place_labels), the legend below; the `outlined`
    nodes in a thick red frame."""
    dag = dag.copy()
    dag.add_nodes_from(nodes)
    rows, chains, down = _with_dummies(dag, layers(dag))
    pos, width, height = coordinates(order(rows, down))
    top = FONT + 10 if title else 0
    strongest = max((e.strength for e in edges), default=0.0)
    paths = [_edge_points(e, chains, pos) for e in edges]
    boxes = [(pos[v][0] - _node_width(v) / 2, pos[v][1] - NODE_H / 2, pos[v][0] + _node_width(v) / 2,
              pos[v][1] + NODE_H / 2) for v in nodes]
    placed = place_labels([_label(e) for e in edges], paths, boxes)
    width = max([width, len(title or "") * CHAR_W + 2 * MARGIN]
                + [x + len(_label(e)) * LABEL_CHAR_W + MARGIN for e, (x, _) in zip(edges, placed)]
                + [len(text) * LABEL_CHAR_W + 40 + 2 * MARGIN for _, text in legend])
    legend_top = height
    height += len(legend) * LABEL_H + (6 if legend else 0)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height + top:.0f}" '
           f'viewBox="0 {-top} {width:.0f} {height + top:.0f}" font-family="Helvetica, Arial, sans-serif" '
           f'font-size="{FONT}">']
    if title:
        out.append(f'<text x="{width / 2:.1f}" y="{-4}" text-anchor="middle" font-weight="bold">{escape(title)}</text>')
    drawn = [_edge_svg(e, i, points, strongest, at) for i, (e, points, at) in enumerate(zip(edges, paths, placed))]
    out += [group for group, _ in drawn]
    framed = set(outlined)
    for v in nodes:
        x, y = pos[v]
        w = _node_width(v)
        cls, stroke = (("node mechanism", f'stroke="{MARK_COLOURS["mechanism"]}" stroke-width="3"') if v in framed
                       else ("node", 'stroke="black"'))
        out.append(f'<g class="{cls}"><title>{escape(v)}</title>'
                   f'<rect x="{x - w / 2:.1f}" y="{y - NODE_H / 2:.1f}" width="{w:.1f}" height="{NODE_H:.1f}" '
                   f'rx="8" fill="white" {stroke}/>'
                   f'<text x="{x:.1f}" y="{y + FONT / 3:.1f}" text-anchor="middle">{escape(v)}</text></g>')
    # labels last, with a white halo: over the nodes and lines they would hide under
    out.append(f'<g class="labels" font-size="{LABEL_FONT}" paint-order="stroke" stroke="white" stroke-width="3">'
               + "".join(label for _, label in drawn) + "</g>")
    out.append(_legend_svg(legend, legend_top))
    return "\n".join(out + ["</svg>"]) + "\n"


def _legend_svg(legend, top: float) -> str:
    """The legend's lines below the drawing, each after a sample of its stroke."""
    items = []
    for k, (kind, text) in enumerate(legend):
        y = top + k * LABEL_H + LABEL_H / 2
        colour = EDGE_COLOUR if kind == "edge" else MARK_COLOURS.get(kind, ANOMALY_COLOUR)
        dash = ' stroke-dasharray="6,4"' if kind in ("dashed", "removed") else ""
        if kind == "mechanism":
            items.append(f'<rect x="{MARGIN:.1f}" y="{y - 5:.1f}" width="30" height="10" rx="3" fill="white" '
                         f'stroke="{colour}" stroke-width="3"/>')
        elif kind not in ("text", "note"):
            items.append(f'<path d="M{MARGIN:.1f},{y:.1f} L{MARGIN + 30:.1f},{y:.1f}" stroke="{colour}" '
                         f'stroke-width="2"{dash}/>')
        fill = f' fill="{ANOMALY_COLOUR}"' if kind == "note" else ""
        items.append(f'<text x="{MARGIN + 38:.1f}" y="{y + 3:.1f}"{fill}>{escape(text)}</text>')
    return f'<g class="legend" font-size="{LABEL_FONT}">' + "".join(items) + "</g>" if items else ""


def _along(points: list[tuple[float, float]], f: float) -> tuple[float, float]:
    """The point a fraction `f` of the way along the polyline through `points`."""
    lengths = [((b[0] - a[0]) ** 2 + (b[1] - a[1]) ** 2) ** 0.5 for a, b in zip(points, points[1:])]
    left = f * sum(lengths)
    for (a, b), n in zip(zip(points, points[1:]), lengths):
        if left <= n and n > 0:
            return a[0] + (b[0] - a[0]) * left / n, a[1] + (b[1] - a[1]) * left / n
        left -= n
    return points[-1]


def _overlap(a, b) -> float:
    """Area two boxes (x0, y0, x1, y1) share."""
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


def label_box(text: str, x: float, y: float) -> tuple[float, float, float, float]:
    """The box of a label whose text starts at x on baseline y."""
    return x - 1, y - LABEL_H + 3, x + len(text) * LABEL_CHAR_W + 1, y + 3


def place_labels(texts: list[str], paths: list[list], boxes: list[tuple]) -> list[tuple[float, float]]:
    """The start and baseline of each label: beside its edge, at the first of several points along it
    (the middle first) where its box covers no node box and no label placed before; failing that,
    where it covers least. Labels are placed in the order given."""
    placed, taken = [], list(boxes)
    for text, points in zip(texts, paths):
        w = len(text) * LABEL_CHAR_W
        best, best_cost = None, float("inf")
        for f in (0.5, 0.38, 0.62, 0.26, 0.74, 0.15, 0.85):
            x, y = _along(points, f)
            for at in ((x + 6, y + 3), (x - 6 - w, y + 3), (x + 6, y - 9), (x - 6 - w, y + 15),
                       (x - w / 2, y - 9), (x - w / 2, y + 15)):
                cost = sum(_overlap(label_box(text, *at), t) for t in taken)
                if cost < best_cost:
                    best, best_cost = at, cost
                if cost == 0:
                    break
            if best_cost == 0:
                break
        placed.append(best)
        taken.append(label_box(text, *best))
    return placed


def _edge_points(e: DrawnEdge, chains: dict, pos: dict) -> list[tuple[float, float]]:
    """From the border of src to the border of dst, through the edge's dummy nodes; a pair the model
    lacks bends out to the side."""
    chain = chains.get((e.src, e.dst))
    points = [pos[v] for v in chain] if chain else [pos[e.src], pos[e.dst]]
    if not chain:
        (xa, ya), (xb, yb) = points
        bend = 0.25 * max(abs(yb - ya), abs(xb - xa), NODE_H)
        points.insert(1, ((xa + xb) / 2 + bend, (ya + yb) / 2))
    return [_border(points[0], points[1], e.src)] + points[1:-1] + [_border(points[-1], points[-2], e.dst)]


def _border(centre, toward, v) -> tuple[float, float]:
    """Where the segment from node v's centre toward a point leaves v's box."""
    (x, y), (tx, ty) = centre, toward
    dx, dy = tx - x, ty - y
    if dx == 0 and dy == 0:
        return centre
    hw, hh = _node_width(v) / 2, NODE_H / 2
    t = min(hw / abs(dx) if dx else float("inf"), hh / abs(dy) if dy else float("inf"))
    return x + dx * t, y + dy * t


def _edge_svg(e: DrawnEdge, i: int, points: list, strongest: float, at: tuple[float, float]) -> tuple[str, str]:
    """One edge's group (its path and an arrowhead as wide as the pen) and its label, beside it."""
    colour = e.colour
    width = _width(e.strength, strongest)
    head = 6 + 2 * width
    marker = (f'<marker id="arrow{i}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="{head:.1f}" '
              f'markerHeight="{head:.1f}" markerUnits="userSpaceOnUse" orient="auto">'
              f'<path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>') if e.directed else ""
    attrs = (f'fill="none" stroke="{colour}" stroke-width="{width:.2f}"'
             + (' stroke-dasharray="6,4"' if e.dashed else "")
             + (f' marker-end="url(#arrow{i})"' if e.directed else ""))
    d, _ = _path(points)
    return (f'<g class={quoteattr(e.css)}><title>{escape(e.title)}</title>{marker}<path d="{d}" {attrs}/></g>',
            f'<text x="{at[0]:.1f}" y="{at[1]:.1f}" fill="{colour}">{escape(_label(e))}</text>')
