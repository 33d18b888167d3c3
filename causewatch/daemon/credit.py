"""Credit for agents (the ZeroMQ guide's credit-based flow control): the bytes each connected agent may
have sent and not yet had acked, so that all agents together hold about `budget` bytes in flight however many connect.

The IO thread notes every frame here; a grant is a share of the budget among the connections heard from in
the last `idle` seconds, rounded down to a power of two so that it changes rarely. An agent may always have
one frame in flight, so the bound is about max(budget, connections x one frame).
"""

from __future__ import annotations

import time


def _floor_pow2(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


class CreditGrants:
    def __init__(self, budget: int, idle: float = 30.0, clock=time.monotonic):
        self.budget, self.idle, self.clock = budget, idle, clock
        self._seen: dict[bytes, float] = {}     # connection -> when its last frame came
        self._granted: dict[bytes, int] = {}    # credit connection -> bytes last granted
        self.share = budget                     # the grant of a connection now

    def note(self, identity: bytes, wants_credit: bool) -> list[tuple[bytes, int]]:
        """A frame came from `identity`: the grants to send now, as (connection, bytes). A credit connection
        whose grant is not the share gets the share; when the share falls, every connection granted more
        is told at once (an agent spends a stale grant until it hears), when it grows, each on its next frame."""
        self._seen[identity] = self.clock()
        share = _floor_pow2(self.budget // len(self._seen))
        changes = {i: share for i, g in self._granted.items() if g > share} if share < self.share else {}
        self.share = share
        if wants_credit and self._granted.get(identity) != share:
            changes[identity] = share
        self._granted.update(changes)
        return list(changes.items())

    @property
    def connections(self) -> int:
        return len(self._seen)

    def forget_idle(self) -> None:
        """Drop the connections not heard from in `idle` seconds (gone, or idle: a returning agent's next
        frame gets it a grant again); the share grows back lazily, on the next grants."""
        cutoff = self.clock() - self.idle
        for identity in [i for i, t in self._seen.items() if t < cutoff]:
            del self._seen[identity]
            self._granted.pop(identity, None)
        self.share = _floor_pow2(self.budget // max(len(self._seen), 1))
