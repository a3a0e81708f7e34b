"""NodeFeatureRules in desired/: the labels nfd-master will write, predicted in the plan
from the nodes' live NodeFeature objects (NFD's published CRDs, objects created through
the API), joined to what the tree declares and to where workloads can land."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reconcile.nfd.nodefeature import NODE_NAME_LABEL
from tests.conftest import ClusterFactory
from tests.support import REPO, TestCluster, lab_objects, run_cli, wait_for

CRDS = (REPO / "reconcile" / "sandbox" / "seeds" / "crds" / "nfd-api-crds.yaml").read_text()
KEY = "feature.node.kubernetes.io/custom-gpu-training"
NAMESPACE = """\
apiVersion: v1
kind: Namespace
metadata:
  name: node-feature-discovery
"""
WORKLOAD = f"""\
apiVersion: v1
kind: Namespace
metadata:
  name: training
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: trainer
  namespace: training
spec:
  replicas: 1
  selector:
    matchLabels: {{app: trainer}}
  template:
    metadata:
      labels: {{app: trainer}}
    spec:
      nodeSelector:
        {KEY}: "true"
      containers:
      - name: trainer
        image: registry.example/trainer:1
"""


def rule(device: str) -> str:
    return f"""\
apiVersion: nfd.k8s-sigs.io/v1alpha1
kind: NodeFeatureRule
metadata:
  name: gpu-training
spec:
  rules:
  - name: training nodes
    labels:
      custom-gpu-training: "true"
    matchFeatures:
    - feature: pci.device
      matchExpressions:
        vendor: {{op: In, value: ["10de"]}}
        device: {{op: In, value: ["{device}"]}}
"""


def node_feature(node: str, vendor: str, device: str) -> dict[str, Any]:
    return {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": {
            "name": node,
            "namespace": "node-feature-discovery",
            "labels": {NODE_NAME_LABEL: node},
        },
        "spec": {
            "features": {
                "instances": {
                    "pci.device": {
                        "elements": [
                            {"attributes": {"vendor": vendor, "device": device, "class": "0302"}}
                        ]
                    }
                }
            }
        },
    }


@pytest.fixture
def nfd(make_cluster: ClusterFactory, tmp_path: Path) -> tuple[TestCluster, Path]:
    """The lab's nodes, NFD's CRDs applied, and a NodeFeature for lab-node-0 (no NVIDIA
    device) and lab-node-1 (an A10, 10de:2236)."""
    cluster = make_cluster([o for o in lab_objects("lab") if o["kind"] == "Node"])
    work = tmp_path / "tree"
    (work / "desired" / "workloads").mkdir(parents=True)
    (work / "desired" / "workloads" / "nfd.yaml").write_text(CRDS + "---\n" + NAMESPACE)
    applied = run_cli("apply", "--timeout", "60", cwd=work, kubeconfig=cluster.kubeconfig)
    assert applied.code == 0, applied.stderr
    # A CRD just created is served a moment later (its handler installed after Established).
    collection = "/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/node-feature-discovery/nodefeatures"
    wait_for(lambda: cluster.raw("GET", collection)[0] == 200, what="NodeFeatures to be served")
    for node, vendor, device in (("lab-node-0", "1af4", "1050"), ("lab-node-1", "10de", "2236")):
        status, body = cluster.raw(
            "POST",
            "/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/node-feature-discovery/nodefeatures",
            node_feature(node, vendor, device),
        )
        assert status == 201, body
    return cluster, work


def _write(work: Path, *documents: str) -> None:
    text = "---\n".join([CRDS, NAMESPACE, *documents])
    (work / "desired" / "workloads" / "nfd.yaml").write_text(text)


def test_a_new_rule_predicts_its_labels_and_a_changed_one_the_workload_it_strands(
    nfd: tuple[TestCluster, Path],
) -> None:
    cluster, work = nfd
    _write(work, rule("2236"), WORKLOAD)
    plan = run_cli("plan", cwd=work, kubeconfig=cluster.kubeconfig)
    assert plan.code == 1, plan.stderr
    assert f"lab-node-1 {KEY} true (nfd)" in plan.lines
    assert not [line for line in plan.lines if line.startswith("lab-node-0 ")]
    document = json.loads(
        run_cli("plan", "-o", "json", cwd=work, kubeconfig=cluster.kubeconfig).stdout
    )
    assert document["predicted"] == [
        {
            "node": "lab-node-1",
            "key": KEY,
            "value": "true",
            "rules": ["gpu-training/training nodes"],
        }
    ]
    applied = run_cli("apply", cwd=work, kubeconfig=cluster.kubeconfig)
    assert applied.code == 0, applied.stderr
    if cluster.sandbox is not None:
        cluster.sandbox.clear_requests()
    again = run_cli("plan", cwd=work, kubeconfig=cluster.kubeconfig)
    assert (again.code, again.stdout) == (0, ""), again.stderr
    if cluster.sandbox is not None:
        # The tree's rules are the cluster's: nothing to predict, no NodeFeature read.
        asked = {r.resource for r in cluster.sandbox.requests}
        assert "nodefeaturerules" in asked and "nodefeatures" not in asked

    # As nfd-master would: the label on lab-node-1 only.
    for node in ("lab-node-0", "lab-node-1", "lab-node-2"):
        cluster.label(node, **{KEY: "true" if node == "lab-node-1" else None})
    _write(work, rule("20b5"), WORKLOAD)
    changed = run_cli("plan", cwd=work, kubeconfig=cluster.kubeconfig)
    assert f"lab-node-1 {KEY} - (nfd)" in changed.lines, changed.stdout
    # The rule change leaves the trainer no node: an error before merge, nothing written.
    assert changed.code == 2
    assert "Deployment/training/trainer: no node will take it after apply" in changed.stderr
    # ... naming the label the rule change takes from the node it ran on, and the rule.
    assert (
        f"Where it fitted before: lab-node-1 loses {KEY}=true "
        "(NodeFeatureRule gpu-training/training nodes)." in changed.stderr
    )
    markdown = run_cli("plan", "-o", "markdown", cwd=work, kubeconfig=cluster.kubeconfig).stdout
    assert "**Predicted by NFD rules:**" in markdown
    assert (
        f"| lab-node-1 | `{KEY}` | `true` | *(absent)* | gpu-training/training nodes |" in markdown
    )


def test_a_label_desired_declares_and_a_rule_writes_otherwise_is_an_error(
    nfd: tuple[TestCluster, Path],
) -> None:
    cluster, work = nfd
    _write(work, rule("2236"))
    nodes = work / "desired" / "nodes"
    nodes.mkdir()
    (nodes / "lab-node-1.yaml").write_text(
        "apiVersion: reconcile.dev/v1alpha1\nkind: NodeFeatures\nmetadata:\n  name: lab-node-1\n"
        f'labels:\n  {KEY}: "false"\n'
    )
    versions = cluster.resource_versions()
    plan = run_cli("plan", cwd=work, kubeconfig=cluster.kubeconfig)
    assert plan.code == 2, plan.stderr
    assert "desired/ declares 'false'" in plan.stderr
    assert "gpu-training/training nodes makes nfd-master write 'true'" in plan.stderr
    apply = run_cli("apply", cwd=work, kubeconfig=cluster.kubeconfig)
    assert apply.code == 2
    assert cluster.resource_versions() == versions
    status, _ = cluster.raw("GET", "/apis/nfd.k8s-sigs.io/v1alpha1/nodefeaturerules/gpu-training")
    assert status == 404


def test_two_rules_writing_one_key_differently_are_named(nfd: tuple[TestCluster, Path]) -> None:
    cluster, work = nfd
    other = (
        rule("2236")
        .replace("name: gpu-training", "name: zz-override")
        .replace('custom-gpu-training: "true"', 'custom-gpu-training: "false"')
    )
    _write(work, rule("2236"), other)
    plan = run_cli("plan", cwd=work, kubeconfig=cluster.kubeconfig)
    assert plan.code == 1, plan.stderr
    assert f"lab-node-1 {KEY} false (nfd)" in plan.lines
    assert (
        "gpu-training/training nodes writes 'true', zz-override/training nodes writes 'false'"
        in plan.stderr
    )
