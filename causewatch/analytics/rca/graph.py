"""A call graph between units, background knowledge: `src` calls `dst`, so a fault at `dst` shows at `src`
and at every unit that reaches it."""

from __future__ import annotations

from collections.abc import Iterable


class CallGraph:
    """Who calls whom; `ancestors(u)` are the units a fault at u propagates to, `descendants(u)` the
    units whose fault u would echo."""

    def __init__(self, edges: Iterable[tuple[str, str]]):
        self.edges = [(str(a), str(b)) for a, b in edges]

    @property
    def nodes(self) -> set[str]:
        return {n for edge in self.edges for n in edge}

    def callers(self) -> dict[str, set[str]]:
        """unit -> the units that call it."""
        out: dict[str, set[str]] = {}
        for a, b in self.edges:
            out.setdefault(b, set()).add(a)
        return out

    def _reach(self, start: str, forward: bool) -> set[str]:
        step: dict[str, set[str]] = {}
        for a, b in self.edges:
            src, dst = (a, b) if forward else (b, a)
            step.setdefault(src, set()).add(dst)
        seen, todo = set(), [start]
        while todo:
            for nxt in step.get(todo.pop(), ()):
                if nxt not in seen and nxt != start:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    def descendants(self, unit: str) -> set[str]:
        return self._reach(unit, forward=True)

    def ancestors(self, unit: str) -> set[str]:
        return self._reach(unit, forward=False)
