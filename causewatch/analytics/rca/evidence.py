"""The evidence of a ranked unit in words: what changed, by how much, and what it explains."""

from __future__ import annotations

from causewatch.analytics.rca.deviation import CUT, Deviation

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


def _shares(explained: dict[str, float], order) -> str:
    units = sorted(explained, key=lambda u: (-order(u), u))
    shown = ", ".join(f"{u} ({explained[u]:.0%})" for u in units[:NAMED])
    return shown + (f" and {len(units) - NAMED} more" if len(units) > NAMED else "")


def _level(level) -> str:
    return f", once the ×{number(level.factor)} that {level.units} of {level.of} units' {level.kind} share " \
        "is taken out" if level is not None else ""


def sentence(unit: str, strong, hyp, *, by_graph: bool, off_path: bool, order, level=None) -> str:
    """One unit's evidence: `strong` its most changed column (a hypotheses.Change, None without data),
    `hyp` its hypothesis (None: not a candidate); `order` sizes the units named, largest first; `level`
    the common change taken out of that column's kind (levels.Level), if any."""
    if strong is None:
        return f"{unit} has no column with data in both windows"
    if hyp is None:
        return f"no change beyond the cut: {change(unit, strong.kind, strong.dev)}{_level(level)}"
    parts = [change(unit, strong.kind, strong.dev) + _level(level)]
    if strong.size < CUT:
        parts[0] += ", below the cut on its own"
    if hyp.explained:
        if by_graph:
            parts.append(f"it accounts for the changes at its callers {_shares(hyp.explained, order)}")
        else:
            parts.append(f"it explains the change at units that move with it on the baseline "
                         f"{names(sorted(hyp.explained, key=lambda u: (-order(u), u)))}")
    if hyp.echo_of:
        parts.append(f"it may echo {names(sorted(hyp.echo_of, key=lambda u: (-order(u), u)))}, anomalous too")
    elif hyp.explained:
        parts.append("their changes are echoes")
    if off_path:
        parts.append("it does not account for the symptom's change")
    return "; ".join(parts)
