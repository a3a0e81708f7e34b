"""Which resource serves a kind, as the API server's discovery documents say."""

from __future__ import annotations

from typing import Any, Protocol

from reconcile.diagnostics import NotFound
from reconcile.kube.objects import ApiResource


class Requester(Protocol):
    """Where discovery's GETs go (the Cluster)."""

    def request(self, method: str, path: str) -> Any: ...


class Discovery:
    """Which resource serves an apiVersion/kind, one request per group-version, cached."""

    def __init__(self, cluster: Requester) -> None:
        self.cluster = cluster
        self._lists: dict[str, dict[str, ApiResource] | None] = {}

    def resource_for(self, api_version: str, kind: str) -> ApiResource | None:
        if api_version not in self._lists:
            self._lists[api_version] = self._fetch(api_version)
        return (self._lists[api_version] or {}).get(kind)

    def namespaced_listable(self) -> list[ApiResource]:
        """Every namespaced kind the server lets one list (preferred versions): what a
        namespace can hold."""
        versions = ["v1"]
        for group in self.cluster.request("GET", "/apis").get("groups") or ():
            preferred = (group.get("preferredVersion") or {}).get("groupVersion")
            if preferred:
                versions.append(str(preferred))
        return [
            resource
            for api_version in versions
            for resource, verbs in self._resources(api_version) or ()
            if resource.namespaced and "list" in verbs
        ]

    def _fetch(self, api_version: str) -> dict[str, ApiResource] | None:
        resources = self._resources(api_version)
        if resources is None:
            return None
        return {resource.kind: resource for resource, _ in resources}

    def _resources(self, api_version: str) -> list[tuple[ApiResource, list[str]]] | None:
        """The resources one group-version serves, subresources left out, each with its
        verbs; None when the server does not serve that group-version."""
        group, _, version = api_version.rpartition("/")
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            document = self.cluster.request("GET", path)
        except NotFound:
            return None
        return [
            (
                ApiResource(
                    group, version, entry["name"], entry["kind"], bool(entry.get("namespaced"))
                ),
                list(entry.get("verbs") or ()),
            )
            for entry in document.get("resources") or ()
            if "/" not in entry.get("name", "")
        ]
