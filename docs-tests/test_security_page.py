"""docs/security.md: every statement in its tables names the test or CI check that backs it,
and every one it names exists in the tree (a test function, a test's title, a line of a CI
script, or a file). Run by scripts/test-docs.sh."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "security.md"
# `path` or `path::name`: a file of the tree, and what it must hold.
CITATION = re.compile(r"`((?:[\w.-]+/)*[\w.-]+\.(?:rs|py|js|sh|toml|md|in))(?:::([^`]+))?`")


def table_rows(text: str) -> list[str]:
    """The body rows of every table: not its header (the row above `|---|`) nor that line."""
    lines = text.splitlines()
    rows = []
    for i, line in enumerate(lines):
        if not line.startswith("|") or re.match(r"^\|[-|: ]+\|$", line):
            continue
        if i + 1 < len(lines) and re.match(r"^\|[-|: ]+\|$", lines[i + 1]):
            continue
        rows.append(line)
    return rows


def cited(path: str, name: str | None) -> str | None:
    """Why `path::name` is not in the tree, or None when it is."""
    file = ROOT / path
    if not file.is_file():
        return f"{path}: no such file"
    if name is None:
        return None
    text = file.read_text()
    if file.suffix == ".rs":
        found = re.search(rf"\bfn {re.escape(name)}\b", text)
    elif file.suffix == ".py":
        found = re.search(rf"\bdef {re.escape(name)}\b", text)
    else:
        found = name in text
    return None if found else f"{path}: does not hold {name!r}"


def test_every_row_names_what_backs_it():
    rows = table_rows(PAGE.read_text())
    assert len(rows) >= 30, f"the page's tables have {len(rows)} rows"
    bare = [r for r in rows if not CITATION.search(r)]
    assert not bare, "rows that name no test or CI check:\n" + "\n".join(bare)


def test_every_cited_test_and_check_exists():
    citations = CITATION.findall(PAGE.read_text())
    assert len(citations) >= 40
    missing = [why for path, name in citations if (why := cited(path, name or None))]
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize(
    ("path", "name"),
    [("native/tests/metrics.rs", "no_such_test"), ("scripts/check.sh", "no such check"), ("docs/nope.md", None)],
)
def test_a_missing_citation_is_caught(path, name):
    assert cited(path, name) is not None


def test_the_page_is_in_the_book():
    assert "(security.md)" in (ROOT / "docs" / "SUMMARY.md").read_text()
