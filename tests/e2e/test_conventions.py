"""What a kubectl, terraform or Argo CD user types by habit gets an answer that leads to the
right command: `apply --dry-run` names `reconcile plan` (never the destructive `--prune`),
and an unknown command gets did-you-mean, at every level."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.e2e.test_prune_guards import snapshot
from tests.support import REPO, TestCluster, run_cli


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


def _commands() -> list[str]:
    import click

    from reconcile.cli.app import main

    found = []

    def walk(group: click.Group, ctx: click.Context, prefix: str) -> None:
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None
            found.append(prefix + name)
            if isinstance(command, click.Group):
                walk(
                    command, click.Context(command, info_name=name, parent=ctx), f"{prefix}{name} "
                )

    walk(main, click.Context(main, info_name="reconcile"), "")
    return found


def test_every_command_has_exit_codes_and_its_help_ends_with_them() -> None:
    from reconcile.cli.output import EXIT_CODES

    commands = _commands()
    assert sorted(EXIT_CODES) == sorted(commands)
    for command in commands:
        shown = run_cli(*command.split(), "--help")
        assert shown.code == 0, (command, shown.stderr)
        last = " ".join(shown.stdout.split("Exit codes:")[-1].split())
        assert "Exit codes:" in shown.stdout, command
        assert last == EXIT_CODES[command] + ".", command


def test_the_command_table_gives_each_commands_codes() -> None:
    from reconcile.cli.output import EXIT_CODES

    rows = [
        line
        for line in (REPO / "docs" / "commands.md").read_text().splitlines()
        if line.startswith("| `reconcile ")
    ]
    assert rows
    for row in rows:
        codes = row.rstrip(" |").rsplit(" | ", 1)[1]
        assert codes in EXIT_CODES.values(), row


def test_report_without_a_support_matrix_is_an_error_as_drivers_audit_is(
    lab: TestCluster, workdir: Path
) -> None:
    shutil.rmtree(workdir / "desired" / "drivers")
    for args in (["report"], ["drivers", "audit"]):
        refused = run_cli(*args, cwd=workdir, kubeconfig=lab.kubeconfig)
        assert refused.code == 2, args
        assert refused.stderr.splitlines() == [
            "error: no support matrix in desired/drivers/ (a DriverSupportMatrix .yaml or a .csv)"
        ], args
        assert refused.stdout == "", args


@pytest.mark.parametrize(
    "args",
    [
        ["plan"],
        ["apply"],
        ["placement"],
        ["audit"],
        ["drivers", "audit"],
        ["report"],
        ["rollout", "status"],
        ["rbac"],
        ["rollout", "abandon", "lab-node-0"],  # a list at the top
    ],
    ids=" ".join,
)
def test_yaml_is_the_json_document(lab: TestCluster, workdir: Path, args: list[str]) -> None:
    import json

    import yaml

    # apply changes the cluster: each format's run starts from the same drift
    documents = []
    for output in ("json", "yaml"):
        if args == ["apply"]:
            lab.label("lab-node-1", **{"nvidia.com/gpu.count": "9"})
        shown = run_cli(*args, "-o", output, cwd=workdir, kubeconfig=lab.kubeconfig)
        assert shown.code in (0, 1), shown.stderr
        documents.append(shown.stdout)
    as_json, as_yaml = json.loads(documents[0]), yaml.safe_load(documents[1])
    for document in (as_json, as_yaml):  # the digest and the server's address differ by run
        if isinstance(document, dict):
            for volatile in ("digest", "cluster", "resourceVersion"):
                document.pop(volatile, None)
    assert as_yaml == as_json


def test_help_offers_only_the_formats_a_command_renders() -> None:
    placement = run_cli("placement", "--help").stdout
    assert "[text|json|yaml]" in placement
    plan = run_cli("plan", "--help").stdout
    assert "[text|json|markdown|wide|yaml]" in plan
    refused = run_cli("placement", "-o", "wide")
    assert refused.code == 2
    assert (
        refused.stderr
        == "error: reconcile placement does not render -o wide: use text, json, yaml\n"
    )


def test_plan_and_apply_take_a_node_selector_and_a_saved_plan_records_it(
    lab: TestCluster, workdir: Path
) -> None:
    node_file = workdir / "desired" / "nodes" / "lab-node-0.yaml"
    node_file.write_text(node_file.read_text().replace('gpu.count: "4"', 'gpu.count: "8"'))
    everything = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert everything.lines == [
        "lab-node-0 nvidia.com/gpu.count 8",
        "lab-node-1 nvidia.com/gpu.count 2",
    ]
    one = ["-l", "kubernetes.io/hostname=lab-node-1"]
    planned = run_cli("plan", *one, cwd=workdir, kubeconfig=lab.kubeconfig)
    assert (planned.code, planned.lines) == (1, ["lab-node-1 nvidia.com/gpu.count 2"])

    saved = workdir / "plan.json"
    run_cli("plan", *one, "--out", str(saved), cwd=workdir, kubeconfig=lab.kubeconfig)
    assert json.loads(saved.read_text())["selector"] == "kubernetes.io/hostname=lab-node-1"
    before = snapshot(lab)
    unselected = run_cli("apply", str(saved), cwd=workdir, kubeconfig=lab.kubeconfig)
    assert unselected.code == 2
    assert "planned with --selector kubernetes.io/hostname=lab-node-1" in unselected.stderr
    assert snapshot(lab) == before

    applied = run_cli("apply", *one, str(saved), cwd=workdir, kubeconfig=lab.kubeconfig)
    assert (applied.code, applied.lines) == (0, ["lab-node-1 nvidia.com/gpu.count 2"])
    assert lab.labels("lab-node-0")["nvidia.com/gpu.count"] == "4"  # not selected: left
    rest = run_cli(
        "apply", "-l", "nvidia.com/gpu.present=true", cwd=workdir, kubeconfig=lab.kubeconfig
    )
    assert rest.lines == ["lab-node-0 nvidia.com/gpu.count 8"]


def test_a_selector_that_does_not_parse_is_refused_before_anything_is_asked(
    sandbox_only: TestCluster, workdir: Path
) -> None:
    assert sandbox_only.sandbox is not None
    sandbox_only.sandbox.clear_requests()
    for command in ("plan", "apply"):
        refused = run_cli(command, "-l", "a in (", cwd=workdir, kubeconfig=sandbox_only.kubeconfig)
        assert refused.code == 2
        assert refused.stderr.splitlines() == [
            "error: --selector 'a in (': unable to parse requirement: found '', expected: ',', "
            "')' or identifier"
        ]
    assert sandbox_only.sandbox.requests == []
