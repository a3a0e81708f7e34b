"""Planning workload objects against FakeCluster: discovery, missing namespaces, drift by
dry-run, the inventory, prune and its guards, and Secrets kept out of the plan."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from reconcile.desired.models import DesiredState, Manifest
from reconcile.diagnostics import EmptyPrune, Source
from reconcile.engine.objects.apply import apply_objects
from reconcile.engine.objects.inventory import (
    CONFIGMAPS,
    INVENTORY_KEY,
    INVENTORY_NAME,
    INVENTORY_NAMESPACE,
    MANAGED_BY_LABEL,
    inventory_object,
    read_inventory,
)
from reconcile.engine.objects.plan import desired_configs, plan_objects
from reconcile.engine.objects.targets import DRY_RUNS_AT_ONCE, ObjectPlanning
from reconcile.engine.plan import ObjectAction, Plan, PlanOptions
from reconcile.kube.objects import ApiResource
from tests.fake import NAMESPACES, FakeCluster


def _manifest(kind: str, name: str, namespace: str = "apps", **fields: Any) -> Manifest:
    api_version = {"Deployment": "apps/v1", "Widget": "example.com/v1"}.get(kind, "v1")
    metadata = {"name": name} if kind == "Namespace" else {"name": name, "namespace": namespace}
    body = {"apiVersion": api_version, "kind": kind, "metadata": metadata, **fields}
    return Manifest(body, Source(f"desired/workloads/{name}.yaml", 1, 1))


def _plan(cluster: FakeCluster, *manifests: Manifest, **options: bool) -> ObjectPlanning:
    return plan_objects(DesiredState(manifests=manifests), cluster, PlanOptions.of(**options))


def _applied(cluster: FakeCluster, *manifests: Manifest) -> None:
    """The manifests applied as reconcile applies them (inventory included)."""
    state = DesiredState(manifests=manifests)
    planning = plan_objects(state, cluster)
    assert not planning.findings
    plan = Plan(objects=tuple(planning.objects), inventory=planning.inventory)
    results = apply_objects(plan, cluster, saved=False, configs=desired_configs(state))
    assert [r.error for r in results if r.error] == []


def test_a_kind_the_server_does_not_serve_is_a_finding_that_blocks_apply() -> None:
    cluster = FakeCluster(namespaces=("default", "apps"))
    planning = _plan(cluster, _manifest("Widget", "w"))
    [finding] = planning.findings
    assert (finding.kind, finding.subject, finding.blocksApply) == (
        "unknown-kind",
        "Widget/apps/w",
        True,
    )
    assert "apiVersion example.com/v1 kind Widget" in finding.message
    assert planning.objects == []


def test_an_object_in_a_namespace_nobody_creates_is_a_finding_not_a_create() -> None:
    cluster = FakeCluster()
    planning = _plan(cluster, _manifest("ConfigMap", "settings", data={"a": "1"}))
    [finding] = planning.findings
    assert finding.kind == "namespace-missing"
    assert finding.message.startswith(
        "namespace apps does not exist and desired/ does not create it"
    )
    assert planning.objects == []
    assert cluster.writes == []


def test_a_namespace_created_by_the_same_apply_lets_its_objects_be_planned_offline() -> None:
    cluster = FakeCluster()
    planning = _plan(
        cluster,
        _manifest("Namespace", "apps"),
        _manifest("ConfigMap", "settings", data={"a": "1"}),
        _manifest("ConfigMap", "Not_A_Name", data={"a": "1"}),
    )
    assert [(o.kind, o.name, o.action) for o in planning.objects] == [
        ("Namespace", "apps", ObjectAction.CREATE),
        ("ConfigMap", "settings", ObjectAction.CREATE),
    ]
    [invalid] = planning.findings
    assert (invalid.kind, invalid.subject) == ("object-invalid", "ConfigMap/apps/Not_A_Name")


def test_an_object_in_sync_plans_nothing_and_drift_is_the_fields_it_changes() -> None:
    cluster = FakeCluster(namespaces=("default", "apps"))
    _applied(cluster, _manifest("ConfigMap", "settings", data={"a": "1", "b": "2"}))

    assert (
        _plan(cluster, _manifest("ConfigMap", "settings", data={"a": "1", "b": "2"})).objects == []
    )
    [update] = _plan(cluster, _manifest("ConfigMap", "settings", data={"a": "1", "b": "3"})).objects
    assert update.action is ObjectAction.UPDATE
    live = cluster.get_object(CONFIGMAPS, "apps", "settings")
    assert live is not None and update.resourceVersion == live["metadata"]["resourceVersion"]
    assert [(c.path, c.before, c.after) for c in update.changes] == [(("data", "b"), "2", "3")]


def test_the_inventory_lists_what_reconcile_applied_and_changes_only_when_desired_does() -> None:
    cluster = FakeCluster(namespaces=("default", "apps"))
    assert _plan(cluster).inventory is None  # nothing declared, nothing recorded
    settings = _manifest("ConfigMap", "settings", data={"a": "1"})

    assert _plan(cluster, settings).inventory == ("v1 ConfigMap apps settings",)
    _applied(cluster, settings)
    assert read_inventory(cluster) == ("v1 ConfigMap apps settings",)
    assert _plan(cluster, settings).inventory is None  # already what it should be


def test_an_object_dropped_from_desired_is_prunable_and_pruned_only_with_prune() -> None:
    cluster = FakeCluster(namespaces=("default", "apps"))
    old, kept = _manifest("ConfigMap", "old"), _manifest("ConfigMap", "kept")
    _applied(cluster, old, kept)

    without = _plan(cluster, kept)
    assert (without.prunable, without.objects) == (["ConfigMap/apps/old"], [])
    assert without.inventory is None  # the prunable object stays recorded

    with_prune = _plan(cluster, kept, prune=True)
    [pruned] = with_prune.objects
    assert (pruned.action, pruned.id) == (ObjectAction.PRUNE, "ConfigMap/apps/old")
    assert with_prune.inventory == ("v1 ConfigMap apps kept",)


def test_an_object_that_is_no_longer_labelled_as_reconciles_is_never_pruned() -> None:
    cluster = FakeCluster(namespaces=("default", "apps"))
    old, kept = _manifest("ConfigMap", "old"), _manifest("ConfigMap", "kept")
    _applied(cluster, old, kept)
    live = cluster.get_object(CONFIGMAPS, "apps", "old") or {}
    live["metadata"]["labels"] = {MANAGED_BY_LABEL: "someone-else"}
    cluster.add(CONFIGMAPS, live)

    planning = _plan(cluster, kept, prune=True)

    assert (planning.objects, planning.prunable) == ([], [])


def test_pruning_everything_reconcile_manages_needs_allow_empty_prune() -> None:
    cluster = FakeCluster(namespaces=("default", "apps"))
    _applied(cluster, _manifest("ConfigMap", "a"), _manifest("ConfigMap", "b"))

    with pytest.raises(EmptyPrune, match="would delete all 2 object"):
        _plan(cluster, prune=True)
    planning = _plan(cluster, prune=True, allow_empty_prune=True)
    assert sorted(o.name for o in planning.objects) == ["a", "b"]


def test_a_node_listed_in_an_old_inventory_is_never_pruned() -> None:
    cluster = FakeCluster(namespaces=("default", "apps"))
    cluster.add_node("gpu-1")
    cluster.apply_object(
        CONFIGMAPS, inventory_object(["v1 Node - gpu-1", "v1 ConfigMap apps kept"])
    )
    planning = _plan(cluster, _manifest("ConfigMap", "kept"), prune=True)
    assert planning.never_pruned == ["Node/gpu-1"]
    assert [o.kind for o in planning.objects] == ["ConfigMap"]  # the create of `kept`
    assert planning.inventory == ("v1 ConfigMap apps kept",)


def test_a_namespace_is_not_pruned_while_it_holds_objects_reconcile_does_not_manage() -> None:
    cluster = FakeCluster(namespaces=("default",))
    namespace, kept = _manifest("Namespace", "apps"), _manifest("ConfigMap", "kept", "default")
    _applied(cluster, namespace, kept)
    cluster.add(CONFIGMAPS, _manifest("ConfigMap", "someone-elses").body)
    cluster.add(CONFIGMAPS, _manifest("ConfigMap", "kube-root-ca.crt").body)  # the control plane's

    planning = _plan(cluster, kept, prune=True)
    [finding] = planning.findings
    assert (finding.kind, finding.subject) == ("prune-namespace-not-empty", "Namespace/apps")
    assert "holds 1 object(s) reconcile does not manage (1 ConfigMap)" in finding.message

    assert _plan(cluster, kept, prune=True, prune_namespace_contents=True).findings == []


def test_a_namespace_desired_still_puts_objects_in_is_not_pruned() -> None:
    cluster = FakeCluster(namespaces=("default",))
    _applied(cluster, _manifest("Namespace", "apps"), _manifest("ConfigMap", "settings"))

    planning = _plan(cluster, _manifest("ConfigMap", "settings"), prune=True)

    [finding] = planning.findings
    assert (finding.kind, finding.blocksApply) == ("prune-namespace-in-use", True)
    assert "ConfigMap/apps/settings" in finding.message
    assert cluster.get_object(NAMESPACES, "", "apps") is not None


def test_a_secret_value_never_reaches_the_plan() -> None:
    cluster = FakeCluster(namespaces=("default", "apps"))
    _applied(cluster, _manifest("Secret", "token", data={"token": "b2xkLWh1bnRlcjI="}))

    [update] = _plan(
        cluster, _manifest("Secret", "token", data={"token": "bmV3LWh1bnRlcjI="})
    ).objects

    assert update.manifest is None and update.manifestDigest is not None
    assert [c.sensitive for c in update.changes] == [True]
    shown = update.model_dump_json()
    assert "b2xkLWh1bnRlcjI=" not in shown and "bmV3LWh1bnRlcjI=" not in shown


def test_the_inventory_is_read_from_its_configmap() -> None:
    cluster = FakeCluster()
    assert read_inventory(cluster) == ()
    cluster.apply_object(
        CONFIGMAPS,
        {
            "metadata": {"name": INVENTORY_NAME, "namespace": INVENTORY_NAMESPACE},
            "data": {INVENTORY_KEY: "v1 ConfigMap a x\n\n  \nv1 ConfigMap a y\n"},
        },
    )
    assert read_inventory(cluster) == ("v1 ConfigMap a x", "v1 ConfigMap a y")


class _SlowDryRuns(FakeCluster):
    """Dry runs that answer later the earlier their object comes, counting how many are in
    flight at once."""

    def __init__(self) -> None:
        super().__init__(namespaces=("default", "apps"))
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most = 0

    def apply_object(
        self,
        resource: ApiResource,
        body: dict[str, Any],
        *,
        dry_run: bool = False,
        force: bool = False,
    ) -> dict[str, Any]:
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        time.sleep(0.02 * (30 - int(body["metadata"]["name"].removeprefix("settings-"))) / 30)
        try:
            with self.lock:
                return super().apply_object(resource, body, dry_run=dry_run, force=force)
        finally:
            with self.lock:
                self.in_flight -= 1


def test_dry_runs_are_planned_a_few_at_a_time_in_the_order_of_the_targets() -> None:
    cluster = _SlowDryRuns()
    manifests = [
        _manifest("ConfigMap", f"settings-{i:02d}", "nowhere" if i == 7 else "apps", data={})
        for i in reversed(range(30))
    ]
    planning = _plan(cluster, *manifests)
    assert [o.name for o in planning.objects] == [f"settings-{i:02d}" for i in range(30) if i != 7]
    assert [(f.kind, f.subject) for f in planning.findings] == [
        ("namespace-missing", "ConfigMap/nowhere/settings-07")
    ]
    assert 1 < cluster.most <= DRY_RUNS_AT_ONCE
