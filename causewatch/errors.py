"""The one error hierarchy of causewatch, and `explain`, which turns known library failures into a sentence.

Every message names the thing that was wrong and what was expected, so a user can fix it.
"""

import errno


class CausewatchError(Exception):
    """Base of every error causewatch raises on purpose."""


class WireError(CausewatchError):
    """A frame that breaks wire protocol v1: `field` is where, `reason` what, `code` the counter label."""

    def __init__(self, field: str, reason: str, code: str = "invalid"):
        self.field, self.reason, self.code = field, reason, code
        self.boot: str | None = None  # set when the envelope was readable, so the sender can settle the frame
        self.seq: int | None = None
        super().__init__(f"{field}: {reason}")


class ConfigError(CausewatchError):
    """A bad setting: `key` names it, `where` the file (and line) or flag it came from."""

    def __init__(self, key: str, reason: str, where: str = ""):
        self.key, self.reason, self.where = key, reason, where
        # a flag already names the key: "--bind: …", a file names line and key: "daemon.toml:3: bind: …"
        head = where if where.startswith("--") else f"{where + ': ' if where else ''}{key}"
        super().__init__(f"{head}: {reason}")


class InputError(CausewatchError):
    """Bad input to a command or library call (a file, a column, an expression)."""


class NotFoundError(InputError):
    """Input that names what is not there (yet): an app without probe results, a scope without a model.
    The HTTP API answers it with a 404; the CLI, like any InputError, exits 2 naming it."""


def explain(e: BaseException) -> str | None:
    """One line for a failure of DuckDB, ZeroMQ or the OS that a user can fix; None for anything else.

    The libraries are recognised by module name, so this never imports them.
    """
    text = (str(e).strip().splitlines() or [type(e).__name__])[0]
    library = type(e).__module__.split(".")[0]
    if library in ("duckdb", "_duckdb"):
        low = text.lower()
        if "lock" in low:
            return f"{text} — the store is in use (a running daemon?): stop it, or ask the daemon over --http"
        if "does not exist" in low or "no such file" in low:
            return f"{text} — give the path of an existing store (the daemon's --db)"
        if "not a valid duckdb" in low or "corrupt" in low or "serializ" in low or "checksum" in low:
            return f"{text} — this file is not a readable DuckDB store: give the daemon's --db file"
        return f"DuckDB: {text}"
    code = getattr(e, "errno", None)
    if library == "zmq":
        if code == errno.EADDRINUSE:
            return f"{text}: the ZeroMQ port is in use (another daemon?) — stop it or choose another --bind"
        if code in (errno.EINVAL, errno.EPROTONOSUPPORT, errno.ENODEV):
            return f"{text}: bad ZeroMQ endpoint — write tcp://HOST:PORT or ipc:///PATH"
        return None
    if isinstance(e, OSError):
        if code == errno.EADDRINUSE:
            return f"{text}: the port is in use — stop the other process or choose another port"
        if code == errno.EADDRNOTAVAIL or type(e).__name__ == "gaierror":   # no socket import at start-up
            return f"{text}: no such local address — give an address of this machine"
        if e.filename is not None and code in (errno.EACCES, errno.EPERM, errno.ENOENT, errno.EROFS,
                                               errno.EISDIR, errno.ENOTDIR, errno.ENOSPC):
            return f"{e.filename}: {e.strerror} — choose a path that exists and that you may write"
    return None
