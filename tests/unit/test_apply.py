"""Applying a plan: node patches guarded by resourceVersion, conflicts, stale saved plans,
and workload objects (inventory first, creates, updates, prunes) against FakeCluster."""

from __future__ import annotations

import pytest

from reconcile.desired.models import DesiredNode, DesiredState, Manifest
from reconcile.diagnostics import Source, StalePlan
from reconcile.engine.nodes.apply import apply_node, apply_plan
from reconcile.engine.nodes.plan import build_plan
from reconcile.engine.objects.apply import apply_objects, preflight_objects
from reconcile.engine.objects.inventory import (
    CONFIGMAPS,
    INVENTORY_NAME,
    INVENTORY_NAMESPACE,
    read_inventory,
)
from reconcile.engine.objects.plan import plan_objects
from reconcile.engine.plan import Plan, PlanOptions
from reconcile.engine.results import DONE_BY_OTHERS
from reconcile.engine.saved import check_fresh, check_objects_fresh
from tests.fake import FakeCluster


def desired(**nodes: dict[str, str | None]) -> DesiredState:
    return DesiredState(
        nodes={
            name: DesiredNode(name, labels, Source(f"desired/nodes/{name}.yaml", 4, 9))
            for name, labels in nodes.items()
        }
    )


def _configmap(name: str, namespace: str = "apps", **data: str) -> Manifest:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }
    return Manifest(body, Source(f"desired/workloads/{name}.yaml", 1, 1))


def _objects(cluster: FakeCluster, *manifests: Manifest, prune: bool = False) -> Plan:
    planning = plan_objects(DesiredState(manifests=manifests), cluster, PlanOptions(prune=prune))
    assert not planning.findings
    return Plan(objects=tuple(planning.objects), inventory=planning.inventory)


def _other_writer(cluster: FakeCluster, node: str, **labels: str) -> None:
    cluster.patch_node(node, {"metadata": {"labels": labels}})


# --- nodes -------------------------------------------------------------------------------


def test_only_drifted_nodes_are_written_and_a_second_plan_finds_nothing() -> None:
    cluster = FakeCluster()
    cluster.add_node("n1", {"a.io/x": "0"})
    cluster.add_node("n2", {"a.io/x": "1"})
    state = desired(n1={"a.io/x": "1"}, n2={"a.io/x": "1"})

    result = apply_plan(build_plan(state, cluster.list_nodes()), cluster, desired=state)

    assert result.ok
    assert [(name, c.key, c.after) for name, c in result.lines()] == [("n1", "a.io/x", "1")]
    assert cluster.writes == [("patch", "nodes/n1")]
    assert cluster.get_node("n1").labels["a.io/x"] == "1"
    assert not build_plan(state, cluster.list_nodes()).nodes


def test_a_label_declared_absent_is_removed_from_the_node() -> None:
    cluster = FakeCluster()
    cluster.add_node("n1", {"a.io/x": "0", "a.io/keep": "k"})
    state = desired(n1={"a.io/x": None})

    result = apply_plan(build_plan(state, cluster.list_nodes()), cluster, desired=state)

    assert result.ok
    assert cluster.get_node("n1").labels == {"a.io/keep": "k"}


def test_a_conflict_on_a_fresh_plan_is_replanned_and_the_drift_left_written() -> None:
    cluster = FakeCluster()
    cluster.add_node("n1", {"a.io/x": "0"})
    state = desired(n1={"a.io/x": "1"})
    plan = build_plan(state, cluster.list_nodes())
    _other_writer(cluster, "n1", **{"a.io/other": "o"})  # the planned resourceVersion moves

    [node] = apply_plan(plan, cluster, desired=state).nodes

    assert (node.error, node.conflicts, [c.key for c in node.applied]) == (None, 1, ["a.io/x"])
    assert cluster.get_node("n1").labels == {"a.io/x": "1", "a.io/other": "o"}


def test_drift_another_writer_fixed_first_is_a_note_and_no_line() -> None:
    cluster = FakeCluster()
    cluster.add_node("n1", {"a.io/x": "0"})
    state = desired(n1={"a.io/x": "1"})
    plan = build_plan(state, cluster.list_nodes())
    _other_writer(cluster, "n1", **{"a.io/x": "1"})

    result = apply_plan(plan, cluster, desired=state)

    [node] = result.nodes
    assert (node.applied, node.note, node.conflicts) == ((), DONE_BY_OTHERS, 1)
    assert list(result.lines()) == []
    assert cluster.writes == [("patch", "nodes/n1")] * 2  # the other writer's, then the 409


def test_a_saved_plan_whose_node_moved_is_stale_and_nothing_is_written_to_it() -> None:
    cluster = FakeCluster()
    cluster.add_node("n1", {"a.io/x": "0"})
    plan = build_plan(desired(n1={"a.io/x": "1"}), cluster.list_nodes())
    _other_writer(cluster, "n1", **{"a.io/other": "o"})

    moved = rf"n1 \(resourceVersion {plan.nodes[0].resourceVersion} -> {cluster.version}\)"
    with pytest.raises(StalePlan, match=moved):
        check_fresh(plan, cluster.list_nodes())
    [node] = apply_plan(plan, cluster, desired=None).nodes

    assert node.error is not None and node.error.startswith("plan is stale")
    assert cluster.get_node("n1").labels == {"a.io/x": "0", "a.io/other": "o"}


def test_a_saved_plan_applied_twice_writes_once() -> None:
    cluster = FakeCluster()
    cluster.add_node("n1", {"a.io/x": "0"})
    plan = build_plan(desired(n1={"a.io/x": "1"}), cluster.list_nodes())

    first = apply_plan(plan, cluster, desired=None)
    check_fresh(plan, cluster.list_nodes())  # moved, but exactly as planned: not stale
    [again] = apply_plan(plan, cluster, desired=None).nodes

    assert [c.key for c in first.nodes[0].applied] == ["a.io/x"]
    assert (again.applied, again.note) == ((), DONE_BY_OTHERS)
    assert cluster.get_node("n1").labels["a.io/x"] == "1"


def test_a_node_the_policy_refused_is_written_only_when_allowed() -> None:
    cluster = FakeCluster()
    cluster.add_node("n1", {"a.io/x": "0"})
    state = desired(n1={"a.io/x": "1"})
    [planned] = build_plan(state, cluster.list_nodes()).nodes
    refused = planned.model_copy(update={"refusal": "no driver image for it"})

    held = apply_node(refused, cluster, desired=state, prune=False)
    assert (held.error, cluster.writes) == ("no driver image for it", [])

    written = apply_node(refused, cluster, desired=state, prune=False, allow_refused=True)
    assert written.error is None and cluster.get_node("n1").labels["a.io/x"] == "1"


def test_nodes_not_started_when_told_to_stop_are_skipped_unwritten() -> None:
    cluster = FakeCluster()
    for name in ("n1", "n2"):
        cluster.add_node(name, {"a.io/x": "0"})
    state = desired(n1={"a.io/x": "1"}, n2={"a.io/x": "1"})

    result = apply_plan(
        build_plan(state, cluster.list_nodes()), cluster, desired=state, should_stop=lambda: True
    )

    assert (result.ok, result.skipped, result.nodes, cluster.writes) == (
        False,
        ("n1", "n2"),
        (),
        [],
    )


def test_a_node_deleted_after_planning_fails_alone() -> None:
    cluster = FakeCluster()
    for name in ("n1", "n2"):
        cluster.add_node(name, {"a.io/x": "0"})
    state = desired(n1={"a.io/x": "1"}, n2={"a.io/x": "1"})
    plan = build_plan(state, cluster.list_nodes())
    cluster.delete_node("n1")

    result = apply_plan(plan, cluster, desired=state)

    assert [n.name for n in result.failed] == ["n1"]
    assert "not found" in (result.failed[0].error or "")
    assert cluster.get_node("n2").labels["a.io/x"] == "1"


# --- workload objects ----------------------------------------------------------------------


def test_a_new_object_is_recorded_in_the_inventory_before_it_is_created() -> None:
    cluster = FakeCluster(namespaces=("default", "apps"))
    plan = _objects(cluster, _configmap("settings", mode="fast"))

    [result] = apply_objects(plan, cluster, saved=False)

    assert result.error is None and result.changed is not None
    inventory = ("apply", f"configmaps/{INVENTORY_NAMESPACE}/{INVENTORY_NAME}")
    # recorded before the object is created, and applied again once all is written
    assert cluster.writes == [inventory, ("apply", "configmaps/apps/settings"), inventory]
    assert read_inventory(cluster) == ("v1 ConfigMap apps settings",)
    live = cluster.get_object(CONFIGMAPS, "apps", "settings")
    assert live is not None and live["data"] == {"mode": "fast"}
    assert live["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "reconcile"}


def test_an_object_another_writer_created_first_is_a_note() -> None:
    cluster = FakeCluster(namespaces=("default", "apps"))
    plan = _objects(cluster, _configmap("settings", mode="fast"))
    cluster.add(CONFIGMAPS, _configmap("settings", mode="fast").body)

    [result] = apply_objects(plan, cluster, saved=False)

    assert result.changed is None
    assert result.note is not None and result.note.startswith("created by another writer first")


def test_an_update_that_meets_a_moved_object_is_replanned_unless_the_plan_was_saved() -> None:
    cluster = FakeCluster(namespaces=("default", "apps"))
    apply_objects(_objects(cluster, _configmap("settings", mode="fast")), cluster, saved=False)
    plan = _objects(cluster, _configmap("settings", mode="slow"))
    [update] = plan.objects
    assert [(c.path, c.before, c.after) for c in update.changes] == [
        (("data", "mode"), "fast", "slow")
    ]
    cluster.add(CONFIGMAPS, cluster.get_object(CONFIGMAPS, "apps", "settings") or {})  # moves

    with pytest.raises(StalePlan, match="apps/settings"):
        check_objects_fresh(plan, cluster)
    [stale] = apply_objects(plan, cluster, saved=True)
    assert stale.error == "plan is stale: the object changed after the plan was made"

    [fresh] = apply_objects(plan, cluster, saved=False)
    assert fresh.error is None and fresh.changed is not None
    assert (cluster.get_object(CONFIGMAPS, "apps", "settings") or {})["data"] == {"mode": "slow"}


def test_prune_deletes_the_object_and_one_already_gone_is_a_note() -> None:
    cluster = FakeCluster(namespaces=("default", "apps"))
    apply_objects(_objects(cluster, _configmap("old"), _configmap("kept")), cluster, saved=False)
    plan = _objects(cluster, _configmap("kept"), prune=True)
    assert [(o.action, o.name) for o in plan.objects] == [("prune", "old")]

    [pruned] = apply_objects(plan, cluster, saved=False)
    [again] = apply_objects(plan, cluster, saved=False)

    assert pruned.changed is not None and cluster.get_object(CONFIGMAPS, "apps", "old") is None
    assert again.note is not None and again.note.startswith("deleted by another writer first")
    assert read_inventory(cluster) == ("v1 ConfigMap apps kept",)


def test_preflight_of_a_saved_plan_names_an_update_whose_object_moved_and_writes_nothing() -> None:
    cluster = FakeCluster(namespaces=("default", "apps"))
    cluster.add(CONFIGMAPS, _configmap("settings", mode="old").body)
    plan = _objects(cluster, _configmap("settings", mode="new"))
    assert preflight_objects(plan, cluster, saved=True) == []
    cluster.add(CONFIGMAPS, cluster.get_object(CONFIGMAPS, "apps", "settings") or {})  # moves

    [problem] = preflight_objects(plan, cluster, saved=True)

    assert problem.startswith(
        'ConfigMap/apps/settings: Operation cannot be fulfilled on configmaps "settings"'
    )
    assert preflight_objects(plan, cluster, saved=False) == []  # no precondition when fresh
    assert (cluster.get_object(CONFIGMAPS, "apps", "settings") or {})["data"] == {"mode": "old"}
