"""The README's first commands are the ones CI runs."""

from __future__ import annotations

import re

from tests.support import REPO


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL)


def test_ci_runs_the_readmes_test_command() -> None:
    blocks = _code_blocks((REPO / "README.md").read_text())
    test_command = blocks[1].strip()
    assert test_command.startswith("python3 -m venv .venv && ")
    assert test_command in (REPO / ".ci" / "run").read_text()


def test_quickstart_is_one_line_that_installs_and_runs_plan_and_apply_on_the_sandbox() -> None:
    quickstart = _code_blocks((REPO / "README.md").read_text())[0].strip()
    assert "\n" not in quickstart
    assert "pip install ." in quickstart
    assert "reconcile sandbox --seed lab --" in quickstart
    assert "reconcile plan" in quickstart and "reconcile apply" in quickstart
