#!/usr/bin/env python3
"""The module graph of each crate, and a check that it has no circles (ARCHITECTURE.md).

A node is a crate's top-level module (``core/src/dataset/build.rs`` belongs to ``dataset``); an
edge A -> B is a path in A's non-test code that names B: ``crate::B::...`` (in a ``use`` or
inline, braces included, or as a string such as ``schemars(with = "crate::B::T")``),
``crate::Item`` where lib.rs re-exports ``Item`` from B, or ``super::...`` resolved to B. Test
code is left out: files named ``tests.rs`` or ``*_tests.rs``, and every item under
``#[cfg(test)]``. A circle is a strongly connected component of more than one module.

    python3 tools/modgraph/modgraph.py            # check every crate; exit 1 on a circle
    python3 tools/modgraph/modgraph.py --graph    # print each crate's edges too

Hand-written, not ``cargo modules`` (which answers the same with ``--acyclic``): that tool
compiles rust-analyzer's crates, minutes of CPU on every cold CI run, for a check this scan
makes in under a second. It reads paths, not types, which is what a circle is made of.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The crates whose module graphs must have no circles: (name, source root, root file).
CRATES = [
    ("insitubatch-core", "core/src", "lib.rs"),
    ("insitubatch-object", "object/src", "lib.rs"),
    ("insitubatch-native", "native/src", "lib.rs"),
    ("insitubatch-python", "python-bindings/src", "lib.rs"),
    ("insitubatch-wasm", "wasm/src", "lib.rs"),
]

PATH_RE = re.compile(r"\b(crate|super)((?:::(?:\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*))+)")
CFG_TEST_RE = re.compile(r"#\[cfg\(test\)\]")
PATH_STRING_RE = re.compile(r"(?:crate|super)(?:::[A-Za-z_][A-Za-z0-9_]*)+")
CHAR_RE = re.compile(r"'(?:\\.|[^'\\])'")


def strip(text: str) -> str:
    """Source without comments, string and char literals, and test code."""
    return drop_test_items(blank_literals(text))


def blank_literals(text: str) -> str:
    """Comments (nested block comments too), strings, raw strings and char literals removed,
    in one left-to-right scan: a regular expression per kind cannot tell a `"` inside a
    comment from one that opens a string."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 258]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = len(re.match(r"r(#*)", text[i:]).group(1))
            end = text.find('"' + "#" * hashes, i + 2 + hashes)
            out.append('""')
            i = n if end < 0 else end + 1 + hashes
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            # A path written as a string is still a path (`schemars(with = "crate::DType")`).
            inner = text[i + 1 : j]
            out.append(inner if PATH_STRING_RE.fullmatch(inner) else '""')
            i = j + 1
        elif c == "'" and (m := CHAR_RE.match(text, i)):
            out.append("' '")
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_test_items(text: str) -> str:
    """Remove each item that follows a ``#[cfg(test)]`` attribute: up to its matching brace,
    or to its semicolon for a ``mod x;`` or a ``use``."""
    out, i = [], 0
    for m in CFG_TEST_RE.finditer(text):
        if m.start() < i:
            continue
        out.append(text[i : m.start()])
        j = m.end()
        depth = 0
        while j < len(text):
            c = text[j]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    j += 1
                    break
            elif c == ";" and depth == 0:
                j += 1
                break
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def module_of(src: Path, file: Path) -> list[str]:
    """The module path of ``file`` under ``src``: ``dataset/build.rs`` -> ``[dataset, build]``."""
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts


def is_test_file(file: Path) -> bool:
    return file.name == "tests.rs" or file.stem.endswith("_tests") or "tests" in file.parent.name.split("/")


def root_reexports(root_text: str, modules: set[str]) -> dict[str, str]:
    """Names lib.rs re-exports, mapped to the module they come from (``Error`` -> ``error``)."""
    names: dict[str, str] = {}
    for m in re.finditer(r"\bpub\s+use\s+([A-Za-z_][A-Za-z0-9_]*)::(\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*)\s*;", root_text, re.S):
        module, items = m.group(1), m.group(2)
        if module not in modules:
            continue
        for item in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)(?:\s+as\s+([A-Za-z_][A-Za-z0-9_]*))?", items.strip("{}")):
            names[item[1] or item[0]] = module
    return names


def segments(path: str) -> list[list[str]]:
    """``::a::{b, c::d}`` -> ``[[a, b], [a, c, d]]`` (one level of braces, as we write them)."""
    m = re.match(r"((?:::[A-Za-z_][A-Za-z0-9_]*)*)(?:::\{([^}]*)\})?", path)
    head = [s for s in m.group(1).split("::") if s] if m else []
    group = m.group(2) if m else None
    if not group:
        return [head]
    return [head + [s for s in part.strip().split("::") if s] for part in group.split(",") if part.strip()]


def crate_edges(src: Path, root_file: str) -> dict[str, set[str]]:
    files = [f for f in sorted(src.rglob("*.rs")) if not is_test_file(f)]
    modules = {module_of(src, f)[0] for f in files if module_of(src, f)}
    reexports = root_reexports(strip((src / root_file).read_text()), modules)
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for f in files:
        here = module_of(src, f)
        if not here:
            continue  # the crate root names every module; it is not a node
        text = strip(f.read_text())
        # `super` of a file is its parent module; of a `mod.rs`, the module above it.
        for m in PATH_RE.finditer(text):
            base = [] if m.group(1) == "crate" else here[:-1]
            for seg in segments(m.group(2)):
                path = list(base)
                for s in seg:
                    if s == "super":
                        path = path[:-1]
                    else:
                        path.append(s)
                if not path:
                    continue
                target = path[0] if path[0] in modules else reexports.get(path[0])
                if target and target != here[0]:
                    edges[here[0]].add(target)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", action="store_true", help="print each crate's edges")
    args = ap.parse_args()
    failed = False
    for name, src, root_file in CRATES:
        edges = crate_edges(ROOT / src, root_file)
        if args.graph:
            for a in sorted(edges):
                print(f"{name}: {a} -> {', '.join(sorted(edges[a])) or '-'}")
        for comp in circles(edges):
            failed = True
            inner = {a: sorted(b for b in edges[a] if b in comp) for a in comp}
            print(f"{name}: an import circle among {', '.join(comp)}: " + "; ".join(f"{a} -> {', '.join(bs)}" for a, bs in inner.items()))
    if failed:
        print("Move the item that closes each circle to the module it belongs to (ARCHITECTURE.md, Core's public API).")
        return 1
    print(f"no import circles in {', '.join(n for n, _, _ in CRATES)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
