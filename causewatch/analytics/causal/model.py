"""CausalModel: the learned graph (directed and undirected edges), strengths, sepsets, equivalences.

Submodels by MDL regression, Markov-condition violations on new data (what anomaly alerts are built
on), diffs between versions, and export to JSON, Graphviz DOT and TETRAD's graph text format.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable

import networkx as nx
import pandas as pd

from causewatch.analytics.causal import mdl
from causewatch.analytics.causal.ci import AutoTest, CIResult, CITest, Dataset, KDEMITest


class ModelError(ValueError):
    """A model operation on data that does not fit it (missing columns, bad JSON)."""


@dataclasses.dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    directed: bool
    strength: float  # bits: I(src; dst), at most either end's entropy (strength.py), whatever the CI test


class CausalModel:
    """A CPDAG over named variables held in a networkx DiGraph.

    An undirected edge a – b is stored as the two arcs a -> b and b -> a with `directed=False`.
    """

    def __init__(self, graph: nx.DiGraph, sepsets: dict | None = None, equivalences: list | None = None,
                 discrete: Iterable[str] = (), data: pd.DataFrame | None = None):
        self.graph = graph
        self.sepsets = dict(sepsets or {})
        self.equivalences = list(equivalences or [])
        self.discrete = set(discrete)
        self.data = data

    @classmethod
    def from_search(cls, nodes, arcs, undirected, strengths, sepsets, equivalences, discrete=(), data=None):
        g = nx.DiGraph()
        g.add_nodes_from(nodes)
        for a, b in arcs:
            g.add_edge(a, b, directed=True, strength=float(strengths.get(frozenset((a, b)), 0.0)))
        for p in undirected:
            a, b = sorted(p)
            s = float(strengths.get(p, 0.0))
            g.add_edge(a, b, directed=False, strength=s)
            g.add_edge(b, a, directed=False, strength=s)
        return cls(g, sepsets, equivalences, discrete, data)

    # ---- reading the graph --------------------------------------------------------------------
    @property
    def nodes(self) -> list[str]:
        return list(self.graph.nodes)

    def edges(self) -> list[Edge]:
        """Every edge once: directed ones as src -> dst, undirected ones with src < dst."""
        out = []
        for a, b, d in self.graph.edges(data=True):
            if d["directed"] or a < b:
                out.append(Edge(a, b, bool(d["directed"]), float(d.get("strength", 0.0))))
        return sorted(out, key=lambda e: (e.src, e.dst))

    def parents(self, v: str) -> list[str]:
        return sorted(u for u in self.graph.predecessors(v) if self.graph[u][v]["directed"])

    def dag_extension(self) -> nx.DiGraph:
        """One DAG of the equivalence class (Dor & Tarsi): undirected edges oriented without new
        v-structures or cycles; falls back to a topological completion when none exists."""
        directed = nx.DiGraph()
        directed.add_nodes_from(self.graph.nodes)
        directed.add_edges_from((e.src, e.dst) for e in self.edges() if e.directed)
        work = self.graph.copy()
        out = directed.copy()
        remaining = set(work.nodes)
        while remaining:
            sink = next((v for v in sorted(remaining) if self._is_dt_sink(work, v)), None)
            if sink is None:
                sink = min(remaining)
            for u in list(work.predecessors(sink)):
                if not work[u][sink]["directed"]:
                    out.add_edge(u, sink)
            work.remove_node(sink)
            remaining.discard(sink)
        if not nx.is_directed_acyclic_graph(out):
            order = {v: i for i, v in enumerate(nx.topological_sort(directed))}
            out = directed.copy()
            out.add_edges_from((e.src, e.dst) if order[e.src] < order[e.dst] else (e.dst, e.src)
                               for e in self.edges() if not e.directed)
        return out

    @staticmethod
    def _is_dt_sink(work: nx.DiGraph, v) -> bool:
        """No outgoing arc, and every undirected neighbour is adjacent to all other neighbours of v."""
        if any(work[v][w]["directed"] for w in work.successors(v)):
            return False
        neigh = set(work.predecessors(v)) | set(work.successors(v))
        und = [u for u in neigh if work.has_edge(u, v) and not work[u][v]["directed"]]
        return all(work.has_edge(u, w) or work.has_edge(w, u) for u in und for w in neigh if w != u)

    # ---- analysis -----------------------------------------------------------------------------
    def fit_submodels(self, data: pd.DataFrame | None = None) -> dict[str, mdl.Submodel]:
        """MDL regression of every node on its parents (in one DAG of the class); formulas as text."""
        df = self._df(data)
        dag = self.dag_extension()
        return {v: mdl.fit_submodel(df, v, sorted(dag.predecessors(v)), self.discrete) for v in self.nodes}

    def markov_violations(self, data: pd.DataFrame, threshold: float | None = None,
                          ci_test: CITest | None = None) -> pd.DataFrame:
        """For each node, I(node; non-descendants \\ parents | parents) in bits on `data`.

        A node violates the Markov condition when that information exceeds `threshold` (bits) or,
        without one, when the CI test's statistic exceeds its threshold (both in the test's own
        units: bits for the KDE and counting tests). Columns: variable, bits, stat, threshold, violated.
        """
        df = self._df(data)
        dag = self.dag_extension()
        ds = Dataset(df[self.nodes], [v for v in self.nodes if v in self.discrete])
        test = ci_test or KDEMITest()
        rows = []
        for v in self.nodes:
            parents = sorted(dag.predecessors(v))
            others = sorted(set(self.nodes) - nx.descendants(dag, v) - set(parents) - {v})
            if not others:
                rows.append({"variable": v, "bits": 0.0, "stat": 0.0, "threshold": float("nan"), "violated": False})
                continue
            res = _block_test(test, ds, v, others, parents)
            stat, limit = (res.stat, res.threshold) if threshold is None else (res.bits, threshold)
            rows.append({"variable": v, "bits": res.bits, "stat": stat, "threshold": limit,
                         "violated": bool(stat > limit)})
        return pd.DataFrame(rows, columns=["variable", "bits", "stat", "threshold", "violated"])

    def diff(self, other: CausalModel) -> dict:
        """Edges added, removed and re-oriented going from self to other."""
        mine = {frozenset((e.src, e.dst)): e for e in self.edges()}
        theirs = {frozenset((e.src, e.dst)): e for e in other.edges()}

        def show(e):
            return {"src": e.src, "dst": e.dst, "directed": e.directed}
        return {
            "added": [show(theirs[p]) for p in sorted(theirs.keys() - mine.keys(), key=sorted)],
            "removed": [show(mine[p]) for p in sorted(mine.keys() - theirs.keys(), key=sorted)],
            "reoriented": [{"before": show(mine[p]), "after": show(theirs[p])}
                           for p in sorted(mine.keys() & theirs.keys(), key=sorted)
                           if (mine[p].src, mine[p].dst, mine[p].directed)
                           != (theirs[p].src, theirs[p].dst, theirs[p].directed)],
        }

    # ---- export -------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "nodes": self.nodes,
            "edges": [dataclasses.asdict(e) for e in self.edges()],
            "equivalences": self.equivalences,
            "discrete": sorted(self.discrete),
            "sepsets": [{"pair": sorted(p), "given": list(s)}
                        for p, s in sorted(self.sepsets.items(), key=lambda i: sorted(i[0]))],
        }

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_json(cls, text: str | dict) -> CausalModel:
        d = json.loads(text) if isinstance(text, str) else text
        try:
            arcs = [(e["src"], e["dst"]) for e in d["edges"] if e["directed"]]
            und = [frozenset((e["src"], e["dst"])) for e in d["edges"] if not e["directed"]]
            strengths = {frozenset((e["src"], e["dst"])): e.get("strength", 0.0) for e in d["edges"]}
            sepsets = {frozenset(s["pair"]): tuple(s["given"]) for s in d.get("sepsets", [])}
            return cls.from_search(d["nodes"], arcs, und, strengths, sepsets, d.get("equivalences", []),
                                   d.get("discrete", []))
        except (KeyError, TypeError) as e:
            raise ModelError(f"model JSON lacks {e}; expected nodes and edges [{{src, dst, directed}}]") from None

    def to_dot(self, name: str = "causal") -> str:
        lines = [f"digraph {json.dumps(name)} {{"]
        lines += [f"  {json.dumps(v)};" for v in self.nodes]
        for e in self.edges():
            attrs = [f'label="{e.strength:.2f}"'] + ([] if e.directed else ["dir=none"])
            lines.append(f"  {json.dumps(e.src)} -> {json.dumps(e.dst)} [{', '.join(attrs)}];")
        return "\n".join(lines + ["}"]) + "\n"

    def to_tetrad(self) -> str:
        """TETRAD's graph text format ("Graph Nodes:" / "Graph Edges:" with --> and ---)."""
        lines = ["Graph Nodes:", ";".join(self.nodes), "", "Graph Edges:"]
        for i, e in enumerate(self.edges(), 1):
            lines.append(f"{i}. {e.src} {'-->' if e.directed else '---'} {e.dst}")
        return "\n".join(lines) + "\n"

    def _df(self, data):
        df = self.data if data is None else data
        if df is None:
            raise ModelError("no data: pass a DataFrame (the model was not learned from data here)")
        missing = set(self.nodes) - set(df.columns)
        if missing:
            raise ModelError(f"data lacks the model's columns {sorted(missing)}")
        return df


def _block_test(test: CITest, ds: Dataset, v: str, others: list[str], parents: list[str]) -> CIResult:
    """The test of v ⊥ others | parents with `others` as one block (the default AutoTest checks with
    its KDE test, which counts on all-discrete data)."""
    if isinstance(test, AutoTest):
        test = test.kde
    if isinstance(test, KDEMITest):
        return test.block(ds, [v], others, parents)
    # Tests without a block form: the surest single-variable dependence.
    return max((test.test(ds, v, o, tuple(parents)) for o in others), key=lambda r: r.margin)
