#!/usr/bin/env python3
"""Refresh the dashboard screenshots of the book (docs/img/dashboard/) from the ones the
dashboard tests write (scripts/test-www.sh: $INSITUBATCH_CACHE/www-artifacts/), cropped,
scaled to 900 px and reduced to a palette so the repository stays small. A manual step
(needs Pillow, which CI does not install): run it after the dashboard changes and commit
the images.

    python docs-tests/screenshots.py [ARTIFACTS_DIR]
"""
import os
import sys
from pathlib import Path

from PIL import Image

ART = Path(sys.argv[1] if len(sys.argv) > 1 else
           os.path.join(os.environ.get("INSITUBATCH_CACHE", os.path.expanduser("~/.cache/insitubatch")),
                        "www-artifacts"))
OUT = Path(__file__).resolve().parent.parent / "docs" / "img" / "dashboard"
# book image <- test screenshot, crop box (left, top, right, bottom; None = the whole shot)
SHOTS = {
    "describe.png": ("02-describe.png", (0, 0, 1300, 2200), 64),
    "preview.png": ("04-batch.png", None, 128),
    "window.png": ("06-window.png", None, 128),
    "live.png": ("07-live.png", (0, 2240, 1300, None), 64),
}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for out, (src, box, colors) in SHOTS.items():
        im = Image.open(ART / src).convert("RGB")
        if box:
            im = im.crop(tuple(im.height if v is None else v for v in box))
        if im.width > 900:
            im = im.resize((900, round(im.height * 900 / im.width)), Image.LANCZOS)
        im.quantize(colors=colors, method=Image.Quantize.MEDIANCUT).save(OUT / out, optimize=True)
        print(f"{OUT / out}: {im.size[0]}x{im.size[1]}, {(OUT / out).stat().st_size} bytes")


if __name__ == "__main__":
    main()
