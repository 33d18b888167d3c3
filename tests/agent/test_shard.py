"""An agent's shard (agent/shard.py): the node's rendezvous owner among `daemons`, and its spooled frames
stay promised to the shard they were spooled for when the list changes (handed to SPOOL/to-NAME/),
rejoining the main spool if the node comes back."""

import dataclasses

from causewatch import shards
from causewatch.agent import shard
from causewatch.agent.spool import Spool
from causewatch.config import AgentConfig

DAEMONS = ("a=tcp://127.0.0.1:5001", "b=tcp://127.0.0.1:5002")


def node_of(owner: str, members) -> str:
    return next(f"n{i}" for i in range(1000) if shards.owner(f"n{i}", members) == owner)


def test_choose_sends_to_the_owner_only():
    assert shard.choose(AgentConfig(node="x")) == (AgentConfig(node="x"), "")
    node = node_of("b", ["a", "b"])
    cfg, name = shard.choose(AgentConfig(node=node, daemons=DAEMONS))
    assert (name, cfg.daemon) == ("b", "tcp://127.0.0.1:5002")


def test_frames_stay_promised_to_their_shard(tmp_path):
    # a node a owns, which moves to c when c is added
    node = next(f"n{i}" for i in range(1000)
                if shards.owner(f"n{i}", ["a", "b"]) == "a" and shards.owner(f"n{i}", ["a", "b", "c"]) == "c")
    base = AgentConfig(node=node, spool=str(tmp_path / "spool"), daemons=DAEMONS)
    cfg, name = shard.choose(base)
    assert shard.hand_over(cfg, name) == []                       # a fresh spool: nothing to hand over
    s = Spool(cfg.spool, cfg.spool_max_bytes)
    for seq in (1, 2, 3):
        s.put("boot1", seq, b"frame%d" % seq)
    s.close()
    moved, name2 = shard.choose(dataclasses.replace(base, daemons=DAEMONS + ("c=tcp://127.0.0.1:5003",)))
    assert name2 == "c"
    drains = shard.hand_over(moved, name2)
    assert [(d.daemon, d.daemons) for d in drains] == [("tcp://127.0.0.1:5001", ())]
    left = Spool(drains[0].spool, base.spool_max_bytes)
    assert [(b, q) for b, q, _ in left.pending()] == [("boot1", 1), ("boot1", 2), ("boot1", 3)]
    left.close()
    main = Spool(cfg.spool, cfg.spool_max_bytes)
    assert main.pending() == []                                   # none goes to c
    main.close()
    assert (tmp_path / "spool" / shard.MARK).read_text() == "c=tcp://127.0.0.1:5003"
    assert len(shard.hand_over(moved, name2)) == 1                # again: still one folder, still for a
    # the list shrinks back: the node is a's again and the frames rejoin the main spool
    assert shard.hand_over(cfg, name) == []
    main = Spool(cfg.spool, cfg.spool_max_bytes)
    assert [q for _, q, _ in main.pending()] == [1, 2, 3]
    main.close()
    assert not list((tmp_path / "spool").glob("to-*"))
