"""The agent's on-disk spool: every frame stays here from send until its ack, across agent restarts.

A bounded SQLite file (WAL, so a killed agent keeps what it had committed). When it is full the
oldest frames are dropped and counted — the caller logs and exports that, it is never silent.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path


class Spool:
    def __init__(self, folder: str | Path, max_bytes: int):
        self.path = Path(folder).expanduser() / "spool.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS frames (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                         "boot TEXT NOT NULL, seq INTEGER NOT NULL, data BLOB NOT NULL, UNIQUE (boot, seq))")
        self.bytes = self._db.execute("SELECT coalesce(sum(length(data)), 0) FROM frames").fetchone()[0]

    def put(self, boot: str, seq: int, data: bytes) -> list[tuple[str, int]]:
        """Keep a frame; return the (boot, seq) of the oldest frames dropped to make room for it."""
        if len(data) > self.max_bytes:
            raise ValueError(f"frame of {len(data)} bytes is larger than the whole spool ({self.max_bytes})")
        with self._lock:
            dropped = []
            self._db.execute("BEGIN")
            while self.bytes + len(data) > self.max_bytes:
                fid, b, s, size = self._db.execute(
                    "SELECT id, boot, seq, length(data) FROM frames ORDER BY id LIMIT 1").fetchone()
                self._db.execute("DELETE FROM frames WHERE id = ?", (fid,))
                self.bytes -= size
                dropped.append((b, s))
            self._db.execute("INSERT INTO frames (boot, seq, data) VALUES (?, ?, ?)", (boot, seq, data))
            self._db.execute("COMMIT")
            self.bytes += len(data)
            return dropped

    def remove(self, boot: str, seq: int) -> None:
        with self._lock:
            row = self._db.execute("DELETE FROM frames WHERE boot = ? AND seq = ? RETURNING length(data)",
                                   (boot, seq)).fetchone()
            if row:
                self.bytes -= row[0]

    def adopt(self, folder: Path) -> int:
        """Move every frame of another spool (an instrumented program's) into this one; return how many.
        A crash between the two commits leaves a frame in both: the daemon stores it once."""
        other = folder / "spool.sqlite"
        if not other.is_file() or other == self.path:
            return 0
        theirs = Spool(folder, self.max_bytes)
        try:
            frames = theirs.pending()
            for boot, seq, data in frames:
                with self._lock:
                    self._db.execute("INSERT OR IGNORE INTO frames (boot, seq, data) VALUES (?, ?, ?)",
                                     (boot, seq, data))
                theirs.remove(boot, seq)
        finally:
            theirs.close()
        with self._lock:
            self.bytes = self._db.execute("SELECT coalesce(sum(length(data)), 0) FROM frames").fetchone()[0]
        return len(frames)

    def pending(self) -> list[tuple[str, int, bytes]]:
        """Every frame kept, oldest first."""
        with self._lock:
            return self._db.execute("SELECT boot, seq, data FROM frames ORDER BY id").fetchall()

    def close(self) -> None:
        with self._lock:
            self._db.close()
