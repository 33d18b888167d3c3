"""The evidence of a ranked unit in words: what changed, by how much, and what it explains."""

from __future__ import annotations

from causewatch.analytics.rca.deviation import Deviation

NAMED = 3   # units named in a list before "and N more"


def number(x: float) -> str:
    return f"{x:.3g}"


def names(units: list[str]) -> str:
    shown = ", ".join(units[:NAMED])
    return shown + (f" and {len(units) - NAMED} more" if len(units) > NAMED else "")


def change(unit: str, kind: str, dev: Deviation) -> str:
    verb = "rose" if dev.incident > dev.median else "fell"
    what = unit if kind == unit else f"{unit}'s {kind}"
    return (f"{what} {verb} from {number(dev.median)} to {number(dev.incident)} "
            f"(robust z {dev.z:.3g})")


def sentence(unit: str, kind: str | None, dev: Deviation | None, anomalous: bool, *, explained: list[str],
             by_graph: bool, echo_of: list[str], off_path: bool) -> str:
    """One unit's evidence; `explained` are the anomalous units its change accounts for, `echo_of` the
    anomalous units whose change may account for its own."""
    if dev is None or kind is None:
        return f"{unit} has no column with data in both windows"
    if not anomalous:
        return f"no change beyond the cut: {change(unit, kind, dev)}"
    parts = [change(unit, kind, dev)]
    if explained:
        how = "its callers" if by_graph else "units that move with it on the baseline"
        parts.append(f"it explains the change at {how} {names(explained)}")
    if echo_of:
        parts.append(f"it may echo {names(echo_of)}, anomalous too")
    elif explained:
        parts.append("their changes are echoes")
    if off_path:
        parts.append("it lies off the symptom's call paths")
    return "; ".join(parts)
