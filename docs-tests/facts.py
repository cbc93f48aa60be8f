#!/usr/bin/env python3
"""The facts the user pages state, each written once and rendered or checked everywhere else:

- **what is built**: `docs/features.toml`, the one list, renders README.md's "Status" and the
  book's feature table (docs/features.md); every test it names must exist in the tree, and a
  "not yet" feature must not name one that does;
- **figures**: every measured figure on a user page comes from a committed rows file under
  `bench/rows/`, either rendered (a table between markers naming its rows, regenerated here
  from them) or cited (`<!--fig:NAME-->2.1–2.3×<!--/fig-->` in the prose, NAME a function of
  docs-tests/figures.py over one rows file, which the page names), and a figure with no such
  mark (a ratio, a MB/s or GB/s figure) fails;
- **rows**: the committed rows carry no machine's absolute paths;
- **names**: docs/migration.md, which says it lists every public name, has every name of the
  Python package's `__all__` and every public member of `InSituDataset` (read from the source
  with `ast`, so no build is needed).

User pages: README.md, js/README.md, python-bindings/README.md and the book (docs/) but for
its lab record (docs/lab/, for contributors: run logs, spreads, history). Stdlib only, so
scripts/check.sh runs it with the system Python (3.11+ for tomllib).

    python3 docs-tests/facts.py --check    # scripts/check.sh: fails, listing every problem
    python3 docs-tests/facts.py --write    # rewrite every rendered block from its source
"""
from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import figures  # noqa: E402

FEATURES = ROOT / "docs" / "features.toml"
STATUSES = ("built", "partial", "not yet")
SURFACES = ("Rust", "CLI", "Python", "Node", "browser", "dashboard", "widget")
LAB = ROOT / "docs" / "lab"


def user_pages() -> list[Path]:
    pages = [ROOT / "README.md", ROOT / "js" / "README.md", ROOT / "python-bindings" / "README.md"]
    return pages + [p for p in sorted((ROOT / "docs").rglob("*.md")) if LAB not in p.parents]


# -- what is built --------------------------------------------------------------------------------


def load_features() -> list[dict]:
    return tomllib.loads(FEATURES.read_text(encoding="utf-8"))["feature"]


def test_exists(ref: str) -> bool:
    """Whether FILE::NAME names a test in the tree: a Rust `fn NAME`, a Python `def NAME`, or a
    JS `test(`/`it(` whose name starts with NAME."""
    file, _, name = ref.partition("::")
    path = ROOT / file
    if not name or not path.is_file():
        return False
    text = path.read_text(encoding="utf-8")
    if file.endswith(".rs"):
        return re.search(rf"\bfn {re.escape(name)}\s*\(", text) is not None
    if file.endswith(".py"):
        return re.search(rf"\bdef {re.escape(name)}\s*\(", text) is not None
    if file.endswith((".js", ".mjs")):
        return re.search(rf"\b(?:test|it)\(\s*['\"`]{re.escape(name)}", text) is not None
    return False


def feature_problems(features: list[dict]) -> list[str]:
    out = []
    for f in features:
        where = f"docs/features.toml, {f.get('name', '(no name)')!r}"
        missing = {"name", "surfaces", "status", "tests"} - f.keys()
        if missing:
            out.append(f"{where}: lacks {sorted(missing)}")
            continue
        if f["status"] not in STATUSES:
            out.append(f"{where}: status {f['status']!r} is none of {STATUSES}")
        if bad := [s for s in f["surfaces"] if s not in SURFACES]:
            out.append(f"{where}: surfaces {bad} are none of {SURFACES}")
        if f["status"] == "not yet":
            if found := [t for t in f["tests"] if test_exists(t)]:
                out.append(f"{where}: 'not yet', but its tests exist ({', '.join(found)}): is it built? say so")
            if not f.get("note"):
                out.append(f"{where}: a 'not yet' feature says why in `note`")
        else:
            if not f["tests"]:
                out.append(f"{where}: {f['status']} with no test that proves it")
            if gone := [t for t in f["tests"] if not test_exists(t)]:
                out.append(f"{where}: no such test in the tree: {', '.join(gone)}")
        if f["status"] == "partial" and not f.get("note"):
            out.append(f"{where}: a partial feature says what is missing in `note`")
        if page := f.get("page"):
            if not (ROOT / "docs" / page).is_file():
                out.append(f"{where}: no page docs/{page}")
            elif f["status"] == "not yet" and f"rendered not-yet:{page} " not in (ROOT / "docs" / page).read_text():
                out.append(f"{where}: docs/{page} has no rendered block not-yet:{page} to say it")
    return out


def render_status() -> str:
    """README.md's Status: what is built, partly built and not yet, one line each, with where."""
    fs = load_features()
    by = {s: [f for f in fs if f["status"] == s] for s in STATUSES}
    lines = ["Built and tested (each feature's tests: [docs/features.md](docs/features.md)):", ""]
    lines += [f"- {f['name']} ({', '.join(f['surfaces'])})" for f in by["built"]]
    if by["partial"]:
        lines += ["", "Built, with a gap:", ""]
        lines += [f"- {f['name']} ({', '.join(f['surfaces'])}): {f['note']}" for f in by["partial"]]
    if by["not yet"]:
        lines += ["", "Not yet:", ""]
        lines += [f"- {f['name']}: {f['note']}" for f in by["not yet"]]
    return "\n".join(lines) + "\n"


def render_not_yet(page: str) -> str:
    """A page's own "not yet" list: the features of docs/features.toml whose page it is."""
    lines = [f"- {f['name']}: {f['note']}" for f in load_features() if f["status"] == "not yet" and f.get("page") == page]
    return "\n".join(lines) + "\n"


def render_feature_table() -> str:
    """The book's feature table: each feature, where, its status and the tests that prove it."""
    rows = ["| feature | where | status | tested by |", "|---|---|---|---|"]
    for f in load_features():
        name = f"[{f['name']}]({f['page']})" if f.get("page") else f["name"]
        status = f["status"] + (f": {f['note']}" if f.get("note") else "")
        tests = "<br>".join(f"`{t}`" for t in f["tests"]) or "—"
        rows.append(f"| {name} | {', '.join(f['surfaces'])} | {status} | {tests} |")
    return "\n".join(rows) + "\n"


# -- rendered blocks and cited figures ------------------------------------------------------------

# name -> (the source it is rendered from, its renderer)
RENDERERS = {
    "status": ("docs/features.toml", render_status),
    "features": ("docs/features.toml", render_feature_table),
    **figures.TABLES,
}
def renderer(name: str):
    """(source, render) of a rendered block: RENDERERS', or a page's "not yet" list
    (`not-yet:PAGE`, PAGE relative to docs/)."""
    if name.startswith("not-yet:"):
        page = name.split(":", 1)[1]
        return "docs/features.toml", lambda: render_not_yet(page)
    return RENDERERS.get(name)


BLOCK = re.compile(r"<!-- BEGIN rendered (?P<name>[^\s>]+) from (?P<source>\S+) \(python3 docs-tests/facts\.py "
                   r"--write\): do not edit -->\n(?P<body>.*?)<!-- END rendered (?P=name) -->", re.S)
FIG = re.compile(r"<!--fig:(?P<name>[\w-]+)-->(?P<text>.*?)<!--/fig-->", re.S)
# What a measured figure looks like in prose: a ratio (2.1×, 1.02-1.06x) or a rate (600 MB/s).
MEASURED = re.compile(r"(?<![\w.$])\d+(?:\.\d+)?(?:\s?[–-]\s?\d+(?:\.\d+)?)?(?:×(?!\s?\d)|x\b|\s?[MG]B/s)")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,}).*?^ {0,3}\1\s*$", re.S | re.M)
COMMENT = re.compile(r"<!--.*?-->", re.S)
CODE = re.compile(r"`[^`\n]*`")


def block_problems(page: Path, text: str) -> list[str]:
    out, rel = [], page.relative_to(ROOT)
    for m in BLOCK.finditer(text):
        name, source = m["name"], m["source"]
        if renderer(name) is None:
            out.append(f"{rel}: rendered block {name!r} has no renderer in docs-tests/facts.py")
            continue
        want_source, render = renderer(name)
        if source != want_source:
            out.append(f"{rel}: block {name!r} says it comes from {source}, its renderer reads {want_source}")
        elif m["body"] != render():
            out.append(f"{rel}: block {name!r} is stale against {source}: run python3 docs-tests/facts.py --write")
    return out


def figure_problems(page: Path, text: str) -> list[str]:
    out, rel = [], page.relative_to(ROOT)
    for m in FIG.finditer(text):
        name = m["name"]
        if name not in figures.FIGURES:
            out.append(f"{rel}: figure {name!r} is not in docs-tests/figures.py")
            continue
        rows, compute = figures.FIGURES[name]
        for f in (rows,) if isinstance(rows, str) else rows:
            if f not in text:
                out.append(f"{rel}: figure {name!r} comes from {f}, which the page does not name")
        want = compute()
        if m["text"] != want:
            out.append(f"{rel}: figure {name!r} says {m['text']!r}; its rows give {want!r}")
    # What is left once the code, the rendered blocks and the cited figures are taken out.
    prose = BLOCK.sub("", text)
    prose = FIG.sub("", prose)
    prose = FENCE.sub("", prose)
    prose = COMMENT.sub("", prose)
    prose = CODE.sub("", prose)
    for n, line in enumerate(prose.splitlines(), 1):
        for m in MEASURED.finditer(line):
            out.append(f"{rel}: a figure that cites no rows file: {m.group(0)!r} in {line.strip()[:100]!r} "
                       "(cite it, <!--fig:NAME-->...<!--/fig--> with NAME in docs-tests/figures.py, or move it "
                       "to the lab record, docs/lab/)")
    return out


# -- rows -----------------------------------------------------------------------------------------

# An absolute path of one machine: a home, a temp folder, or a checkout (the driver writes
# $INSITUBATCH_CACHE/..., $HOME/..., $TMPDIR/... or paths relative to the repository).
MACHINE_PATH = re.compile(r"(?<![\w$~.])(?:file://)?/(?:root|home/[^/\s\"]+|Users/[^/\s\"]+|tmp|var/tmp|work)/")


def rows_problems() -> list[str]:
    out = []
    for f in sorted((ROOT / "bench" / "rows").iterdir()):
        text = f.read_text(encoding="utf-8")
        if f.suffix in (".json", ".jsonl"):
            try:
                [json.loads(line) for line in text.splitlines() if line.strip()] if f.suffix == ".jsonl" \
                    else json.loads(text)
            except ValueError as e:
                out.append(f"{f.relative_to(ROOT)}: not JSON ({e})")
        if m := MACHINE_PATH.search(text):
            out.append(f"{f.relative_to(ROOT)}: a machine's path {text[m.start():m.end() + 30]!r} (bench/report.py "
                       "portable() writes $INSITUBATCH_CACHE/, $HOME/, $TMPDIR/ or relative paths)")
    return out


# -- names ----------------------------------------------------------------------------------------

PACKAGE = ROOT / "python-bindings" / "python" / "insitubatch_rs"
MIGRATION = ROOT / "docs" / "migration.md"


def public_names() -> tuple[list[str], list[str]]:
    """The package's `__all__`, and `InSituDataset`'s public members (methods and properties)."""
    import ast

    names: list[str] = []
    for node in ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            names = [e.value for e in node.value.elts]
    members: list[str] = []
    for node in ast.parse((PACKAGE / "_dataset.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef) and node.name == "InSituDataset":
            members = [f.name for f in node.body if isinstance(f, ast.FunctionDef) and not f.name.startswith("_")]
    return names, members


def names_problems() -> list[str]:
    text = MIGRATION.read_text(encoding="utf-8")
    names, members = public_names()
    if not names or not members:
        return ["docs-tests/facts.py: found no __all__ or no InSituDataset in python-bindings/python/insitubatch_rs"]
    said = set(re.findall(r"`([A-Za-z_][\w.]*)", text))
    out = [f"docs/migration.md: no row names `{n}` of insitubatch_rs.__all__" for n in names if n not in said]
    out += [f"docs/migration.md: no row names InSituDataset's `{m}`" for m in members if m not in said]
    return out


# -- the whole check ------------------------------------------------------------------------------


def problems() -> list[str]:
    out = feature_problems(load_features())
    for page in user_pages():
        text = page.read_text(encoding="utf-8")
        out += block_problems(page, text)
        out += figure_problems(page, text)
    for page in sorted(LAB.rglob("*.md")) if LAB.exists() else []:
        out += block_problems(page, page.read_text(encoding="utf-8"))
    out += rows_problems()
    out += names_problems()
    out += figures.self_check()
    return out


def write() -> list[str]:
    """Rewrite every rendered block of every page; returns the pages changed."""
    changed = []
    for page in user_pages() + (sorted(LAB.rglob("*.md")) if LAB.exists() else []):
        text = page.read_text(encoding="utf-8")

        def fresh(m: re.Match) -> str:
            if renderer(m["name"]) is None:
                return m.group(0)
            source, render = renderer(m["name"])
            head = m.group(0).split("\n", 1)[0].replace(f"from {m['source']} ", f"from {source} ")
            return f"{head}\n{render()}<!-- END rendered {m['name']} -->"

        new = BLOCK.sub(fresh, text)
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed.append(str(page.relative_to(ROOT)))
    return changed


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        for p in write():
            print(f"rewrote {p}")
        return 0
    if argv == ["--check"]:
        found = problems()
        for p in found:
            print(p)
        print(f"docs facts: {len(found)} problem(s)" if found else "docs facts: every rendered block current, "
              "every figure cited and equal to its rows, every listed test present, the rows portable, every "
              "public name in docs/migration.md")
        return 1 if found else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
