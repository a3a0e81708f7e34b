"""What reconcile wrote is pruned wherever its inventory says it wrote it: on a node a group
no longer selects, or whose file was deleted, as on a node desired/ still declares. The
guards and checks of a prune hold for them too, and a saved plan with such a prune applies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_prune_guards import _reseal, snapshot
from tests.e2e.test_watch import eventually, watching
from tests.support import TestCluster, run_cli

INVENTORIES = (
    "reconcile.dev/managed-labels",
    "reconcile.dev/managed-annotations",
    "reconcile.dev/managed-taints",
)

RACK = """\
apiVersion: reconcile.dev/v1alpha1
kind: NodeGroup
metadata:
  name: rack-r1
selector:
  matchLabels: {example.com/rack: r1}
labels:
  example.com/pool: r1
taints:
- {key: example.com/pool, value: r1, effect: NoSchedule}
"""

GROUP_LINES = [
    "lab-node-1 example.com/pool r1",
    "lab-node-1 taint:example.com/pool:NoSchedule r1",
    "lab-node-2 example.com/pool r1",
    "lab-node-2 taint:example.com/pool:NoSchedule r1",
]
PRUNE_LINES = [
    "lab-node-1 example.com/pool -",
    "lab-node-1 taint:example.com/pool:NoSchedule -",
    "lab-node-2 example.com/pool -",
    "lab-node-2 taint:example.com/pool:NoSchedule -",
]


def _inventories(cluster: TestCluster, node: str) -> dict[str, str]:
    annotations = cluster.node(node)["metadata"].get("annotations") or {}
    return {k: v for k, v in annotations.items() if k in INVENTORIES}


def _taint_keys(cluster: TestCluster, node: str) -> list[str]:
    return [t["key"] for t in cluster.node(node)["spec"].get("taints") or ()]


@pytest.fixture
def pooled(lab: TestCluster, workdir: Path) -> Path:
    """The lab with the rack-r1 group applied to lab-node-1 (which its own file declares
    too) and lab-node-2 (which only the group does); then the group file deleted and
    lab-node-2 relabelled out of the rack."""
    (workdir / "desired" / "nodes" / "lab-node-2.yaml").unlink()
    lab.label("lab-node-1", **{"example.com/rack": "r1"})
    lab.label("lab-node-2", **{"example.com/rack": "r1"})
    groups = workdir / "desired" / "groups"
    groups.mkdir()
    (groups / "rack-r1.yaml").write_text(RACK)
    applied = run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert applied.code == 0, applied.stderr
    assert [line for line in applied.lines if "example.com/pool" in line] == GROUP_LINES
    (groups / "rack-r1.yaml").unlink()
    lab.label("lab-node-2", **{"example.com/rack": "r2"})
    return workdir


def test_facts_of_a_deleted_group_are_noted_and_pruned_with_the_inventory_emptied(
    lab: TestCluster, pooled: Path
) -> None:
    plan = run_cli("plan", cwd=pooled, kubeconfig=lab.kubeconfig)
    # Out of sync (exit 1): each line says that only --prune removes it.
    assert (plan.code, plan.lines) == (1, [f"{line} (--prune)" for line in PRUNE_LINES])
    assert "note: 4 label(s) set by reconcile are no longer declared" in plan.stderr
    as_json = run_cli("plan", "-o", "json", cwd=pooled, kubeconfig=lab.kubeconfig)
    prunable = json.loads(as_json.stdout)["prunable"]
    assert [(p["node"], p["key"]) for p in prunable if "example.com/pool" in p["key"]] == [
        ("lab-node-1", "example.com/pool"),
        ("lab-node-1", "taint:example.com/pool:NoSchedule"),
        ("lab-node-2", "example.com/pool"),
        ("lab-node-2", "taint:example.com/pool:NoSchedule"),
    ]

    pruning = run_cli("plan", "--prune", cwd=pooled, kubeconfig=lab.kubeconfig)
    assert (pruning.code, pruning.lines) == (1, PRUNE_LINES), pruning.stderr

    applied = run_cli("apply", "--prune", cwd=pooled, kubeconfig=lab.kubeconfig)
    assert (applied.code, applied.lines) == (0, PRUNE_LINES), applied.stderr
    for node in ("lab-node-1", "lab-node-2"):
        assert "example.com/pool" not in lab.labels(node)
        assert "example.com/pool" not in _taint_keys(lab, node)
    # lab-node-2 had only the group's facts: its inventories are gone; lab-node-1's
    # own file is still declared there, so its label inventory stays without the pool.
    assert _inventories(lab, "lab-node-2") == {}
    kept = _inventories(lab, "lab-node-1")
    assert "example.com/pool" not in kept["reconcile.dev/managed-labels"].split(",")
    assert "reconcile.dev/managed-taints" not in kept
    again = run_cli("plan", "--prune", cwd=pooled, kubeconfig=lab.kubeconfig)
    assert (again.code, again.stdout) == (0, ""), again.stderr


def test_facts_of_a_deleted_node_file_are_pruned(lab: TestCluster, workdir: Path) -> None:
    node_file = workdir / "desired" / "nodes" / "lab-node-2.yaml"
    node_file.write_text(
        node_file.read_text()
        + "annotations:\n  example.com/owner: infra\n"
        + "taints:\n- {key: example.com/cpu-only, effect: PreferNoSchedule}\n"
    )
    assert run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig).code == 0
    declared = _inventories(lab, "lab-node-2")["reconcile.dev/managed-labels"].split(",")
    node_file.unlink()

    applied = run_cli("apply", "--prune", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert applied.code == 0, applied.stderr
    assert applied.lines == sorted(
        [
            *(f"lab-node-2 {key} -" for key in declared),
            "lab-node-2 annotation:example.com/owner -",
            "lab-node-2 taint:example.com/cpu-only:PreferNoSchedule -",
        ],
        key=lambda line: (line.split()[1].startswith(("annotation:", "taint:")), line),
    )
    assert "example.com/owner" not in lab.node("lab-node-2")["metadata"].get("annotations", {})
    assert _taint_keys(lab, "lab-node-2") == []
    assert _inventories(lab, "lab-node-2") == {}


def test_pruning_every_fact_of_a_deleted_group_needs_allow_empty_prune(
    lab: TestCluster, workdir: Path
) -> None:
    work = workdir  # the lab's workloads, no node files: the group declares every fact
    for node_file in (work / "desired" / "nodes").iterdir():
        node_file.unlink()
    (work / "desired" / "groups").mkdir()
    (work / "desired" / "groups" / "rack-r1.yaml").write_text(RACK)
    lab.label("lab-node-2", **{"example.com/rack": "r1"})
    assert run_cli("apply", cwd=work, kubeconfig=lab.kubeconfig).code == 0
    (work / "desired" / "groups" / "rack-r1.yaml").unlink()
    before = snapshot(lab)

    for command in ("plan", "apply"):
        refused = run_cli(command, "--prune", cwd=work, kubeconfig=lab.kubeconfig)
        assert refused.code == 2, refused.stderr
        assert refused.stdout == ""
        [line] = refused.stderr.splitlines()
        assert line.startswith(
            "error: --prune would remove all 2 label(s) reconcile manages (lab-node-2 "
            "example.com/pool, lab-node-2 taint:example.com/pool:NoSchedule)"
        )
        assert line.endswith("pass --allow-empty-prune")
    assert snapshot(lab) == before

    allowed = run_cli(
        "apply", "--prune", "--allow-empty-prune", cwd=work, kubeconfig=lab.kubeconfig
    )
    assert allowed.code == 0, allowed.stderr
    assert allowed.lines == [
        "lab-node-2 example.com/pool -",
        "lab-node-2 taint:example.com/pool:NoSchedule -",
    ]


def test_a_pruned_fact_of_an_undeclared_node_goes_through_the_impact_check(
    lab: TestCluster, workdir: Path
) -> None:
    # lab-node-0, the only A100 node, loses its product label: a100-job is stranded.
    lab.label("lab-node-0", **{"nvidia.com/gpu.count": "1"})  # drift: apply records inventory
    assert run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig).code == 0
    (workdir / "desired" / "nodes" / "lab-node-0.yaml").unlink()

    plan = run_cli("plan", "--prune", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert "lab-node-0 nvidia.com/gpu.product -" in plan.lines
    assert (
        "error: Pod/nfd-lab/a100-job: no node will take it after apply (1/1 placed before): "
        "0/3 nodes are "
        "available: 3 node(s) didn't match Pod's node affinity/selector."
    ) in plan.stderr


def test_a_saved_plan_pruning_an_undeclared_node_applies(lab: TestCluster, pooled: Path) -> None:
    out = pooled / "plan.json"
    saved = run_cli("plan", "--prune", "--out", str(out), cwd=pooled, kubeconfig=lab.kubeconfig)
    assert saved.code == 1, saved.stderr

    applied = run_cli("apply", "--prune", str(out), cwd=pooled, kubeconfig=lab.kubeconfig)

    assert (applied.code, applied.lines) == (0, PRUNE_LINES), applied.stderr
    assert _inventories(lab, "lab-node-2") == {}


def test_a_saved_plan_adding_to_an_undeclared_node_is_still_refused(
    lab: TestCluster, pooled: Path
) -> None:
    out = pooled / "plan.json"
    saved = run_cli("plan", "--prune", "--out", str(out), cwd=pooled, kubeconfig=lab.kubeconfig)
    assert saved.code == 1, saved.stderr

    def add_label(document: dict[str, Any]) -> None:
        [node] = [n for n in document["nodes"] if n["name"] == "lab-node-2"]
        node["changes"][0]["after"] = "r9"

    _reseal(out, add_label)
    before = snapshot(lab)

    refused = run_cli("apply", "--prune", str(out), cwd=pooled, kubeconfig=lab.kubeconfig)

    assert refused.code == 2
    assert "lab-node-2 example.com/pool r9 (planning gives" in refused.stderr
    assert snapshot(lab) == before


def test_watch_prunes_a_node_relabelled_out_of_its_pool(lab: TestCluster, workdir: Path) -> None:
    desired = workdir / "desired"
    (desired / "nodes" / "lab-node-2.yaml").unlink()
    (desired / "groups").mkdir()
    (desired / "groups" / "rack-r1.yaml").write_text(RACK)
    lab.label("lab-node-2", **{"example.com/rack": "r1"})
    with watching(lab, desired, correct=True, prune=True) as (heard, _):
        assert "lab-node-2 example.com/pool r1" in heard.drift_lines("corrected")
        assert lab.labels("lab-node-2")["example.com/pool"] == "r1"

        lab.label("lab-node-2", **{"example.com/rack": "r2"})  # out of the pool: one event

        eventually(lambda: "example.com/pool" not in lab.labels("lab-node-2"), "the prune")
        eventually(lambda: _taint_keys(lab, "lab-node-2") == [], "the taint's prune")
        assert "lab-node-2 example.com/pool -" in heard.drift_lines("corrected")
        assert "lab-node-2 taint:example.com/pool:NoSchedule -" in heard.drift_lines("corrected")
    assert _inventories(lab, "lab-node-2") == {}
