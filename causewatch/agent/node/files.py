"""Reading kernel files: one read per file per run, and the caches that keep labelled names made once."""

from __future__ import annotations

import functools
import os

from causewatch import wire


def _text(path: str) -> str:
    """A file's whole text by plain system calls: a text-mode open() costs three objects and two more calls,
    40 % of reading a small /proc file."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        parts = []
        while chunk := os.read(fd, 65536):
            parts.append(chunk)
    finally:
        os.close(fd)
    return b"".join(parts).decode(errors="replace")


def read(path: str) -> str:
    """A kernel file's text; an empty one, or one cut short (the kernel ends every line), raises."""
    text = _text(path)
    if not text.endswith("\n"):
        raise ValueError(f"{path}: {'empty' if not text else 'cut short (no newline at its end)'}")
    return text


def read_or(path: str, default: str | None = None) -> str | None:
    """A small sysfs file's stripped text, or `default` where it cannot be read (absent, EINVAL on a down link)."""
    try:
        return _text(path).strip()
    except OSError:
        return default


def number(text: str) -> float:
    """An integer or float as /proc writes it (hex with 0x)."""
    return float(int(text, 0)) if text[:2] == "0x" else float(text)


@functools.lru_cache(maxsize=1 << 14)
def name(base: str, *labels: tuple[str, str]) -> str:
    """`wire.labelled` for label pairs, cached: the same devices come back run after run."""
    return wire.labelled(base, dict(labels))


def columns(text: str, skip: int = 0) -> tuple[int, list[str]]:
    """(fields per row, every field) of a table whose rows all have the same width, split in one call;
    a row of another width (a truncated file) raises."""
    lines = text.splitlines()[skip:]
    if not lines:
        raise ValueError("no rows")
    width = len(lines[0].split())
    fields = " ".join(lines).split()
    if width == 0 or len(fields) != width * len(lines):
        raise ValueError(f"rows of unequal width ({len(fields)} fields in {len(lines)} rows of {width})")
    return width, fields


def path(root: str, *parts: str) -> str:
    return os.path.join(root, *parts)
