"""Bad input through the real CLI: every problem printed, exit 2, and the cluster untouched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import TestCluster, asked_beyond_read_ahead, run_cli

BAD_INPUTS = {
    "invalid value": (
        "nodes/lab-node-1.yaml",
        "nvidia.com/gpu.product: NVIDIA-A10",
        'nvidia.com/gpu.product: "NVIDIA A10"',
    ),
    "invalid key": (
        "nodes/lab-node-1.yaml",
        "nvidia.com/gpu.product:",
        '"nvidia.com/gpu product":',
    ),
    "unquoted integer": (
        "nodes/lab-node-1.yaml",
        'nvidia.com/gpu.count: "2"',
        "nvidia.com/gpu.count: 2",
    ),
    "duplicate key": (
        "nodes/lab-node-1.yaml",
        'nvidia.com/gpu.count: "2"',
        'nvidia.com/gpu.count: "2"\n  nvidia.com/gpu.count: "3"',
    ),
    "unknown field": ("nodes/lab-node-1.yaml", "labels:", "label:"),
    "unknown kind": ("nodes/lab-node-1.yaml", "kind: NodeFeatures", "kind: NodeLabel"),
    "malformed yaml": ("nodes/lab-node-1.yaml", "labels:", "labels: ["),
    "bad matrix row": ("drivers/precompiled.yaml", 'branch: "535"', "branch: r535"),
}


# Whole files added next to the shipped ones: (file, content).
BAD_FILES = {
    "empty file": ("nodes/lab-node-7.yaml", ""),
    "alias bomb": ("nodes/lab-node-7.yaml", "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n"),
    # an .env file is named after its node: this one declares lab-node-1 a second time
    "node declared twice": ("nodes/lab-node-1.env", "nvidia.com/gpu.count=2\n"),
}


def _break(workdir: Path, case: str) -> str:
    """Make desired/ invalid in the way `case` names; the file to see in the messages."""
    if case in BAD_FILES:
        file, content = BAD_FILES[case]
        (workdir / "desired" / file).write_text(content)
        return file
    file, old, new = BAD_INPUTS[case]
    path = workdir / "desired" / file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return file


@pytest.mark.parametrize("case", sorted(BAD_INPUTS) + sorted(BAD_FILES))
def test_plan_and_apply_refuse_bad_input_having_only_read(
    case: str, lab: TestCluster, workdir: Path
) -> None:
    file = _break(workdir, case)
    versions = lab.resource_versions()
    if lab.sandbox is not None:
        lab.sandbox.clear_requests()

    for command in ("plan", "apply"):
        result = run_cli(command, cwd=workdir, kubeconfig=lab.kubeconfig)
        assert result.code == 2, (command, result)
        assert result.stdout == ""
        assert f"desired/{file}:" in result.stderr
        assert "nothing was changed in the cluster" in result.stderr

    if lab.sandbox is not None:  # the nodes were being read meanwhile, nothing else
        assert asked_beyond_read_ahead(lab.sandbox.requests) == []
    assert lab.resource_versions() == versions


def test_validate_prints_every_problem_with_its_position(workdir: Path) -> None:
    node = workdir / "desired" / "nodes" / "lab-node-1.yaml"
    node.write_text(
        node.read_text()
        .replace('nvidia.com/gpu.count: "2"', "nvidia.com/gpu.count: 2")
        .replace("nvidia.com/gpu.product: NVIDIA-A10", 'nvidia.com/gpu.product: "NVIDIA A10"')
    )

    result = run_cli("validate", cwd=workdir)

    assert result.code == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(
        "desired/nodes/lab-node-1.yaml:17:27: labels.nvidia.com/gpu.product: invalid label value"
    )
    assert lines[0].endswith('(sanitized: "NVIDIA-A10")')
    assert lines[1] == (
        "desired/nodes/lab-node-1.yaml:18:25: labels.nvidia.com/gpu.count: must be a string, but YAML "
        'reads 2 as an integer (2): quote it to keep it exactly as written: "2"'
    )


def test_validate_passes_on_the_shipped_desired_state(workdir: Path) -> None:
    result = run_cli("validate", cwd=workdir)
    # A clean run says so in one line on stderr, as terraform validate does; -q silences it.
    assert (result.code, result.stdout, result.stderr) == (
        0,
        "",
        "note: desired is valid: 3 node(s), 0 group(s), 11 object(s), 3 support-matrix row(s)\n",
    )
    quiet = run_cli("validate", "-q", cwd=workdir)
    assert (quiet.code, quiet.stdout, quiet.stderr) == (0, "", "")


def test_validate_json_is_machine_readable(workdir: Path) -> None:
    (workdir / "desired" / "nodes" / "empty.yaml").write_text("")

    result = run_cli("validate", "-o", "json", cwd=workdir)

    assert result.code == 2
    document = json.loads(result.stdout)
    assert document["valid"] is False
    assert document["diagnostics"] == [
        {
            "severity": "error",
            "summary": "empty file",
            "detail": "remove it or declare something in it",
            "file": "desired/nodes/empty.yaml",
            "line": 1,
            "column": 1,
        }
    ]


def test_validate_takes_another_directory(tmp_path: Path) -> None:
    result = run_cli("validate", "--desired", str(tmp_path / "missing"), cwd=tmp_path)
    assert result.code == 2
    assert "desired state directory not found: missing" in result.stderr


def test_unreachable_cluster_is_an_error_not_drift(workdir: Path, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "dead.yaml"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )

    result = run_cli("plan", cwd=workdir, kubeconfig=kubeconfig)

    assert result.code == 2
    assert result.stderr == (
        "error: cannot connect to the API server https://127.0.0.1:1 (connection refused or "
        "host unreachable): check the server address in the kubeconfig and that the cluster "
        "is up\n"
    )


def test_missing_kubeconfig_is_explained(workdir: Path) -> None:
    result = run_cli("plan", "--kubeconfig", "nope.yaml", cwd=workdir)
    assert (result.code, result.stderr) == (2, "error: kubeconfig not found: nope.yaml\n")


def test_unknown_context_is_explained(lab: TestCluster, workdir: Path) -> None:
    result = run_cli("plan", "--context", "prod", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert result.code == 2
    assert "prod" in result.stderr


def test_saved_plan_that_is_not_a_plan(lab: TestCluster, workdir: Path) -> None:
    bogus = workdir / "plan.json"
    bogus.write_text('{"kind": "Something"}')

    result = run_cli("apply", str(bogus), cwd=workdir, kubeconfig=lab.kubeconfig)

    assert result.code == 2
    assert "is not a saved reconcile plan" in result.stderr


def test_bad_output_format_is_a_usage_error(workdir: Path) -> None:
    result = run_cli("validate", "-o", "xml", cwd=workdir)
    assert result.code == 2
    assert "'xml' is not one of 'text', 'json', 'markdown', 'wide', 'yaml'" in result.stderr


def test_validate_knows_builtin_kinds_and_the_gpu_label_catalogue_offline(workdir: Path) -> None:
    workloads = workdir / "desired" / "workloads" / "gpu-drv.yaml"
    workloads.write_text(workloads.read_text().replace("kind: Deployment", "kind: Deploymnet"))
    node = workdir / "desired" / "nodes" / "lab-node-0.yaml"
    node.write_text(node.read_text().replace("nvidia.com/gpu.product:", "nvidia.com/gpu.prodcut:"))

    result = run_cli("validate", cwd=workdir)

    assert result.code == 0  # warnings: the table and the catalogue may lag what exists
    assert (
        "desired/workloads/gpu-drv.yaml:50:7: warning: apps/v1 serves no kind Deploymnet that "
        "reconcile knows: did you mean Deployment?"
    ) in result.stderr
    assert (
        "desired/nodes/lab-node-0.yaml:15:3: warning: nvidia.com/gpu.prodcut is not a label NFD, "
        "GPU Feature Discovery or the GPU Operator publishes: did you mean nvidia.com/gpu.product?"
    ) in result.stderr
