"""unchanged_by_apply: True only when a server-side apply could change nothing."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from reconcile.engine.objects.unchanged import unchanged_by_apply

CONFIG: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {
        "name": "web",
        "namespace": "ml",
        "creationTimestamp": None,
        "labels": {"app": "web"},
    },
    "spec": {
        "replicas": 2,
        "paused": False,
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "web",
                        "image": "web:1",
                        "args": ["--port", "80"],
                        "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    }
                ],
                "tolerations": [{"key": "gpu", "operator": "Exists"}],
            }
        },
        "finalizerNames": ["a", "b"],
    },
}
# As the API server records the apply of CONFIG (labels and lists merged per their types).
FIELDS: dict[str, Any] = {
    "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
    "f:spec": {
        "f:replicas": {},
        "f:paused": {},
        "f:template": {
            "f:spec": {
                "f:containers": {
                    'k:{"name":"web"}': {
                        ".": {},
                        "f:name": {},
                        "f:image": {},
                        "f:args": {},
                        "f:ports": {
                            'k:{"containerPort":80,"protocol":"TCP"}': {
                                ".": {},
                                "f:containerPort": {},
                                "f:protocol": {},
                            }
                        },
                    }
                },
                "f:tolerations": {},
            }
        },
        "f:finalizerNames": {'v:"a"': {}, 'v:"b"': {}},
    },
}


def live_of(config: dict[str, Any], fields: dict[str, Any], **entry: Any) -> dict[str, Any]:
    """`config` as stored: defaulted, with server fields, and reconcile's apply entry."""
    live = copy.deepcopy(config)
    live["metadata"].update(
        creationTimestamp="2026-12-07T00:00:00Z", uid="u-1", resourceVersion="7", generation=3
    )
    container = live["spec"]["template"]["spec"]["containers"][0]
    container["imagePullPolicy"] = "IfNotPresent"
    live["spec"]["template"]["spec"]["tolerations"][0]["effect"] = ""
    live["spec"]["progressDeadlineSeconds"] = 600
    live["status"] = {"replicas": 2}
    live["metadata"]["managedFields"] = [
        {
            "manager": "kube-controller-manager",
            "operation": "Update",
            "apiVersion": "apps/v1",
            "subresource": "status",
            "fieldsV1": {"f:status": {"f:replicas": {}}},
        },
        {
            "manager": "reconcile",
            "operation": "Apply",
            "apiVersion": "apps/v1",
            "fieldsV1": fields,
            **entry,
        },
    ]
    return live


def test_an_applied_configuration_with_defaults_and_server_fields_is_unchanged() -> None:
    assert unchanged_by_apply(CONFIG, live_of(CONFIG, FIELDS))


def edited(path: tuple[Any, ...], value: Any, tree: dict[str, Any] = CONFIG) -> dict[str, Any]:
    copied = copy.deepcopy(tree)
    node: Any = copied
    for part in path[:-1]:
        node = node[part]
    if value is DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return copied


DELETE = object()
CONTAINER = ("spec", "template", "spec", "containers", 0)


@pytest.mark.parametrize(
    ("config", "why"),
    [
        (edited(("spec", "replicas"), 3), "a value differs"),
        (edited(("spec", "replicas"), 2.0), "2.0 is not 2"),
        (edited(("spec", "paused"), 0), "0 is not false"),
        (edited(("spec", "replicas"), DELETE), "a field reconcile owns is dropped"),
        (edited(("spec", "minReadySeconds"), 0), "a field reconcile does not own is set"),
        (edited(("metadata", "labels", "tier"), "gold"), "a label is added"),
        (edited((*CONTAINER, "args"), ["--port"]), "an atomic list shrinks"),
        (edited((*CONTAINER, "ports", 0), {"containerPort": 80}), "a key field left to default"),
        (edited(("spec", "finalizerNames"), ["a", "c"]), "a set member differs"),
        (edited(("spec", "finalizerNames"), ["a"]), "a set member is dropped"),
        (edited(("spec", "template", "spec", "tolerations", 0, "value"), "x"), "atomic item"),
        (edited(("apiVersion",), "apps/v1beta2"), "another version"),
        (edited(("status",), {"replicas": 2}), "status is not applied here"),
    ],
)
def test_any_change_goes_to_the_server(config: dict[str, Any], why: str) -> None:
    assert not unchanged_by_apply(config, live_of(CONFIG, FIELDS)), why


def test_a_live_value_moved_under_reconciles_fields_is_a_change() -> None:
    live = live_of(CONFIG, FIELDS)
    live["spec"]["template"]["spec"]["containers"][0]["args"] = ["--port", "81"]
    assert not unchanged_by_apply(CONFIG, live)
    live = live_of(CONFIG, FIELDS)
    live["spec"]["template"]["spec"]["containers"].append({"name": "side", "image": "s:1"})
    assert not unchanged_by_apply(CONFIG, live)


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ({"operation": "Update"}, "an update entry is not the apply's"),
        ({"subresource": "status"}, "a subresource's entry"),
        ({"manager": "kubectl"}, "another manager's"),
        ({"apiVersion": "apps/v1beta1"}, "recorded at another version"),
        ({"fieldsV1": None}, "no field set"),
    ],
)
def test_only_reconciles_own_apply_entry_counts(entry: dict[str, Any], why: str) -> None:
    assert not unchanged_by_apply(CONFIG, live_of(CONFIG, FIELDS, **entry)), why


def test_a_field_set_wider_or_narrower_than_the_configuration_is_a_change() -> None:
    wider = copy.deepcopy(FIELDS)
    wider["f:spec"]["f:minReadySeconds"] = {}
    assert not unchanged_by_apply(CONFIG, live_of(CONFIG, wider))
    narrower = copy.deepcopy(FIELDS)
    del narrower["f:spec"]["f:template"]["f:spec"]["f:tolerations"]
    assert not unchanged_by_apply(CONFIG, live_of(CONFIG, narrower))
    indexed = copy.deepcopy(FIELDS)
    indexed["f:spec"]["f:finalizerNames"] = {"i:0": {}, "i:1": {}}
    assert not unchanged_by_apply(CONFIG, live_of(CONFIG, indexed))
