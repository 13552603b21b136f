"""Every citation of the project's own documents resolves inside the repository.

A citation is `docs/<name>.md`, optionally followed by section numbers (`§3`, `§2, §9`)
or by a quoted heading (`docs/design.md, "Verdicts"`). The document must exist, each `§N`
must be a heading of it (`## §N. ...`), and a quoted heading must be one of its headings.
A `§N` that follows no document, or a document cited by an old path, is an error too.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SOURCES = ["rocmcheck", "probes", "tests", "benchmarks", "conftest.py", "README.md", "docs"]

# `§N` may carry a note in parentheses: `§0 (allocator variables), §6 (...)`.
CITATION = re.compile(r'docs/([\w.-]+\.md)((?:(?:[\s,;]|and)*§\d+(?:\s*\([^()\n]*\))?)*)(?:,\s*"([^"\n]+)")?')
SECTION = re.compile(r"§(\d+)")
OLD_STYLE = re.compile(r"research/[\w.-]+\.md|(?<![\w/])design\.md|catalogue(?:'s)? §|catalogue \(§")


def _files():
    for name in SOURCES:
        path = ROOT / name
        if path.is_file():
            yield path
        else:
            yield from (p for p in sorted(path.rglob("*")) if p.suffix in (".py", ".md", ".json", ".toml"))


def _headings(doc: Path):
    return [line.lstrip("#").strip() for line in doc.read_text(encoding="utf-8").splitlines()
            if line.startswith("#")]


def _problems():
    problems = []
    for path in _files():
        text = path.read_text(encoding="utf-8", errors="replace")
        where = path.relative_to(ROOT)
        cited_spans = []
        for match in CITATION.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            doc = DOCS / match.group(1)
            cited_spans.append(match.span())
            if not doc.is_file():
                problems.append(f"{where}:{line}: docs/{match.group(1)} does not exist")
                continue
            headings = _headings(doc)
            numbers = {m.group(1) for h in headings for m in [re.match(r"§(\d+)\b", h)] if m}
            for number in SECTION.findall(match.group(2) or ""):
                if number not in numbers:
                    problems.append(f"{where}:{line}: docs/{match.group(1)} has no section §{number}")
            if match.group(3) and match.group(3) not in headings:
                problems.append(f'{where}:{line}: docs/{match.group(1)} has no heading "{match.group(3)}"')
        if path.parent == DOCS or path == Path(__file__).resolve():
            continue  # the documents' own headings and this file's examples use § freely
        for match in SECTION.finditer(text):
            if not any(start <= match.start() < end for start, end in cited_spans):
                line = text.count("\n", 0, match.start()) + 1
                problems.append(f"{where}:{line}: §{match.group(1)} does not follow a docs/<name>.md citation")
        for match in OLD_STYLE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            problems.append(f"{where}:{line}: '{match.group(0)}' cites a document outside docs/")
    return problems


def test_every_docs_citation_resolves():
    assert _problems() == []


def test_the_catalogue_keeps_its_numbering():
    numbers = [int(m.group(1)) for h in _headings(DOCS / "failure-catalogue.md")
               for m in [re.match(r"§(\d+)\.", h)] if m]
    assert numbers == list(range(len(numbers))) and len(numbers) >= 11


def test_the_readme_links_the_docs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/" in readme.split("## Development", 1)[1]
