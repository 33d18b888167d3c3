"""A workload's phase mix: SimPoint's phases of its vectors, each with its weight, its intervals and the keys
that weigh most in it, as the phases command, the demo's report and a job's report show them."""

from __future__ import annotations

from .centroids import phase_centroids, top_keys
from .keyed import bbv_matrix
from .simpoint import SimPoint


def top_functions(model, X, names, top: int) -> list[list[dict]]:
    """Each phase's `top` keys by their share of its centroid, as [{"key", "share"}]: a function's name
    (a stored key, or a block's function in the pc file), else `block N` (a .bb file's block id)."""
    centroids = phase_centroids(X, model.labels_, model.interval_weights_, model.k_)
    return [[{"key": key if isinstance(key, str) else f"block {key + 1}", "share": round(share, 6)}
             for key, share in phase] for phase in top_keys(centroids, top, names)]


def phase_rows(model, tops: list[list[dict]] | None) -> list[dict]:
    """Per non-empty phase: its number, simulation point, weight, intervals and (given) top functions."""
    return [{"phase": p, "simpoint": int(i), "weight": float(model.weights_[p]),
             "intervals": int((model.labels_ == p).sum()), **({"top": tops[p]} if tops is not None else {})}
            for p, i in enumerate(model.simpoints_) if i >= 0]


def phase_mix(rows, top: int = 3, **simpoint) -> list[dict]:
    """The phases of vectors in their long form (a row per vector and key, as the daemon's `bbv` rows come;
    `keyed.bbv_matrix`), heaviest first: `phase_rows` with each phase's `top` keys, clustered by
    SimPoint(**simpoint); [] with fewer than two vectors, which make no mix."""
    X, keys, _ = bbv_matrix(rows)
    if X.shape[0] < 2:
        return []
    model = SimPoint(**simpoint).fit(X)
    return sorted(phase_rows(model, top_functions(model, X, keys, top)), key=lambda r: (-r["weight"], r["phase"]))
