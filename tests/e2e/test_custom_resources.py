"""An operator's CRDs with their custom resources in one desired/ tree: validated
offline against the CRD's schema, planned as creates before the CRD is served, applied
after the CRDs are established (fresh and saved plans), and a CRD never pruned while
custom resources of it remain."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import ClusterFactory
from tests.support import TestCluster, lab_objects, run_cli

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
GROUP = "e2e.reconcile.dev"

TREE = f"""\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.{GROUP}
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
              required: [size]
              properties:
                size: {{type: integer, minimum: 1}}
                mode: {{type: string, enum: [fast, safe], default: safe}}
                port: {{x-kubernetes-int-or-string: true}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.{GROUP}
spec:
  group: {GROUP}
  scope: Cluster
  names: {{plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
---
apiVersion: v1
kind: Namespace
metadata:
  name: crd-lab
---
apiVersion: {GROUP}/v1
kind: Widget
metadata:
  name: small
  namespace: crd-lab
spec:
  size: 2
  port: http
---
apiVersion: {GROUP}/v1
kind: Gadget
metadata:
  name: free-form
spec:
  anything: {{nested: [1, 2]}}
"""

CREATES = [
    "Namespace/crd-lab +",
    f"CustomResourceDefinition/gadgets.{GROUP} +",
    f"CustomResourceDefinition/widgets.{GROUP} +",
    "Gadget/free-form +",
    "Widget/crd-lab/small +",
]


@pytest.fixture
def empty(make_cluster: ClusterFactory) -> TestCluster:
    return make_cluster([o for o in lab_objects("lab") if o["kind"] == "Node"])


def _tree(workdir: Path, text: str = TREE) -> Path:
    workloads = workdir / "desired" / "workloads"
    shutil.rmtree(workloads)
    workloads.mkdir()
    (workloads / "operator.yaml").write_text(text)
    return workloads / "operator.yaml"


def _objects(cluster: TestCluster) -> list[str]:
    found = []
    for path in (
        CRDS,
        f"/apis/{GROUP}/v1/widgets",
        f"/apis/{GROUP}/v1/gadgets",
        "/api/v1/namespaces/crd-lab",
    ):
        status, body = cluster.raw("GET", path)
        if status != 200:
            continue
        # A real API server leaves kind out of a list's items.
        kind = str(body["kind"]).removesuffix("List")
        for item in body.get("items", [body]):
            if kind != "CustomResourceDefinition" or GROUP in item["metadata"]["name"]:
                found.append(f"{kind}/{item['metadata']['name']}")
    return sorted(found)


def test_crds_and_their_resources_plan_and_apply_in_one_run(
    empty: TestCluster, workdir: Path
) -> None:
    _tree(workdir)
    plan = run_cli("plan", cwd=workdir, kubeconfig=empty.kubeconfig)
    assert plan.code == 1, plan.stderr
    assert [line for line in plan.lines if "nvidia" not in line] == CREATES
    assert "checked offline only (not dry-run): the API server does not serve" in plan.stderr
    assert "error" not in plan.stderr

    apply = run_cli("apply", "--timeout", "60", cwd=workdir, kubeconfig=empty.kubeconfig)
    assert apply.code == 0, apply.stderr
    assert [line for line in apply.lines if "nvidia" not in line] == CREATES

    status, widget = empty.raw("GET", f"/apis/{GROUP}/v1/namespaces/crd-lab/widgets/small")
    assert status == 200, widget
    assert widget["spec"] == {"size": 2, "port": "http", "mode": "safe"}  # defaulted
    status, gadget = empty.raw("GET", f"/apis/{GROUP}/v1/gadgets/free-form")
    assert (status, gadget["spec"]) == (200, {"anything": {"nested": [1, 2]}})

    again = run_cli("plan", cwd=workdir, kubeconfig=empty.kubeconfig)
    assert (again.code, again.stdout, again.stderr) == (0, "", "")


def test_a_saved_plan_of_crds_and_resources_applies(empty: TestCluster, workdir: Path) -> None:
    _tree(workdir)
    saved = run_cli("plan", "--out", "plan.json", cwd=workdir, kubeconfig=empty.kubeconfig)
    assert saved.code == 1, saved.stderr
    apply = run_cli("apply", "plan.json", cwd=workdir, kubeconfig=empty.kubeconfig)
    assert apply.code == 0, apply.stderr
    assert [line for line in apply.lines if "nvidia" not in line] == CREATES
    assert "Widget/small" in _objects(empty)


def test_an_invalid_resource_is_refused_offline_at_its_fields_line(
    empty: TestCluster, workdir: Path
) -> None:
    file = _tree(workdir, TREE.replace("size: 2", "size: two"))
    line = next(n for n, text in enumerate(TREE.splitlines(), 1) if "size: 2" in text)
    validate = run_cli("validate", cwd=workdir)
    assert validate.code == 2
    assert f"{file.relative_to(workdir)}:{line}:9: " in validate.stderr, validate.stderr
    assert "spec.size in body must be of type integer" in validate.stderr

    apply = run_cli("apply", cwd=workdir, kubeconfig=empty.kubeconfig)
    assert apply.code == 2
    assert "spec.size in body must be of type integer" in apply.stderr
    assert _objects(empty) == []


def test_a_crd_with_remaining_resources_is_not_pruned(empty: TestCluster, workdir: Path) -> None:
    _tree(workdir)
    assert run_cli("apply", cwd=workdir, kubeconfig=empty.kubeconfig).code == 0
    # Someone else's Widget, beside reconcile's.
    status, body = empty.raw(
        "POST",
        f"/apis/{GROUP}/v1/namespaces/crd-lab/widgets",
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": "Widget",
            "metadata": {"name": "theirs"},
            "spec": {"size": 1},
        },
    )
    assert status == 201, body
    before = _objects(empty)
    # The widgets' CRD and reconcile's Widget are no longer declared.
    _tree(
        workdir,
        "\n---\n".join(
            d for d in TREE.split("\n---\n") if "widgets" not in d and "Widget" not in d
        ),
    )
    apply = run_cli("apply", "--prune", cwd=workdir, kubeconfig=empty.kubeconfig)
    assert apply.code == 2
    assert f"CustomResourceDefinition/widgets.{GROUP}" in apply.stderr
    assert "Widget/crd-lab/theirs" in apply.stderr
    assert apply.stderr.count("error:") == 1, apply.stderr
    assert _objects(empty) == before


SHRINK_RULE = """\
              x-kubernetes-validations:
                - rule: self.size >= oldSelf.size
                  message: size may not shrink
"""


def _with_rule(text: str) -> str:
    """TREE with a transition rule on Widget's spec."""
    anchor = "              required: [size]\n"
    assert anchor in text
    return text.replace(anchor, anchor + SHRINK_RULE, 1)


def _widget(cluster: TestCluster) -> dict[str, object]:
    status, widget = cluster.raw("GET", f"/apis/{GROUP}/v1/namespaces/crd-lab/widgets/small")
    assert status == 200, widget
    return dict(widget)


def test_a_transition_rule_the_crd_gains_judges_the_update_before_anything_is_written(
    empty: TestCluster, workdir: Path
) -> None:
    """The tree's CRD gains `self.size >= oldSelf.size` as its Widget shrinks: the cluster's
    dry run judges by the CRD it serves, which has no such rule, and apply writes the CRD
    first, so the Widget's write would be refused half-way. The plan judges the update
    by the tree's rules, against the live Widget, and apply writes nothing."""
    _tree(workdir)
    first = run_cli("apply", "--timeout", "60", cwd=workdir, kubeconfig=empty.kubeconfig)
    assert first.code == 0, first.stderr
    crd_before = empty.raw("GET", f"{CRDS}/widgets.{GROUP}")[1]["spec"]
    widget_before = _widget(empty)

    file = _tree(workdir, _with_rule(TREE).replace("size: 2", "size: 1"))
    plan = run_cli("plan", cwd=workdir, kubeconfig=empty.kubeconfig)
    assert plan.code == 2, plan.stderr
    assert "Widget/crd-lab/small" in plan.stderr
    assert "spec: Invalid value: size may not shrink" in plan.stderr
    assert f"CustomResourceDefinition widgets.{GROUP} in desired/" in plan.stderr
    assert str(file.relative_to(workdir)) in plan.stderr

    apply = run_cli("apply", "--timeout", "60", cwd=workdir, kubeconfig=empty.kubeconfig)
    assert apply.code == 2
    assert "size may not shrink" in apply.stderr
    assert empty.raw("GET", f"{CRDS}/widgets.{GROUP}")[1]["spec"] == crd_before
    assert _widget(empty)["spec"] == widget_before["spec"]

    # Growing passes the rule: the CRD and the Widget are both applied.
    _tree(workdir, _with_rule(TREE).replace("size: 2", "size: 3"))
    grown = run_cli("apply", "--timeout", "60", cwd=workdir, kubeconfig=empty.kubeconfig)
    assert grown.code == 0, grown.stderr
    assert _widget(empty)["spec"]["size"] == 3  # type: ignore[index]
    again = run_cli("plan", cwd=workdir, kubeconfig=empty.kubeconfig)
    assert (again.code, again.stdout) == (0, ""), again.stderr
