"""Shards: a site's daemons, named, and which one owns a key (a node's frames, a scope's model), by
rendezvous (highest-random-weight) hashing, as Thaler and Ravishankar gave it and VictoriaMetrics' vminsert uses.

Every member scores each key with a hash of (member, key); the highest score owns it. Adding a member
moves to it only the keys it now outscores, about 1/N of them, and takes none from one member to
another; removing one moves only its own keys. The hash is keyed by the member's NAME, not its address,
so a daemon that moves host keeps its nodes.
"""

from __future__ import annotations

import hashlib
import re

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")   # a shard name: also a folder (shard=NAME) and a label


def weight(member: str, key: str) -> int:
    """The member's score for key: 64 bits of BLAKE2b over both (stable across processes and machines,
    unlike Python's hash)."""
    return int.from_bytes(hashlib.blake2b(f"{member}\0{key}".encode(), digest_size=8).digest(), "big")


def owner(key: str, members) -> str:
    """The member (a name) that owns key: the highest weight; ties, vanishingly rare, to the larger name."""
    names = list(members)
    if not names:
        raise ValueError("no shards to choose from")
    return max(names, key=lambda m: (weight(m, key), m))


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a shard, or None."""
    if not NAME.fullmatch(name):
        return f"{name!r} is not a shard name (letters, digits, _ . -; 63 at most; a letter or digit first)"
    return None


def parse_members(entries, check_address=None) -> dict[str, str]:
    """{name: address} of entries written NAME=ADDRESS (a bare ADDRESS is its own name only where it
    is a valid name, which addresses are not: so NAME= is required). Raises ValueError naming the entry."""
    out: dict[str, str] = {}
    for entry in entries:
        if not isinstance(entry, str):
            raise ValueError(f"{entry!r}: expected a string NAME=ADDRESS")
        name, eq, address = entry.partition("=")
        if not eq or not address:
            raise ValueError(f"{entry!r}: write NAME=ADDRESS (e.g. a=tcp://10.0.0.5:5555)")
        problem = name_problem(name) or (check_address(address) if check_address else None)
        if problem:
            raise ValueError(f"{entry!r}: {problem}")
        if name in out:
            raise ValueError(f"{entry!r}: shard {name!r} is named twice")
        out[name] = address
    return out
