#!/usr/bin/env python3
"""Whether two builds of a wheel are the same but for what maturin stamps on each build.

    scripts/same_wheel.py FIRST.whl SECOND.whl

maturin embeds a CycloneDX SBOM of the wheel's Rust (`.dist-info/sboms/*.json`, PEP 770) whose
`serialNumber` is a random UUID and whose `metadata.timestamp` is the build's time, so two
builds of one commit never agree byte for byte there, nor in RECORD's hash of that file.
Everything else must: the same entries in the same order with the same dates and modes, and
the same bytes (the extension module included). Exits 1 naming each other difference, 0
saying which of the expected ones it saw. Standard library only.
"""

from __future__ import annotations

import json
import sys
import zipfile


def normalized(name: str, data: bytes) -> bytes:
    if "/sboms/" in name and name.endswith(".json"):
        doc = json.loads(data)
        doc.pop("serialNumber", None)
        doc.get("metadata", {}).pop("timestamp", None)
        return json.dumps(doc, sort_keys=True).encode()
    if name.endswith(".dist-info/RECORD"):
        return b"\n".join(line for line in data.splitlines() if b"/sboms/" not in line)
    return data


def main() -> int:
    first, second = (zipfile.ZipFile(p) for p in sys.argv[1:3])
    a, b = first.infolist(), second.infolist()
    differ, stamped = [], []
    if [i.filename for i in a] != [i.filename for i in b]:
        differ.append("the entries (or their order)")
    for x, y in zip(a, b):
        if (x.date_time, x.external_attr) != (y.date_time, y.external_attr):
            differ.append(f"{x.filename}: date or mode")
        dx, dy = first.read(x), second.read(y)
        if dx == dy:
            continue
        if normalized(x.filename, dx) == normalized(y.filename, dy):
            stamped.append(x.filename)
        else:
            differ.append(f"{x.filename}: content")
    if differ:
        print(f"not the same: {'; '.join(differ)}", file=sys.stderr)
        return 1
    said = f" but for maturin's SBOM serial number and timestamp ({', '.join(stamped)})" if stamped else ""
    print(f"the same{said}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
