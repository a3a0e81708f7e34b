"""The API resources the sandbox serves, and the discovery documents that describe them.

One table drives routing, discovery (`/api`, `/apis`, `/apis/{group}/{version}`),
the namespaced/cluster distinction and field selectors, so a new kind is one row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from reconcile.kube import crds
from reconcile.sandbox import events

# Verbs the sandbox implements (no `deletecollection`: refused with 405).
VERBS: Final = ("create", "delete", "get", "list", "patch", "update", "watch")
READ_ONLY: Final = ("get", "list", "watch")


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    selectable_fields: tuple[str, ...] = ()
    # metadata.generation is kept (and bumped on spec changes) for most kinds, not all.
    generation: bool = True
    categories: tuple[str, ...] = ()
    list_kind: str = field(default="", compare=False)
    verbs: tuple[str, ...] = VERBS
    # Another resource's storage key, when this one is a view of that one's objects
    # (core v1 events of events.k8s.io Events).
    storage: str = ""
    # Strategy flags (rest.RESTUpdateStrategy): PUT of a missing object creates it; PUT
    # without metadata.resourceVersion is refused.
    create_on_update: bool = False
    unconditional_update: bool = True
    # No watch cache upstream (events): watches get no periodic bookmarks.
    watch_cache: bool = True
    # Field selectors beyond metadata.* are refused with upstream's generic message
    # (`"x" is not a known field selector: only ...`) rather than `field label not supported`.
    generic_field_selectors: bool = False
    # Validated as its internal core type (events.k8s.io Events): 422s name `Event`.
    validated_as_core: bool = False
    # DELETE answers a Success Status, as upstream does for every kind deleted at once
    # (only the kinds added with watch say so yet; the others answer the deleted object).
    delete_status: bool = False
    # A custom resource's: the openAPIV3Schema of its CRD's served version.
    schema: Any = field(default=None, compare=False)

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """Storage key: one stored version per group/resource."""
        return self.storage or f"{self.group}/{self.plural}"

    @property
    def read_only(self) -> bool:
        return "create" not in self.verbs

    @property
    def qualified(self) -> str:
        """`nodes`, `deployments.apps`: how API errors name the resource."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        """`Node`, `Deployment.apps`: how validation errors name the kind."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def singular(self) -> str:
        return self.kind.lower()


def _r(
    group: str,
    version: str,
    plural: str,
    kind: str,
    namespaced: bool,
    *short: str,
    sub: tuple[str, ...] = (),
    fields: tuple[str, ...] = (),
    generation: bool = True,
    categories: tuple[str, ...] = (),
    **more: Any,
) -> Resource:
    return Resource(
        group,
        version,
        plural,
        kind,
        namespaced,
        short,
        sub,
        fields,
        generation,
        categories,
        kind + "List",
        **more,
    )


_ALL = ("all",)
RESOURCES: Final[tuple[Resource, ...]] = (
    _r(
        "",
        "v1",
        "namespaces",
        "Namespace",
        False,
        "ns",
        sub=("status",),
        fields=("status.phase",),
        generation=False,
    ),
    _r(
        "",
        "v1",
        "nodes",
        "Node",
        False,
        "no",
        sub=("status",),
        fields=("spec.unschedulable",),
        generation=False,
    ),
    _r(
        "",
        "v1",
        "pods",
        "Pod",
        True,
        "po",
        sub=("status", "eviction"),
        fields=(
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ),
        categories=_ALL,
    ),
    _r("", "v1", "configmaps", "ConfigMap", True, "cm", generation=False),
    _r("", "v1", "secrets", "Secret", True, fields=("type",), generation=False),
    _r(
        "",
        "v1",
        "services",
        "Service",
        True,
        "svc",
        sub=("status",),
        generation=False,
        categories=_ALL,
    ),
    _r("", "v1", "serviceaccounts", "ServiceAccount", True, "sa", generation=False),
    # Events are written through events.k8s.io/v1 only; core v1 reads the same objects.
    _r(
        "",
        "v1",
        "events",
        "Event",
        True,
        "ev",
        fields=events.CORE_FIELDS,
        generation=False,
        verbs=READ_ONLY,
        storage="events.k8s.io/events",
        watch_cache=False,
    ),
    _r(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        True,
        "deploy",
        sub=("status", "scale"),
        categories=_ALL,
    ),
    _r(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        True,
        "rs",
        sub=("status", "scale"),
        categories=_ALL,
    ),
    _r("apps", "v1", "daemonsets", "DaemonSet", True, "ds", sub=("status",), categories=_ALL),
    _r(
        "apps",
        "v1",
        "statefulsets",
        "StatefulSet",
        True,
        "sts",
        sub=("status", "scale"),
        categories=_ALL,
    ),
    _r("batch", "v1", "jobs", "Job", True, sub=("status",), categories=_ALL),
    _r("batch", "v1", "cronjobs", "CronJob", True, "cj", sub=("status",), categories=_ALL),
    _r("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, "pdb", sub=("status",)),
    _r("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, generation=False),
    _r(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        False,
        generation=False,
    ),
    _r("rbac.authorization.k8s.io", "v1", "roles", "Role", True, generation=False),
    _r("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, generation=False),
    _r(
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        True,
        "ev",
        fields=tuple(events.V1_FIELDS),
        generation=False,
        create_on_update=True,
        watch_cache=False,
        validated_as_core=True,
        delete_status=True,
    ),
    _r(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        "crd",
        "crds",
        sub=("status",),
        categories=("api-extensions",),
    ),
    # Dynamic Resource Allocation, what `placement` reads of it (GA in 1.34).
    _r(
        "resource.k8s.io",
        "v1",
        "resourceslices",
        "ResourceSlice",
        False,
        fields=("spec.driver", "spec.nodeName"),
    ),
    _r("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False),
    _r("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True, sub=("status",)),
    _r("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True),
    _r("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False, generation=False),
    _r(
        "coordination.k8s.io",
        "v1",
        "leases",
        "Lease",
        True,
        generation=False,
        create_on_update=True,
        unconditional_update=False,
        generic_field_selectors=True,
        delete_status=True,
    ),
)

BY_PATH: Final = {(r.group, r.version, r.plural): r for r in RESOURCES}
# Objects are created as the kind the API serves writes for (not a read-only view).
BY_KIND: Final = {(r.group_version, r.kind): r for r in RESOURCES if not r.read_only}
GROUPS: Final = tuple(dict.fromkeys(r.group for r in RESOURCES if r.group))

# The server version the sandbox reports; its behaviour follows v1.36.
VERSION: Final = {
    "major": "1",
    "minor": "36",
    "gitVersion": "v1.36.0-reconcile-sandbox",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.25.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}


CRDS: Final = BY_PATH[("apiextensions.k8s.io", "v1", "customresourcedefinitions")]


def custom_resources(crds_stored: Iterable[Mapping[str, Any]]) -> tuple[Resource, ...]:
    """The resources the Established CRDs among `crds_stored` serve, one per served version."""
    return tuple(
        Resource(
            kind.group,
            kind.version,
            kind.plural,
            kind.kind,
            kind.namespaced,
            list_kind=kind.kind + "List",
            schema=kind.schema,
        )
        for crd in crds_stored
        if crds.is_established(crd)
        for kind in crds.custom_kinds([crd]).values()
    )


def resource_for(
    api_version: str, kind: str, served: tuple[Resource, ...] = RESOURCES
) -> Resource | None:
    if served is RESOURCES:
        return BY_KIND.get((api_version, kind))
    return next(
        (r for r in served if (r.group_version, r.kind) == (api_version, kind) and not r.read_only),
        None,
    )


def by_path(served: tuple[Resource, ...]) -> dict[tuple[str, str, str], Resource]:
    if served is RESOURCES:
        return BY_PATH
    return {(r.group, r.version, r.plural): r for r in served}


def api_versions() -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    }


def _group_document(group: str, served: tuple[Resource, ...] = RESOURCES) -> dict[str, Any]:
    version = next(r.version for r in served if r.group == group)
    gv = {"groupVersion": f"{group}/{version}", "version": version}
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": [gv],
        "preferredVersion": gv,
    }


def _groups(served: tuple[Resource, ...]) -> tuple[str, ...]:
    return (
        GROUPS if served is RESOURCES else tuple(dict.fromkeys(r.group for r in served if r.group))
    )


def api_group_list(served: tuple[Resource, ...] = RESOURCES) -> dict[str, Any]:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {k: v for k, v in _group_document(g, served).items() if k not in ("kind", "apiVersion")}
            for g in _groups(served)
        ],
    }


def api_group(group: str, served: tuple[Resource, ...] = RESOURCES) -> dict[str, Any] | None:
    return _group_document(group, served) if group in _groups(served) else None


def resource_list(
    group: str, version: str, served: tuple[Resource, ...] = RESOURCES
) -> dict[str, Any] | None:
    members = [r for r in served if r.group == group and r.version == version]
    if not members:
        return None
    entries: list[dict[str, Any]] = []
    for r in members:
        entry: dict[str, Any] = {
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": list(r.verbs),
        }
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.categories:
            entry["categories"] = list(r.categories)
        entries.append(entry)
        for sub in r.subresources:
            if sub == "scale":
                entries.append(
                    {
                        "name": f"{r.plural}/scale",
                        "singularName": "",
                        "namespaced": True,
                        "group": "autoscaling",
                        "version": "v1",
                        "kind": "Scale",
                        "verbs": ["get", "patch", "update"],
                    }
                )
            elif sub == "eviction":
                entries.append(
                    {
                        "name": f"{r.plural}/eviction",
                        "singularName": "",
                        "namespaced": True,
                        "group": "policy",
                        "version": "v1",
                        "kind": "Eviction",
                        "verbs": ["create"],
                    }
                )
            else:
                entries.append(
                    {
                        "name": f"{r.plural}/{sub}",
                        "singularName": "",
                        "namespaced": r.namespaced,
                        "kind": r.kind,
                        "verbs": ["get", "patch", "update"],
                    }
                )
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": entries}


# --- OpenAPI v3 ------------------------------------------------------------------------------
# Only as much as kubectl reads: whether PATCH of a kind takes `fieldValidation`, so that
# `kubectl apply/create` let the server validate instead of downloading the full schema.

_FIELD_VALIDATION = {
    "name": "fieldValidation",
    "in": "query",
    "description": "Ignore, Warn or Strict",
    "schema": {"type": "string", "uniqueItems": True},
}


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def openapi_v3_root() -> dict[str, Any]:
    versions = dict.fromkeys((r.group, r.version) for r in RESOURCES)
    return {
        "paths": {
            _gv_path(g, v): {
                "serverRelativeURL": f"/openapi/v3/{_gv_path(g, v)}?hash=reconcile-sandbox"
            }
            for g, v in versions
        }
    }


def openapi_v3_group_version(path: str) -> dict[str, Any] | None:
    members = [r for r in RESOURCES if _gv_path(r.group, r.version) == path]
    if not members:
        return None
    paths: dict[str, Any] = {}
    for r in members:
        if r.read_only:
            continue
        base = (
            f"/{path}/namespaces/{{namespace}}/{r.plural}"
            if r.namespaced
            else f"/{path}/{r.plural}"
        )
        gvk = {"group": r.group, "version": r.version, "kind": r.kind}
        paths[base + "/{name}"] = {
            "patch": {
                "operationId": f"patch{r.kind}",
                "parameters": [_FIELD_VALIDATION],
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
            }
        }
        paths[base] = {
            "post": {
                "operationId": f"create{r.kind}",
                "parameters": [_FIELD_VALIDATION],
                "x-kubernetes-action": "post",
                "x-kubernetes-group-version-kind": gvk,
            }
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": VERSION["gitVersion"]},
        "paths": paths,
        "components": {},
    }
