#!/usr/bin/env python3
"""The license report of a release and its allow-list check, from its CycloneDX SBOMs.

    scripts/licenses.py --allow deny.toml --report dist/LICENSES.md dist/sbom/*.cdx.json

Reads every component's license from the SBOMs (an SPDX id, an SPDX expression, or a free
text name), writes one table per SBOM to the report, and exits 1 naming each component whose
license the allow-list does not allow (or that has none). The allow-list is deny.toml's
`[licenses] allow`, the one cargo-deny holds the Rust crates to, so the Python and npm packages
of a release are held to the same list. An expression is allowed when its `OR`s and `AND`s come
out true with each license allowed or not; a free text name (older Python metadata) is
allowed only when it is one of NAMES below, each the SPDX id it means.

Hand-written rather than a license tool: the SBOMs already hold every license (cyclonedx-py,
cargo-cyclonedx, cyclonedx-npm read them from the packages' metadata), and what is left is
this boolean evaluation over one allow-list. Standard library only (tomllib: Python 3.11+).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from pathlib import Path

# Free-text license names in package metadata that mean one SPDX license (Python packages
# without a License-Expression give a trove classifier, "License :: OSI Approved :: BSD
# License", whose last part is looked up here: numpy before 2.3 says so of its BSD-3-Clause).
NAMES = {
    "BSD License": "BSD-3-Clause",
    "MIT License": "MIT",
    "Apache Software License": "Apache-2.0",
    "Apache License 2.0": "Apache-2.0",
    "Apache 2.0": "Apache-2.0",
    "ISC License (ISCL)": "ISC",
}


def allowed_licenses(deny_toml: Path) -> set[str]:
    with deny_toml.open("rb") as f:
        return set(tomllib.load(f)["licenses"]["allow"])


def licenses_of(component: dict) -> list[str]:
    """The license expressions of a component (each entry of `licenses`)."""
    out = []
    for entry in component.get("licenses", []):
        if "expression" in entry:
            out.append(entry["expression"])
        elif "license" in entry:
            lic = entry["license"]
            name = lic.get("name", "").split(" :: ")[-1]
            out.append(lic.get("id") or NAMES.get(name, lic.get("name", "")))
    return [e for e in out if e]


TOKEN = re.compile(r"\(|\)|[A-Za-z0-9.+\-]+(?:\s+WITH\s+[A-Za-z0-9.+\-]+)?")


def expression_allowed(expression: str, allow: set[str]) -> bool:
    """Whether an SPDX expression holds with each license allowed or not (`A WITH B` is one
    license, as deny.toml lists it). A text that is no expression is allowed only when it is
    an allowed id itself."""
    if expression in allow:
        return True
    tokens = [re.sub(r"\s+", " ", t) for t in TOKEN.findall(expression)]
    if "".join(tokens).replace(" ", "") != re.sub(r"\s+", "", expression):
        return False  # free text that is not an SPDX expression

    def parse_or(i: int) -> tuple[bool, int]:
        value, i = parse_and(i)
        while i < len(tokens) and tokens[i].upper() == "OR":
            rhs, i = parse_and(i + 1)
            value = value or rhs
        return value, i

    def parse_and(i: int) -> tuple[bool, int]:
        value, i = parse_atom(i)
        while i < len(tokens) and tokens[i].upper() == "AND":
            rhs, i = parse_atom(i + 1)
            value = value and rhs
        return value, i

    def parse_atom(i: int) -> tuple[bool, int]:
        if i >= len(tokens):
            raise ValueError("expression ends early")
        if tokens[i] == "(":
            value, i = parse_or(i + 1)
            if i >= len(tokens) or tokens[i] != ")":
                raise ValueError("unbalanced parenthesis")
            return value, i + 1
        return tokens[i].removesuffix("+") in allow, i + 1

    try:
        value, end = parse_or(0)
    except ValueError:
        return False
    return value and end == len(tokens)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--allow", type=Path, required=True, help="deny.toml: its [licenses] allow")
    ap.add_argument("--report", type=Path, required=True, help="the license report to write (Markdown)")
    ap.add_argument("sboms", type=Path, nargs="+", help="CycloneDX JSON SBOMs")
    args = ap.parse_args()
    allow = allowed_licenses(args.allow)
    refused = []
    lines = [
        "# Licenses of this release",
        "",
        "Every component of every SBOM in `sbom/`, with its license as its metadata declares it. Each is",
        "checked against the allow-list in the repository's `deny.toml` (scripts/licenses.py).",
    ]
    for sbom in args.sboms:
        doc = json.loads(sbom.read_text())
        root = doc.get("metadata", {}).get("component", {})
        components = [root] if root else []
        components += doc.get("components", [])
        lines += ["", f"## {sbom.name}", "", "| component | version | license |", "|---|---|---|"]
        seen = set()
        for c in sorted(components, key=lambda c: (c.get("name", ""), c.get("version", ""))):
            key = (c.get("group", ""), c.get("name", ""), c.get("version", ""))
            if key in seen:
                continue
            seen.add(key)
            name = "/".join(p for p in key[:2] if p)
            found = licenses_of(c)
            text = " AND ".join(f"({e})" if " " in e and len(found) > 1 else e for e in found) or "(none declared)"
            lines.append(f"| {name} | {key[2]} | {text} |")
            if not found or not all(expression_allowed(e, allow) for e in found):
                refused.append(f"{sbom.name}: {name} {key[2]}: {text}")
    args.report.write_text("\n".join(lines) + "\n")
    if refused:
        print(
            f"licenses: {len(refused)} component(s) have a license deny.toml's allow-list does not allow, or none "
            f"declared; add the license to the list only if it is permissive, or replace the component:",
            file=sys.stderr,
        )
        for r in refused:
            print(f"  {r}", file=sys.stderr)
        return 1
    print(f"licenses: {sum(1 for line in lines if line.startswith('| ') and not line.startswith('| component'))} "
          f"components, every license allowed; report: {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
