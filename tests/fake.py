"""An API server in memory, as far as `NodeApi` and `ObjectApi` (reconcile/kube/api.py) ask.

For unit tests of the engine and the GPU domain: what a function asks of a cluster and
what it does with the answers. It keeps the rules those callers depend on and no more:

- nodes are dicts (labels, annotations, taints, unschedulable, Ready) read as `LiveNode`s
  by the client's own decoder; a patch is a JSON merge patch (RFC 7386: null deletes, a
  list is replaced whole), and a resourceVersion in it is a precondition (409);
- every other object (pods, budgets, leases, events, namespaces, workloads) is keyed by
  resource, namespace and name; server-side apply merges the configuration into the
  object (maps merged, anything else replaced) and removes what reconcile's previous
  configuration set and this one does not, a resourceVersion in it is a precondition,
  and a namespaced object needs its namespace;
- every write that changes something takes the next resourceVersion, one counter for the
  whole store; a write that changes nothing keeps it;
- discovery serves a small table of kinds (`KINDS`);
- an eviction is refused (429, cause DisruptionBudget) when a budget selecting the pod
  allows no disruption, else spends one of its disruptions and deletes the pod.

- `update_object` is a merge patch as another field manager (kubectl-patch, a
  controller): it takes ownership of the fields whose values it changed, and an apply
  that would change a field another manager owns is refused (409, one cause per field
  naming the manager, as the API server words it) unless forced, which takes it over.

Fields shared with other managers, immutable fields, defaulting, admission and graceful
deletion (an evicted or deleted pod is gone at once) are not modelled: the sandbox and end-to-end tests hold the client to the real protocol,
and tests/sandbox/test_fake.py holds this fake to the sandbox where it does model it.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

from reconcile.diagnostics import ApiError, Conflict, NotFound, TooManyRequests
from reconcile.kube import wire
from reconcile.kube.objects import FIELD_MANAGER, ApiResource, LiveNode, NodeEvent
from reconcile.kube.selector import from_label_selector
from reconcile.kube.selector import parse as parse_selector
from reconcile.sandbox import fields as ownership


def _kind(api_version: str, plural: str, kind: str, namespaced: bool = True) -> ApiResource:
    group, _, version = api_version.rpartition("/")
    return ApiResource(group, version, plural, kind, namespaced)


NAMESPACES: Final = _kind("v1", "namespaces", "Namespace", namespaced=False)
NODES: Final = _kind("v1", "nodes", "Node", namespaced=False)
PODS: Final = _kind("v1", "pods", "Pod")
CONFIGMAPS: Final = _kind("v1", "configmaps", "ConfigMap")
BUDGETS: Final = _kind("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget")
LEASES: Final = _kind("coordination.k8s.io/v1", "leases", "Lease")
EVENTS: Final = _kind("events.k8s.io/v1", "events", "Event")
CRDS: Final = _kind(
    "apiextensions.k8s.io/v1", "customresourcedefinitions", "CustomResourceDefinition", False
)

KINDS: Final = (
    NAMESPACES,
    NODES,
    PODS,
    CONFIGMAPS,
    _kind("v1", "secrets", "Secret"),
    _kind("v1", "services", "Service"),
    _kind("v1", "serviceaccounts", "ServiceAccount"),
    _kind("apps/v1", "deployments", "Deployment"),
    _kind("apps/v1", "daemonsets", "DaemonSet"),
    BUDGETS,
    LEASES,
    EVENTS,
    _kind("rbac.authorization.k8s.io/v1", "roles", "Role"),
    _kind("rbac.authorization.k8s.io/v1", "clusterroles", "ClusterRole", namespaced=False),
    CRDS,
)

_Key = tuple[str, str, str, str]  # group, plural, namespace, name

# One sequence for every FakeCluster: no two objects share a uid, as no two clusters'
# kube-system namespaces do (a cluster's identity).
_UIDS: Final = itertools.count(1)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: `target` with `patch` merged in (null deletes a key; a non-object
    replaces whatever was there). Neither argument is changed."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def _merged(live: Any, config: Any) -> Any:
    """`config` applied over `live`: maps merged key by key, anything else replaced."""
    if not (isinstance(live, dict) and isinstance(config, dict)):
        return copy.deepcopy(config)
    merged = copy.deepcopy(live)
    for key, value in config.items():
        merged[key] = _merged(live.get(key), value)
    return merged


def _fields(config: Any) -> dict[str, Any]:
    """A FieldsV1 of every field `config` sets (a list counts as one field)."""
    if not isinstance(config, dict):
        return {}
    return {f"f:{key}": _fields(value) for key, value in config.items()}


def _release(obj: dict[str, Any], owned: dict[str, Any], kept: dict[str, Any]) -> None:
    """Remove from `obj` every field the FieldsV1 `owned` lists and `kept` does not."""
    for key, below in owned.items():
        if not key.startswith("f:"):
            continue
        name = key[2:]
        if key not in kept:
            obj.pop(name, None)
        elif below and isinstance(obj.get(name), dict):
            _release(obj[name], below, kept[key])


def _metadata(obj: dict[str, Any]) -> dict[str, Any]:
    metadata: dict[str, Any] = obj.setdefault("metadata", {})
    return metadata


def _modified(resource: ApiResource, name: str) -> Conflict:
    return Conflict(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {resource.plural} "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
    )


def _not_found(resource: ApiResource, name: str) -> NotFound:
    return NotFound(404, "NotFound", f'{resource.plural} "{name}" not found')


class FakeDiscovery:
    """Discovery over a fixed table of kinds."""

    def __init__(self, kinds: Iterable[ApiResource]) -> None:
        self.kinds = tuple(kinds)

    def resource_for(self, api_version: str, kind: str) -> ApiResource | None:
        return next((r for r in self.kinds if (r.api_version, r.kind) == (api_version, kind)), None)

    def namespaced_listable(self) -> list[ApiResource]:
        return [r for r in self.kinds if r.namespaced]


class FakeCluster:
    """`NodeApi` and `ObjectApi` over dicts in memory (see the module's docstring).

    `writes` records every write asked for, as (verb, "plural/namespace/name"), refused
    or not, so that a test can say what was (not) written."""

    def __init__(
        self,
        *,
        namespaces: Iterable[str] = ("default", "kube-system"),
        kinds: Iterable[ApiResource] = KINDS,
    ) -> None:
        self.kinds = tuple(kinds)
        # Applied CRDs become Established (and their kinds served) at once; a test that
        # needs the delay sets this False and calls establish().
        self.establish_crds = True
        self.version = 0
        self.nodes: dict[str, dict[str, Any]] = {}
        self.objects: dict[_Key, dict[str, Any]] = {}
        self.node_events: list[NodeEvent] = []
        self.writes: list[tuple[str, str]] = []
        self.retries = 0
        for namespace in namespaces:
            self.add(NAMESPACES, {"metadata": {"name": namespace}})

    # --- seeding ------------------------------------------------------------------------

    def _next_version(self) -> str:
        self.version += 1
        return str(self.version)

    def add_node(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        *,
        annotations: dict[str, str] | None = None,
        taints: Sequence[dict[str, Any]] = (),
        unschedulable: bool = False,
        ready: bool = True,
    ) -> LiveNode:
        """A node stored as the API server would hold it; the node as read back."""
        node: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "uid": f"uid-{next(_UIDS)}",
                "resourceVersion": self._next_version(),
                "labels": dict(labels or {}),
                "annotations": dict(annotations or {}),
            },
            "spec": {"taints": [dict(t) for t in taints]} if taints else {},
            "status": {"conditions": [{"type": "Ready", "status": str(ready)}]},
        }
        if unschedulable:
            node["spec"]["unschedulable"] = True
        self.nodes[name] = node
        return self._node_event("ADDED", node)

    def add(self, resource: ApiResource, obj: dict[str, Any]) -> dict[str, Any]:
        """`obj` stored as it is (uid and resourceVersion given); the stored copy."""
        stored = copy.deepcopy(obj)
        stored.setdefault("apiVersion", resource.api_version)
        stored.setdefault("kind", resource.kind)
        metadata = _metadata(stored)
        metadata.setdefault("uid", f"uid-{next(_UIDS)}")
        metadata["resourceVersion"] = self._next_version()
        if not resource.namespaced:
            metadata.pop("namespace", None)
        self.objects[self._key(resource, metadata.get("namespace") or "", metadata["name"])] = (
            stored
        )
        return copy.deepcopy(stored)

    def add_pod(
        self,
        namespace: str,
        name: str,
        node: str,
        *,
        labels: dict[str, str] | None = None,
        owner: str | None = None,
    ) -> dict[str, Any]:
        """A running, ready pod bound to `node` (owned by ReplicaSet `owner`, if given)."""
        metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}}
        if owner is not None:
            metadata["ownerReferences"] = [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner, "controller": True}
            ]
        return self.add(
            PODS,
            {
                "metadata": metadata,
                "spec": {"nodeName": node},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            },
        )

    def add_budget(
        self, namespace: str, name: str, selector: dict[str, str], *, disruptions_allowed: int
    ) -> dict[str, Any]:
        """A PodDisruptionBudget over pods labelled `selector`, with the status the
        disruption controller would have given it."""
        return self.add(
            BUDGETS,
            {
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"selector": {"matchLabels": selector}, "maxUnavailable": 1},
                "status": {"disruptionsAllowed": disruptions_allowed, "observedGeneration": 1},
            },
        )

    # --- NodeApi: nodes -------------------------------------------------------------------

    def _node_event(self, kind: str, node: dict[str, Any]) -> LiveNode:
        live = wire.node_from_json(node)
        self.node_events.append(NodeEvent(kind, live.resource_version, live))
        return live

    def list_nodes(self, *, label_selector: str | None = None) -> list[LiveNode]:
        selector = parse_selector(label_selector or "")
        return [
            wire.node_from_json(node)
            for node in self.nodes.values()
            if selector.matches(node["metadata"].get("labels") or {})
        ]

    def list_nodes_at(self) -> tuple[list[LiveNode], str]:
        return self.list_nodes(), str(self.version)

    def watch_nodes(
        self, resource_version: str, *, timeout_seconds: int = 300
    ) -> Iterator[NodeEvent]:
        """The node events after `resource_version`, then the end of the stream."""
        for event in list(self.node_events):
            if int(event.resource_version) > int(resource_version or 0):
                yield event

    def get_node(self, name: str) -> LiveNode:
        if name not in self.nodes:
            raise _not_found(NODES, name)
        return wire.node_from_json(self.nodes[name])

    def patch_node(self, name: str, patch: dict[str, Any], *, dry_run: bool = False) -> LiveNode:
        if not dry_run:
            self.writes.append(("patch", f"nodes/{name}"))
        if name not in self.nodes:
            raise _not_found(NODES, name)
        current = self.nodes[name]
        patched = merge_patch(current, patch)
        if patched["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise _modified(NODES, name)
        if dry_run:
            return wire.node_from_json(patched)
        if patched != current:
            patched["metadata"]["resourceVersion"] = self._next_version()
            self.nodes[name] = patched
            return self._node_event("MODIFIED", patched)
        return wire.node_from_json(current)

    def delete_node(self, name: str) -> None:
        node = self.nodes.pop(name)
        node["metadata"]["resourceVersion"] = self._next_version()
        self._node_event("DELETED", node)

    # --- NodeApi: pods, budgets, evictions ------------------------------------------------

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        return [p for p in self.list_objects(PODS) if (p.get("spec") or {}).get("nodeName") == node]

    def pods_on_nodes(self, nodes: Sequence[str]) -> list[dict[str, Any]]:
        return [p for node in sorted(set(nodes)) for p in self.pods_on(node)]

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get_object(PODS, namespace, name)

    def budgets(self, namespace: str) -> list[dict[str, Any]]:
        return self.list_objects(BUDGETS, namespace)

    def evict(self, namespace: str, name: str) -> None:
        self.writes.append(("evict", f"pods/{namespace}/{name}"))
        pod = self.objects.get(self._key(PODS, namespace, name))
        if pod is None:
            raise _not_found(PODS, name)
        labels = pod["metadata"].get("labels") or {}
        covering = [
            key
            for key, budget in self.objects.items()
            if key[:3] == ("policy", BUDGETS.plural, namespace)
            and from_label_selector(budget["spec"].get("selector")).matches(labels)
        ]
        if len(covering) > 1:
            raise ApiError(
                500,
                "InternalError",
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            )
        for key in covering:
            budget = self.objects[key]
            status = budget.setdefault("status", {})
            if int(status.get("disruptionsAllowed") or 0) < 1:
                raise TooManyRequests(
                    429,
                    "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    (
                        {
                            "reason": "DisruptionBudget",
                            "message": f"The disruption budget {key[3]} is not allowing disruptions",
                        },
                    ),
                )
            status["disruptionsAllowed"] = int(status["disruptionsAllowed"]) - 1
            budget["metadata"]["resourceVersion"] = self._next_version()
        del self.objects[self._key(PODS, namespace, name)]

    # --- NodeApi: leases and events ------------------------------------------------------------

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get_object(LEASES, namespace, name)

    def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._create(LEASES, namespace, body)

    def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(("replace", f"{LEASES.plural}/{namespace}/{name}"))
        key = self._key(LEASES, namespace, name)
        current = self.objects.get(key)
        if current is None:
            raise _not_found(LEASES, name)
        if _metadata(body).get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise _modified(LEASES, name)
        stored = copy.deepcopy(body)
        _metadata(stored).update(
            namespace=namespace,
            uid=current["metadata"]["uid"],
            resourceVersion=self._next_version(),
        )
        self.objects[key] = stored
        return copy.deepcopy(stored)

    def list_leases(
        self, namespace: str, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        return self.list_objects(LEASES, namespace, label_selector=label_selector)

    def delete_lease(self, namespace: str, name: str) -> bool:
        return self.delete_object(LEASES, namespace, name)

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        named = copy.deepcopy(body)
        metadata = _metadata(named)
        if not metadata.get("name"):
            metadata["name"] = f"{metadata.get('generateName') or 'event-'}{self.version + 1}"
        self._create(EVENTS, namespace, named)

    def events(self) -> list[dict[str, Any]]:
        """Every Event recorded, oldest first."""
        found = self.list_objects(EVENTS)
        return sorted(found, key=lambda e: int(e["metadata"]["resourceVersion"]))

    def _create(
        self, resource: ApiResource, namespace: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        name = str(_metadata(body).get("name") or "")
        self.writes.append(("create", f"{resource.plural}/{namespace}/{name}"))
        self._require_namespace(resource, namespace)
        if self._key(resource, namespace, name) in self.objects:
            raise Conflict(409, "AlreadyExists", f'{resource.plural} "{name}" already exists')
        stored = copy.deepcopy(body)
        _metadata(stored)["namespace"] = namespace
        return self.add(resource, stored)

    # --- ObjectApi -----------------------------------------------------------------------

    def _key(self, resource: ApiResource, namespace: str, name: str) -> _Key:
        return (resource.group, resource.plural, namespace if resource.namespaced else "", name)

    def _require_namespace(self, resource: ApiResource, namespace: str) -> None:
        if resource.namespaced and self._key(NAMESPACES, "", namespace) not in self.objects:
            raise NotFound(404, "NotFound", f'namespaces "{namespace}" not found')

    def discovery(self) -> FakeDiscovery:
        return FakeDiscovery(self.kinds)

    def get_object(self, resource: ApiResource, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.objects.get(self._key(resource, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def list_objects(
        self, resource: ApiResource, namespace: str = "", *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        selector = parse_selector(label_selector or "")
        found = []
        for (group, plural, where, _), obj in sorted(self.objects.items()):
            if (group, plural) != (resource.group, resource.plural):
                continue
            if namespace and where != namespace:
                continue
            if not selector.matches(obj["metadata"].get("labels") or {}):
                continue
            found.append(copy.deepcopy(obj))
        return found

    def list_specs(
        self, resource: ApiResource, namespace: str = "", *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        kept = ("name", "namespace", "labels", "annotations", "resourceVersion")
        return [
            {
                **{k: obj[k] for k in ("apiVersion", "kind", "spec") if k in obj},
                "metadata": {k: v for k, v in obj["metadata"].items() if k in kept},
            }
            for obj in self.list_objects(resource, namespace, label_selector=label_selector)
        ]

    def apply_object(
        self,
        resource: ApiResource,
        body: dict[str, Any],
        *,
        dry_run: bool = False,
        force: bool = False,
    ) -> dict[str, Any]:
        return self._apply(resource, body, dry_run=dry_run, force=force)[1]

    def apply_created(self, resource: ApiResource, body: dict[str, Any], *, force: bool) -> bool:
        return self._apply(resource, body, dry_run=False, force=force)[0]

    def update_object(
        self,
        resource: ApiResource,
        namespace: str,
        name: str,
        patch: dict[str, Any],
        *,
        manager: str,
    ) -> dict[str, Any]:
        """A merge patch by field manager `manager` (an Update): it owns what it changed."""
        key = self._key(resource, namespace, name)
        live = self.objects[key]
        after = _merged(copy.deepcopy(live), patch)
        ownership.record_update(live, after, manager, resource.api_version)
        if after != live:
            _metadata(after)["resourceVersion"] = self._next_version()
        self.objects[key] = after
        return copy.deepcopy(after)

    def _apply(
        self, resource: ApiResource, body: dict[str, Any], *, dry_run: bool, force: bool = False
    ) -> tuple[bool, dict[str, Any]]:
        """(created, the object after server-side apply of `body`)."""
        config = copy.deepcopy(body)
        metadata = _metadata(config)
        namespace = str(metadata.get("namespace") or "") if resource.namespaced else ""
        name = str(metadata.get("name") or "")
        if not dry_run:
            self.writes.append(("apply", f"{resource.plural}/{namespace}/{name}"))
        if resource.group and resource not in self.kinds:
            raise NotFound(404, "NotFound", "the server could not find the requested resource")
        self._require_namespace(resource, namespace)
        key = self._key(resource, namespace, name)
        live = self.objects.get(key)
        precondition = metadata.pop("resourceVersion", None)
        if precondition is not None and (
            live is None or precondition != live["metadata"]["resourceVersion"]
        ):
            raise _modified(resource, name)
        others_fields = _taken_over(live, config, force=force)
        after = _merged(live or {}, config)
        after.update(apiVersion=resource.api_version, kind=resource.kind)
        managed: dict[str, Any] = {
            "manager": FIELD_MANAGER,
            "operation": "Apply",
            "apiVersion": resource.api_version,
            "fieldsV1": _fields(config),
        }
        others: list[dict[str, Any]] = []
        for entry in (live or {}).get("metadata", {}).get("managedFields") or ():
            if (entry.get("manager"), entry.get("operation")) == (FIELD_MANAGER, "Apply"):
                _release(after, entry.get("fieldsV1") or {}, managed["fieldsV1"])
            else:
                others.append(entry)
        if others_fields is not None:
            others = [o for o in others_fields if o.get("fieldsV1")]
        _metadata(after)["managedFields"] = [*others, managed]
        if live is None and not dry_run:
            _metadata(after)["uid"] = f"uid-{next(_UIDS)}"
        if live is not None and after == live:
            return False, copy.deepcopy(live)
        if dry_run:
            return live is None, after
        _metadata(after)["resourceVersion"] = self._next_version()
        self.objects[key] = after
        if resource == CRDS and self.establish_crds:
            self.establish(name)
        return live is None, copy.deepcopy(after)

    def establish(self, name: str) -> None:
        """The CRD `name` Established, and its served versions' kind served, as the API
        server does once it accepted the names."""
        crd = self.objects[self._key(CRDS, "", name)]
        crd["status"] = {"conditions": [{"type": "Established", "status": "True"}]}
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        for version in spec.get("versions") or ():
            if version.get("served"):
                served = ApiResource(
                    spec["group"],
                    version["name"],
                    names["plural"],
                    names["kind"],
                    spec.get("scope") != "Cluster",
                )
                if served not in self.kinds:
                    self.kinds = (*self.kinds, served)

    def create_object(self, resource: ApiResource, body: dict[str, Any]) -> dict[str, Any]:
        """Created as it is; a `generateName` gets a counter after it."""
        body = copy.deepcopy(body)
        metadata = _metadata(body)
        if not metadata.get("name") and metadata.get("generateName"):
            metadata["name"] = f"{metadata['generateName']}{next(_UIDS)}"
        return self._create(resource, str(metadata.get("namespace") or ""), body)

    def delete_object(
        self, resource: ApiResource, namespace: str, name: str, *, dry_run: bool = False
    ) -> bool:
        """Delete (a namespace with everything in it); False when it was already gone."""
        if dry_run:
            return self._key(resource, namespace, name) in self.objects
        self.writes.append(("delete", f"{resource.plural}/{namespace}/{name}"))
        if self.objects.pop(self._key(resource, namespace, name), None) is None:
            return False
        if resource == NAMESPACES:
            for key in [k for k in self.objects if k[2] == name]:
                del self.objects[key]
        return True

    # --- which cluster ---------------------------------------------------------------------

    def identity(self) -> tuple[str, str]:
        kube_system = self.objects.get(self._key(NAMESPACES, "", "kube-system")) or {}
        return "https://fake.invalid", str((kube_system.get("metadata") or {}).get("uid") or "")


def _taken_over(
    live: dict[str, Any] | None, config: dict[str, Any], *, force: bool
) -> list[dict[str, Any]] | None:
    """The managedFields entries of managers other than reconcile once a forced `config`
    took fields over from them (None: it took none); a conflict when they own such a
    field and the apply is not forced."""
    if live is None:
        return None
    entries = [
        e
        for e in ownership.entries_of(live)
        if (e.manager, e.operation) != (FIELD_MANAGER, "Apply")
    ]
    wanted = ownership.leaf_values(config)
    current = ownership.leaf_values(live)
    conflicts = [
        (entry, path)
        for path, value in sorted(wanted.items())
        if path in current and current[path] != value
        for entry in entries
        if path in entry.fields
    ]
    if conflicts and not force:
        causes = tuple(
            {
                "reason": "FieldManagerConflict",
                "message": f"conflict with {entry.describe()}",
                "field": ownership.show_path(path),
            }
            for entry, path in conflicts
        )
        first, path = conflicts[0]
        message = (
            f"Apply failed with {len(conflicts)} conflict(s): conflict with "
            f"{first.describe()}: {ownership.show_path(path)}"
        )
        raise Conflict(409, "Conflict", message, causes)
    if not conflicts:
        return None
    for entry, path in conflicts:
        entry.fields.discard(path)
    return [e.to_json() for e in entries]
