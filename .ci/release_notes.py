"""Print CHANGELOG.md's section for one version: the release notes of its tag.

    python3 .ci/release_notes.py 1.2.0 > notes.md

The changelog keeps the Keep a Changelog format (https://keepachangelog.com/en/1.1.0/): a
`## [1.2.0] - 2026-12-31` heading per release, newest first, under `## [Unreleased]`. The
section is everything between its heading and the next `## ` heading (link definitions at
the end excluded). Exit 1, saying why, when the version has no section or an empty one: a
tag is released only with its notes written.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

CHANGELOG = Path(__file__).resolve().parent.parent / "CHANGELOG.md"
HEADING = re.compile(r"^## \[(?P<version>[^\]]+)\](?: - (?P<date>\d{4}-\d{2}-\d{2}))?\s*$")
LINK = re.compile(r"^\[[^\]]+\]: \S+\s*$")


def section(text: str, version: str) -> str:
    """The body of `version`'s section, stripped; ValueError when there is none, when it is
    empty, or when a release's heading has no date."""
    lines = text.splitlines()
    start = None
    for i, line in enumerate(lines):
        found = HEADING.match(line)
        if found and found["version"] == version:
            if version != "Unreleased" and not found["date"]:
                raise ValueError(f"CHANGELOG.md: the heading of {version} has no date")
            start = i + 1
            break
    if start is None:
        raise ValueError(f"CHANGELOG.md has no section `## [{version}] - YYYY-MM-DD`")
    body: list[str] = []
    for line in lines[start:]:
        if line.startswith("## "):
            break
        body.append(line)
    notes = "\n".join(line for line in body if not LINK.match(line)).strip()
    if not notes:
        raise ValueError(f"CHANGELOG.md: the section of {version} is empty")
    return notes + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: release_notes.py VERSION", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(section(CHANGELOG.read_text(), argv[1].removeprefix("v")))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
