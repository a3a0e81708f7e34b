"""`reconcile nfd features NODE`: a node's live NodeFeature objects merged as nfd-master
merges them, printed as the one file `nfd eval --features` reads; through the real CLI
against the lab, whose NodeFeatures and gpu-training rule explain its feature labels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ClusterFactory
from tests.support import TestCluster, lab_objects, run_cli

NFD = "/apis/nfd.k8s-sigs.io/v1alpha1"
FNK = "feature.node.kubernetes.io/"


def _rules_file(directory: Path) -> Path:
    path = directory / "rules.yaml"
    rules = [o for o in lab_objects("lab") if o["kind"] == "NodeFeatureRule"]
    path.write_text(yaml.safe_dump_all(rules))
    return path


def _eval(features: Path, rules: Path) -> dict[str, Any]:
    result = run_cli("nfd", "eval", "--features", str(features), str(rules), "-o", "json")
    assert result.code == 0, result.stderr
    return dict(json.loads(result.stdout))


def _live_objects(cluster: TestCluster, node: str, path: Path) -> Path:
    """The node's NodeFeature objects as the API serves them, as a List file."""
    code, found = cluster.raw(
        "GET", f"{NFD}/nodefeatures?labelSelector=nfd.node.kubernetes.io%2Fnode-name%3D{node}"
    )
    assert code == 200, found
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": found["items"]}))
    return path


@pytest.mark.parametrize("node", ["lab-node-0", "lab-node-1", "lab-node-2"])
def test_features_evaluated_give_the_labels_nfd_master_wrote_on_the_lab(
    lab: TestCluster, tmp_path: Path, node: str
) -> None:
    result = run_cli("nfd", "features", node, kubeconfig=lab.kubeconfig)
    assert result.code == 0, result.stderr
    document = yaml.safe_load(result.stdout)
    assert (document["apiVersion"], document["kind"]) == ("nfd.k8s-sigs.io/v1alpha1", "NodeFeature")
    assert document["metadata"]["name"] == node
    features = tmp_path / "f.yaml"
    features.write_text(result.stdout)
    found = _eval(features, _rules_file(tmp_path))
    owned = {k: v for k, v in lab.labels(node).items() if k.startswith(FNK)}
    # What nfd-master would write is what the node carries (on lab-node-1 the rule's label
    # too), and what its feature-labels annotation says nfd-master owns.
    assert found["labels"] == owned
    annotation = lab.node(node)["metadata"]["annotations"]["nfd.node.kubernetes.io/feature-labels"]
    assert {FNK + k for k in annotation.split(",")} == set(owned)
    assert found["rules"] == [
        {"rule": "gpu-training/a10-training", "matched": node == "lab-node-1"}
    ]


def test_features_round_trip_through_eval_as_the_live_objects_do(
    lab: TestCluster, tmp_path: Path
) -> None:
    # A second object for the node, in another namespace: a device plugin's features.
    extra = {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": {
            "name": "vendor-gpu-features",
            "namespace": "gpu-vendor",
            "labels": {"nfd.node.kubernetes.io/node-name": "lab-node-1"},
        },
        "spec": {
            "labels": {"kernel-version.full": "overridden", "vendor.example.com/extra": "x"},
            "features": {
                "instances": {
                    "pci.device": {
                        "elements": [{"attributes": {"vendor": "10de", "device": "2237"}}]
                    }
                },
                "flags": {"kernel.loadedmodule": {"elements": {"nvidia_peermem": {}}}},
            },
        },
    }
    code, body = lab.raw("POST", "/api/v1/namespaces", {"metadata": {"name": "gpu-vendor"}})
    assert code == 201, body
    code, body = lab.raw("POST", f"{NFD}/namespaces/gpu-vendor/nodefeatures", extra)
    assert code == 201, body
    rules = _rules_file(tmp_path)
    merged = run_cli("nfd", "features", "lab-node-1", kubeconfig=lab.kubeconfig)
    assert merged.code == 0, merged.stderr
    (tmp_path / "f.yaml").write_text(merged.stdout)
    live = _live_objects(lab, "lab-node-1", tmp_path / "live.json")
    through_features = _eval(tmp_path / "f.yaml", rules)
    assert through_features == _eval(live, rules)
    # nfd-worker's own object (in nfd-master's namespace) first, the vendor's merged
    # over it: its label wins, its device is appended, its module joins the others.
    assert through_features["labels"][FNK + "kernel-version.full"] == "overridden"
    assert through_features["labels"]["vendor.example.com/extra"] == "x"
    document = yaml.safe_load(merged.stdout)
    devices = document["spec"]["features"]["instances"]["pci.device"]["elements"]
    assert devices[-1] == {"attributes": {"device": "2237", "vendor": "10de"}}
    assert len(devices) == 4
    assert (
        "nvidia_peermem" in document["spec"]["features"]["flags"]["kernel.loadedmodule"]["elements"]
    )
    as_json = run_cli("nfd", "features", "lab-node-1", "-o", "json", kubeconfig=lab.kubeconfig)
    assert as_json.code == 0 and json.loads(as_json.stdout) == document


def test_a_node_nfd_worker_published_nothing_for_is_one_error_line(lab: TestCluster) -> None:
    result = run_cli("nfd", "features", "no-such-node", kubeconfig=lab.kubeconfig)
    assert result.code == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "error: no nfd.k8s-sigs.io/v1alpha1 NodeFeature object is labelled "
        "nfd.node.kubernetes.io/node-name=no-such-node: nfd-worker has published nothing "
        "for that node"
    ]


def test_a_cluster_without_nfds_crds_is_one_error_line(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster([o for o in lab_objects("lab") if o["kind"] == "Node"])
    if not cluster.is_sandbox:
        pytest.skip("a real cluster keeps NFD's CRDs between tests")
    result = run_cli("nfd", "features", "lab-node-1", kubeconfig=cluster.kubeconfig)
    assert result.code == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "Node Feature Discovery's CRDs are not installed" in lines[0]
    assert "nodefeatures.nfd.k8s-sigs.io" in lines[0]
