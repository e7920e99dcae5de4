"""The docs stay short enough to read and their links resolve.

README.md is what a newcomer reads in ten minutes (at most 250 lines) and BENCHMARKS.md holds only
today's tables and verdicts (at most 150 lines); the reference lives in docs/ and the benchmarks'
history in docs/benchmarks/. Every relative link in README.md, BENCHMARKS.md and docs/**/*.md must
point to a file that exists, and a `#anchor` into a markdown file to one of its headings, slugged
as GitHub does.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 250
BENCHMARKS_MAX_LINES = 150

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"`+[^`]*`+")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)


def documents() -> list[Path]:
    return [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").rglob("*.md"))]


def prose_lines(text: str) -> Iterator[str]:
    """The lines outside fenced code blocks."""
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    text = path.read_text(encoding="utf-8")
    for line in prose_lines(text):
        found.update(HTML_ANCHOR.findall(line))
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> Iterator[str]:
    for line in prose_lines(path.read_text(encoding="utf-8")):
        yield from LINK.findall(INLINE_CODE.sub("", line))


def broken_links(path: Path) -> list[str]:
    """Each relative link of `path` whose file or heading anchor does not exist."""
    problems = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto:...
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            problems.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{target}: no heading #{anchor} in {resolved.name}")
    return problems


def line_count(name: str) -> int:
    return len((ROOT / name).read_text(encoding="utf-8").splitlines())


def test_the_readme_is_at_most_250_lines():
    assert line_count("README.md") <= README_MAX_LINES


def test_benchmarks_is_at_most_150_lines():
    assert line_count("BENCHMARKS.md") <= BENCHMARKS_MAX_LINES


def test_the_readme_starts_with_its_two_commands():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    commands = [line.split()[:2] for line in lines if line.startswith("make ")]
    assert commands[:2] == [["make", "demo"], ["make", "test"]]


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path):
    assert broken_links(path) == []


def test_the_documents_are_found_and_have_links():
    names = {str(p.relative_to(ROOT)) for p in documents()}
    assert {"README.md", "BENCHMARKS.md", "docs/architecture.md", "docs/benchmarks/fairness.md"} <= names
    assert len(list(links(ROOT / "README.md"))) >= 5


def test_the_check_finds_a_missing_file_and_a_missing_heading(tmp_path: Path):
    (tmp_path / "other.md").write_text("# Other page\n\n## Fairness: `make bench-fairness`\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n## It's `here`\n\n"
        "[ok](other.md#fairness-make-bench-fairness) [ok](#its-here) [ok](https://example.com/x)\n"
        "`[not a link](nowhere.md)`\n"
        "```\n[in a code block](nowhere.md)\n```\n"
        "[gone](missing.md) [bad anchor](other.md#fairness) [bad local](#nope)\n"
    )
    assert broken_links(page) == [
        "missing.md: no such file",
        "other.md#fairness: no heading #fairness in other.md",
        "#nope: no heading #nope in page.md",
    ]


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Fairness: `make bench-fairness`", "fairness-make-bench-fairness"),
        ("Dispatcher (`:8702/metrics`)", "dispatcher-8702metrics"),
        ("Delivery: callers who wait", "delivery-callers-who-wait"),
        ("inferq's own API", "inferqs-own-api"),
        ("Tenants, keys and security", "tenants-keys-and-security"),
    ],
)
def test_headings_are_slugged_as_github_does(heading: str, anchor: str):
    assert slug(heading) == anchor
