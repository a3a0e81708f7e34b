"""What the engine and the GPU domain ask of a cluster, as two Protocols.

`NodeApi` is the node side (nodes, the pods bound to them, their disruption budgets and
evictions, leases and events); `ObjectApi` is any other object, found by discovery and
written by server-side apply. `kube.client.Cluster` satisfies both structurally; the
unit tests' `FakeCluster` (tests/fake.py) is an in-memory one. A function asks for the
one it uses, so a caller passes either without adapting it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from reconcile.kube.objects import ApiResource, LiveNode, NodeEvent


class NodeApi(Protocol):
    """Nodes and what runs on them, as the engine and the GPU domain use them."""

    def list_nodes(self, *, label_selector: str | None = None) -> list[LiveNode]:
        """Every node (matching `label_selector`, a selector's text)."""
        ...

    def list_nodes_at(self) -> tuple[list[LiveNode], str]:
        """Every node, and the list's resourceVersion: where a watch of them starts."""
        ...

    def watch_nodes(
        self, resource_version: str, *, timeout_seconds: int = 300
    ) -> Iterator[NodeEvent]:
        """The nodes' changes after `resource_version`; WatchExpired when it is too old."""
        ...

    def get_node(self, name: str) -> LiveNode:
        """The node; NotFound when there is none."""
        ...

    def patch_node(self, name: str, patch: dict[str, Any], *, dry_run: bool = False) -> LiveNode:
        """The node after a JSON merge patch (null deletes); a resourceVersion in the patch
        is a precondition (Conflict when stale). With `dry_run`, the node as the server
        would make it, nothing stored (`dryRun=All`)."""
        ...

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        """Every pod bound to `node`, all namespaces."""
        ...

    def pods_on_nodes(self, nodes: Sequence[str]) -> list[dict[str, Any]]:
        """Every pod bound to one of `nodes`, all namespaces."""
        ...

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod, or None when there is none."""
        ...

    def budgets(self, namespace: str) -> list[dict[str, Any]]:
        """The namespace's PodDisruptionBudgets, status included."""
        ...

    def evict(self, namespace: str, name: str) -> None:
        """The pod evicted (policy/v1 Eviction): TooManyRequests when a budget allows no
        disruption, NotFound when the pod is gone."""
        ...

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Lease, or None when there is none."""
        ...

    def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """The Lease created; Conflict when it exists, NotFound when the namespace does not."""
        ...

    def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """The Lease replaced; the body's resourceVersion is a precondition (Conflict)."""
        ...

    def list_leases(
        self, namespace: str, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """The namespace's Leases (matching `label_selector`)."""
        ...

    def delete_lease(self, namespace: str, name: str) -> bool:
        """The Lease deleted; False when it was gone already."""
        ...

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        """An events.k8s.io/v1 Event recorded."""
        ...


class ResourceFinder(Protocol):
    """Which resource serves a kind: what `ObjectApi.discovery()` returns."""

    def resource_for(self, api_version: str, kind: str) -> ApiResource | None:
        """The resource serving `kind` in `api_version`, or None when none does."""
        ...

    def namespaced_listable(self) -> list[ApiResource]:
        """Every namespaced kind one may list: what a namespace can hold."""
        ...


class ObjectApi(Protocol):
    """Any object by its resource, namespace and name: read, applied, deleted."""

    def discovery(self) -> ResourceFinder: ...

    def get_object(self, resource: ApiResource, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None when there is none."""
        ...

    def list_objects(
        self, resource: ApiResource, namespace: str = "", *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """The objects of `resource` (in `namespace`, or every namespace when empty)."""
        ...

    def list_specs(
        self, resource: ApiResource, namespace: str = "", *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """The objects `list_objects` gives with only their apiVersion, kind, spec and the
        metadata naming and selecting them (name, namespace, labels, annotations,
        resourceVersion); never a Secret's kind."""
        ...

    def apply_object(
        self,
        resource: ApiResource,
        body: dict[str, Any],
        *,
        dry_run: bool = False,
        force: bool = False,
    ) -> dict[str, Any]:
        """The object after server-side apply of `body` (as the server would make it, only,
        with `dry_run`)."""
        ...

    def apply_created(self, resource: ApiResource, body: dict[str, Any], *, force: bool) -> bool:
        """Server-side apply of `body`: True when this request created the object."""
        ...

    def create_object(self, resource: ApiResource, body: dict[str, Any]) -> dict[str, Any]:
        """The object as created (a `generateName` named by the server)."""
        ...

    def delete_object(
        self, resource: ApiResource, namespace: str, name: str, *, dry_run: bool = False
    ) -> bool:
        """Delete; False when the object was already gone. With `dry_run`, only asked
        (`dryRun=All`): whether the server would delete it."""
        ...
