"""The README's first commands are the ones CI runs, the docs repeat them word for word,
and the README's links lead somewhere."""

from __future__ import annotations

import re

from tests.support import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL)


def test_ci_runs_the_readmes_test_command() -> None:
    blocks = _code_blocks(README.read_text())
    test_command = blocks[1].strip()
    assert test_command.startswith("python3 -m venv .venv && ")
    assert "mkdocs build --strict" in test_command  # the site: links, generated pages
    assert test_command in (REPO / ".ci" / "run").read_text()


def test_quickstart_is_one_line_that_installs_and_runs_plan_and_apply_on_the_sandbox() -> None:
    quickstart = _code_blocks(README.read_text())[0].strip()
    assert "\n" not in quickstart
    assert "pip install ." in quickstart
    assert "reconcile sandbox --seed lab --" in quickstart
    assert "reconcile plan" in quickstart and "reconcile apply" in quickstart


def test_the_docs_give_the_readmes_two_commands_word_for_word() -> None:
    quickstart, test_command = (b.strip() for b in _code_blocks(README.read_text())[:2])
    assert _code_blocks((DOCS / "getting-started.md").read_text())[0].strip() == quickstart
    assert _code_blocks((DOCS / "development.md").read_text())[0].strip() == test_command


def test_the_readme_is_a_front_page() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    sections = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert sections == ["Quickstart", "Tests", "Changing MIG layouts", "Commands", "Documentation"]


def test_every_link_of_the_readme_names_a_file_of_the_repository() -> None:
    targets = re.findall(r"\]\(([^)\s]+)\)", README.read_text())
    relative = [t.split("#", 1)[0] for t in targets if not re.match(r"^[a-z]+:", t)]
    assert relative
    assert [t for t in relative if not (REPO / t).exists()] == []
    # It leads into the site: its front page, the start, the commands, the references.
    assert {t for t in relative if t.startswith("docs/")} >= {
        "docs/index.md",
        "docs/getting-started.md",
        "docs/commands.md",
        "docs/reference/desired.md",
        "docs/reference/commands.md",
    }
