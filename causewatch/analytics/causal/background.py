"""Background knowledge for the PC learner: tiers, forbidden and required edges.

Tier "inputs" (parameters) only has outgoing edges, tier "outputs" only incoming ones; other named
tiers are ordered as given, and an edge between two ordered tiers points from the earlier one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import networkx as nx


class BackgroundError(ValueError):
    """Background knowledge that names unknown variables or contradicts itself."""


class Background:
    """What the expert knows before learning; the learner never tests, removes or orients against it."""

    def __init__(self, tiers: Mapping[str, Iterable[str]] | None = None,
                 forbidden: Iterable[tuple[str, str]] = (), required: Iterable[tuple[str, str]] = ()):
        self.tiers = {name: list(vs) for name, vs in (tiers or {}).items()}
        self.forbidden = {frozenset(p) for p in forbidden}
        self.required = {tuple(p) for p in required}
        self._outputs = frozenset(self.tiers.get("outputs", ()))
        self._rank: dict[str, float] = {}
        middle = [t for t in self.tiers if t not in ("inputs", "outputs")]
        ends = {"inputs": float("-inf"), "outputs": float("inf")}
        for name, vs in self.tiers.items():
            rank = ends[name] if name in ends else float(middle.index(name))
            for v in vs:
                if v in self._rank:
                    raise BackgroundError(f"variable {v!r} is in two tiers; put it in one")
                self._rank[v] = rank

    def validate(self, nodes: Iterable[str]) -> None:
        """Raise BackgroundError if a name is unknown or the knowledge contradicts itself."""
        nodes = set(nodes)
        named = set(self._rank) | {v for p in self.forbidden for v in p} | {v for p in self.required for v in p}
        unknown = named - nodes
        if unknown:
            raise BackgroundError(f"background names unknown variables {sorted(unknown)}; "
                                  f"variables are {sorted(nodes)}")
        for a, b in self.required:
            if frozenset((a, b)) in self.forbidden:
                raise BackgroundError(f"edge {a}->{b} is both required and forbidden")
            if not self.orientation_allowed(a, b) or not self.adjacency_allowed(a, b):
                raise BackgroundError(f"required edge {a}->{b} goes against the tiers")
        g = nx.DiGraph(list(self.required))
        if not nx.is_directed_acyclic_graph(g):
            raise BackgroundError(f"required edges form a cycle: {nx.find_cycle(g)}")

    def outputs(self) -> frozenset[str]:
        """The output tier. An output has no children, so it is a collider on every path through it:
        conditioning on it can open paths and never blocks one, and no separating set needs it."""
        return self._outputs

    def is_required(self, a: str, b: str) -> bool:
        return (a, b) in self.required or (b, a) in self.required

    def adjacency_allowed(self, a: str, b: str) -> bool:
        """False for forbidden pairs and for two inputs or two outputs (neither may gain a parent/child)."""
        if frozenset((a, b)) in self.forbidden:
            return False
        ra, rb = self._rank.get(a), self._rank.get(b)
        return not (ra is not None and ra == rb and ra in (float("-inf"), float("inf")))

    def orientation_allowed(self, a: str, b: str) -> bool:
        """Whether a -> b agrees with the tiers and the required edges."""
        if (b, a) in self.required:
            return False
        ra, rb = self._rank.get(a), self._rank.get(b)
        if ra == float("inf") or rb == float("-inf"):
            return False
        if ra is None or rb is None:
            return True
        return ra <= rb

    def forced(self, a: str, b: str) -> tuple[str, str] | None:
        """The orientation the knowledge forces on an adjacency a–b, if any."""
        ab, ba = self.orientation_allowed(a, b), self.orientation_allowed(b, a)
        if (a, b) in self.required or (ab and not ba):
            return a, b
        if (b, a) in self.required or (ba and not ab):
            return b, a
        return None
