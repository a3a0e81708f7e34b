"""The engine's operations end to end against FakeCluster: plan binds to the cluster and
the tree, apply writes nodes then objects or nothing at all, and a saved plan is applied
only where, from what and as it was planned."""

from __future__ import annotations

import dataclasses

import pytest

from reconcile.desired.models import DesiredNode, DesiredState, Manifest
from reconcile.diagnostics import PlanRefused, ReconcileError, Severity, Source, StalePlan
from reconcile.engine import operations
from reconcile.engine.checks import Projection
from reconcile.engine.findings import Finding
from reconcile.engine.objects.inventory import CONFIGMAPS, read_inventory
from reconcile.engine.operations import ApplyRequest, PlanRequest
from reconcile.engine.plan import Plan, PlanOptions
from tests.fake import FakeCluster


def _state(*, x: str = "1", digest: str = "tree-1") -> DesiredState:
    settings = Manifest(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": "default"},
            "data": {"x": x},
        },
        Source("desired/workloads/settings.yaml", 1, 1),
    )
    node = DesiredNode("n1", {"a.io/x": x}, Source("desired/nodes/n1.yaml", 4, 9))
    return DesiredState(nodes={"n1": node}, manifests=(settings,), digest=digest)


def _cluster() -> FakeCluster:
    cluster = FakeCluster()
    cluster.add_node("n1", {"a.io/x": "0"})
    return cluster


def _plan(cluster: FakeCluster, state: DesiredState, **options: bool) -> Plan:
    return operations.plan(PlanRequest(state, PlanOptions.of(**options)), cluster)


def test_a_plan_is_bound_to_the_cluster_and_the_tree_and_holds_nodes_and_objects() -> None:
    cluster = _cluster()
    plan = _plan(cluster, _state())

    server, uid = cluster.identity()
    assert plan.cluster is not None
    assert (plan.cluster.server, plan.cluster.kubeSystemUID, plan.desiredDigest) == (
        server,
        uid,
        "tree-1",
    )
    assert uid  # the kube-system namespace's
    assert [(n.name, [c.key for c in n.changes]) for n in plan.nodes] == [("n1", ["a.io/x"])]
    assert [(o.id, o.action) for o in plan.objects] == [("ConfigMap/default/settings", "create")]
    assert plan.inventory == ("v1 ConfigMap default settings",)
    assert cluster.writes == []  # planning only reads and dry-runs


def test_apply_writes_the_nodes_and_the_objects_and_then_nothing_is_left_to_plan() -> None:
    cluster = _cluster()
    state = _state()

    result = operations.apply(ApplyRequest(_plan(cluster, state), desired=state), cluster)

    assert result.ok and result.retries == 0
    assert cluster.get_node("n1").labels["a.io/x"] == "1"
    assert (cluster.get_object(CONFIGMAPS, "default", "settings") or {})["data"] == {"x": "1"}
    assert read_inventory(cluster) == ("v1 ConfigMap default settings",)
    again = _plan(cluster, state)
    assert (again.nodes, again.objects, again.inventory) == ((), (), None)


def test_a_finding_that_blocks_apply_means_nothing_at_all_is_written() -> None:
    def refuse_everything(projection: Projection) -> list[Finding]:
        return [
            Finding(
                severity=Severity.ERROR,
                kind="no",
                subject=node.name,
                message="not today",
                blocksApply=True,
            )
            for node in projection.nodes
        ]

    cluster = _cluster()
    state = _state()
    plan = operations.plan(PlanRequest(state), cluster, checks=(refuse_everything,))

    result = operations.apply(ApplyRequest(plan, desired=state), cluster)

    assert (result.ok, result.rejected) == (False, ("n1: not today",))
    assert cluster.writes == []


def test_a_saved_plan_is_verified_and_applied_where_and_as_it_was_planned() -> None:
    cluster = _cluster()
    state = _state()
    plan = _plan(cluster, state)
    opened = operations.open_saved(plan, state)

    verified = operations.verify_saved(opened, cluster, PlanRequest(state))
    result = operations.apply(
        ApplyRequest(verified, desired=None, saved=True, configs=opened.configs), cluster
    )

    assert result.ok
    assert cluster.get_node("n1").labels["a.io/x"] == "1"


def test_a_saved_plan_is_refused_on_another_cluster_tree_or_options() -> None:
    state = _state()
    plan = _plan(_cluster(), state)
    elsewhere = _cluster()  # another kube-system namespace, so another uid

    with pytest.raises(PlanRefused, match="made for another cluster"):
        operations.verify_saved(operations.open_saved(plan, state), elsewhere, PlanRequest(state))

    cluster = FakeCluster()
    cluster.add_node("n1", {"a.io/x": "0"})
    plan = _plan(cluster, state)
    other_tree = dataclasses.replace(state, digest="tree-2")
    with pytest.raises(PlanRefused, match="another desired/ tree"):
        operations.verify_saved(
            operations.open_saved(plan, other_tree), cluster, PlanRequest(state)
        )
    with pytest.raises(PlanRefused, match="planned without --prune"):
        operations.verify_saved(
            operations.open_saved(plan, state), cluster, PlanRequest(state, PlanOptions(prune=True))
        )
    assert cluster.writes == []


def test_a_saved_plan_whose_node_moved_is_stale() -> None:
    cluster = _cluster()
    state = _state()
    plan = _plan(cluster, state)
    cluster.patch_node("n1", {"metadata": {"labels": {"a.io/other": "o"}}})

    with pytest.raises(StalePlan, match="n1"):
        operations.verify_saved(operations.open_saved(plan, state), cluster, PlanRequest(state))


def test_a_saved_plan_that_planning_no_longer_gives_is_refused() -> None:
    cluster = _cluster()
    state = _state()
    plan = _plan(cluster, state)
    edited = dataclasses.replace(_state(x="2"), digest=state.digest)  # same digest, new label

    with pytest.raises(PlanRefused, match=r"not what planning gives now: n1 a\.io/x"):
        operations.verify_saved(operations.open_saved(plan, edited), cluster, PlanRequest(edited))


def test_a_saved_plan_is_never_applied_without_its_tree() -> None:
    plan = _plan(_cluster(), _state())
    with pytest.raises(ReconcileError, match="applied from the desired/ tree"):
        operations.open_saved(plan, None)
