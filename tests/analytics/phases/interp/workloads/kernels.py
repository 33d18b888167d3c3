"""Phase kernels for the interpreter recordings: small pure-Python loops that exercise different parts of
CPython (integer arithmetic, dicts and strings, sorting, floats and math, recursion, regular expressions,
bytes), each rep about the same work.  Imported by the programs beside it; stdlib only."""

import collections
import json
import math
import re

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
PATTERN = re.compile(r"([a-z]+)-(\d+)")


def arith(reps):
    s = 1
    for r in range(reps):
        for i in range(200):
            s = (s * 31 + i) & 0xFFFF
            if s & 1:
                s ^= i
    return s


def strdict(reps):
    d = {}
    for r in range(reps):
        for i in range(80):
            key = f"{WORDS[i % 10]}:{i}"
            d[key] = d.get(key, 0) + len(key)
        d = {k: v for k, v in d.items() if v < 1000}
    return len(d)


def sort(reps):
    x = 12345
    total = 0
    for r in range(reps):
        items = []
        for i in range(120):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
            items.append(x)
        items.sort()
        total += sorted(items, key=lambda v: -v)[0]
    return total


def floats(reps):
    acc = 0.0
    for r in range(reps):
        for i in range(120):
            acc += math.sqrt(i + 1.0) * math.sin(i * 0.1) / (1.0 + abs(acc))
    return acc


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def recur(reps):
    return sum(fib(12) for _ in range(reps))


def regex(reps):
    text = " ".join(f"{w}-{i}" for i, w in enumerate(WORDS * 6))
    found = 0
    for r in range(reps):
        for m in PATTERN.finditer(text):
            found += int(m.group(2))
    return found


def bytesops(reps):
    buf = bytearray(range(256))
    h = 0
    for r in range(reps):
        for i in range(0, 256, 8):
            chunk = bytes(buf[i:i + 8])
            h = (h * 131 + int.from_bytes(chunk[:4], "little") + chunk.count(7)) & 0xFFFFFFFF
            buf[i] = h & 0xFF
    return h


def records(reps):
    """json and collections: encode, decode and count records (more of CPython's C code per rep)."""
    rows = [{"id": i, "name": WORDS[i % 10], "tags": WORDS[: i % 4], "score": i * 0.5} for i in range(12)]
    seen = collections.Counter()
    for r in range(reps):
        back = json.loads(json.dumps(rows, sort_keys=True))
        seen.update(row["name"] for row in back)
        seen.update(tag for row in back for tag in row["tags"])
    return sum(seen.values())


def text(reps):
    """str methods: split, case, replace, format, join, partition."""
    line = "The quick brown fox jumps over the lazy dog; " * 3
    out = 0
    for r in range(reps * 8):
        words = line.split()
        caps = [w.upper() if len(w) > 3 else w.title() for w in words]
        joined = "_".join(caps).replace("_THE_", "-").lower()
        head, _, tail = joined.partition(";")
        out += len("{:>20}|{:<10}|{:^8}".format(head[:20], tail[:10], r % 97)) + joined.count("o")
    return out


class Shape:
    __slots__ = ("w", "h")

    def __init__(self, w, h):
        self.w, self.h = w, h

    def area(self):
        return self.w * self.h


class Square(Shape):
    def area(self):
        return super().area() + 1


def objects(reps):
    """classes, method calls, super(), exceptions, generators."""
    total = 0
    for r in range(reps * 3):
        shapes = [Square(i, i + 1) if i % 3 else Shape(i, 2) for i in range(25)]
        total += sum(s.area() for s in shapes)
        for s in shapes[:8]:
            try:
                total += 100 // (s.w - 3)
            except ZeroDivisionError:
                total -= 1
    return total


KERNELS = {f.__name__: f for f in (arith, strdict, sort, floats, recur, regex, bytesops, records, text, objects)}
