"""The sandbox through the official client, bullet by bullet of what it must be faithful to.

These run against a real cluster too (RECONCILE_TEST_KUBECONFIG): they are how the
sandbox's answers are checked against kube-apiserver's.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.conftest import ClusterFactory
from tests.support import TestCluster, lab_objects, wait_for

LAB_VALUE_MESSAGE = (
    'Node "lab-node-1" is invalid: metadata.labels: Invalid value: "NVIDIA A100-SXM4-40GB": a valid label '
    "must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation "
    "is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


@pytest.fixture
def core(lab: TestCluster) -> Any:
    return client.CoreV1Api(lab.api_client)


@pytest.fixture
def driver_lab(make_cluster: ClusterFactory) -> TestCluster:
    return make_cluster(lab_objects("driver-lab"))


def status_of(error: ApiException) -> dict[str, Any]:
    return dict(json.loads(error.body or "{}"))


def fails(call: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as raised:
        call()
    status = status_of(raised.value)
    assert status["code"] == raised.value.status
    return status


# --- discovery -----------------------------------------------------------------------------


def test_discovery_documents(lab: TestCluster) -> None:
    assert lab.raw("GET", "/version")[1]["major"] == "1"
    assert lab.raw("GET", "/api")[1]["versions"] == ["v1"]
    groups = {g["name"] for g in lab.raw("GET", "/apis")[1]["groups"]}
    assert {"apps", "policy"} <= groups
    resources = {r["name"]: r for r in lab.raw("GET", "/api/v1")[1]["resources"]}
    assert resources["nodes"]["namespaced"] is False
    assert resources["nodes"]["shortNames"] == ["no"]
    assert resources["pods/eviction"]["group"] == "policy"
    assert resources["pods/eviction"]["kind"] == "Eviction"
    assert resources["pods/eviction"]["verbs"] == ["create"]
    assert "nodes/status" in resources
    policy = {r["name"] for r in lab.raw("GET", "/apis/policy/v1")[1]["resources"]}
    assert {"poddisruptionbudgets", "poddisruptionbudgets/status"} <= policy


# --- nodes ---------------------------------------------------------------------------------


def test_node_get_and_list(core: Any) -> None:
    node = core.read_node("lab-node-1")
    assert node.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-A10"
    assert node.metadata.uid
    assert node.metadata.creation_timestamp is not None
    names = [n.metadata.name for n in core.list_node().items]
    assert names == ["lab-node-0", "lab-node-1", "lab-node-2"]


def test_node_list_by_label_selector(core: Any) -> None:
    gpu = core.list_node(label_selector="nvidia.com/gpu.present=true")
    assert [n.metadata.name for n in gpu.items] == ["lab-node-0", "lab-node-1"]
    no_gpu = core.list_node(label_selector="!nvidia.com/gpu.present")
    assert [n.metadata.name for n in no_gpu.items] == ["lab-node-2"]
    many = core.list_node(label_selector="nvidia.com/gpu.count>4")
    assert [n.metadata.name for n in many.items] == ["lab-node-1"]  # the drifted 9


def test_node_list_by_field_selector(core: Any) -> None:
    found = core.list_node(field_selector="metadata.name=lab-node-2")
    assert [n.metadata.name for n in found.items] == ["lab-node-2"]


def test_bad_label_selector_is_a_400_with_the_parsers_message(core: Any) -> None:
    status = fails(lambda: core.list_node(label_selector="a in (b"))
    assert (status["code"], status["reason"]) == (400, "BadRequest")
    assert status["message"] == "unable to parse requirement: found '', expected: ',' or ')'"


def test_pagination_with_limit_and_continue(core: Any) -> None:
    first = core.list_node(limit=1)
    assert [n.metadata.name for n in first.items] == ["lab-node-0"]
    assert first.metadata._continue
    assert first.metadata.remaining_item_count == 2
    second = core.list_node(limit=2, _continue=first.metadata._continue)
    assert [n.metadata.name for n in second.items] == ["lab-node-1", "lab-node-2"]
    assert not second.metadata._continue


def test_bad_continue_token_is_a_400(core: Any) -> None:
    assert fails(lambda: core.list_node(limit=1, _continue="not-a-token"))["code"] in (400, 410)


def test_node_create_delete_and_already_exists(core: Any) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "lab-node-9", "labels": {"a.io/b": "c"}},
    }
    created = core.create_node(body)
    assert created.metadata.name == "lab-node-9"
    status = fails(lambda: core.create_node(body))
    assert (status["code"], status["reason"], status["message"]) == (
        409,
        "AlreadyExists",
        'nodes "lab-node-9" already exists',
    )
    core.delete_node("lab-node-9")
    status = fails(lambda: core.read_node("lab-node-9"))
    assert (status["code"], status["reason"], status["message"]) == (
        404,
        "NotFound",
        'nodes "lab-node-9" not found',
    )
    assert status["details"] == {"name": "lab-node-9", "kind": "nodes"}


def test_node_created_without_ready_condition_gets_the_not_ready_taint(
    core: Any,
) -> None:
    created = core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "fresh"}})
    assert [(t.key, t.effect) for t in created.spec.taints] == [
        ("node.kubernetes.io/not-ready", "NoSchedule")
    ]


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/merge-patch+json", {"metadata": {"labels": {"nvidia.com/gpu.count": "2"}}}),
        (
            "application/strategic-merge-patch+json",
            {"metadata": {"labels": {"nvidia.com/gpu.count": "2"}}},
        ),
        (
            "application/json-patch+json",
            [{"op": "replace", "path": "/metadata/labels/nvidia.com~1gpu.count", "value": "2"}],
        ),
    ],
)
def test_node_patch_types(core: Any, content_type: str, body: Any) -> None:
    before = core.read_node("lab-node-1").metadata.resource_version
    patched = core.patch_node("lab-node-1", body, _content_type=content_type)
    assert patched.metadata.labels["nvidia.com/gpu.count"] == "2"
    assert int(patched.metadata.resource_version) > int(before)


def test_merge_patch_null_deletes_a_label(core: Any) -> None:
    patched = core.patch_node(
        "lab-node-1",
        {"metadata": {"labels": {"nvidia.com/gpu.deploy.driver": None}}},
        _content_type="application/merge-patch+json",
    )
    assert "nvidia.com/gpu.deploy.driver" not in patched.metadata.labels


def test_server_side_apply_on_a_node_records_the_field_manager(core: Any) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "lab-node-2", "labels": {"example.com/rack": "r1"}},
    }
    applied = core.patch_node(
        "lab-node-2", body, field_manager="rack-tool", _content_type="application/apply-patch+yaml"
    )
    assert applied.metadata.labels["example.com/rack"] == "r1"
    managers = {m.manager: m.operation for m in applied.metadata.managed_fields}
    assert managers["rack-tool"] == "Apply"


def test_apply_without_field_manager_is_refused(lab: TestCluster) -> None:
    status, body = lab.raw(
        "PATCH",
        "/api/v1/nodes/lab-node-2",
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "lab-node-2"}},
        "application/apply-patch+yaml",
    )
    assert status == 422
    assert (
        body["message"]
        == 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch'
    )


def test_unknown_patch_type_is_a_415(lab: TestCluster) -> None:
    status, body = lab.raw("PATCH", "/api/v1/nodes/lab-node-2", "{}", "application/xml")
    assert (status, body["reason"]) == (415, "UnsupportedMediaType")


def test_invalid_label_value_is_the_real_422(core: Any, lab: TestCluster) -> None:
    before = core.read_node("lab-node-1")
    status = fails(
        lambda: core.patch_node(
            "lab-node-1",
            {"metadata": {"labels": {"nvidia.com/gpu.product": "NVIDIA A100-SXM4-40GB"}}},
        )
    )
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert status["message"] == LAB_VALUE_MESSAGE
    [cause] = status["details"]["causes"]
    assert cause["field"] == "metadata.labels"
    assert cause["reason"] == "FieldValueInvalid"
    assert status["details"]["kind"] == "Node"
    after = core.read_node("lab-node-1")
    assert after.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-A10"
    assert after.metadata.resource_version == before.metadata.resource_version


def test_invalid_label_key_and_too_long_value(core: Any) -> None:
    status = fails(
        lambda: core.patch_node(
            "lab-node-1", {"metadata": {"labels": {"nvidia.com/gpu product": "x"}}}
        )
    )
    assert status["message"].startswith(
        'Node "lab-node-1" is invalid: metadata.labels: Invalid value: "nvidia.com/gpu product": name part must consist of'
    )
    long_value = "a" * 64
    status = fails(
        lambda: core.patch_node("lab-node-1", {"metadata": {"labels": {"x.io/y": long_value}}})
    )
    assert status["message"] == (
        f'Node "lab-node-1" is invalid: metadata.labels: Invalid value: "{long_value}": must be no more than 63 bytes'
    )


def test_stale_resource_version_in_a_patch_is_a_409(core: Any) -> None:
    node = core.read_node("lab-node-1")
    core.patch_node("lab-node-1", {"metadata": {"labels": {"x.io/y": "1"}}})
    status = fails(
        lambda: core.patch_node(
            "lab-node-1",
            {
                "metadata": {
                    "resourceVersion": node.metadata.resource_version,
                    "labels": {"x.io/y": "2"},
                }
            },
            _content_type="application/merge-patch+json",
        )
    )
    assert (status["code"], status["reason"]) == (409, "Conflict")
    assert status["message"] == (
        'Operation cannot be fulfilled on nodes "lab-node-1": the object has been modified; please apply your '
        "changes to the latest version and try again"
    )


def test_stale_resource_version_in_an_update_is_a_409(core: Any) -> None:
    node = core.read_node("lab-node-2")
    core.patch_node("lab-node-2", {"metadata": {"labels": {"x.io/y": "1"}}})
    node.metadata.labels["x.io/y"] = "2"
    assert fails(lambda: core.replace_node("lab-node-2", node))["reason"] == "Conflict"


def test_resource_version_increases_on_every_write_and_not_on_a_no_op(
    core: Any,
) -> None:
    versions = [int(core.read_node("lab-node-0").metadata.resource_version)]
    for value in ("1", "2"):
        versions.append(
            int(
                core.patch_node(
                    "lab-node-0", {"metadata": {"labels": {"x.io/y": value}}}
                ).metadata.resource_version
            )
        )
    assert versions == sorted(versions) and len(set(versions)) == 3
    same = core.patch_node("lab-node-0", {"metadata": {"labels": {"x.io/y": "2"}}})
    assert int(same.metadata.resource_version) == versions[-1]


def test_dry_run_returns_the_result_and_stores_nothing(core: Any) -> None:
    before = core.read_node("lab-node-0")
    preview = core.patch_node(
        "lab-node-0", {"metadata": {"labels": {"x.io/y": "dry"}}}, dry_run="All"
    )
    assert preview.metadata.labels["x.io/y"] == "dry"
    after = core.read_node("lab-node-0")
    assert "x.io/y" not in after.metadata.labels
    assert after.metadata.resource_version == before.metadata.resource_version


def test_node_status_subresource_changes_only_status(core: Any) -> None:
    node = core.read_node("lab-node-0")
    node.status.conditions[0].status = "False"
    node.metadata.labels["ignored.io/label"] = "x"
    updated = core.replace_node_status("lab-node-0", node)
    assert updated.status.conditions[0].status == "False"
    assert "ignored.io/label" not in updated.metadata.labels


def test_cordon_and_uncordon(core: Any) -> None:
    cordoned = core.patch_node("lab-node-0", {"spec": {"unschedulable": True}})
    assert cordoned.spec.unschedulable is True
    assert [
        n.metadata.name for n in core.list_node(field_selector="spec.unschedulable=true").items
    ] == ["lab-node-0"]
    uncordoned = core.patch_node("lab-node-0", {"spec": {"unschedulable": None}})
    assert not uncordoned.spec.unschedulable


# --- namespaced kinds ----------------------------------------------------------------------

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p1", "labels": {"app": "demo"}},
    "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
}


def test_pod_create_get_list_patch_delete_and_defaults(core: Any) -> None:
    created = core.create_namespaced_pod("nfd-lab", POD)
    assert created.metadata.namespace == "nfd-lab"
    assert created.status.phase == "Pending"
    assert created.spec.restart_policy == "Always"
    assert created.spec.containers[0].image_pull_policy == "IfNotPresent"
    assert created.metadata.generation == 1
    listed = core.list_namespaced_pod("nfd-lab", label_selector="app=demo")
    assert [p.metadata.name for p in listed.items] == ["p1"]
    patched = core.patch_namespaced_pod("p1", "nfd-lab", {"metadata": {"labels": {"tier": "x"}}})
    assert patched.metadata.labels == {"app": "demo", "tier": "x"}
    core.delete_namespaced_pod("p1", "nfd-lab")
    assert (
        fails(lambda: core.read_namespaced_pod("p1", "nfd-lab"))["message"] == 'pods "p1" not found'
    )


def test_pod_in_a_missing_namespace_is_a_404(core: Any) -> None:
    status = fails(lambda: core.create_namespaced_pod("nowhere", POD))
    assert (status["code"], status["message"]) == (404, 'namespaces "nowhere" not found')


def test_pods_by_node_field_selector(core: Any) -> None:
    found = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=lab-node-1")
    names = [p.metadata.name for p in found.items]
    assert names == ["trainer-5c8f7d6b9c-q9m4x", "or-job", "train-a"]  # by namespace, then name
    pending = core.list_namespaced_pod("gpu-drv", field_selector="status.phase=Pending")
    assert [p.metadata.name for p in pending.items] == ["cuda13-job", "trainer-5c8f7d6b9c-z5r1v"]


def test_pod_status_subresource(core: Any) -> None:
    pod = core.read_namespaced_pod("train-a", "nfd-lab")
    assert pod.status.phase == "Running"
    pod.status.phase = "Succeeded"
    assert core.replace_namespaced_pod_status("train-a", "nfd-lab", pod).status.phase == "Succeeded"


def test_pod_required_fields(core: Any) -> None:
    bad = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p2"},
        "spec": {"containers": [{"name": "c"}]},
    }
    status = fails(lambda: core.create_namespaced_pod("nfd-lab", bad))
    assert status["message"] == 'Pod "p2" is invalid: spec.containers[0].image: Required value'
    nameless = {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": POD["spec"]}
    status = fails(lambda: core.create_namespaced_pod("nfd-lab", nameless))
    assert (
        status["message"]
        == 'Pod "" is invalid: metadata.name: Required value: name or generateName is required'
    )


AFFINITY_PATH = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def _pod_with(requirement: dict[str, Any] | None, terms: list[Any] | None = None) -> dict[str, Any]:
    pod = json.loads(json.dumps(POD))
    pod["metadata"]["name"] = "aff"
    selector_terms = terms if terms is not None else [{"matchExpressions": [requirement]}]
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": selector_terms}
        }
    }
    return dict(pod)


@pytest.mark.parametrize(
    ("requirement", "terms", "message"),
    [
        (
            {"key": "nvidia.com/gpu.present", "operator": "Exists", "values": ["true"]},
            None,
            f"{AFFINITY_PATH}.nodeSelectorTerms[0].matchExpressions[0].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
        ),
        (
            {"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["1", "2"]},
            None,
            f"{AFFINITY_PATH}.nodeSelectorTerms[0].matchExpressions[0].values: Required value: must be specified single value when `operator` is 'Lt' or 'Gt'",
        ),
        (
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": []},
            None,
            f"{AFFINITY_PATH}.nodeSelectorTerms[0].matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
        ),
        (
            None,
            [],
            f"{AFFINITY_PATH}.nodeSelectorTerms: Required value: must have at least one node selector term",
        ),
        (
            {"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["-5"]},
            None,
            f'{AFFINITY_PATH}.nodeSelectorTerms[0].matchExpressions[0].values[0]: Invalid value: "-5": a valid label must be',
        ),
        (
            None,
            [{"matchFields": [{"key": "metadata.labels", "operator": "In", "values": ["x"]}]}],
            f'{AFFINITY_PATH}.nodeSelectorTerms[0].matchFields[0].key: Invalid value: "metadata.labels": not a valid field selector key',
        ),
        (
            None,
            [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}],
            f"{AFFINITY_PATH}.nodeSelectorTerms[0].matchFields[0].values: Required value: must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
        ),
    ],
)
def test_node_affinity_validation(core: Any, requirement: Any, terms: Any, message: str) -> None:
    status = fails(lambda: core.create_namespaced_pod("nfd-lab", _pod_with(requirement, terms)))
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert status["message"].startswith(f'Pod "aff" is invalid: {message}')


@pytest.mark.parametrize(
    "terms", [[{"matchExpressions": [{"key": "n", "operator": "Gt", "values": ["abc"]}]}], [{}]]
)
def test_never_schedulable_affinity_is_admitted_as_upstream(core: Any, terms: Any) -> None:
    assert core.create_namespaced_pod("nfd-lab", _pod_with(None, terms)).metadata.name == "aff"


def test_deployment_and_pdb_lifecycle(lab: TestCluster) -> None:
    apps: Any = client.AppsV1Api(lab.api_client)
    policy: Any = client.PolicyV1Api(lab.api_client)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": POD["spec"]},
        },
    }
    created = apps.create_namespaced_deployment("nfd-lab", deployment)
    assert created.metadata.generation == 1
    assert created.spec.strategy.type == "RollingUpdate"
    scaled = apps.patch_namespaced_deployment("web", "nfd-lab", {"spec": {"replicas": 3}})
    assert scaled.metadata.generation == 2
    relabelled = apps.patch_namespaced_deployment(
        "web", "nfd-lab", {"metadata": {"labels": {"x": "y"}}}
    )
    assert relabelled.metadata.generation == 2  # metadata is not spec
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web-pdb"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    }
    assert policy.create_namespaced_pod_disruption_budget("nfd-lab", pdb).metadata.name == "web-pdb"
    assert [
        p.metadata.name for p in policy.list_namespaced_pod_disruption_budget("nfd-lab").items
    ] == ["web-pdb"]
    policy.delete_namespaced_pod_disruption_budget("web-pdb", "nfd-lab")
    apps.delete_namespaced_deployment("web", "nfd-lab")
    assert apps.list_namespaced_deployment("nfd-lab").items == []


def test_deployment_selector_must_match_template(lab: TestCluster) -> None:
    apps: Any = client.AppsV1Api(lab.api_client)
    bad = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "other"}}, "spec": POD["spec"]},
        },
    }
    status = fails(lambda: apps.create_namespaced_deployment("nfd-lab", bad))
    assert status["message"] == (
        'Deployment.apps "web" is invalid: spec.template.metadata.labels: Invalid value: '
        'map[string]string{"app":"other"}: `selector` does not match template `labels`'
    )


def test_namespace_server_side_apply_and_dry_run_create(lab: TestCluster) -> None:
    core: Any = client.CoreV1Api(lab.api_client)
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
    preview = core.create_namespace(body, dry_run="All")
    assert preview.metadata.name == "team-a"
    assert fails(lambda: core.read_namespace("team-a"))["code"] == 404
    applied = core.patch_namespace(
        "team-a", body, field_manager="reconcile", _content_type="application/apply-patch+yaml"
    )
    assert applied.metadata.labels["kubernetes.io/metadata.name"] == "team-a"
    assert applied.status.phase == "Active"


def test_server_side_apply_conflict_names_the_other_manager(lab: TestCluster) -> None:
    apps: Any = client.AppsV1Api(lab.api_client)
    manifest: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "nfd-lab"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": POD["spec"]},
        },
    }
    apps.patch_namespaced_deployment(
        "web",
        "nfd-lab",
        manifest,
        field_manager="reconcile",
        _content_type="application/apply-patch+yaml",
    )
    apps.patch_namespaced_deployment(
        "web", "nfd-lab", {"spec": {"replicas": 5}}, field_manager="kubectl-scale"
    )
    manifest["spec"]["replicas"] = 3
    status = fails(
        lambda: apps.patch_namespaced_deployment(
            "web",
            "nfd-lab",
            manifest,
            field_manager="reconcile",
            _content_type="application/apply-patch+yaml",
        )
    )
    assert (status["code"], status["reason"]) == (409, "Conflict")
    assert status["message"] == (
        'Apply failed with 1 conflict: conflict with "kubectl-scale" using apps/v1: .spec.replicas'
    )
    assert (
        status["details"]["causes"][0]["message"] == 'conflict with "kubectl-scale" using apps/v1'
    )

    assert status["details"]["causes"][0]["field"] == ".spec.replicas"
    forced = apps.patch_namespaced_deployment(
        "web",
        "nfd-lab",
        manifest,
        field_manager="reconcile",
        force=True,
        _content_type="application/apply-patch+yaml",
    )
    assert forced.spec.replicas == 3


def test_applying_the_same_manifest_twice_changes_nothing(lab: TestCluster) -> None:
    apps: Any = client.AppsV1Api(lab.api_client)
    manifest: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "nfd-lab"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": POD["spec"]},
        },
    }
    first = apps.patch_namespaced_deployment(
        "web",
        "nfd-lab",
        manifest,
        field_manager="reconcile",
        _content_type="application/apply-patch+yaml",
    )
    second = apps.patch_namespaced_deployment(
        "web",
        "nfd-lab",
        manifest,
        field_manager="reconcile",
        _content_type="application/apply-patch+yaml",
    )
    assert second.metadata.resource_version == first.metadata.resource_version


def test_apply_removes_fields_it_no_longer_sets(lab: TestCluster) -> None:
    core: Any = client.CoreV1Api(lab.api_client)
    manifest: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team-b", "labels": {"a.io/x": "1", "a.io/y": "2"}},
    }
    core.patch_namespace(
        "team-b", manifest, field_manager="reconcile", _content_type="application/apply-patch+yaml"
    )
    del manifest["metadata"]["labels"]["a.io/y"]
    applied = core.patch_namespace(
        "team-b", manifest, field_manager="reconcile", _content_type="application/apply-patch+yaml"
    )
    assert "a.io/y" not in applied.metadata.labels
    assert applied.metadata.labels["a.io/x"] == "1"


# --- eviction and budgets ------------------------------------------------------------------


def _trainer_pods(core: Any) -> Iterator[Any]:
    return iter(core.list_namespaced_pod("gpu-drv", label_selector="app=trainer").items)


def test_pdb_status_is_computed_from_ready_pods(driver_lab: TestCluster) -> None:
    policy: Any = client.PolicyV1Api(driver_lab.api_client)
    pdb = policy.read_namespaced_pod_disruption_budget("trainer-pdb", "gpu-drv")
    assert (
        pdb.status.current_healthy,
        pdb.status.desired_healthy,
        pdb.status.disruptions_allowed,
        pdb.status.expected_pods,
    ) == (4, 4, 0, 4)


def test_eviction_blocked_by_the_budget_is_a_429_with_the_real_message(
    driver_lab: TestCluster,
) -> None:
    core: Any = client.CoreV1Api(driver_lab.api_client)
    pod = next(p for p in _trainer_pods(core) if p.spec.node_name == "lab-node-1")
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod.metadata.name, "namespace": "gpu-drv"},
    }
    status = fails(
        lambda: core.create_namespaced_pod_eviction(pod.metadata.name, "gpu-drv", eviction)
    )
    assert (status["code"], status["reason"]) == (429, "TooManyRequests")
    assert status["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert status["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget trainer-pdb needs 4 healthy pods and has 4 currently",
        }
    ]
    assert core.read_namespaced_pod(pod.metadata.name, "gpu-drv").metadata.name == pod.metadata.name


def test_eviction_allowed_once_the_budget_has_room(driver_lab: TestCluster) -> None:
    core: Any = client.CoreV1Api(driver_lab.api_client)
    policy: Any = client.PolicyV1Api(driver_lab.api_client)
    policy.patch_namespaced_pod_disruption_budget(
        "trainer-pdb", "gpu-drv", {"spec": {"minAvailable": 3}}
    )
    assert (
        policy.read_namespaced_pod_disruption_budget(
            "trainer-pdb", "gpu-drv"
        ).status.disruptions_allowed
        == 1
    )
    pod = next(p for p in _trainer_pods(core) if p.spec.node_name == "lab-node-1")
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod.metadata.name, "namespace": "gpu-drv"},
    }
    code, body = driver_lab.raw(
        "POST", f"/api/v1/namespaces/gpu-drv/pods/{pod.metadata.name}/eviction", eviction
    )
    assert (code, body["status"]) == (201, "Success")
    # As kube-apiserver: a bound pod is Terminating until its kubelet confirms, then gone.
    terminating = core.read_namespaced_pod(pod.metadata.name, "gpu-drv")
    assert terminating.metadata.deletion_timestamp is not None
    wait_for(
        lambda: (
            driver_lab.raw("GET", f"/api/v1/namespaces/gpu-drv/pods/{pod.metadata.name}")[0] == 404
        ),
        what="the evicted pod to go",
    )
    after = policy.read_namespaced_pod_disruption_budget("trainer-pdb", "gpu-drv")
    assert (after.status.current_healthy, after.status.disruptions_allowed) == (3, 0)


def test_pod_under_two_budgets_cannot_be_evicted(driver_lab: TestCluster) -> None:
    policy: Any = client.PolicyV1Api(driver_lab.api_client)
    policy.create_namespaced_pod_disruption_budget(
        "gpu-drv",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "second"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "trainer"}}},
        },
    )
    core: Any = client.CoreV1Api(driver_lab.api_client)
    pod = next(_trainer_pods(core))
    code, body = driver_lab.raw(
        "POST",
        f"/api/v1/namespaces/gpu-drv/pods/{pod.metadata.name}/eviction",
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod.metadata.name}},
    )
    assert code == 500
    assert (
        body["message"]
        == "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    )


# --- what is not implemented -----------------------------------------------------------------


def test_unknown_resource_is_a_404_naming_it(lab: TestCluster) -> None:
    status, body = lab.raw("GET", "/apis/example.com/v1/widgets")
    assert status == 404
    if lab.is_sandbox:
        assert (
            "/apis/example.com/v1/widgets is not served by the reconcile sandbox" in body["message"]
        )


def test_requests_without_the_token_are_unauthorized(lab: TestCluster) -> None:
    url = lab.api_client.configuration.host + "/api/v1/nodes"
    response = lab.api_client.rest_client.pool_manager.request(
        "GET", url, headers={"Accept": "application/json"}
    )
    assert response.status == 401


@pytest.mark.parametrize(
    ("header", "status"),
    [
        ("Bearer {token}", 200),
        ("bearer {token}", 200),  # the scheme is case-insensitive (RFC 7235)
        ("  BEARER {token}  ", 200),  # the header is trimmed
        ("Bearer {token} extra", 200),  # the token is the second field, as upstream
        ("Bearer", 401),
        ("Bearer  {token}", 401),  # an empty token field
        ("Basic {token}", 401),
        ("Bearer {token}x", 401),
    ],
)
def test_bearer_tokens_are_read_as_the_api_server_reads_them(
    lab: TestCluster, header: str, status: int
) -> None:
    if not lab.is_sandbox:
        pytest.skip("the sandbox's own token")
    token = lab.api_client.configuration.api_key["BearerToken"].removeprefix("Bearer ")
    url = lab.api_client.configuration.host + "/api/v1/nodes"
    response = lab.api_client.rest_client.pool_manager.request(
        "GET",
        url,
        headers={"Accept": "application/json", "Authorization": header.format(token=token)},
    )
    assert response.status == status


def test_secret_string_data_is_merged_into_data_and_never_stored(lab: TestCluster) -> None:
    """As kube-apiserver's conversion does, on create and on server-side apply alike; the
    apply's managed fields still name stringData (checked against v1.36)."""
    path = "/api/v1/namespaces/default/secrets/creds"
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds", "namespace": "default"},
        "data": {"user": "YWRtaW4=", "password": "b2xk"},
        "stringData": {"password": "new"},
    }
    created = lab.create(secret)
    assert created["data"] == {"user": "YWRtaW4=", "password": "bmV3"}
    assert "stringData" not in created and created["type"] == "Opaque"
    status, applied = lab.raw(
        "PATCH",
        f"{path}?fieldManager=me",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "creds", "namespace": "default"},
            "stringData": {"password": "newer"},
        },
        "application/apply-patch+yaml",
    )
    assert status == 200, applied
    assert applied["data"]["password"] == "bmV3ZXI=" and "stringData" not in applied
    [mine] = [m for m in applied["metadata"]["managedFields"] if m["manager"] == "me"]
    assert mine["fieldsV1"] == {"f:stringData": {"f:password": {}}}


def test_a_bound_pod_is_deleted_gracefully_unless_the_grace_period_is_zero(
    lab: TestCluster,
) -> None:
    if lab.sandbox is None:
        pytest.skip("the sandbox's stand-in kubelet")
    lab.sandbox.api.kubelet_delay = 30.0  # nothing confirms within the test
    path = "/api/v1/namespaces/nfd-lab/pods/a100-job"
    code, deleted = lab.raw("DELETE", path)
    assert code == 200
    assert deleted["metadata"]["deletionTimestamp"]
    assert deleted["metadata"]["deletionGracePeriodSeconds"] == 30
    assert lab.raw("GET", path)[0] == 200  # Terminating, still there
    code, _ = lab.raw(
        "DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
    )
    assert code == 200
    assert lab.raw("GET", path)[0] == 404


def test_an_answer_over_128_kib_is_gzipped_for_a_client_that_asks(
    make_cluster: ClusterFactory,
) -> None:
    # As kube-apiserver v1.36 answers: Content-Encoding gzip and Vary when the client's
    # Accept-Encoding names gzip and the answer is over 128 KiB; smaller ones as they are.
    labels = {f"example.com/fact-{i:02d}": f"value-{i}" for i in range(20)}
    nodes = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n-{i:03d}", "labels": labels}}
        for i in range(300)
    ]
    cluster = make_cluster(nodes)
    api = cluster.api_client

    def get(path: str, encoding: str | None) -> tuple[dict[str, str], bytes]:
        headers = {"Accept": "application/json"}
        if encoding is not None:
            headers["Accept-Encoding"] = encoding
        api.update_params_for_auth(headers, None, ["BearerToken"], path, "GET", None)
        response = api.rest_client.pool_manager.request(
            "GET",
            api.configuration.host + path,
            headers=headers,
            preload_content=False,
            decode_content=False,
        )
        body = response.read(decode_content=False)
        return dict(response.headers), body

    headers, body = get("/api/v1/nodes", "gzip")
    assert headers.get("Content-Encoding") == "gzip"
    assert "Accept-Encoding" in headers.get("Vary", "")
    listed = json.loads(gzip.decompress(body))
    names = {item["metadata"]["name"] for item in listed["items"]}
    assert {f"n-{i:03d}" for i in range(300)} <= names
    assert len(gzip.decompress(body)) > 128 * 1024 > len(body)

    headers, body = get("/api/v1/nodes", None)
    assert "Content-Encoding" not in headers
    assert {item["metadata"]["name"] for item in json.loads(body)["items"]} == names

    headers, body = get("/api/v1/nodes?limit=1", "gzip, deflate")
    assert "Content-Encoding" not in headers
    assert len(json.loads(body)["items"]) == 1
