#!/usr/bin/env python3
"""Checks the links of the built book: every relative link and image in every page must reach
a file of the book, and every `#anchor` an element with that id in its page. Also checks that
every page under docs/ is in SUMMARY.md (a page left out is not in the book at all).

Hand-written (stdlib only) rather than mdbook-linkcheck: its last release (0.7.7) is built
against mdBook 0.4 and refuses the 0.5 this book is built with, and lychee, which can check
local links offline, is a large build for a 50-line check. External links are not fetched
(tests only talk to loopback); they are counted.

    python docs-tests/linkcheck.py BUILT_BOOK_DIR
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

DOCS = Path(__file__).resolve().parent.parent / "docs"
# mdBook's own generated pages: print.html repeats every page with rewritten links, toc.html is
# the sidebar (its links are the chapters, checked where they are written), and 404.html uses
# site-absolute paths.
SKIP = {"print.html", "toc.html", "404.html"}


class Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        for key in ("id", "name"):
            if a.get(key):
                self.ids.add(a[key])
        for key in ("href", "src"):
            if a.get(key) and tag in ("a", "img", "link", "script", "source"):
                self.links.append(a[key])


def parse(path: Path) -> Links:
    p = Links()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def summary_pages() -> set[str]:
    text = (DOCS / "SUMMARY.md").read_text(encoding="utf-8")
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    return {m for m in re.findall(r"\]\(([^)#]+\.md)\)", text)}


def main() -> int:
    book = Path(sys.argv[1])
    errors: list[str] = []
    listed = summary_pages()
    for md in sorted(DOCS.rglob("*.md")):
        rel = str(md.relative_to(DOCS))
        if rel != "SUMMARY.md" and rel not in listed:
            errors.append(f"docs/{rel} is not in docs/SUMMARY.md, so it is not in the book: add it")
    parsed = {p: parse(p) for p in book.rglob("*.html") if p.name not in SKIP}
    checked = external = 0
    for page, links in sorted(parsed.items()):
        for link in links.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//"):
                external += 1
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            checked += 1
            where = f"{page.relative_to(book)}: {link}"
            if not target.exists():
                errors.append(f"{where}: no such file in the book")
                continue
            if parts.fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else parse(target).ids
                if unquote(parts.fragment) not in ids:
                    errors.append(f"{where}: no element with id {parts.fragment!r} in {target.relative_to(book)}")
    for e in errors:
        print(f"linkcheck: {e}", file=sys.stderr)
    print(f"linkcheck: {len(parsed)} pages, {checked} local links and anchors checked, {external} external links "
          f"not fetched, {len(errors)} broken")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
