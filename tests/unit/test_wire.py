"""A node's JSON as the API server sends it, read into what a plan compares."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reconcile.kube import wire

# A node as kube-apiserver v1.36 answers a LIST: two writers of labels (the later one
# wins gpu.count), the kubelet's status writer, which touches no label.
NODE: dict[str, Any] = {
    "metadata": {
        "name": "gpu-1",
        "uid": "ed87c286-7e29-4e64-9e7a-fba8d668e468",
        "resourceVersion": "10219",
        "labels": {"nvidia.com/gpu.count": "8", "kubernetes.io/os": "linux"},
        "annotations": {"reconcile.dev/managed-labels": "nvidia.com/gpu.count"},
        "managedFields": [
            {
                "manager": "kubelet",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2026-12-02T05:20:20Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:labels": {".": {}, "f:kubernetes.io/os": {}}},
                    "f:status": {"f:conditions": {".": {}}},
                },
            },
            {
                "manager": "gpu-feature-discovery",
                "operation": "Update",
                "time": "2026-12-02T05:20:28Z",
                "fieldsV1": {"f:metadata": {"f:labels": {"f:nvidia.com/gpu.count": {}}}},
            },
            {
                "manager": "kubelet",
                "operation": "Update",
                "subresource": "status",
                "time": "2026-12-02T05:21:00Z",
                "fieldsV1": {"f:status": {"f:images": {}, "f:nodeInfo": {}}},
            },
        ],
    },
    "spec": {"taints": [{"key": "gpu", "value": "a100", "effect": "NoSchedule"}]},
    "status": {
        "conditions": [
            {"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": "True", "reason": "KubeletReady"},
        ],
        "images": [{"names": ["registry.example/driver:550"], "sizeBytes": 1}],
    },
}


def test_a_node_is_read_into_what_the_plan_compares() -> None:
    node = wire.node(json.dumps(NODE).encode())

    assert node.name == "gpu-1"
    assert node.resource_version == "10219"
    assert node.labels == {"nvidia.com/gpu.count": "8", "kubernetes.io/os": "linux"}
    assert node.annotations == {"reconcile.dev/managed-labels": "nvidia.com/gpu.count"}
    assert node.taints == ({"key": "gpu", "value": "a100", "effect": "NoSchedule"},)
    assert node.ready
    assert not node.unschedulable


def test_the_writer_of_each_label_comes_from_the_managed_fields() -> None:
    node = wire.node(json.dumps(NODE).encode())

    assert dict(node.label_managers) == {
        "kubernetes.io/os": "kubelet",
        "nvidia.com/gpu.count": "gpu-feature-discovery",
    }


def test_a_page_of_a_list_carries_its_continue_token_and_version() -> None:
    second = json.loads(json.dumps(NODE))
    second["metadata"].update(name="gpu-2", managedFields=None)
    second["status"] = {"conditions": [{"type": "Ready", "status": "Unknown"}]}
    second["spec"] = {"unschedulable": True}
    body = {
        "kind": "NodeList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "10300", "continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ"},
        "items": [NODE, second],
    }

    data = json.dumps(body).encode()
    nodes, head = wire.page_nodes(data), wire.page_head(data)

    assert [n.name for n in nodes] == ["gpu-1", "gpu-2"]
    assert head.continue_ == "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ"
    assert head.resource_version == "10300"
    assert not nodes[1].ready and nodes[1].unschedulable
    assert dict(nodes[1].label_managers) == {}


def test_the_head_of_a_page_is_its_list_metadata_and_its_items_are_only_checked() -> None:
    body = b'{"metadata":{"resourceVersion":"10300","continue":"abc"},"items":[{"x":[1,{}]}]}'

    head = wire.page_head(body)

    assert (head.continue_, head.resource_version) == ("abc", "10300")
    assert wire.page_head(b'{"metadata":{"resourceVersion":"7"},"items":null}').continue_ == ""
    with pytest.raises(ValueError):
        wire.page_head(b'{"metadata":{},"items":[1,')


def test_the_last_page_has_no_token_and_an_empty_list_no_items() -> None:
    data = b'{"kind":"NodeList","metadata":{"resourceVersion":"7"},"items":null}'
    head = wire.page_head(data)

    assert (wire.page_nodes(data), head.continue_, head.resource_version) == ([], "", "7")


def test_the_dict_form_of_a_watch_event_reads_the_same() -> None:
    assert wire.node_from_json(NODE) == wire.node(json.dumps(NODE).encode())


@pytest.mark.parametrize(
    "body",
    [b"not json", b'{"items": {"a": 1}}', b'{"items": [{"metadata": {"labels": {"a": 1}}}]}'],
)
def test_an_answer_not_in_the_shape_of_a_node_list_is_a_value_error(body: bytes) -> None:
    with pytest.raises(ValueError):
        wire.page_nodes(body)


def test_labels_that_repeat_across_nodes_are_held_once() -> None:
    key = "feature.node.kubernetes.io/kernel-version.full"  # longer than msgspec shares
    nodes = [
        {
            "metadata": {
                "name": f"gpu-{i}",
                "labels": {key: "5.15.0-119-generic"},
                "managedFields": [
                    {
                        "manager": "nfd-master",
                        "fieldsV1": {"f:metadata": {"f:labels": {f"f:{key}": {}}}},
                    }
                ],
            }
        }
        for i in range(2)
    ]
    body = json.dumps({"metadata": {}, "items": nodes}).encode()

    first, second = wire.page_nodes(body)

    [(key_1, value_1)] = first.labels.items()
    [(key_2, value_2)] = second.labels.items()
    assert key_1 is key_2 and value_1 is value_2
    assert first.label_managers == second.label_managers == {key: "nfd-master"}


FEATURE: dict[str, Any] = {
    "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
    "kind": "NodeFeature",
    "metadata": {
        "name": "gpu-1",
        "namespace": "node-feature-discovery",
        "uid": "0f6c2a6e-3a8b-4bb0-9d55-5b2b1f0e7c11",
        "resourceVersion": "4411",
        "labels": {"nfd.node.kubernetes.io/node-name": "gpu-1"},
        "managedFields": [{"manager": "nfd-worker", "fieldsV1": {"f:spec": {"f:features": {}}}}],
    },
    "spec": {
        "features": {
            "attributes": {"kernel.version": {"elements": {"major": "5", "minor": "15"}}},
            "instances": {"pci.device": {"elements": [{"attributes": {"vendor": "10de"}}]}},
        },
        "labels": {"example.com/rack": "r1"},
    },
    "status": {"ignored": True},
}


def test_a_page_of_specs_keeps_the_spec_and_the_metadata_that_names_and_selects_it() -> None:
    page = {"kind": "NodeFeatureList", "metadata": {}, "items": [FEATURE, {"metadata": {}}]}
    first, bare = wire.page_specs(json.dumps(page).encode())
    assert first == {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": {
            "name": "gpu-1",
            "namespace": "node-feature-discovery",
            "labels": {"nfd.node.kubernetes.io/node-name": "gpu-1"},
            "resourceVersion": "4411",
        },
        "spec": FEATURE["spec"],
    }
    assert bare == {"apiVersion": "", "kind": "", "metadata": {"name": "", "resourceVersion": ""}}


@pytest.mark.parametrize(
    "body", [b'{"items": [{"metadata": {"labels": {"a": 1}}}]}', b'{"items": {}}', b"[1"]
)
def test_a_page_not_in_the_shape_of_a_list_of_objects_is_a_value_error(body: bytes) -> None:
    with pytest.raises(ValueError):
        wire.page_specs(body)
