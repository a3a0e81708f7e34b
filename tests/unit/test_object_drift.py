"""Object drift: live against the server's dry-run result, scoped to what the manifest sets."""

from __future__ import annotations

import copy
from typing import Any

from reconcile.desired.problems import field_path
from reconcile.diagnostics import Invalid
from reconcile.engine.diff import Action, FieldChange, manifest_drift, object_drift
from reconcile.engine.objects.inventory import inventory_entry, parse_inventory_entry
from reconcile.engine.objects.plan import is_immutable

MANIFEST: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "a", "labels": {"app": "web"}},
    "spec": {
        "replicas": 2,
        "template": {"spec": {"containers": [{"name": "c", "image": "nginx:1"}]}},
    },
}
LIVE: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {
        "name": "web",
        "namespace": "a",
        "labels": {"app": "web"},
        "uid": "u1",
        "resourceVersion": "5",
        "generation": 3,
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "annotations": {"other": "x"},
        "managedFields": [{"manager": "reconcile", "operation": "Apply"}],
    },
    "spec": {
        "replicas": 2,
        "strategy": {"type": "RollingUpdate"},
        "template": {
            "spec": {
                "containers": [{"name": "c", "image": "nginx:1", "imagePullPolicy": "IfNotPresent"}]
            }
        },
    },
    "status": {"replicas": 2},
}


def _result(**changes: Any) -> dict[str, Any]:
    result = copy.deepcopy(LIVE)
    result["metadata"]["resourceVersion"] = "6"
    result["metadata"]["generation"] = 4
    result["status"] = {"replicas": 0}
    for dotted, value in changes.items():
        node = result
        *parents, last = dotted.split(".")
        for part in parents:
            node = node[part]
        node[last] = value
    return result


def test_defaults_status_and_write_metadata_are_never_drift() -> None:
    assert object_drift(MANIFEST, LIVE, _result()) == []


def test_a_changed_field_is_reported_with_before_and_after() -> None:
    [change] = object_drift(MANIFEST, LIVE, _result(**{"spec.replicas": 3}))
    assert change == FieldChange(path=("spec", "replicas"), action=Action.UPDATE, before=2, after=3)
    assert (change.shown_path, change.shown_value) == ("spec.replicas", "3")


def test_a_list_that_changes_length_is_shown_whole() -> None:
    result = _result()
    result["spec"]["template"]["spec"]["containers"].append({"name": "d", "image": "busybox"})
    manifest = copy.deepcopy(MANIFEST)
    manifest["spec"]["template"]["spec"]["containers"].append({"name": "d", "image": "busybox"})
    [change] = object_drift(manifest, LIVE, result)
    assert change.path == ("spec", "template", "spec", "containers")
    assert len(change.after) == 2


def test_what_the_manifest_does_not_set_is_out_of_scope() -> None:
    result = _result()
    result["metadata"]["annotations"] = {"other": "changed-by-a-webhook"}
    assert object_drift(MANIFEST, LIVE, result) == []


def test_a_field_reconcile_owned_and_no_longer_sets_shows_as_removed() -> None:
    live = copy.deepcopy(LIVE)
    live["metadata"]["labels"]["tier"] = "x"
    owned: dict[str, Any] = {"f:metadata": {"f:labels": {"f:app": {}, "f:tier": {}}}}
    [change] = object_drift(MANIFEST, live, _result(), owned=owned)
    assert change.action is Action.REMOVE
    assert (change.shown_path, change.shown_value) == ("metadata.labels.tier", "-")


def test_keys_with_dots_and_slashes_are_bracketed() -> None:
    change = FieldChange(
        path=("metadata", "labels", "app.kubernetes.io/name"), action=Action.ADD, after="web app"
    )
    assert change.shown_path == 'metadata.labels["app.kubernetes.io/name"]'
    assert change.shown_value == '"web app"'


def test_manifest_drift_compares_lists_item_by_item() -> None:
    assert manifest_drift(MANIFEST, LIVE) == []
    manifest = copy.deepcopy(MANIFEST)
    manifest["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:2"
    [change] = manifest_drift(manifest, LIVE)
    assert change.shown_path == "spec.template.spec.containers[0].image"


def test_field_paths_from_api_errors() -> None:
    assert field_path("spec.containers[0].image") == ("spec", "containers", 0, "image")
    assert field_path("metadata.labels") == ("metadata", "labels")
    assert field_path(
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[1]"
    ) == (
        "spec",
        "affinity",
        "nodeAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "nodeSelectorTerms",
        1,
    )


def test_inventory_entries_round_trip() -> None:
    entry = inventory_entry("v1", "Namespace", "", "nfd-lab")
    assert entry == "v1 Namespace - nfd-lab"
    assert parse_inventory_entry(entry) == ("v1", "Namespace", "", "nfd-lab")
    assert parse_inventory_entry("garbage") is None


def test_immutable_errors_are_recognised() -> None:
    assert is_immutable(
        Invalid(
            422,
            "Invalid",
            'Deployment.apps "x" is invalid: spec.selector: Invalid value: {}: field is immutable',
        )
    )
    assert is_immutable(
        Invalid(
            422,
            "Invalid",
            'Pod "p" is invalid: spec: Forbidden: pod updates may not change fields other than ...',
        )
    )
    assert not is_immutable(
        Invalid(422, "Invalid", 'Pod "p" is invalid: spec.containers[0].image: Required value')
    )
