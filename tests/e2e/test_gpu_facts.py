"""GPU facts through the real CLI: sanitize, audit, driver tags, matrix coverage, report."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ClusterFactory
from tests.support import REPO, TestCluster, lab_objects, run_cli

DRIVER_LAB = REPO / "examples" / "driver-lab"
LAB_TAGS = {
    "lab-node-0": "550-5.15.0-119-generic-ubuntu22.04",
    "lab-node-1": "535-5.15.0-107-generic-ubuntu22.04",
    "lab-node-2": "550-6.8.0-45-generic-ubuntu24.04",
}
MATRIX_HEADER = "driver_branch,kernel,os_tag\n"
LAB_ROWS = "550,5.15.0-119-generic,ubuntu22.04\n535,5.15.0-107-generic,ubuntu22.04\n550,6.8.0-45-generic,ubuntu24.04\n"
NODE_3 = """\
apiVersion: v1
kind: Node
metadata:
  name: lab-node-3
  annotations:
    kwok.x-k8s.io/node: fake
  labels:
    kubernetes.io/hostname: lab-node-3
    nvidia.com/gpu.present: "true"
    nvidia.com/cuda.driver.major: "550"
    nvidia.com/cuda.driver.minor: "90"
    nvidia.com/cuda.driver.rev: "07"
    feature.node.kubernetes.io/kernel-version.full: 6.8.0-52-generic
    feature.node.kubernetes.io/system-os_release.ID: ubuntu
    feature.node.kubernetes.io/system-os_release.VERSION_ID: "24.04"
status:
  conditions:
  - type: Ready
    status: "True"
"""


@pytest.fixture
def three_node_driver_lab(make_cluster: ClusterFactory) -> TestCluster:
    """The driver lab at its step 3: lab-node-0..2, before lab-node-3 joins."""
    objects = [o for o in lab_objects("driver-lab") if o["metadata"]["name"] != "lab-node-3"]
    objects = [
        o for o in objects if not (o["kind"] == "Pod" and o["spec"].get("nodeName") == "lab-node-3")
    ]
    return make_cluster(objects)


@pytest.fixture
def driver_workdir(tmp_path: Path) -> Path:
    """A desired/ holding only the lab's support-matrix.csv with its three rows."""
    work = tmp_path / "drv"
    (work / "desired" / "drivers").mkdir(parents=True)
    (work / "desired" / "drivers" / "support-matrix.csv").write_text(MATRIX_HEADER + LAB_ROWS)
    return work


def test_sanitize_one_line_per_value() -> None:
    result = run_cli("sanitize", "NVIDIA A100-SXM4-40GB", "Tesla T4 (PCIe)", "NVIDIA-A10")
    assert (result.code, result.lines) == (
        0,
        ["NVIDIA-A100-SXM4-40GB", "Tesla-T4--PCIe", "NVIDIA-A10"],
    )


def test_sanitize_refuses_a_value_with_nothing_left() -> None:
    result = run_cli("sanitize", "---", "A10")
    assert result.code == 2
    assert result.lines == ["A10"]
    assert (
        result.stderr
        == "error: '---' has no alphanumeric character to keep: it cannot be a label value\n"
    )


def test_audit_compares_the_gpu_count_with_what_the_node_offers(lab: TestCluster) -> None:
    # The lab's drift: lab-node-1 says 9 GPUs, its kubelet offers 2.
    result = run_cli("audit", kubeconfig=lab.kubeconfig)
    assert (result.code, result.lines) == (1, ["lab-node-1 nvidia.com/gpu.count allocatable=2"])
    lab.label("lab-node-1", **{"nvidia.com/gpu.count": "2"})
    fixed = run_cli("audit", kubeconfig=lab.kubeconfig)
    assert (fixed.code, fixed.stdout) == (0, "OK\n")


def test_audit_finds_missing_and_malformed_gpu_labels(lab: TestCluster) -> None:
    lab.label("lab-node-0", **{"nvidia.com/gpu.memory": None, "nvidia.com/gpu.count": "four"})
    lab.label("lab-node-1", **{"nvidia.com/gpu.product": ""})
    lab.label("lab-node-2", **{"nvidia.com/gpu.present": "true"})  # a new GPU node, GFD not run yet

    result = run_cli("audit", kubeconfig=lab.kubeconfig)

    assert result.code == 1
    assert result.lines == [
        "lab-node-0 nvidia.com/gpu.count not-a-number",
        "lab-node-0 nvidia.com/gpu.memory missing",
        "lab-node-1 nvidia.com/gpu.count allocatable=2",
        "lab-node-1 nvidia.com/gpu.product bad-format",
        "lab-node-2 nvidia.com/gpu.count missing",
        "lab-node-2 nvidia.com/gpu.memory missing",
        "lab-node-2 nvidia.com/gpu.product missing",
    ]
    document = json.loads(run_cli("audit", "-o", "json", kubeconfig=lab.kubeconfig).stdout)
    assert document["ok"] is False
    assert document["findings"][0] == {
        "node": "lab-node-0",
        "key": "nvidia.com/gpu.count",
        "reason": "not-a-number",
    }


def test_the_driver_lab_plays_through(
    three_node_driver_lab: TestCluster, driver_workdir: Path
) -> None:
    cluster, work = three_node_driver_lab, driver_workdir
    for node, tag in LAB_TAGS.items():
        assert run_cli("drivers", "tag", node, cwd=work, kubeconfig=cluster.kubeconfig).lines == [
            tag
        ]
    every = run_cli("drivers", "tag", "--all", cwd=work, kubeconfig=cluster.kubeconfig)
    assert every.lines == [f"{node} {tag}" for node, tag in LAB_TAGS.items()]
    assert run_cli("drivers", "audit", cwd=work, kubeconfig=cluster.kubeconfig).stdout == "OK\n"

    cluster.create(_node_3())
    skew = run_cli("drivers", "audit", cwd=work, kubeconfig=cluster.kubeconfig)
    assert (skew.code, skew.lines) == (1, ["lab-node-3 MISSING 550-6.8.0-52-generic-ubuntu24.04"])

    matrix = work / "desired" / "drivers" / "support-matrix.csv"
    matrix.write_text(matrix.read_text() + "550,6.8.0-52-generic,ubuntu24.04\n")
    fixed = run_cli("drivers", "audit", cwd=work, kubeconfig=cluster.kubeconfig)
    assert (fixed.code, fixed.stdout) == (0, "OK\n")


def _node_3() -> dict[str, Any]:
    import yaml

    return dict(yaml.safe_load(NODE_3))


@pytest.mark.kubectl
def test_lab_node_3_joins_with_kubectl_apply(
    three_node_driver_lab: TestCluster, driver_workdir: Path, tmp_path: Path
) -> None:
    kubectl = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or "kubectl"
    manifest = tmp_path / "node3.yaml"
    manifest.write_text(NODE_3)
    import subprocess

    applied = subprocess.run(
        [
            kubectl,
            "--kubeconfig",
            str(three_node_driver_lab.kubeconfig),
            "apply",
            "-f",
            str(manifest),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={"HOME": str(tmp_path)},
    )
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.strip() == "node/lab-node-3 created"
    skew = run_cli(
        "drivers", "audit", cwd=driver_workdir, kubeconfig=three_node_driver_lab.kubeconfig
    )
    assert skew.lines == ["lab-node-3 MISSING 550-6.8.0-52-generic-ubuntu24.04"]


def test_tag_with_a_missing_part_is_an_error_naming_the_label(
    three_node_driver_lab: TestCluster, driver_workdir: Path
) -> None:
    three_node_driver_lab.label(
        "lab-node-2", **{"feature.node.kubernetes.io/kernel-version.full": None}
    )

    single = run_cli("drivers", "tag", "lab-node-2", kubeconfig=three_node_driver_lab.kubeconfig)
    assert (single.code, single.stdout) == (2, "")
    assert single.stderr == (
        "error: lab-node-2: cannot build the driver image tag: label "
        "feature.node.kubernetes.io/kernel-version.full is missing\n"
    )
    every = run_cli("drivers", "tag", "--all", kubeconfig=three_node_driver_lab.kubeconfig)
    assert every.code == 2
    assert every.lines == [f"{n} {t}" for n, t in LAB_TAGS.items() if n != "lab-node-2"]
    audit = run_cli(
        "drivers", "audit", cwd=driver_workdir, kubeconfig=three_node_driver_lab.kubeconfig
    )
    assert audit.code == 2
    assert "label feature.node.kubernetes.io/kernel-version.full is missing" in audit.stderr


def test_drivers_tag_needs_a_node_or_all(lab: TestCluster) -> None:
    result = run_cli("drivers", "tag", kubeconfig=lab.kubeconfig)
    assert (result.code, result.stderr) == (2, "error: give a NODE or --all\n")


def test_drivers_audit_without_a_matrix_is_an_error(lab: TestCluster, tmp_path: Path) -> None:
    (tmp_path / "desired" / "nodes").mkdir(parents=True)
    result = run_cli("drivers", "audit", cwd=tmp_path, kubeconfig=lab.kubeconfig)
    assert result.code == 2
    assert "no support matrix in desired/drivers/" in result.stderr


def test_plan_reports_a_kernel_bump_without_its_image(lab: TestCluster, workdir: Path) -> None:
    node = workdir / "desired" / "nodes" / "lab-node-0.yaml"
    node.write_text(node.read_text().replace("5.15.0-119-generic", "5.15.0-122-generic"))

    plan = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert plan.code == 2
    assert (
        "lab-node-0 feature.node.kubernetes.io/kernel-version.full 5.15.0-122-generic" in plan.lines
    )
    assert (
        "error: lab-node-0: driver image 550-5.15.0-122-generic-ubuntu22.04 is not in the support matrix: "
        "build and push it, then add its row to desired/drivers/"
    ) in plan.stderr
    findings = json.loads(
        run_cli("plan", "-o", "json", cwd=workdir, kubeconfig=lab.kubeconfig).stdout
    )["findings"]
    assert [(f["kind"], f["subject"]) for f in findings] == [("driver-image-missing", "lab-node-0")]
    assert (
        run_cli("validate", cwd=workdir).code == 2
    )  # offline too, since the file declares every part


def test_apply_refuses_to_converge_onto_a_missing_image_unless_allowed(
    lab: TestCluster, workdir: Path
) -> None:
    node = workdir / "desired" / "nodes" / "lab-node-0.yaml"
    node.write_text(node.read_text().replace("5.15.0-119-generic", "5.15.0-122-generic"))

    refused = run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert refused.code == 2
    assert refused.lines == ["lab-node-1 nvidia.com/gpu.count 2"]  # the rest still converges
    assert (
        "lab-node-0: not converged: refused: these changes move the node onto driver image 550-5.15.0-122-generic-ubuntu22.04"
        in refused.stderr
    )
    assert (
        lab.labels("lab-node-0")["feature.node.kubernetes.io/kernel-version.full"]
        == "5.15.0-119-generic"
    )

    allowed = run_cli("apply", "--allow-missing-image", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert (allowed.code, allowed.lines) == (
        0,
        ["lab-node-0 feature.node.kubernetes.io/kernel-version.full 5.15.0-122-generic"],
    )


def test_a_new_node_in_a_pull_request_is_checked_before_it_exists(
    lab: TestCluster, workdir: Path
) -> None:
    nodes = workdir / "desired" / "nodes"
    (nodes / "lab-node-3.yaml").write_text(
        (nodes / "lab-node-0.yaml")
        .read_text()
        .replace("lab-node-0", "lab-node-3")
        .replace("5.15.0-119-generic", "6.8.0-52-generic")
        .replace('VERSION_ID: "22.04"', 'VERSION_ID: "24.04"')
    )

    plan = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert plan.code == 2
    assert "lab-node-3: declared in desired/nodes/lab-node-3.yaml" in plan.stderr
    assert (
        "error: lab-node-3: driver image 550-6.8.0-52-generic-ubuntu24.04 is not in the support matrix"
        in plan.stderr
    )


def test_report_is_computed_from_the_cluster_and_desired(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(lab_objects("driver-lab"))
    cluster.label("lab-node-1", **{"nvidia.com/gpu-driver-upgrade-state": "upgrade-done"})

    result = run_cli("report", cwd=DRIVER_LAB, kubeconfig=cluster.kubeconfig)

    assert result.code == 0
    assert result.lines[:3] == ["NODES=4", "SKEW=0", "MATRIX_ROWS=4"]
    assert "LAB_NODE_1_TAG=535-5.15.0-107-generic-ubuntu22.04" in result.lines
    assert "LAB_NODE_1_UPGRADE_STATE=upgrade-done" in result.lines
    document = json.loads(
        run_cli("report", "-o", "json", cwd=DRIVER_LAB, kubeconfig=cluster.kubeconfig).stdout
    )
    assert document["gpuNodes"][1] == {
        "name": "lab-node-1",
        "tag": "535-5.15.0-107-generic-ubuntu22.04",
        "upgradeState": "upgrade-done",
    }


def test_report_refuses_two_nodes_that_make_one_variable(make_cluster: ClusterFactory) -> None:
    objects = lab_objects("driver-lab")
    [node] = [o for o in objects if o["kind"] == "Node" and o["metadata"]["name"] == "lab-node-1"]
    twin = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "lab.node.1",
            "labels": {**node["metadata"]["labels"], "kubernetes.io/hostname": "lab.node.1"},
        },
        "status": node["status"],
    }
    cluster = make_cluster([*objects, twin])

    result = run_cli("report", cwd=DRIVER_LAB, kubeconfig=cluster.kubeconfig)

    assert (result.code, result.stdout) == (2, "")
    assert result.stderr == (
        "error: node lab-node-1 and node lab.node.1 both make the variable LAB_NODE_1_TAG: "
        "the report cannot name them apart (-o json names every node as it is); nothing was "
        "printed\n"
    )
    as_json = run_cli("report", "-o", "json", cwd=DRIVER_LAB, kubeconfig=cluster.kubeconfig)
    assert as_json.code == 0
    names = [n["name"] for n in json.loads(as_json.stdout)["gpuNodes"]]
    assert {"lab-node-1", "lab.node.1"} <= set(names)


def test_show_owner_names_the_writer_of_each_drifted_label(lab: TestCluster, workdir: Path) -> None:
    lab.label("lab-node-0", **{"feature.node.kubernetes.io/kernel-version.major": "6"})
    plan = run_cli("plan", "--show-owner", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert plan.lines == [
        "lab-node-0 feature.node.kubernetes.io/kernel-version.major 5 nfd-worker "
        "desired/nodes/lab-node-0.yaml:9:3",
        "lab-node-1 nvidia.com/gpu.count 2 gpu-feature-discovery desired/nodes/lab-node-1.yaml:18:3",
    ]


def test_plan_warns_when_it_fights_the_owner(lab: TestCluster, workdir: Path) -> None:
    # nfd-master (the writer of NFD and GFD labels) set the value reconcile would change.
    status, _ = lab.raw(
        "PATCH",
        "/api/v1/nodes/lab-node-0?fieldManager=nfd-master",
        {"metadata": {"labels": {"nvidia.com/gpu.memory": "40960"}}},
        "application/merge-patch+json",
    )
    assert status == 200

    plan = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert "lab-node-0 nvidia.com/gpu.memory 40537" in plan.lines
    assert (
        "warning: lab-node-0 nvidia.com/gpu.memory: gpu-feature-discovery wrote '40960' (field manager "
        "nfd-master) and re-asserts it on its next resync" in plan.stderr
    )
    assert "nvidia.com/gpu.count" not in plan.stderr  # that one a person changed by hand
