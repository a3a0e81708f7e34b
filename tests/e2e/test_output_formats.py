"""Every command renders the -o formats it lists, or refuses the others with exit 2 and
one error line before it does anything: a format is never silently ignored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconcile.cli.output import WIDE_HEADER
from tests.support import TestCluster, run_cli

# command -> (arguments, formats it renders)
COMMANDS: dict[str, tuple[list[str], set[str]]] = {
    "validate": (["validate"], {"text", "json", "markdown"}),
    "plan": (["plan"], {"text", "json", "markdown", "wide"}),
    "audit": (["audit"], {"text", "json", "markdown"}),
    "drivers audit": (["drivers", "audit"], {"text", "json", "markdown"}),
    "drivers tag": (["drivers", "tag", "--all"], {"text", "json"}),
    "report": (["report"], {"text", "json"}),
    "placement": (["placement"], {"text", "json"}),
    "sanitize": (["sanitize", "NVIDIA A10"], {"text", "json"}),
    "import": (["import", "--dry-run"], {"text", "json"}),
    "rbac": (["rbac"], {"text", "json"}),
    "schemas": (["schemas", "--check"], {"text"}),
    "upgrade": (
        ["upgrade", "lab-node-0", "--driver", "550.90.07", "--dry-run", "--force"],
        {"text", "json"},
    ),
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_an_unrendered_format_is_refused_before_anything_is_asked(
    sandbox_only: TestCluster, workdir: Path, name: str
) -> None:
    args, rendered = COMMANDS[name]
    cwd = Path(__file__).parents[2] if name == "schemas" else workdir
    assert sandbox_only.sandbox is not None
    for fmt in sorted({"text", "json", "markdown", "wide"} - rendered):
        sandbox_only.sandbox.clear_requests()
        result = run_cli(*args, "-o", fmt, cwd=cwd, kubeconfig=sandbox_only.kubeconfig)
        assert result.code == 2, (name, fmt, result.stderr)
        assert result.stdout == ""
        # -o yaml goes wherever -o json does: the same document
        offered: list[str] = [f for f in ("text", "json", "markdown", "wide") if f in rendered]
        offered += ["yaml"] if "json" in rendered else []
        assert result.stderr == (
            f"error: reconcile {name} does not render -o {fmt}: use {', '.join(offered)}\n"
        )
        assert sandbox_only.sandbox.requests == []


@pytest.mark.parametrize("name", sorted(n for n, (_, f) in COMMANDS.items() if "json" in f))
def test_json_is_json(sandbox_only: TestCluster, workdir: Path, name: str) -> None:
    args, _ = COMMANDS[name]
    result = run_cli(*args, "-o", "json", cwd=workdir, kubeconfig=sandbox_only.kubeconfig)
    assert result.code in (0, 1), result.stderr
    json.loads(result.stdout)


def test_wide_adds_the_live_value_and_the_owner_to_each_drift_line(
    lab: TestCluster, workdir: Path
) -> None:
    plan = run_cli("plan", "-o", "wide", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert plan.lines == [WIDE_HEADER, "lab-node-1 nvidia.com/gpu.count 9 2 gpu-feature-discovery"]
    text = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert text.lines == ["lab-node-1 nvidia.com/gpu.count 2"]  # the contract, unchanged
    apply = run_cli("apply", "-o", "wide", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert apply.lines == [WIDE_HEADER, "lab-node-1 nvidia.com/gpu.count 9 2 gpu-feature-discovery"]
