"""FakeCluster (tests/fake.py) answers as the sandbox does through the real client, for
what the fake models: node merge patches and their precondition, server-side apply,
leases, evictions. Each scenario runs on both and their transcripts must be equal."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from reconcile.diagnostics import ApiError, ReconcileError
from reconcile.kube.api import NodeApi, ObjectApi
from reconcile.kube.client import Cluster
from reconcile.sandbox import Sandbox
from tests.fake import CONFIGMAPS, FakeCluster


class Api(NodeApi, ObjectApi, Protocol):
    pass


Scenario = Callable[[Api], list[object]]

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"a.io/x": "0"}}}
NAMESPACES = ("default", "kube-system", "apps")
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p1", "namespace": "apps", "labels": {"app": "a"}},
    "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]},
    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
}
BUDGET = {
    "apiVersion": "policy/v1",
    "kind": "PodDisruptionBudget",
    "metadata": {"name": "pdb", "namespace": "apps"},
    "spec": {"selector": {"matchLabels": {"app": "a"}}, "minAvailable": 1},
}


def _failure(call: Callable[[], object]) -> tuple[str, int, tuple[str, ...]]:
    """What a failing call raised: its type, status and the reasons of its causes."""
    with pytest.raises(ReconcileError) as raised:
        call()
    error = raised.value
    if not isinstance(error, ApiError):
        return type(error).__name__, 0, ()
    return type(error).__name__, error.status, tuple(c.get("reason", "") for c in error.causes)


def node_patches(api: Api) -> list[object]:
    first = api.get_node("n1")
    labels = {"a.io/x": "1", "a.io/new": ""}
    after = api.patch_node(
        "n1", {"metadata": {"labels": labels, "resourceVersion": first.resource_version}}
    )
    same = api.patch_node("n1", {"metadata": {"labels": {"a.io/x": "1"}}})  # changes nothing
    stale = _failure(
        lambda: api.patch_node(
            "n1",
            {"metadata": {"labels": {"a.io/x": "2"}, "resourceVersion": first.resource_version}},
        )
    )
    removed = api.patch_node("n1", {"metadata": {"labels": {"a.io/new": None}}})
    taints = [{"key": "gpu", "effect": "NoSchedule"}]
    tainted = api.patch_node("n1", {"spec": {"taints": taints}})
    return [
        after.labels,
        after.resource_version != first.resource_version,
        same.resource_version == after.resource_version,
        stale,
        removed.labels,
        tainted.taints,
        _failure(lambda: api.get_node("n2")),
    ]


def server_side_apply(api: Api) -> list[object]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "apps"},
        "data": {"a": "1"},
    }
    dry = api.apply_object(CONFIGMAPS, body, dry_run=True)
    stored_after_dry_run = api.get_object(CONFIGMAPS, "apps", "settings")
    created = api.apply_created(CONFIGMAPS, body, force=False)
    again = api.apply_created(CONFIGMAPS, body, force=False)
    live = api.get_object(CONFIGMAPS, "apps", "settings") or {}
    merged = api.apply_object(CONFIGMAPS, {**body, "data": {"b": "2"}})
    stale = {
        **body,
        "metadata": {**body["metadata"], "resourceVersion": live["metadata"]["resourceVersion"]},
    }
    missing = {**body, "metadata": {"name": "x", "namespace": "nowhere"}}
    listed = api.list_objects(CONFIGMAPS, "apps")
    return [
        dry["data"],
        stored_after_dry_run,
        (created, again),
        [m["manager"] for m in live["metadata"]["managedFields"]],
        merged["data"],
        _failure(lambda: api.apply_object(CONFIGMAPS, stale)),
        _failure(lambda: api.apply_object(CONFIGMAPS, missing)),
        [
            (i.get("kind"), i["metadata"]["name"])
            for i in listed
            if i["metadata"]["name"] == "settings"
        ],
        api.delete_object(CONFIGMAPS, "apps", "settings"),
        api.delete_object(CONFIGMAPS, "apps", "settings"),
        api.discovery().resource_for("v1", "ConfigMap") == CONFIGMAPS,
        api.discovery().resource_for("v1", "Widget"),
    ]


def leases(api: Api) -> list[object]:
    body: dict[str, Any] = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "l", "namespace": "apps"},
        "spec": {"holderIdentity": "a"},
    }
    created = api.create_lease("apps", body)
    exists = _failure(lambda: api.create_lease("apps", body))
    no_namespace = _failure(
        lambda: api.create_lease(
            "nowhere", {**body, "metadata": {"name": "l", "namespace": "nowhere"}}
        )
    )
    renewed = api.replace_lease("apps", "l", {**created, "spec": {"holderIdentity": "b"}})
    stale = _failure(
        lambda: api.replace_lease("apps", "l", {**created, "spec": {"holderIdentity": "c"}})
    )
    return [
        exists,
        no_namespace,
        renewed["spec"]["holderIdentity"],
        stale,
        (api.get_lease("apps", "l") or {})["spec"]["holderIdentity"],
        api.get_lease("apps", "none"),
    ]


def evictions(api: Api) -> list[object]:
    pods = [p["metadata"]["name"] for p in api.pods_on("n1")]
    blocked = _failure(lambda: api.evict("apps", "p1"))  # minAvailable 1 of 1: none allowed
    return [pods, blocked, _failure(lambda: api.evict("apps", "gone"))]


def _fake(scenario: Scenario) -> list[object]:
    fake = FakeCluster(namespaces=NAMESPACES)
    fake.add_node("n1", {"a.io/x": "0"})
    fake.add_pod("apps", "p1", "n1", labels={"app": "a"})
    if scenario is evictions:
        fake.add_budget("apps", "pdb", {"app": "a"}, disruptions_allowed=0)
    return scenario(fake)


@pytest.fixture
def sandbox_transcript(tmp_path: Path) -> Iterator[Callable[[Scenario], list[object]]]:
    clusters: list[Cluster] = []
    sandboxes: list[Sandbox] = []

    def run(scenario: Scenario) -> list[object]:
        namespaces = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in NAMESPACES
        ]
        seeds = [*namespaces, NODE, POD, *([BUDGET] if scenario is evictions else [])]
        sandbox = Sandbox(seeds).__enter__()
        sandboxes.append(sandbox)
        cluster = Cluster.connect(str(sandbox.write_kubeconfig(tmp_path / "kc")))
        clusters.append(cluster)
        return scenario(cluster)

    yield run
    for cluster in clusters:
        cluster.close()
    for sandbox in sandboxes:
        sandbox.__exit__(None, None, None)


@pytest.mark.parametrize(
    "scenario",
    [node_patches, server_side_apply, leases, evictions],
    ids=lambda s: s.__name__,
)
def test_the_fake_answers_as_the_sandbox_does(
    scenario: Scenario, sandbox_transcript: Callable[[Scenario], list[object]]
) -> None:
    assert _fake(scenario) == sandbox_transcript(scenario)
