"""The one error hierarchy of causewatch.

Every message names the thing that was wrong and what was expected, so a user can fix it.
"""


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
        super().__init__(f"{where + ': ' if where else ''}{key}: {reason}")


class InputError(CausewatchError):
    """Bad input to a command or library call (a file, a column, an expression)."""
