"""stdout and the exit code agree, command by command: stdout never says OK (or anything a
script could take for a complete answer) when the exit code says the command failed."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.conftest import ClusterFactory
from tests.e2e.test_gpu_facts import LAB_ROWS, MATRIX_HEADER
from tests.support import TestCluster, lab_objects, run_cli

KERNEL = "feature.node.kubernetes.io/kernel-version.full"


def unreachable_kubeconfig(directory: Path) -> Path:
    """A kubeconfig naming a port on 127.0.0.1 where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = directory / "unreachable.kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return path


def _one_error(stderr: str) -> None:
    assert [line for line in stderr.splitlines() if line.startswith("error:")] == [
        stderr.splitlines()[-1]
    ]


@pytest.fixture
def gpu_lab(make_cluster: ClusterFactory) -> TestCluster:
    """The driver lab's lab-node-0..2: three GPU nodes, each image in LAB_ROWS."""
    return make_cluster(
        [
            o
            for o in lab_objects("driver-lab")
            if o["kind"] != "Pod" and o["metadata"]["name"] != "lab-node-3"
        ]
    )


@pytest.fixture
def matrix_workdir(tmp_path: Path) -> Path:
    work = tmp_path / "matrix"
    (work / "desired" / "drivers").mkdir(parents=True)
    (work / "desired" / "drivers" / "support-matrix.csv").write_text(MATRIX_HEADER + LAB_ROWS)
    return work


@pytest.mark.parametrize(
    "args",
    [
        ("audit",),
        ("drivers", "audit"),
        ("drivers", "tag", "--all"),
        ("drivers", "tag", "lab-node-0"),
        ("report",),
        ("placement",),
    ],
    ids=" ".join,
)
@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_an_unreachable_cluster_leaves_stdout_empty(
    args: tuple[str, ...], fmt: str, tmp_path: Path, matrix_workdir: Path
) -> None:
    kubeconfig = unreachable_kubeconfig(tmp_path)
    result = run_cli(*args, "-o", fmt, cwd=matrix_workdir, kubeconfig=kubeconfig)
    assert (result.code, result.stdout) == (2, "")
    _one_error(result.stderr)


def test_audit_says_ok_only_with_exit_0(lab: TestCluster) -> None:
    lab.label("lab-node-1", **{"nvidia.com/gpu.count": "2"})  # as its kubelet offers
    ok = run_cli("audit", kubeconfig=lab.kubeconfig)
    assert (ok.code, ok.stdout) == (0, "OK\n")
    lab.label("lab-node-0", **{"nvidia.com/gpu.memory": None})
    found = run_cli("audit", kubeconfig=lab.kubeconfig)
    assert (found.code, found.lines) == (1, ["lab-node-0 nvidia.com/gpu.memory missing"])
    assert (
        json.loads(run_cli("audit", "-o", "json", kubeconfig=lab.kubeconfig).stdout)["ok"] is False
    )


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_drivers_audit_lists_a_node_without_a_tag_as_unknown(
    gpu_lab: TestCluster, matrix_workdir: Path, fmt: str
) -> None:
    gpu_lab.label("lab-node-2", **{KERNEL: None})
    result = run_cli(
        "drivers", "audit", "-o", fmt, cwd=matrix_workdir, kubeconfig=gpu_lab.kubeconfig
    )
    assert result.code == 2
    assert "OK" not in result.stdout
    unknown = f"lab-node-2 UNKNOWN cannot build the driver image tag: label {KERNEL} is missing"
    assert unknown in result.stdout
    assert result.stderr == (
        f"error: lab-node-2: cannot build the driver image tag: label {KERNEL} is missing\n"
    )


def test_drivers_audit_json_is_not_ok_when_a_tag_cannot_be_built(
    gpu_lab: TestCluster, matrix_workdir: Path
) -> None:
    gpu_lab.label("lab-node-1", **{KERNEL: None})
    gpu_lab.label("lab-node-2", **{KERNEL: ""})
    result = run_cli(
        "drivers", "audit", "-o", "json", cwd=matrix_workdir, kubeconfig=gpu_lab.kubeconfig
    )
    assert result.code == 2
    document = json.loads(result.stdout)
    assert document["ok"] is False
    assert [(f["node"], f["tag"]) for f in document["findings"]] == [
        ("lab-node-1", None),
        ("lab-node-2", None),
    ]
    _one_error(result.stderr)
    assert "lab-node-1: " in result.stderr and "lab-node-2: " in result.stderr


def test_drivers_tag_leaves_out_the_node_it_cannot_tag(gpu_lab: TestCluster) -> None:
    gpu_lab.label("lab-node-2", **{KERNEL: None})
    every = run_cli("drivers", "tag", "--all", kubeconfig=gpu_lab.kubeconfig)
    assert every.code == 2
    assert [line.split()[0] for line in every.lines] == ["lab-node-0", "lab-node-1"]
    _one_error(every.stderr)
    single = run_cli("drivers", "tag", "lab-node-2", kubeconfig=gpu_lab.kubeconfig)
    assert (single.code, single.stdout) == (2, "")


def test_report_names_the_node_whose_tag_cannot_be_built(
    gpu_lab: TestCluster, matrix_workdir: Path
) -> None:
    gpu_lab.label("lab-node-2", **{KERNEL: None})
    result = run_cli("report", cwd=matrix_workdir, kubeconfig=gpu_lab.kubeconfig)
    # A summary, exit 0: the node's tag is empty and the warning says why, once.
    assert result.code == 0
    assert "LAB_NODE_2_TAG=" in result.lines
    assert result.stderr == (
        f"warning: lab-node-2: cannot build the driver image tag: label {KERNEL} is missing\n"
    )


def test_placement_with_invalid_desired_prints_nothing(lab: TestCluster, workdir: Path) -> None:
    (workdir / "desired" / "nodes" / "broken.yaml").write_text("kind: [\n")
    result = run_cli("placement", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert (result.code, result.stdout) == (2, "")


def test_sanitize_prints_only_values_it_could_make(tmp_path: Path) -> None:
    result = run_cli("sanitize", "---", "A10", "***", cwd=tmp_path)
    assert (result.code, result.lines) == (2, ["A10"])
    assert result.stderr == (
        "error: '---', '***' have no alphanumeric character to keep: they cannot be label values\n"
    )
    document = json.loads(run_cli("sanitize", "-o", "json", "---", cwd=tmp_path).stdout)
    assert document == [{"input": "---", "value": None}]


@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_validate_never_says_valid_with_exit_2(workdir: Path, fmt: str) -> None:
    (workdir / "desired" / "nodes" / "broken.yaml").write_text("kind: [\n")
    result = run_cli("validate", "-o", fmt, cwd=workdir)
    assert result.code == 2
    if fmt == "text":
        assert result.stdout == ""
    elif fmt == "json":
        assert json.loads(result.stdout)["valid"] is False
    else:
        assert "No problems found" not in result.stdout
        assert "1 error(s)" in result.stdout
