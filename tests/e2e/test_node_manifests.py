"""Node facts have one home: node files and NodeGroups. A `kind: Node` among the workloads
is refused before anything is read from the cluster, and no prune ever deletes a Node,
whatever an older inventory of objects lists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.e2e.test_prune_guards import _reseal, snapshot
from tests.support import TestCluster, run_cli

NODE_MANIFEST = """\
---
apiVersion: v1
kind: Node
metadata:
  name: lab-node-2
  labels:
    example.com/pool: cpu
"""

REFUSAL = (
    "desired/workloads/nfd-lab.yaml:{line}:7: kind Node may not be declared in "
    "desired/workloads: declare a node's labels, annotations and taints in "
    "desired/nodes/<name>.yaml (kind NodeFeatures) or a NodeGroup in desired/groups/"
)
INVENTORY = "/api/v1/namespaces/default/configmaps/reconcile-inventory"
NODE_ENTRY = "v1 Node - lab-node-2"


def _with_node_manifest(workdir: Path) -> int:
    """Append a Node document to the lab's nfd-lab.yaml; the line of its kind."""
    path = workdir / "desired" / "workloads" / "nfd-lab.yaml"
    text = path.read_text()
    path.write_text(text + NODE_MANIFEST)
    return text.count("\n") + 3


def test_validate_refuses_a_node_manifest_at_its_kind_with_where_node_facts_go(
    workdir: Path,
) -> None:
    line = _with_node_manifest(workdir)

    result = run_cli("validate", cwd=workdir)

    assert result.code == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [REFUSAL.format(line=line)]


def test_plan_and_apply_refuse_a_node_manifest_and_change_nothing(
    lab: TestCluster, workdir: Path
) -> None:
    line = _with_node_manifest(workdir)
    before = snapshot(lab)

    for command in ("plan", "apply"):
        for extra in ((), ("--prune",)):
            result = run_cli(command, *extra, cwd=workdir, kubeconfig=lab.kubeconfig)
            assert result.code == 2, result.stderr
            assert result.stdout == ""
            assert REFUSAL.format(line=line) in result.stderr

    assert snapshot(lab) == before
    assert "example.com/pool" not in lab.labels("lab-node-2")


def _node_in_the_inventory(lab: TestCluster) -> None:
    """As an older reconcile that applied a Node manifest left it: in the inventory of
    objects, and labelled as managed by reconcile."""
    lab.label("lab-node-2", **{"app.kubernetes.io/managed-by": "reconcile"})
    status, inventory = lab.raw("GET", INVENTORY)
    assert status == 200, inventory
    inventory["data"]["objects"] += NODE_ENTRY + "\n"
    status, body = lab.raw("PUT", INVENTORY, inventory)
    assert status == 200, body


def _inventory(lab: TestCluster) -> list[str]:
    status, inventory = lab.raw("GET", INVENTORY)
    assert status == 200, inventory
    return str(inventory["data"]["objects"]).splitlines()


def test_a_node_an_old_inventory_lists_is_never_pruned_and_leaves_the_inventory(
    lab: TestCluster, workdir: Path
) -> None:
    _node_in_the_inventory(lab)
    note = (
        "note: Node/lab-node-2 is in reconcile's inventory of applied objects, but a Node "
        "is never pruned"
    )

    for args in ((), ("--prune",)):
        plan = run_cli("plan", *args, cwd=workdir, kubeconfig=lab.kubeconfig)
        assert "Node/lab-node-2 -" not in plan.lines, plan.stdout
        assert note in plan.stderr

    applied = run_cli("apply", "--prune", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert applied.code == 0, applied.stderr
    assert "Node/lab-node-2 -" not in applied.lines
    assert lab.raw("GET", "/api/v1/nodes/lab-node-2")[0] == 200
    assert NODE_ENTRY not in _inventory(lab)
    again = run_cli("plan", "--prune", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert note not in again.stderr


def test_a_saved_plan_that_prunes_a_node_is_refused(lab: TestCluster, workdir: Path) -> None:
    _node_in_the_inventory(lab)
    out = workdir / "plan.json"
    saved = run_cli("plan", "--prune", "--out", str(out), cwd=workdir, kubeconfig=lab.kubeconfig)
    assert saved.code in (0, 1), saved.stderr

    version = lab.node("lab-node-2")["metadata"]["resourceVersion"]

    def prune_node(document: dict[str, Any]) -> None:
        document["objects"].append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "namespace": "",
                "name": "lab-node-2",
                "plural": "nodes",
                "namespaced": False,
                "source": "",
                "action": "prune",
                "resourceVersion": version,
            }
        )

    _reseal(out, prune_node)
    before = snapshot(lab)

    refused = run_cli("apply", "--prune", str(out), cwd=workdir, kubeconfig=lab.kubeconfig)

    assert refused.code == 2
    [line] = refused.stderr.splitlines()
    assert "Node/lab-node-2 prune (planning gives no change): nothing was applied" in line
    assert snapshot(lab) == before
