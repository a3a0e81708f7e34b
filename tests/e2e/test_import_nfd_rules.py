"""`reconcile import --nfd-rules`: the cluster's NodeFeatureRule objects brought into
desired/workloads/nodefeaturerules/ as manifests, without what the server adds, never
over a file or a rule desired/ declares; through the real CLI against the lab."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import ClusterFactory
from tests.support import TestCluster, lab_objects, run_cli

RULE = Path("desired/workloads/nodefeaturerules/gpu-training.yaml")
NFD = "/apis/nfd.k8s-sigs.io/v1alpha1"


def test_import_writes_each_rule_as_desired_declares_it(lab: TestCluster, tmp_path: Path) -> None:
    # As kubectl apply leaves a rule: its last-applied annotation and a label of its own.
    code, live = lab.raw("GET", f"{NFD}/nodefeaturerules/gpu-training")
    assert code == 200, live
    live["metadata"]["labels"] = {"team": "ml"}
    live["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": "{}",
        "owner": "ml-platform",
    }
    code, live = lab.raw("PUT", f"{NFD}/nodefeaturerules/gpu-training", live)
    assert code == 200, live

    result = run_cli("import", "--nfd-rules", cwd=tmp_path, kubeconfig=lab.kubeconfig)

    assert result.code == 0, result.stderr
    assert f"{RULE} NodeFeatureRule/gpu-training" in result.lines
    written = yaml.safe_load((tmp_path / RULE).read_text())
    seeded = next(o for o in lab_objects("lab") if o["kind"] == "NodeFeatureRule")
    assert written == {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeatureRule",
        "metadata": {
            "name": "gpu-training",
            "labels": {"team": "ml"},
            "annotations": {"owner": "ml-platform"},
        },
        "spec": seeded["spec"],
    }
    # The tree it wrote is valid, and the rule evaluates as nfd-master's did on the lab.
    assert run_cli("validate", cwd=tmp_path).code == 0
    features = run_cli("nfd", "features", "lab-node-1", kubeconfig=lab.kubeconfig)
    (tmp_path / "f.yaml").write_text(features.stdout)
    evaluated = run_cli(
        "nfd", "eval", "--features", "f.yaml", str(RULE), "-o", "json", cwd=tmp_path
    )
    assert evaluated.code == 0, evaluated.stderr
    assert (
        json.loads(evaluated.stdout)["labels"]["feature.node.kubernetes.io/custom-gpu-training"]
        == "true"
    )


def test_import_refuses_to_overwrite_a_rule_and_writes_nothing(
    lab: TestCluster, tmp_path: Path
) -> None:
    first = run_cli("import", "--nfd-rules", cwd=tmp_path, kubeconfig=lab.kubeconfig)
    assert first.code == 0, first.stderr
    before = {p: p.read_text() for p in (tmp_path / "desired").rglob("*.yaml")}
    lab.label("lab-node-0", **{"nvidia.com/gpu.count": "8"})

    again = run_cli("import", "--nfd-rules", cwd=tmp_path, kubeconfig=lab.kubeconfig)

    assert again.code == 2 and again.stdout == ""
    assert again.stderr.splitlines() == [
        f"error: {RULE}: declares NodeFeatureRule gpu-training already: nothing was written"
    ]
    # Not even the node whose label changed: the refusal comes before any write.
    assert {p: p.read_text() for p in (tmp_path / "desired").rglob("*.yaml")} == before

    # A file of that name holding something else: kept as it is.
    kept = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kept, namespace: default}\n"
    (tmp_path / RULE).write_text(kept)
    blocked = run_cli("import", "--nfd-rules", cwd=tmp_path, kubeconfig=lab.kubeconfig)
    assert blocked.code == 2
    assert blocked.stderr.splitlines() == [f"error: {RULE}: exists already: nothing was written"]
    assert (tmp_path / RULE).read_text() == kept


def test_import_dry_run_shows_the_new_rule_file_and_writes_nothing(
    lab: TestCluster, tmp_path: Path
) -> None:
    result = run_cli(
        "import", "--nfd-rules", "--dry-run", "-o", "json", cwd=tmp_path, kubeconfig=lab.kubeconfig
    )
    assert result.code == 0, result.stderr
    changes = {c["path"]: c for c in json.loads(result.stdout)}
    assert changes[str(RULE)]["holds"] == "NodeFeatureRule/gpu-training"
    assert changes[str(RULE)]["new"] and not changes[str(RULE)]["written"]
    assert "+  name: gpu-training\n" in changes[str(RULE)]["diff"]
    assert not (tmp_path / "desired").exists()


def test_import_nfd_rules_without_nfds_crds_is_one_error_line(
    make_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = make_cluster([o for o in lab_objects("lab") if o["kind"] == "Node"])
    if not cluster.is_sandbox:
        pytest.skip("a real cluster keeps NFD's CRDs between tests")
    result = run_cli("import", "--nfd-rules", cwd=tmp_path, kubeconfig=cluster.kubeconfig)
    assert result.code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Node Feature Discovery's CRDs are not installed" in lines[0]
    assert not (tmp_path / "desired").exists()
