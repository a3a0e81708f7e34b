"""Every `sh` block of the README and of docs/ runs as written.

A block of shell a reader is told to run is a promise: each one runs here, from a copy of
the repository's desired/, examples/ and deploy/, with the installed `reconcile` (and
kubectl) first on PATH, and must exit 0. A block that cannot run here says why on the line
before it, `<!-- not run: REASON -->`, and the reason names what tests it instead.
`text` blocks are transcripts and output, not commands."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
_SH_BLOCK = re.compile(r"^```sh\n(?P<body>.*?)^```$", re.DOTALL | re.MULTILINE)
_NOT_RUN = re.compile(r"^<!-- not run: (?P<reason>.+) -->$")
_TEST_FILE = re.compile(r"tests/[\w/]+\.py")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    body: str
    not_run: str | None  # the reason, when the line before says it is not run here

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in _SH_BLOCK.finditer(text):
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            marker = _NOT_RUN.match(before)
            found.append(
                Block(
                    page,
                    text.count("\n", 0, match.start()) + 1,
                    match["body"],
                    marker["reason"] if marker else None,
                )
            )
    return found


RUN = [b for b in blocks() if b.not_run is None]


def test_the_readme_and_the_docs_hold_commands_and_each_is_run_or_says_why_not() -> None:
    found = blocks()
    assert {b.page.name for b in found} >= {"README.md", "getting-started.md", "fleets.md"}
    assert RUN, "no sh block is run"
    for block in found:
        if block.not_run is None:
            continue
        named = _TEST_FILE.findall(block.not_run)
        assert named, f"{block.where}: `not run` names no test that covers it instead"
        for test in named:
            assert (REPO / test).is_file(), f"{block.where}: {test} does not exist"


@pytest.mark.slow
@pytest.mark.parametrize("block", RUN, ids=[b.where for b in RUN])
def test_the_commands_run_as_written(block: Block, tmp_path: Path) -> None:
    work = tmp_path / "repo"
    for tree in ("desired", "examples", "deploy"):
        shutil.copytree(REPO / tree, work / tree)
    bin_dir = Path(sys.executable).parent  # the installed reconcile, and kubectl beside it
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "NO_COLOR": "1"}
    done = subprocess.run(
        ["sh", "-c", block.body],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{block.where}: exit {done.returncode}\n{done.stderr}"
