"""The documentation site: its generated pages are what the package gives now, and
`mkdocs build --strict` passes (a broken link or anchor, a page left out of the navigation
or a stale generated page fails it), as the test command runs it."""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO
from tools import gen_docs
from tools.mkdocs_hooks import repository_link, unescape_table_pipes

DOCS = REPO / "docs"
URL = "https://github.com/example/reconcile"


def test_the_generated_pages_are_what_the_package_gives() -> None:
    assert [p.relative_to(REPO).as_posix() for p in gen_docs.stale()] == [], (
        "run python tools/gen_docs.py"
    )


def test_a_generated_page_that_differs_is_stale(tmp_path: Path) -> None:
    for name, render in gen_docs.PAGES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(render(), encoding="utf-8")
    assert gen_docs.stale(tmp_path) == []
    page = tmp_path / "docs" / "reference" / "commands.md"
    page.write_text(page.read_text() + "edited by hand\n")
    assert gen_docs.stale(tmp_path) == [page]


def test_the_command_reference_holds_every_commands_help() -> None:
    from click.testing import CliRunner

    from reconcile.cli import main

    page = (DOCS / "reference" / "commands.md").read_text()
    for path in (["plan"], ["drivers", "tag"], ["watch"], ["sandbox"]):
        assert f"`reconcile {' '.join(path)}`" in page
        shown = CliRunner().invoke(
            main, [*path, "--help"], prog_name="reconcile", terminal_width=88
        )
        usage = shown.output.splitlines()[0]
        assert usage.startswith(f"Usage: reconcile {' '.join(path)} ")
        assert usage in page


def test_the_desired_reference_holds_every_kinds_fields() -> None:
    page = (DOCS / "reference" / "desired.md").read_text()
    for kind in gen_docs.DESIRED_KINDS:
        assert f"\n## {kind}\n" in page
    for field in ("`taints[].effect`", "`selector.matchExpressions[].operator`", "`rows[].osTag`"):
        assert field in page


def test_a_link_out_of_docs_points_at_the_file_in_the_repository(
    caplog: pytest.LogCaptureFixture,
) -> None:
    page = DOCS / "watch.md"
    assert repository_link("../deploy/README.md#overlays", page, DOCS, URL) == (
        f"{URL}/blob/main/deploy/README.md#overlays"
    )
    assert repository_link("../deploy/monitoring/", page, DOCS, URL) == (
        f"{URL}/tree/main/deploy/monitoring"
    )
    # A page of the site, an anchor, another site: MkDocs's own to check or not a file.
    for target in ("apply.md#saved-plans", "#operations", "https://example.com/x.md"):
        assert repository_link(target, page, DOCS, URL) is None
    assert caplog.records == []

    with caplog.at_level(logging.WARNING):
        assert repository_link("../deploy/nope.yaml", page, DOCS, URL) is None
        assert repository_link("../../../etc/passwd", page, DOCS, URL) is None
    assert [r.getMessage() for r in caplog.records] == [
        "docs/watch.md: link ../deploy/nope.yaml names deploy/nope.yaml, which does not exist",
        "docs/watch.md: link ../../../etc/passwd leads out of the repository",
    ]


def test_a_pipe_escaped_for_github_in_a_table_cells_code_is_a_plain_pipe() -> None:
    assert unescape_table_pipes(r"| `a\|b` | c \| d |") == r"| `a|b` | c \| d |"
    assert unescape_table_pipes(r"text `a\|b`") == r"text `a\|b`"


@pytest.mark.slow
def test_the_site_builds_strict(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs and mkdocs-material are not installed: pip install -e '.[test]'")
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    for page in ("index.html", "reference/desired/index.html", "reference/commands/index.html"):
        assert (site / page).is_file()
