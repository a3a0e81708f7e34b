"""Placement through the real CLI: where the lab's workloads land, and what a label
change does to them, loud at review time."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import TestCluster, run_cli

# Where each workload's replicas land (node and replicas), then every node that could take one.
LAB_PLACEMENT = [
    "Pod/gpu-drv/cuda12-job 1/1 -> lab-node-0 (1); candidates: lab-node-0",
    "Pod/gpu-drv/cuda13-job 0/1 PENDING 1: 0/3 nodes are available: 3 node(s) didn't match Pod's "
    "node affinity/selector.",
    "Pod/nfd-lab/a100-job 1/1 -> lab-node-0 (1); candidates: lab-node-0",
    "Pod/nfd-lab/any-gpu-job 1/1 -> lab-node-0 (1); candidates: lab-node-0",
    "Pod/nfd-lab/gt-job 1/1 -> lab-node-0 (1); candidates: lab-node-0",
    "Pod/nfd-lab/or-job 1/1 -> lab-node-0 (1); candidates: lab-node-0,lab-node-1",
    "Pod/nfd-lab/train-a 1/1 -> lab-node-1 (1); candidates: lab-node-1",
    "Deployment/gpu-drv/trainer 3/4 -> lab-node-0 (1), lab-node-1 (1), lab-node-2 (1); PENDING 1: "
    "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules.",
]
TRAIN_B = """---
apiVersion: v1
kind: Pod
metadata:
  name: train-b
  namespace: nfd-lab
spec:
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - key: feature.node.kubernetes.io/custom-gpu-training
            operator: In
            values: ["true"]
  containers:
  - name: trainer
    image: nvcr.io/nvidia/pytorch:24.07-py3
"""


def test_the_labs_workloads_land_where_the_lab_says(lab: TestCluster, workdir: Path) -> None:
    result = run_cli("placement", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert (result.code, result.lines) == (1, LAB_PLACEMENT)  # exit 1: something stays Pending


def test_placement_uses_the_labels_after_apply(lab: TestCluster, workdir: Path) -> None:
    # Live, lab-node-1 says 9 GPUs (gt-job would fit there); after apply it says 2 again.
    assert lab.labels("lab-node-1")["nvidia.com/gpu.count"] == "9"
    result = run_cli("placement", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert "Pod/nfd-lab/gt-job 1/1 -> lab-node-0 (1); candidates: lab-node-0" in result.lines


def test_placement_without_a_cluster_uses_desired_nodes(workdir: Path) -> None:
    result = run_cli("placement", "--nodes", "desired", cwd=workdir)
    assert (result.code, result.lines) == (1, LAB_PLACEMENT)
    document = json.loads(
        run_cli("placement", "--nodes", "desired", "-o", "json", cwd=workdir).stdout
    )
    assert document[5] == {
        "workload": "Pod/nfd-lab/or-job",
        "nodes": ["lab-node-0", "lab-node-1"],
        "wanted": 1,
        "placed": 1,
        "pending": 0,
        "reason": None,
        "someSchedules": False,
        "evaluated": True,
        "landed": {"lab-node-0": 1},
    }


def test_removing_a_label_in_git_reports_the_pending_pod_and_the_stranded_one(
    lab: TestCluster, workdir: Path
) -> None:
    node = workdir / "desired" / "nodes" / "lab-node-1.yaml"
    node.write_text(
        node.read_text().replace(
            'feature.node.kubernetes.io/custom-gpu-training: "true"',
            "feature.node.kubernetes.io/custom-gpu-training: null",
        )
    )
    workloads = workdir / "desired" / "workloads" / "nfd-lab.yaml"
    workloads.write_text(workloads.read_text() + TRAIN_B)

    plan = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert plan.code == 2
    assert plan.lines == [
        "lab-node-1 feature.node.kubernetes.io/custom-gpu-training -",
        "lab-node-1 nvidia.com/gpu.count 2",
        "Pod/nfd-lab/train-b +",
    ]
    assert (
        "error: Pod/nfd-lab/train-b: no node will take it after apply (1/1 placed before): "
        "0/3 nodes are available: "
        "3 node(s) didn't match Pod's node affinity/selector. Where it fitted before: "
        "lab-node-1 loses feature.node.kubernetes.io/custom-gpu-training=true."
    ) in plan.stderr
    assert (
        "warning: Pod/nfd-lab/train-a: keeps running on lab-node-1 (IgnoredDuringExecution), but lab-node-1 "
        "will no longer match its required node affinity: a restart will not be placed"
    ) in plan.stderr
    markdown = run_cli("plan", "-o", "markdown", cwd=workdir, kubeconfig=lab.kubeconfig).stdout
    capacity = markdown.split("**Capacity:**", 1)[1]
    assert "| **error** | `Pod/nfd-lab/train-b` | no node will take it after apply" in capacity
    assert "| warning | `Pod/nfd-lab/train-a` | keeps running on lab-node-1" in capacity
    placement = run_cli("placement", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert (
        "Pod/nfd-lab/train-b 0/1 PENDING 1: 0/3 nodes are available: 3 node(s) didn't match Pod's "
        "node affinity/selector."
    ) in placement.lines
    assert "Pod/nfd-lab/train-a 0/1 PENDING 1" in placement.stdout


def test_a_label_change_that_strands_a_workload_fails_the_plan_without_other_drift(
    lab: TestCluster, workdir: Path
) -> None:
    run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)  # in sync first
    node = workdir / "desired" / "nodes" / "lab-node-0.yaml"
    node.write_text(
        node.read_text().replace(
            "nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB",
            "nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB",
        )
    )

    plan = run_cli("plan", "-o", "json", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert plan.code == 2
    findings = {
        (f["kind"], f["subject"], f["severity"]) for f in json.loads(plan.stdout)["findings"]
    }
    assert ("unschedulable", "Pod/nfd-lab/a100-job", "error") in findings
    assert ("affinity-lost", "Pod/nfd-lab/a100-job", "warning") in findings


def test_what_was_already_unplaceable_is_not_a_finding_of_every_plan(
    lab: TestCluster, workdir: Path
) -> None:
    run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)
    plan = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert (plan.code, plan.stdout, plan.stderr) == (
        0,
        "",
        "",
    )  # cuda13-job and trainer stay as they were


def test_validate_refuses_gt_with_a_non_integer(workdir: Path) -> None:
    workloads = workdir / "desired" / "workloads" / "gpu-drv.yaml"
    workloads.write_text(workloads.read_text().replace('values: ["560"]', 'values: ["560x"]'))

    result = run_cli("validate", cwd=workdir)

    assert result.code == 2
    assert (
        "desired/workloads/gpu-drv.yaml:42:13: Pod \"cuda13-job\": Gt '560x' on nvidia.com/cuda.driver.major is not "
        "an integer: the API server admits it, the scheduler never matches it"
    ) in result.stderr


BIG_TRAIN = """---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: big-train
  namespace: nfd-lab
spec:
  replicas: 2
  selector:
    matchLabels: {app: big-train}
  template:
    metadata:
      labels: {app: big-train}
    spec:
      nodeSelector:
        nvidia.com/gpu.present: "true"
      containers:
      - name: trainer
        image: nvcr.io/nvidia/pytorch:24.07-py3
        resources:
          limits: {nvidia.com/gpu: 3}
"""


def test_placement_counts_the_gpus_each_replica_takes(lab: TestCluster, workdir: Path) -> None:
    # lab-node-0 offers 4 GPUs, lab-node-1 2, lab-node-2 none: one replica of 3 fits.
    workloads = workdir / "desired" / "workloads" / "nfd-lab.yaml"
    workloads.write_text(workloads.read_text() + BIG_TRAIN)
    result = run_cli("placement", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert result.code == 1
    assert (
        "Deployment/nfd-lab/big-train 1/2 -> lab-node-0 (1); PENDING 1: 0/3 nodes are available: 1 node(s) didn't "
        "match Pod's node affinity/selector, 2 Insufficient nvidia.com/gpu. "
        "(3 nvidia.com/gpu free on the 2 nodes it may use, at most 2 on one node)"
    ) in result.lines
    plan = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert (
        "error: Deployment/nfd-lab/big-train: 1 of 2 replicas cannot be placed after apply "
        "(1/2 placed; before: 1/2 placed): 0/3 nodes are available"
    ) in plan.stderr
