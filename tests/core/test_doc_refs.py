"""A pointer into the docs by heading (docs/perf-log.md, "Walk (b)") names a heading that page has: in the
product's comments, the tests, the benchmarks and the docs themselves. The quoted text is a part of the
heading, as a reader would search for it (case aside); a pointer may go on over a line break, a comment's
`#` included."""

import re

from support import ROOT

TREES = ("causewatch", "tests", "bench", "docs", "README.md", "CONTRIBUTING.md")
REF = re.compile(r'\b(docs/[\w-]+\.md),?\s+\(?"([^"]+)"')
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.M)
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CONTINUED = re.compile(r"\s*\n\s*(?:#\s*)?")   # a line break, and the next line's indent or comment mark


def headings(page: str) -> list[str]:
    return [" ".join(h.split()).lower() for h in HEADING.findall(FENCE.sub("", page))]


def broken(text: str, pages: dict[str, list[str]]) -> list[str]:
    """Each `docs/X.md, "heading"` in text whose page is missing or has no heading holding that text."""
    found = []
    for doc, quoted in REF.findall(CONTINUED.sub(" ", text)):
        want = " ".join(quoted.split())
        if doc not in pages:
            found.append(f'{doc}, "{want}": no such page')
        elif not any(want.lower() in h for h in pages[doc]):
            found.append(f'{doc}, "{want}": no such heading')
    return found


def _files():
    for tree in TREES:
        top = ROOT / tree
        for path in sorted([top] if top.is_file() else top.rglob("*")):
            if path.suffix in (".py", ".md", ".toml", ".yml") and "__pycache__" not in path.parts:
                yield path


def test_every_pointer_by_heading_names_a_heading_of_its_page():
    pages = {f"docs/{p.name}": headings(p.read_text()) for p in (ROOT / "docs").glob("*.md")}
    offenders = [f"{path.relative_to(ROOT)}: {why}" for path in _files() if path.name != "test_doc_refs.py"
                 for why in broken(path.read_text(), pages)]
    assert not offenders, "pointers to headings that are not there:\n" + "\n".join(offenders)


def test_a_pointer_to_a_missing_heading_or_page_is_caught():
    pages = {"docs/a.md": headings("# A page\n\n## Walk (b)\n```\n## not a heading\n```\n")}
    assert broken('see docs/a.md, "walk (b)" and (docs/a.md ("Walk\n    # (b)"))', pages) == []
    assert broken('docs/a.md, "not a heading"; docs/b.md, "Walk"', pages) == [
        'docs/a.md, "not a heading": no such heading', 'docs/b.md, "Walk": no such page']
