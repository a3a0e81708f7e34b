"""Drift people made with kubectl is taken back; a controller's field is not (objects/plan.py
PEOPLE): planning against FakeCluster, whose apply conflicts name the field managers."""

from __future__ import annotations

from typing import Any

import pytest

from reconcile.cli.output import object_lines
from reconcile.desired.models import DesiredState, Manifest
from reconcile.diagnostics import Conflict, Source
from reconcile.engine.diff import manifest_drift
from reconcile.engine.objects.apply import apply_objects
from reconcile.engine.objects.plan import conflicting_managers, plan_objects
from reconcile.engine.plan import ObjectAction, Plan, PlanOptions
from reconcile.engine.saved import differences
from tests.fake import FakeCluster


def _settings(**data: str) -> Manifest:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "apps"},
        "data": {"mode": "single", "level": "1", **data},
    }
    return Manifest(body, Source("desired/workloads/settings.yaml", 1, 1))


def _applied(cluster: FakeCluster, manifest: Manifest) -> None:
    state = DesiredState(manifests=(manifest,))
    planning = plan_objects(state, cluster)
    plan = Plan(objects=tuple(planning.objects), inventory=planning.inventory)
    assert [r.error for r in apply_objects(plan, cluster, saved=False) if r.error] == []


def _plan(cluster: FakeCluster, manifest: Manifest, **options: bool) -> Plan:
    state = DesiredState(manifests=(manifest,))
    planning = plan_objects(state, cluster, PlanOptions.of(**options))
    return Plan(
        objects=tuple(planning.objects),
        inventory=planning.inventory,
        findings=tuple(planning.findings),
        forceConflicts=options.get("forceConflicts", False),
    )


def _changed_by(cluster: FakeCluster, manager: str, **data: str) -> None:
    [resource] = [k for k in cluster.kinds if k.kind == "ConfigMap"]
    cluster.update_object(resource, "apps", "settings", {"data": data}, manager=manager)


def _data(cluster: FakeCluster) -> dict[str, Any]:
    [resource] = [k for k in cluster.kinds if k.kind == "ConfigMap"]
    found = cluster.get_object(resource, "apps", "settings")
    assert found is not None
    return dict(found["data"])


@pytest.mark.parametrize(
    "manager",
    [
        "kubectl-edit",
        "kubectl-patch",
        "kubectl-client-side-apply",
        "kubectl-label",
        "kubectl-annotate",
        "before-first-apply",
    ],
)
def test_a_field_a_person_changed_is_planned_as_taken_back_from_them(manager: str) -> None:
    cluster = FakeCluster(namespaces=("default", "apps"))
    _applied(cluster, _settings())
    _changed_by(cluster, manager, mode="mixed")
    plan = _plan(cluster, _settings())
    assert plan.findings == ()
    [obj] = plan.objects
    assert (obj.action, obj.takenFrom) == (ObjectAction.UPDATE, (manager,))
    assert [(c.shown_path, c.after, c.before, c.manager) for c in obj.changes] == [
        ("data.mode", "single", "mixed", manager)
    ]
    assert object_lines(obj) == ["ConfigMap/apps/settings data.mode single"]
    assert object_lines(obj, wide=True) == [
        f"ConfigMap/apps/settings data.mode mixed single {manager}"
    ]
    document = obj.model_dump(mode="json")
    assert document["takenFrom"] == [manager]
    assert document["changes"][0]["manager"] == manager


def test_apply_takes_the_field_back_and_the_next_plan_is_empty() -> None:
    cluster = FakeCluster(namespaces=("default", "apps"))
    _applied(cluster, _settings())
    _changed_by(cluster, "kubectl-patch", mode="mixed", extra="kept")
    plan = _plan(cluster, _settings())
    assert [r.error for r in apply_objects(plan, cluster, saved=False) if r.error] == []
    assert _data(cluster) == {"mode": "single", "level": "1", "extra": "kept"}
    assert _plan(cluster, _settings()).objects == ()


def test_a_field_a_controller_owns_still_needs_force_conflicts_and_names_it() -> None:
    cluster = FakeCluster(namespaces=("default", "apps"))
    _applied(cluster, _settings())
    _changed_by(cluster, "kubectl-patch", mode="mixed")
    _changed_by(cluster, "horizontal-pod-autoscaler", level="7")
    plan = _plan(cluster, _settings())
    [finding] = plan.findings
    assert (finding.kind, finding.blocksApply) == ("object-conflict", True)
    assert '"horizontal-pod-autoscaler"' in finding.message
    assert "--force-conflicts takes ownership" in finding.message
    [obj] = plan.objects
    assert obj.takenFrom is None
    # The exact drift of a forced dry-run, each field with its manager.
    assert [(c.shown_path, c.after, c.manager) for c in obj.changes] == [
        ("data.level", "1", "horizontal-pod-autoscaler"),
        ("data.mode", "single", "kubectl-patch"),
    ]
    forced = _plan(cluster, _settings(), forceConflicts=True)
    assert forced.findings == ()
    assert [r.error for r in apply_objects(forced, cluster, saved=False) if r.error] == []
    assert _data(cluster) == {"mode": "single", "level": "1"}


def test_a_saved_plan_must_take_back_from_the_same_people() -> None:
    cluster = FakeCluster(namespaces=("default", "apps"))
    _applied(cluster, _settings())
    _changed_by(cluster, "kubectl-patch", mode="mixed")
    saved = _plan(cluster, _settings())
    assert list(differences(saved, _plan(cluster, _settings()), [])) == []
    [obj] = saved.objects
    edited = saved.model_copy(
        update={"objects": (obj.model_copy(update={"takenFrom": ("kubectl-edit",)}),)}
    )
    assert list(differences(edited, _plan(cluster, _settings()), [])) == [
        "ConfigMap/apps/settings takenFrom (not what planning gives)"
    ]


def test_the_managers_a_conflict_names_are_read_from_its_causes() -> None:
    error = Conflict(
        409,
        "Conflict",
        "Apply failed with 2 conflicts: ...",
        (
            {
                "reason": "FieldManagerConflict",
                "message": 'conflict with "kubectl-patch" using v1',
                "field": ".data.mode",
            },
            {
                "reason": "FieldManagerConflict",
                "message": 'conflict with "my \\"hpa\\""',
                "field": ".data.level",
            },
        ),
    )
    assert conflicting_managers(error) == ("kubectl-patch", 'my "hpa"')
    assert conflicting_managers(Conflict(409, "Conflict", "the object has been modified")) is None


def test_an_empty_map_in_the_manifest_is_no_drift_where_the_live_map_has_defaults() -> None:
    manifest = {"spec": {"cdi": {}, "mig": {"strategy": "single"}}}
    live = {"spec": {"cdi": {"enabled": False}, "mig": {"strategy": "mixed"}}}
    assert [c.shown_path for c in manifest_drift(manifest, live)] == ["spec.mig.strategy"]
    assert [c.shown_path for c in manifest_drift(manifest, {"spec": {}})] == [
        "spec.cdi",
        "spec.mig.strategy",
    ]
