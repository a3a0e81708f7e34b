"""What a kubectl, terraform or Argo CD user types by habit gets an answer that leads to the
right command: `apply --dry-run` names `reconcile plan` (never the destructive `--prune`),
and an unknown command gets did-you-mean, at every level."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_prune_guards import snapshot
from tests.support import TestCluster, run_cli


@pytest.mark.parametrize("flag", ["--dry-run", "--dry-run=client", "--dry-run=server"])
def test_apply_dry_run_says_plan_is_the_dry_run_and_changes_nothing(
    lab: TestCluster, workdir: Path, flag: str
) -> None:
    before = snapshot(lab)

    refused = run_cli("apply", flag, cwd=workdir, kubeconfig=lab.kubeconfig)

    assert refused.code == 2
    assert refused.stdout == ""
    [line] = refused.stderr.splitlines()
    assert line.startswith("error: apply has no --dry-run: `reconcile plan` is its dry run")
    assert "`reconcile plan --out plan.json`, then `reconcile apply plan.json`" in line
    assert "--prune" not in refused.stderr
    assert snapshot(lab) == before


def test_apply_dry_run_none_is_apply_itself(lab: TestCluster, workdir: Path) -> None:
    applied = run_cli("apply", "--dry-run=none", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert applied.code == 0, applied.stderr
    assert applied.lines == ["lab-node-1 nvidia.com/gpu.count 2"]


@pytest.mark.parametrize(
    ("args", "meant"),
    [
        (["aply"], "'apply'"),
        (["pan"], "'plan'"),
        (["rollout", "statsu"], "'status'"),
        (["drivers", "adit"], "'audit'"),
    ],
)
def test_an_unknown_command_gets_did_you_mean(args: list[str], meant: str) -> None:
    result = run_cli(*args)
    assert result.code == 2
    assert f"Did you mean {meant}?" in result.stderr


def test_an_unknown_command_with_nothing_close_is_only_unknown() -> None:
    result = run_cli("xyzzy")
    assert result.code == 2
    assert "No such command 'xyzzy'." in result.stderr
    assert "Did you mean" not in result.stderr
