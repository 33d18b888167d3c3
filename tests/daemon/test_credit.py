"""Credit grants (daemon/credit.py): a share of the in-flight budget per connection, told at once when it falls."""

from causewatch.daemon.credit import CreditGrants


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_each_connection_gets_its_share_and_a_falling_share_is_pushed_to_all():
    grants = CreditGrants(2**20, idle=30, clock=Clock())
    assert grants.note(b"a", True) == [(b"a", 2**20)]
    assert grants.note(b"a", True) == []   # its grant stands
    # a second connection halves the share: both are told, the first at once
    assert sorted(grants.note(b"b", True)) == [(b"a", 2**19), (b"b", 2**19)]
    assert grants.note(b"c", False) == [(b"a", 2**18), (b"b", 2**18)]   # an old agent counts, gets none
    assert grants.note(b"a", True) == []


def test_shares_are_powers_of_two_and_idle_connections_give_theirs_back():
    clock = Clock()
    grants = CreditGrants(1000 * 2**10, idle=30, clock=clock)
    for k in range(3):
        grants.note(bytes([k]), True)
    assert grants.share == 2**18   # 1000 KiB / 3 = 333 KiB, rounded down to a power of two
    clock.now = 20
    grants.note(b"\x00", True)
    clock.now = 40
    grants.forget_idle()   # 1 and 2 were last heard at 0
    assert grants.share == 2**19
    assert grants.note(b"\x00", True) == [(b"\x00", 2**19)]   # the grown share, on its next frame
    # back: a grant again, and the share halves for both
    assert sorted(grants.note(b"\x01", True)) == [(b"\x00", 2**18), (b"\x01", 2**18)]
