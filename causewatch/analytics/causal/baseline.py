"""Which model version becomes a scope's baseline: the majority rule, robust to one flickering edge.

Versions are (model_id, rows learnt from, edges as unordered pairs), oldest first; `choose` returns the
chosen version or what the rule still waits for, as data (the daemon stores it with each version).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

WINDOW = 5       # the newest eligible versions the majority is taken over
MIN_VERSIONS = 3  # a majority of fewer says nothing a pair of equal versions does not
TOLERANCE = 1    # edges a chosen version may differ from the majority by (one flickering edge)
FORCE_AFTER = 10  # eligible versions after which the closest version is taken however far (the bound)


@dataclass(frozen=True)
class Version:
    """One stored model version: its id, the rows it was learnt from, its edges (frozenset pairs)."""
    model_id: int | None
    n_rows: int
    edges: frozenset = field(default_factory=frozenset)


@dataclass(frozen=True)
class Decision:
    """The rule's answer: `model_id` chosen (None while waiting), `how` it was chosen, `waiting_for`
    in words, and the figures behind it (eligible versions, the majority's edges, the distance)."""
    model_id: int | None
    chosen: bool
    how: str
    waiting_for: str
    eligible: int
    majority: list = field(default_factory=list)
    distance: int | None = None

    def to_dict(self) -> dict:
        return {"chosen": self.chosen, "model_id": self.model_id, "how": self.how, "waiting_for": self.waiting_for,
                "eligible_versions": self.eligible, "majority_edges": self.majority, "distance": self.distance,
                "rule": RULE}


RULE = (f"the newest version within {TOLERANCE} edge of the edges present in a majority of the newest "
        f"{WINDOW} versions learnt from enough rows (at least {MIN_VERSIONS} of them), or two equal versions in "
        f"a row; after {FORCE_AFTER} such versions, the closest one")


def pairs(edges) -> frozenset:
    """Edges (objects with src, dst, or (src, dst) tuples) as unordered pairs: a re-oriented edge is the same."""
    return frozenset(frozenset((e.src, e.dst) if hasattr(e, "src") else e) for e in edges)


def choose(versions: list[Version], min_rows: int, total_eligible: int | None = None) -> Decision:
    """The baseline among `versions` (oldest first; the newest 2 * WINDOW or so), or why none yet. Two
    equal versions in a row, the newer learnt from `min_rows` rows at least, are chosen at once (the old
    first-stable rule); otherwise the majority over the newest WINDOW versions with `min_rows` rows.
    `total_eligible`: how many versions with `min_rows` rows the scope has had in all (for FORCE_AFTER;
    default: those given)."""
    eligible = [v for v in versions if v.n_rows >= min_rows]
    total = len(eligible) if total_eligible is None else total_eligible
    if not eligible:
        newest = versions[-1].n_rows if versions else 0
        return Decision(None, False, "", f"a version learnt from {min_rows} task rows at least "
                        f"(the newest has {newest})", 0)
    if len(versions) >= 2 and eligible[-1] is versions[-1] and versions[-1].edges == versions[-2].edges:
        return Decision(eligible[-1].model_id, True, "first stable", "", total, _names(eligible[-1].edges), 0)
    recent = eligible[-WINDOW:]
    counts = Counter(p for v in recent for p in v.edges)
    majority = frozenset(p for p, c in counts.items() if 2 * c > len(recent))
    # closest to the majority first, then the newest
    best = min(reversed(recent), key=lambda v: len(v.edges ^ majority))
    distance = len(best.edges ^ majority)
    if len(recent) < MIN_VERSIONS:
        return Decision(None, False, "", f"{MIN_VERSIONS} versions learnt from {min_rows} rows at least "
                        f"(has {len(recent)}, with edges differing), or two equal ones in a row", total,
                        _names(majority), distance)
    if distance <= TOLERANCE:
        return Decision(best.model_id, True, "stable majority", "", total, _names(majority), distance)
    if total >= FORCE_AFTER:
        return Decision(best.model_id, True, f"closest after {total} versions", "", total, _names(majority), distance)
    flicker = sorted(_names(best.edges ^ majority))
    return Decision(None, False, "", f"a version within {TOLERANCE} edge of the majority of the newest {len(recent)} "
                    f"(the closest differs by {distance}: {', '.join(flicker)}); or at the latest the "
                    f"{FORCE_AFTER}th version (has {total})", total, _names(majority), distance)


def _names(edges) -> list[str]:
    return sorted(" --- ".join(sorted(p)) for p in edges)
