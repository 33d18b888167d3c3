"""Which daemon an agent sends to on a sharded site, and what becomes of its spool when that changes.

With `daemons` configured the agent's node is hashed over the shard names (causewatch/shards.py,
rendezvous) and it sends to that one shard only: while it is down the agent spools and backfills when it
returns; it never fails over, since a frame stored by two shards would be stored twice (each shard's
dedup by (node, boot, seq) is its own).

When the list changes and the node now hashes to another shard, the frames already spooled stay promised
to the shard they were spooled for: the spool names its shard (SPOOL/shard, "NAME=ENDPOINT"); at start,
an agent whose node moved hands those frames to SPOOL/to-NAME/ and a `Drain` delivers them to NAME
(its endpoint as recorded) while new frames go to the new shard. A drained folder is removed; one whose
shard never answers again keeps its frames (bounded like the spool; delete the folder to give them up).
A spool without a name (written before sharding) goes to the shard the node hashes to now.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import threading
from pathlib import Path

from causewatch import shards
from causewatch.agent.sender import Sender
from causewatch.agent.spool import Spool
from causewatch.config import AgentConfig

log = logging.getLogger("causewatch.agent.shard")
MARK = "shard"        # SPOOL/shard: "NAME=ENDPOINT" of the shard the spool's frames are promised to
HANDED = "to-"        # SPOOL/to-NAME/: frames promised to NAME after the node moved away from it


def choose(cfg: AgentConfig) -> tuple[AgentConfig, str]:
    """The config with `daemon` set to the endpoint of the shard the node hashes to, and that shard's
    name; unchanged and "" without `daemons`."""
    if not cfg.daemons:
        return cfg, ""
    members = shards.parse_members(cfg.daemons)
    name = shards.owner(cfg.node, members)
    return dataclasses.replace(cfg, daemon=members[name]), name


def hand_over(cfg: AgentConfig, name: str) -> list[AgentConfig]:
    """Move the spool's frames promised to another shard than `name` into SPOOL/to-THAT/, mark the spool
    as `name`'s, and return a config per folder that still holds frames for a shard (its spool, its
    recorded endpoint): what `Drain`s deliver. Called before the agent's Sender opens the spool."""
    if not name:
        return []
    root = Path(cfg.spool).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    mark = root / MARK
    before = mark.read_text().strip() if mark.is_file() else ""
    old, _, old_endpoint = before.partition("=")
    if old and old != name and (root / "spool.sqlite").is_file():
        folder = root / f"{HANDED}{old}"
        folder.mkdir(exist_ok=True)
        (folder / MARK).write_text(before)
        kept = Spool(folder, cfg.spool_max_bytes)
        try:
            moved = kept.adopt(root)   # a crash between its two commits leaves a frame in both: see below
        finally:
            kept.close()
        if moved:
            log.warning("node %s now hashes to shard %s; %d frames spooled for shard %s (%s) go there still",
                        cfg.node, name, moved, old, old_endpoint)
    mark.write_text(f"{name}={cfg.daemon}")
    out = []
    for folder in sorted(root.glob(f"{HANDED}*")):
        if folder.name == f"{HANDED}{name}":
            # the node came back to that shard: its frames rejoin the main spool (same shard, same dedup)
            main = Spool(root, cfg.spool_max_bytes)
            try:
                main.adopt(folder)
            finally:
                main.close()
            shutil.rmtree(folder, ignore_errors=True)
            continue
        endpoint = (folder / MARK).read_text().strip().partition("=")[2] if (folder / MARK).is_file() else ""
        if not _holds_frames(folder, cfg.spool_max_bytes):
            shutil.rmtree(folder, ignore_errors=True)   # nothing promised there (the node moved on an empty spool)
        elif endpoint:
            out.append(dataclasses.replace(cfg, daemon=endpoint, daemons=(), spool=str(folder)))
    return out


def _holds_frames(folder: Path, max_bytes: int) -> bool:
    if not (folder / "spool.sqlite").is_file():
        return False
    spool = Spool(folder, max_bytes)
    try:
        return spool.bytes > 0
    finally:
        spool.close()


class Drain:
    """Delivers the frames of a handed-over spool (`hand_over`) to the shard they were promised to, on a
    thread of its own (a Sender, at-least-once to that shard as any), then removes the folder. While
    that shard is down it waits, as the agent's own sender does."""

    def __init__(self, cfg: AgentConfig, poll: float = 1.0):
        self.cfg, self.poll = cfg, poll
        self.sender = Sender(cfg)
        self._stop = threading.Event()
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="drain", daemon=True)

    def start(self) -> "Drain":
        self.sender.start()
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.sender.flush(self.poll):
                self.done.set()
                return

    def close(self) -> None:
        """Stop; a drained folder is removed, one with frames left stays for the next run."""
        self._stop.set()
        self._thread.join()
        self.sender.close()
        if self.done.is_set():
            shutil.rmtree(self.cfg.spool, ignore_errors=True)
            log.info("frames handed over to %s all delivered", self.cfg.daemon)
