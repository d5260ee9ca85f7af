#!/usr/bin/env python3
"""Screenshot an HTML report in headless Chromium and say whether it rendered.

    .venv/bin/python scripts/html_screenshot.py reports/<run>.html out.png [--section ID]
        [--full-page] [--width 1440] [--height 900]

Prints each problem (a section with no height, a figure that drew no SVG, a console error,
a network request) and exits 1 if there is one; 0 and the screenshot's path otherwise.
Needs Debian's chromium (scripts/setup.sh installs it as root).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from headless_chromium import ChromiumMissing, check_page


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("html", type=Path, help="the HTML report (reports/<run>.html)")
    p.add_argument("png", type=Path, help="the screenshot to write")
    p.add_argument("--section", help="start the screen at this section's id (e.g. speedups)")
    p.add_argument("--full-page", action="store_true", help="the whole page, not one screen")
    p.add_argument("--width", type=int, default=1440, help="CSS pixels (a laptop's 1440)")
    p.add_argument("--height", type=int, default=900)
    args = p.parse_args()
    if not args.html.is_file():
        print(f"{args.html}: no such file", file=sys.stderr)
        return 2
    try:
        check = check_page(
            args.html, args.png, args.width, args.height, args.full_page, args.section
        )
    except ChromiumMissing as err:
        print(err, file=sys.stderr)
        return 2
    print(
        f"{len(check.sections)} sections, {len(check.figures)} figures"
        f" (plotly.js {check.plotly_version})"
    )
    for problem in check.problems():
        print(f"problem: {problem}")
    print(f"screenshot: {check.screenshot}")
    return 1 if check.problems() else 0


if __name__ == "__main__":
    sys.exit(main())
