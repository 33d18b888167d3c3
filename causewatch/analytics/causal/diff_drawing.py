"""A causal diff as a picture: the newer window's model drawn as model_svg draws a model, its changes
marked: added edges in blue, removed ones dashed grey, re-oriented ones purple, strengths that moved
beyond their band orange and labelled old → new, changed mechanisms' nodes framed in red; a legend says so.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import subprocess

from causewatch.analytics.causal import drawing
from causewatch.analytics.causal.diff import CausalDiff, EdgeChange

log = logging.getLogger("causewatch.analytics.causal.diff_drawing")

LEGEND = {"added": "blue: an edge only the newer window's model has",
          "removed": "dashed grey: an edge only the baseline's model has",
          "reoriented": "purple: an edge whose orientation changed (was … in the label)",
          "strength_changed": "orange: a strength moved beyond its band, bits old → new",
          "mechanism": "red frame: a variable's mechanism changed (its fit on its causes no longer holds)"}


def diff_svg(diff: CausalDiff, engine: str = "auto", title: str | None = None) -> str:
    """SVG text of `diff`: its newer model's graph with each change marked, and a legend."""
    if engine not in drawing.ENGINES:
        raise ValueError(f"drawing engine {engine!r}: expected one of {', '.join(drawing.ENGINES)}")
    dag = diff.after.dag_extension()
    nodes, edges = diff_edges(diff)
    outlined = [m.variable for m in diff.mechanisms]
    legend = legend_lines(diff)
    if engine == "dot" or (engine == "auto" and shutil.which("dot")):
        try:
            return drawing.dot_svg(nodes, edges, title, legend, outlined)
        except (OSError, subprocess.SubprocessError) as e:
            if engine == "dot":
                raise
            log.warning("Graphviz dot failed (%s); drawing with the built-in layout", e)
    return drawing.builtin_svg(dag, nodes, edges, title, legend, outlined)


def diff_edges(diff: CausalDiff) -> tuple[list[str], list[drawing.DrawnEdge]]:
    """The nodes of both models and the edges to draw: the newer model's (drawing.drawn_edges), each
    changed one marked and labelled, then the removed ones, which lie outside its layout."""
    nodes, edges = drawing.drawn_edges(diff.after, (), diff.after.dag_extension())
    changes: dict[frozenset, list[EdgeChange]] = {}
    for c in diff.edges:
        changes.setdefault(frozenset((c.src, c.dst)), []).append(c)
    drawn = [_marked(e, changes.get(frozenset((e.src, e.dst)), [])) for e in edges]
    removed = [c for c in diff.edges if c.kind == "removed"]
    drawn += [drawing.DrawnEdge(c.src, c.dst, c.before.directed, c.before.strength, False, in_model=False,
                                mark="removed", text=f"removed ({c.before.strength:.2f})") for c in removed]
    nodes += [v for v in diff.before.nodes if v not in nodes]
    return nodes, drawn


def _marked(e: drawing.DrawnEdge, changes: list[EdgeChange]) -> drawing.DrawnEdge:
    """An edge of the newer model with its changes' mark (a strength change's colour over a
    re-orientation's) and label."""
    if not changes:
        return e
    kinds = {c.kind: c for c in changes}
    words = [f"{e.strength:.2f}"]
    if "strength_changed" in kinds:
        words = [f"{kinds['strength_changed'].before.strength:.2f} → {e.strength:.2f}"]
    if "reoriented" in kinds:
        was = kinds["reoriented"].before
        words.append(f"was {was.src} {'->' if was.directed else '---'} {was.dst}")
    if "added" in kinds:
        words.append("new")
    mark = next(k for k in ("strength_changed", "added", "reoriented") if k in kinds)
    return dataclasses.replace(e, mark=mark, text=", ".join(words))


def legend_lines(diff: CausalDiff) -> list[tuple[str, str]]:
    """The legend: what the strokes mean, one line per kind of change the picture shows, or that none did."""
    lines = [("edge", "grey: an edge of both models, width and label by strength, bits")]
    shown = {c.kind for c in diff.edges} | ({"mechanism"} if diff.mechanisms else set())
    lines += [(kind, text) for kind, text in LEGEND.items() if kind in shown]
    if not shown:
        lines.append(("text", "no change beyond the bands" + ("" if diff.mechanisms_judged
                                                            else " (mechanisms not judged: no rows)")))
    elif not diff.mechanisms_judged:
        lines.append(("text", "mechanisms not judged: no rows"))
    return lines
