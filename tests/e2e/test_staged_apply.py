"""No partial apply: CRDs and Namespaces the cluster lacks are created first, then every
object and node patch of the plan is dry-run by the server, and only when all pass is
anything else written. A custom resource the server refuses once its CRD exists leaves
that CRD, and nothing else, behind; `plan` says which objects it could check offline only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from reconcile.sandbox.errors import ApiStatus
from reconcile.sandbox.server import FaultInjector, Route
from tests.conftest import ClusterFactory
from tests.support import CliResult, TestCluster, lab_objects, run_cli, wait_for

GROUP = "staged.reconcile.dev"
CRD = f"widgets.{GROUP}"

CONFIG_MAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: staged-settings
  namespace: default
data:
  mode: fast
"""
CRD_DOC = f"""\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {CRD}
spec:
  group: {GROUP}
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: {{type: integer, minimum: 1}}
                colour: {{type: string, pattern: '^[a-z]+$'}}
"""


def widget(namespace: str, size: int = 2) -> str:
    """A Widget the schema accepts (a policy of the cluster may not)."""
    return f"""\
apiVersion: {GROUP}/v1
kind: Widget
metadata:
  name: small
  namespace: {namespace}
spec:
  size: {size}
  colour: blue
"""


@pytest.fixture
def nodes_only(make_cluster: ClusterFactory) -> TestCluster:
    """The lab's nodes (lab-node-1's gpu.count drifted to 9), and nothing else."""
    return make_cluster([o for o in lab_objects("lab") if o["kind"] == "Node"])


def _tree(workdir: Path, *documents: str) -> None:
    workloads = workdir / "desired" / "workloads"
    shutil.rmtree(workloads)
    workloads.mkdir()
    (workloads / "tree.yaml").write_text("---\n".join(documents))


def _state(cluster: TestCluster) -> dict[str, Any]:
    """What the tree could have written: the drifted label, the ConfigMap, the CRD, the
    Widgets (all namespaces)."""
    found: dict[str, Any] = {"gpu.count": cluster.labels("lab-node-1").get("nvidia.com/gpu.count")}
    status, body = cluster.raw("GET", "/api/v1/namespaces/default/configmaps/staged-settings")
    found["configmap"] = body.get("data") if status == 200 else None
    status, body = cluster.raw(
        "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD}"
    )
    found["crd"] = status == 200
    status, body = cluster.raw("GET", f"/apis/{GROUP}/v1/widgets")
    found["widgets"] = (
        sorted(i["metadata"]["name"] for i in body["items"]) if status == 200 else None
    )
    return found


def _cleanup_crd(cluster: TestCluster) -> None:
    """A real control plane is shared by the tests: the CRD goes with the test."""
    cluster.raw("DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD}")


# What a ValidatingAdmissionPolicy refusing the Widget answers a server-side apply
# (v1.36, verbatim: 403 Forbidden).
REFUSAL = (
    f'widgets.{GROUP} "small" is forbidden: ValidatingAdmissionPolicy '
    "'staged-small-widgets' with binding 'staged-small-widgets' denied request: "
    "widgets are small here"
)
PROBE = "staged-policy-probe"
POLICY: list[dict[str, Any]] = [
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "staged-small-widgets"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [GROUP],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["widgets"],
                    },
                    # The probe that tells when the policy is in force (_policy_in_force).
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["configmaps"],
                    },
                ]
            },
            "matchConditions": [
                {"name": "ours", "expression": f"object.metadata.name in ['small', '{PROBE}']"}
            ],
            "validations": [
                {
                    "expression": "object.kind != 'ConfigMap' && object.spec.size < 2",
                    "message": "widgets are small here",
                }
            ],
        },
    },
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "staged-small-widgets"},
        "spec": {"policyName": "staged-small-widgets", "validationActions": ["Deny"]},
    },
]
POLICIES = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"


class _AdmissionRefusesWidgets(FaultInjector):
    """Stands in for the ValidatingAdmissionPolicy the sandbox does not have: every
    write of a Widget (dry run or not, as admission runs on both) is refused with the
    real server's answer."""

    def before(self, method: str, route: Route | None) -> ApiStatus | str | None:
        if method in ("PATCH", "POST") and route is not None and route.resource.plural == "widgets":
            return ApiStatus(403, "Forbidden", REFUSAL)
        return None


def _assert_only_the_crd_written(cluster: TestCluster, apply: CliResult) -> None:
    assert apply.code == 2, apply.stderr
    errors = [line for line in apply.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, apply.stderr
    [error] = errors
    assert f"Widget/default/small: {REFUSAL}" in error, error
    assert f"written: CustomResourceDefinition/{CRD} (" in error, error
    assert error.endswith("nothing else was applied"), error
    # Only the staged CRD is printed as written.
    assert apply.lines == [f"CustomResourceDefinition/{CRD} +"], apply.stdout
    assert _state(cluster) == {"gpu.count": "9", "configmap": None, "crd": True, "widgets": []}


def test_a_custom_resource_refused_after_its_crd_leaves_only_the_crd(
    nodes_only: TestCluster, workdir: Path
) -> None:
    if nodes_only.sandbox is None:
        pytest.skip("injects the admission refusal into the sandbox (the real one: below)")
    nodes_only.sandbox.server.faults = _AdmissionRefusesWidgets()
    _tree(workdir, CONFIG_MAP, CRD_DOC, widget("default"))
    apply = run_cli("apply", "--timeout", "60", cwd=workdir, kubeconfig=nodes_only.kubeconfig)
    _assert_only_the_crd_written(nodes_only, apply)

    # A saved plan stages the same way.
    _cleanup_crd(nodes_only)
    saved = run_cli("plan", "--out", "plan.json", cwd=workdir, kubeconfig=nodes_only.kubeconfig)
    assert saved.code == 1, saved.stderr
    apply = run_cli("apply", "plan.json", cwd=workdir, kubeconfig=nodes_only.kubeconfig)
    _assert_only_the_crd_written(nodes_only, apply)


def test_a_validating_admission_policy_refusal_leaves_only_the_crd(
    nodes_only: TestCluster, workdir: Path
) -> None:
    if nodes_only.sandbox is not None:
        pytest.skip("the sandbox has no ValidatingAdmissionPolicy: needs a real API server")
    for obj, collection in zip(POLICY, (POLICIES, BINDINGS), strict=True):
        status, body = nodes_only.raw("POST", collection, obj)
        assert status == 201, body
    try:
        # A policy is in force a moment after it is created (the API server's informer).
        wait_for(lambda: _policy_in_force(nodes_only), what="the admission policy in force")
        _tree(workdir, CONFIG_MAP, CRD_DOC, widget("default"))
        apply = run_cli("apply", "--timeout", "60", cwd=workdir, kubeconfig=nodes_only.kubeconfig)
        _assert_only_the_crd_written(nodes_only, apply)
    finally:
        _cleanup_crd(nodes_only)
        nodes_only.raw("DELETE", f"{BINDINGS}/staged-small-widgets")
        nodes_only.raw("DELETE", f"{POLICIES}/staged-small-widgets")
        wait_for(lambda: not _policy_in_force(nodes_only), what="the admission policy gone")


def _policy_in_force(cluster: TestCluster) -> bool:
    """Whether the policy refuses its probe (a dry-run create: nothing is stored)."""
    probe = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": PROBE}}
    status, body = cluster.raw("POST", "/api/v1/namespaces/default/configmaps?dryRun=All", probe)
    assert status in (201, 403, 422), body
    return status != 201


def test_the_same_tree_applies_once_the_refusal_is_fixed(
    nodes_only: TestCluster, workdir: Path
) -> None:
    _tree(workdir, CONFIG_MAP, CRD_DOC, widget("default"))
    try:
        apply = run_cli("apply", "--timeout", "60", cwd=workdir, kubeconfig=nodes_only.kubeconfig)
        assert apply.code == 0, apply.stderr
        assert "ConfigMap/default/staged-settings +" in apply.lines
        assert "Widget/default/small +" in apply.lines
        assert "lab-node-1 nvidia.com/gpu.count 2" in apply.lines
        assert _state(nodes_only) == {
            "gpu.count": "2",
            "configmap": {"mode": "fast"},
            "crd": True,
            "widgets": ["small"],
        }
        again = run_cli("plan", cwd=workdir, kubeconfig=nodes_only.kubeconfig)
        assert (again.code, again.stdout) == (0, ""), again.stderr
    finally:
        nodes_only.raw("DELETE", f"/apis/{GROUP}/v1/namespaces/default/widgets/small")
        nodes_only.raw("DELETE", "/api/v1/namespaces/default/configmaps/staged-settings")
        _cleanup_crd(nodes_only)


def test_plan_says_which_objects_are_checked_offline_only(
    nodes_only: TestCluster, workdir: Path
) -> None:
    _tree(workdir, CONFIG_MAP, CRD_DOC, widget("default"))
    plan = run_cli("plan", cwd=workdir, kubeconfig=nodes_only.kubeconfig)
    assert plan.code == 1, plan.stderr
    # The line format is the contract: the mark is on stderr and in -o json.
    assert "Widget/default/small +" in plan.lines
    notes = [line for line in plan.stderr.splitlines() if "offline only" in line]
    assert len(notes) == 1, plan.stderr
    assert "Widget/default/small" in notes[0]
    assert "ConfigMap/default/staged-settings" not in notes[0]

    as_json = run_cli("plan", "-o", "json", cwd=workdir, kubeconfig=nodes_only.kubeconfig)
    objects = {o["kind"] + "/" + o["name"]: o for o in json.loads(as_json.stdout)["objects"]}
    # Said where it holds, left out elsewhere (as the plan file's other optional fields).
    assert objects["Widget/small"]["checkedOffline"] is True
    assert "checkedOffline" not in objects["ConfigMap/staged-settings"]
    assert "checkedOffline" not in objects[f"CustomResourceDefinition/{CRD}"]
