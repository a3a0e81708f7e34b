"""May this saved plan be applied here: its file, the cluster and tree it was made from,
and every object in it being what planning gives now (nodes: tests/unit/test_plan.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reconcile.desired.models import DesiredNode, DesiredState, Manifest
from reconcile.diagnostics import PlanRefused, ReconcileError, Source
from reconcile.engine import operations, saved
from reconcile.engine.objects.apply import apply_objects
from reconcile.engine.objects.plan import plan_objects
from reconcile.engine.operations import ApplyRequest, PlanRequest
from reconcile.engine.plan import NO_OPTIONS, ClusterIdentity, Plan
from tests.fake import CONFIGMAPS, FakeCluster
from tests.plan_edits import edited, entry_for, places

TREE = "sha256:" + "1" * 64
HERE = ClusterIdentity(server="https://here", kubeSystemUID="uid-here")
OPTIONS = NO_OPTIONS


def _settings(**data: str) -> Manifest:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "default"},
        "data": data,
    }
    return Manifest(body, Source("desired/workloads/settings.yaml", 1, 1))


def _objects_plan(cluster: FakeCluster, *manifests: Manifest) -> Plan:
    planning = plan_objects(DesiredState(manifests=manifests), cluster)
    return Plan(objects=tuple(planning.objects), inventory=planning.inventory)


def test_a_plan_made_elsewhere_or_from_another_tree_or_unbound_is_refused() -> None:
    plan = Plan().bound(HERE, TREE)
    saved.check_origin(plan, HERE, TREE, OPTIONS)

    there = ClusterIdentity(server="https://here", kubeSystemUID="uid-there")
    with pytest.raises(
        PlanRefused, match=r"made for another cluster \(https://here, kube-system uid uid-here\)"
    ):
        saved.check_origin(plan, there, TREE, OPTIONS)
    with pytest.raises(PlanRefused, match="another desired/ tree"):
        saved.check_origin(plan, HERE, "sha256:" + "2" * 64, OPTIONS)
    with pytest.raises(PlanRefused, match="does not say which cluster"):
        saved.check_origin(Plan(), HERE, TREE, OPTIONS)


def test_the_same_server_url_is_not_the_same_cluster_but_the_same_uid_is() -> None:
    plan = Plan().bound(HERE, TREE)
    moved = ClusterIdentity(server="https://from-a-pod", kubeSystemUID="uid-here")
    saved.check_origin(plan, moved, TREE, OPTIONS)  # the URL differs between laptop and pod


def test_an_object_planned_otherwise_now_is_named() -> None:
    cluster = FakeCluster()
    cluster.apply_object(CONFIGMAPS, _settings(mode="old").body)
    planned = _objects_plan(cluster, _settings(mode="new"))

    assert list(saved.differences(planned, planned, [])) == []
    assert list(
        saved.differences(planned, _objects_plan(cluster, _settings(mode="newer")), [])
    ) == [
        "ConfigMap/default/settings manifest (not what planning gives)",
        "ConfigMap/default/settings changes (not what planning gives)",
    ]
    apply_objects(planned, cluster, saved=False)  # applied since: nothing left to do
    assert list(saved.differences(planned, _objects_plan(cluster, _settings(mode="new")), [])) == [
        "ConfigMap/default/settings update (planning gives no change)",
        "the object inventory to record (not the one planning gives)",
    ]


def test_a_created_object_that_exists_now_or_another_inventory_is_named() -> None:
    cluster = FakeCluster()
    create = _objects_plan(cluster, _settings(mode="new"))
    cluster.apply_object(CONFIGMAPS, _settings(mode="old").body)
    now = _objects_plan(cluster, _settings(mode="new"))

    assert list(saved.differences(create, now, [])) == [
        "ConfigMap/default/settings action create (planning gives update)"
    ]
    recorded = create.model_copy(update={"inventory": None})
    assert list(saved.differences(create, recorded, [])) == [
        "the object inventory to record (not the one planning gives)"
    ]
    with pytest.raises(
        PlanRefused, match="not what planning gives now: ConfigMap/default/settings action create"
    ):
        saved.refuse_differences(create, now, [])


def test_a_plan_file_too_large_missing_or_edited_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = Plan().bound(HERE, TREE)
    path = tmp_path / "plan.json"
    plan.save(path)
    assert saved.load(path) == plan

    monkeypatch.setattr(saved, "MAX_PLAN_BYTES", path.stat().st_size - 1)
    with pytest.raises(ReconcileError, match="larger than 512 MiB"):
        saved.load(path)
    monkeypatch.undo()
    with pytest.raises(ReconcileError, match="cannot read plan"):
        saved.load(tmp_path / "missing.json")
    document = plan.model_dump(mode="json")
    with pytest.raises(ReconcileError, match="was changed after `reconcile plan` wrote it"):
        saved.parse({**document, "prune": True}, "the plan")
    with pytest.raises(ReconcileError, match=r"is not a saved reconcile plan \(kind"):
        saved.parse({**document, "kind": "Other"}, "the plan")


# --- every place of a saved plan that apply takes something from ---------------------------


def _node(
    name: str,
    labels: dict[str, str | None] | None = None,
    annotations: dict[str, str | None] | None = None,
    taints: dict[str, str | None] | None = None,
) -> DesiredNode:
    source = Source(f"desired/nodes/{name}.yaml", 4, 9)
    return DesiredNode(
        name, labels or {}, source, annotations=annotations or {}, taints=taints or {}
    )


def _walked_state(**data: str) -> DesiredState:
    extra = Manifest(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "extra", "namespace": "default"},
        },
        Source("desired/workloads/extra.yaml", 1, 1),
    )
    nodes = {
        "n1": _node("n1", labels={"a.io/x": "1"}),
        "n2": _node("n2", annotations={"a.io/note": "n"}, taints={"dedicated:NoSchedule": "ml"}),
        "n3": _node("n3", labels={"a.io/x": "1"}),
    }
    return DesiredState(nodes=nodes, manifests=(_settings(**data), extra), digest=TREE)


def _walked_cluster() -> FakeCluster:
    """n1 and n2 drifted (a label; an annotation and a taint), n3 in place; the settings
    ConfigMap applied earlier (in the inventory) and changed in desired/ since."""
    cluster = FakeCluster()
    cluster.add_node("n1", {"a.io/x": "0"})
    cluster.add_node("n2", {}, taints=[{"key": "other", "effect": "NoSchedule"}])
    cluster.add_node("n3", {"a.io/x": "1"})
    earlier = DesiredState(manifests=(_settings(mode="old"),), digest=TREE)
    operations.apply(
        ApplyRequest(operations.plan(PlanRequest(earlier), cluster), desired=earlier), cluster
    )
    cluster.writes.clear()
    return cluster


def _opened(document: dict[str, Any], state: DesiredState) -> operations.SavedPlan:
    document = dict(document, digest=None)
    document["digest"] = Plan.model_validate(document).body_digest()  # resealed
    return operations.open_saved(saved.parse(document, "the plan"), state)


def test_no_place_of_a_saved_plan_is_taken_on_trust() -> None:
    """Every edit of every place apply takes something from (digest recomputed, no plan
    key) is refused before anything is written: node entries whole, an entry with no
    changes for any node, objects, the inventory. The plan as saved applies."""
    cluster, state = _walked_cluster(), _walked_state(mode="new")
    planned = operations.plan(PlanRequest(state), cluster)
    assert [n.name for n in planned.nodes] == ["n1", "n2"] and planned.nodes[1].taints
    assert {o.action for o in planned.objects} == {"update", "create"} and planned.inventory
    document = planned.model_dump(mode="json")
    versions = {n.name: n.resource_version for n in cluster.list_nodes()}
    edits = [(p, edited(document, p)) for p in places(document)]
    edits += [(("nodes", "+", n), entry_for(document, n, v)) for n, v in versions.items()]

    for where, edit in edits:
        with pytest.raises(ReconcileError):
            opened = _opened(edit, state)
            operations.verify_saved(opened, cluster, PlanRequest(state))
            pytest.fail(f"{where}: applied")
        assert cluster.writes == [], where

    verified = operations.verify_saved(_opened(document, state), cluster, PlanRequest(state))
    result = operations.apply(ApplyRequest(verified, desired=state, saved=True), cluster)
    assert result.ok and len(edits) > 60
    assert [t["key"] for t in cluster.get_node("n2").taints] == ["other", "dedicated"]
