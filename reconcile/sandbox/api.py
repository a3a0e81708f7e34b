"""What the sandbox's API server does with a request, once the HTTP layer has parsed it.

Every write goes the same way as in kube-apiserver: decode, merge (patch or apply),
default, validate, check the resourceVersion precondition, record field ownership,
bump resourceVersion (and generation when the spec changed), store. A write that
changes nothing stores nothing and keeps the resourceVersion, as etcd3 does.
`dryRun=All` runs every step but the last.
"""

from __future__ import annotations

import copy
import json
import secrets
import threading
import uuid
from collections.abc import Callable
from typing import Any, Final

import yaml

from reconcile.kube import crds
from reconcile.kube import validation as apivalidation
from reconcile.kube.selector import SelectorError, parse
from reconcile.kube.validation import FieldError
from reconcile.sandbox import decoding, defaults, disruption, events, fields
from reconcile.sandbox.errors import (
    ApiStatus,
    already_exists,
    bad_request,
    conflict,
    invalid_object,
    method_not_allowed,
    not_found,
    unconditional_update_refused,
    unsupported_media_type,
)
from reconcile.sandbox.patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from reconcile.sandbox.resources import BY_PATH, CRDS, RESOURCES, Resource, custom_resources
from reconcile.sandbox.store import Key, Obj, Page, Store, encode
from reconcile.sandbox.watch import Watch, WatchOptions

NAMESPACES: Final = BY_PATH[("", "v1", "namespaces")]
PODS: Final = BY_PATH[("", "v1", "pods")]
PDBS: Final = BY_PATH[("policy", "v1", "poddisruptionbudgets")]

MERGE_PATCH: Final = "application/merge-patch+json"
STRATEGIC_PATCH: Final = "application/strategic-merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
APPLY_PATCH: Final = "application/apply-patch+yaml"
PATCH_TYPES: Final = (MERGE_PATCH, STRATEGIC_PATCH, JSON_PATCH, APPLY_PATCH)

# Fields the server owns: a client's value for them is ignored (or checked, for resourceVersion).
_SERVER_METADATA: Final = (
    "uid",
    "creationTimestamp",
    "generation",
    "selfLink",
    "deletionTimestamp",
)


def _without_volatile(obj: Obj) -> Obj:
    """The object minus what changes on every write, to tell a no-op write from a real one."""
    stripped = dict(obj)
    metadata = dict(stripped.get("metadata") or {})
    for key in ("resourceVersion", "managedFields", "generation"):
        metadata.pop(key, None)
    stripped["metadata"] = metadata
    return stripped


def _ownership(obj: Obj) -> list[tuple[str, str, str]]:
    """Who owns what, without the timestamps that every apply refreshes."""
    return sorted(
        (
            str(e.get("manager")),
            str(e.get("operation")),
            json.dumps(e.get("fieldsV1"), sort_keys=True),
        )
        for e in (obj.get("metadata") or {}).get("managedFields") or ()
    )


def _spec_of(obj: Obj) -> Any:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class SandboxApi:
    """Operations on the store, each holding the store's lock for its whole duration."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.clock: Callable[[], str] = fields.now
        # How long a stand-in kubelet takes to confirm a bound pod's graceful deletion.
        self.kubelet_delay = 0.2
        # How often a watch that asked for bookmarks gets one (upstream: about a minute).
        self.bookmark_interval = 60.0

    # --- reads -------------------------------------------------------------------------

    def served(self) -> tuple[Resource, ...]:
        """The built-in resources and those the Established CRDs serve."""
        stored = list(self.store.values(CRDS.key))
        return (*RESOURCES, *custom_resources(stored)) if stored else RESOURCES

    def get(self, resource: Resource, namespace: str, name: str) -> str:
        with self.store.lock:
            encoded = self.store.encoded(resource.key, (namespace, name))
        if encoded is None:
            raise not_found(resource, name)
        convert = _view(resource)
        return encode(convert(json.loads(encoded))) if convert else encoded

    # --- the scale subresource (autoscaling/v1 Scale of a Deployment, ReplicaSet, ...) ---

    def get_scale(self, resource: Resource, namespace: str, name: str) -> Obj:
        return _scale(json.loads(self.get(resource, namespace, name)))

    def set_scale(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        scale: Obj,
        *,
        manager: str | None,
        dry_run: bool,
    ) -> Obj:
        """Write a Scale's spec.replicas to its object (as kube-apiserver's scale REST)."""
        replicas = (scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise invalid_object(
                resource,
                name,
                [
                    FieldError(
                        "Invalid value",
                        "spec.replicas",
                        replicas,
                        "must be greater than or equal to 0",
                    )
                ],
            )
        body = json.dumps({"spec": {"replicas": replicas}}).encode()
        _, obj = self.patch(
            resource,
            namespace,
            name,
            "application/merge-patch+json",
            body,
            manager=manager,
            dry_run=dry_run,
            force=False,
            subresource="scale",
        )
        return _scale(obj)

    def list(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 0,
        token: str | None = None,
    ) -> Page:
        match = _matcher(resource, label_selector, field_selector)
        with self.store.lock:
            page = self.store.page(
                resource.key, namespace=namespace, match=match, limit=limit, token=token
            )
        convert = _view(resource)
        if convert:
            page.items = [encode(convert(json.loads(item))) for item in page.items]
        return page

    def watch(
        self, resource: Resource, namespace: str | None, options: WatchOptions, *, as_table: bool
    ) -> Watch:
        """A watch of the collection; its selectors are checked now (400 before any event)."""
        return Watch(
            self.store,
            resource,
            namespace,
            options,
            match=_matcher(resource, options.label_selector, options.field_selector),
            convert=_view(resource),
            as_table=as_table,
            bookmark_interval=self.bookmark_interval,
            bookmarks_served=resource.watch_cache,
        )

    # --- writes ------------------------------------------------------------------------

    def create(
        self,
        resource: Resource,
        namespace: str,
        body: Any,
        *,
        manager: str,
        dry_run: bool,
        keep_status: bool = False,
        keep_managed_fields: bool = False,
    ) -> Obj:
        obj = self._decoded(resource, body)
        metadata = obj.setdefault("metadata", {})
        if not metadata.get("name") and metadata.get("generateName"):
            metadata["name"] = str(metadata["generateName"]) + secrets.token_hex(3)[:5]
        self._check_namespace(resource, namespace, obj)
        with self.store.lock:
            name = str(metadata.get("name") or "")
            if name and self.store.peek(resource.key, (namespace, name)) is not None:
                raise already_exists(resource, name)
            return self._store_new(
                resource,
                namespace,
                obj,
                manager=manager,
                dry_run=dry_run,
                keep_status=keep_status,
                # Seeds may say who owns what, as an export with managed fields does.
                applied=keep_managed_fields and bool(metadata.get("managedFields")),
            )

    def _store_new(
        self,
        resource: Resource,
        namespace: str,
        obj: Obj,
        *,
        manager: str,
        dry_run: bool,
        applied: bool = False,
        keep_status: bool = False,
    ) -> Obj:
        if not keep_status and resource.kind != "Node":
            obj.pop(
                "status", None
            )  # only nodes may be created with a status (kubelet registration)
        metadata = obj.setdefault("metadata", {})
        for key in (*_SERVER_METADATA, "resourceVersion"):
            metadata.pop(key, None)
        if resource.namespaced:
            metadata["namespace"] = namespace
        defaults.apply(resource.group, resource.kind, obj, creating=True)
        _structural(resource, obj)
        self._validate(resource, obj, None)
        if resource.namespaced and self.store.peek(NAMESPACES.key, ("", namespace)) is None:
            raise not_found(NAMESPACES, namespace)
        metadata["uid"] = str(uuid.uuid4())
        metadata["creationTimestamp"] = self.clock()
        if resource.generation:
            metadata["generation"] = 1
        if not applied:
            metadata.pop("managedFields", None)
            fields.record_update(None, obj, manager, resource.group_version)
        if dry_run:
            return obj
        metadata["resourceVersion"] = self.store.next_resource_version()
        self.store.put(resource.key, (namespace, str(metadata["name"])), obj)
        self._after_write(resource, namespace)
        return obj

    def update(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        body: Any,
        *,
        manager: str,
        dry_run: bool,
        subresource: str = "",
    ) -> tuple[int, Obj]:
        """PUT: (status code, object); 201 when the resource creates on update."""
        obj = self._decoded(resource, body)
        self._check_name(obj, name)
        self._check_namespace(resource, namespace, obj)
        with self.store.lock:
            old = self.store.get(resource.key, (namespace, name))
            if old is None:
                if not resource.create_on_update or subresource:
                    raise not_found(resource, name)
                obj.setdefault("metadata", {})["name"] = name
                return 201, self._store_new(
                    resource, namespace, obj, manager=manager, dry_run=dry_run
                )
            if not resource.unconditional_update and not obj["metadata"].get("resourceVersion"):
                raise unconditional_update_refused(resource, name)
            return 200, self._store_update(
                resource,
                (namespace, name),
                old,
                obj,
                manager=manager,
                dry_run=dry_run,
                subresource=subresource,
            )

    def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        content_type: str,
        raw: bytes,
        *,
        manager: str | None,
        dry_run: bool,
        force: bool,
        subresource: str = "",
    ) -> tuple[int, Obj]:
        if resource.read_only:
            raise _read_only(resource)
        if content_type not in PATCH_TYPES:
            raise unsupported_media_type(content_type)
        if content_type == APPLY_PATCH:
            return self._apply(
                resource,
                namespace,
                name,
                raw,
                manager=manager,
                dry_run=dry_run,
                force=force,
                subresource=subresource,
            )
        if force:
            raise bad_request("force may not be specified for non-apply patch")
        try:
            patch = json.loads(raw)
        except ValueError as e:
            raise bad_request(f"error decoding patch: {e}") from None
        with self.store.lock:
            old = self._existing(resource, namespace, name)
            try:
                if content_type == MERGE_PATCH:
                    new = merge_patch(old, patch)
                elif content_type == STRATEGIC_PATCH:
                    new = strategic_merge_patch(old, patch)
                else:
                    new = json_patch(old, patch)
            except PatchError as e:
                raise ApiStatus(422, "Invalid", str(e)) from None
            if not isinstance(new, dict):
                raise ApiStatus(422, "Invalid", "the patch does not produce an object")
            decoding.decode_patched(resource, new, encode)
            self._check_name(new, name)
            stored = self._store_update(
                resource,
                (namespace, name),
                old,
                new,
                manager=manager or "unknown",
                dry_run=dry_run,
                subresource=subresource,
                patched=True,
            )
        return 200, stored

    def _apply(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        raw: bytes,
        *,
        manager: str | None,
        dry_run: bool,
        force: bool,
        subresource: str,
    ) -> tuple[int, Obj]:
        if not manager:
            raise invalid_object_options()
        try:
            config = yaml.load(
                raw.decode("utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
            )
        except (yaml.YAMLError, UnicodeDecodeError) as e:
            raise bad_request(f"error decoding YAML: {e}") from None
        if not isinstance(config, dict):
            raise bad_request("apply patch must be an object")
        config = json.loads(json.dumps(config, default=str))
        if (
            config.get("apiVersion") != resource.group_version
            or config.get("kind") != resource.kind
        ):
            raise bad_request(
                f"apply patch for {resource.qualified} must have apiVersion {resource.group_version} "
                f"and kind {resource.kind}"
            )
        self._check_name(config, name)
        self._check_namespace(resource, namespace, config)
        decoding.decode(resource, config)
        metadata = config.setdefault("metadata", {})
        metadata["name"] = name
        if resource.schema is not None:
            # The typed patch refuses a field the schema does not declare (a 500 without
            # a reason), before defaulting or validation; a plain write prunes it.
            refused = crds.apply_error(_custom_kind(resource), config)
            if refused is not None:
                raise ApiStatus(500, "", refused)
        with self.store.lock:
            old = self.store.get(resource.key, (namespace, name))
            if old is None:
                if subresource:
                    raise not_found(resource, name)
                new = fields.server_side_apply(
                    None, config, manager=manager, api_version=resource.group_version, force=force
                )
                return 201, self._store_new(
                    resource, namespace, new, manager=manager, dry_run=dry_run, applied=True
                )
            precondition = metadata.get("resourceVersion")
            if precondition and precondition != old["metadata"].get("resourceVersion"):
                raise conflict(resource, name)
            new = fields.server_side_apply(
                old, config, manager=manager, api_version=resource.group_version, force=force
            )
            stored = self._store_update(
                resource,
                (namespace, name),
                old,
                new,
                manager=manager,
                dry_run=dry_run,
                subresource=subresource,
                applied=True,
            )
        return 200, stored

    def delete(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        *,
        dry_run: bool,
        grace: int | None = None,
    ) -> Obj:
        if resource.read_only:
            raise _read_only(resource)
        with self.store.lock:
            old = self._existing(resource, namespace, name)
            if dry_run:
                return old
            if resource is PODS and self._terminating(old, grace):
                return self._begin_termination(namespace, name, old, grace)
            self.store.delete(resource.key, (namespace, name))
            if resource is CRDS:
                # The CRD's finalizer deletes every custom resource of it first.
                for custom in custom_resources([_established(old)]):
                    for obj in list(self.store.values(custom.key)):
                        metadata = obj["metadata"]
                        self.store.delete(
                            custom.key, (metadata.get("namespace") or "", metadata["name"])
                        )
            if resource is NAMESPACES:
                # No namespace controller here: what the namespace held goes with it at once.
                for other in BY_PATH.values():
                    if other.namespaced and not other.storage:
                        for obj in list(self.store.values(other.key, name)):
                            self.store.delete(other.key, (name, obj["metadata"]["name"]))
            self._after_write(resource, namespace)
        return old

    def evict(self, namespace: str, name: str, body: Any, *, dry_run: bool) -> dict[str, Any]:
        if body is not None and not isinstance(body, dict):
            raise bad_request("the body of an eviction must be a policy/v1 Eviction")
        with self.store.lock:
            pod = self._existing(PODS, namespace, name)
            budget = disruption.check_eviction(self.store, pod, self.clock)
            if dry_run:
                return disruption.SUCCESS
            if budget is not None:
                self._store_update(
                    PDBS,
                    (namespace, budget["metadata"]["name"]),
                    self._existing(PDBS, namespace, budget["metadata"]["name"]),
                    budget,
                    manager="kube-controller-manager",
                    dry_run=False,
                    subresource="status",
                )
            if self._terminating(pod, None):
                self._begin_termination(namespace, name, pod, None)
                return disruption.SUCCESS
            self.store.delete(PODS.key, (namespace, name))
            self._after_write(PODS, namespace)
        return disruption.SUCCESS

    # --- graceful deletion ----------------------------------------------------------------

    def _terminating(self, pod: Obj, grace: int | None) -> bool:
        """A pod bound to a node is deleted gracefully, as by kube-apiserver: it stays,
        Terminating, until its kubelet confirms (here: `kubelet_delay` seconds later),
        unless deleted with a zero grace period. An unbound pod goes at once."""
        return bool((pod.get("spec") or {}).get("nodeName")) and grace != 0

    def _begin_termination(self, namespace: str, name: str, pod: Obj, grace: int | None) -> Obj:
        metadata = pod["metadata"]
        if metadata.get("deletionTimestamp"):
            return pod  # already terminating
        new = copy.deepcopy(pod)
        period = (
            grace
            if grace is not None
            else (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
        )
        new["metadata"]["deletionTimestamp"] = self.clock()
        new["metadata"]["deletionGracePeriodSeconds"] = period
        new["metadata"]["resourceVersion"] = self.store.next_resource_version()
        self.store.put(PODS.key, (namespace, name), new)
        self._after_write(PODS, namespace)
        uid = metadata.get("uid")
        timer = threading.Timer(
            self.kubelet_delay, self._confirm_termination, (namespace, name, uid)
        )
        timer.daemon = True
        timer.start()
        return new

    def _confirm_termination(self, namespace: str, name: str, uid: object) -> None:
        """The kubelet's part: the containers stopped, the pod goes."""
        with self.store.lock:
            current = self.store.get(PODS.key, (namespace, name))
            if current is None or current["metadata"].get("uid") != uid:
                return
            self.store.delete(PODS.key, (namespace, name))
            self._after_write(PODS, namespace)

    # --- the write path ------------------------------------------------------------------

    def _store_update(
        self,
        resource: Resource,
        key: Key,
        old: Obj,
        new: Obj,
        *,
        manager: str,
        dry_run: bool,
        subresource: str,
        patched: bool = False,
        applied: bool = False,
    ) -> Obj:
        precondition = (new.get("metadata") or {}).get("resourceVersion")
        if precondition and precondition != old["metadata"].get("resourceVersion"):
            raise conflict(resource, key[1])
        if subresource == "status":
            merged = copy.deepcopy(old)
            merged["status"] = new.get("status")
            new = merged
        else:
            new = dict(new)
            if "status" in resource.subresources:
                # Status is written through its subresource only; the main resource keeps it.
                new.pop("status", None)
                if "status" in old:
                    new["status"] = old["status"]
        new["apiVersion"], new["kind"] = resource.group_version, resource.kind
        metadata = new.setdefault("metadata", {})
        for field in _SERVER_METADATA:
            if field in old["metadata"]:
                metadata[field] = old["metadata"][field]
            else:
                metadata.pop(field, None)
        metadata["name"], metadata["resourceVersion"] = key[1], old["metadata"]["resourceVersion"]
        if resource.namespaced:
            metadata["namespace"] = key[0]
        if not applied:
            metadata["managedFields"] = copy.deepcopy(old["metadata"].get("managedFields") or [])
        defaults.apply(resource.group, resource.kind, new, creating=False)
        _structural(resource, new)
        self._validate(resource, new, old)
        if _without_volatile(new) == _without_volatile(old) and (
            not applied or _ownership(new) == _ownership(old)
        ):
            return old  # nothing changed: no write, same resourceVersion
        if not applied:
            fields.record_update(old, new, manager, resource.group_version, subresource)
        if resource.generation and _spec_of(new) != _spec_of(old):
            metadata["generation"] = int(old["metadata"].get("generation", 1)) + 1
        if dry_run:
            return new
        metadata["resourceVersion"] = self.store.next_resource_version()
        self.store.put(resource.key, key, new)
        self._after_write(resource, key[0])
        return new

    def _after_write(self, resource: Resource, namespace: str) -> None:
        """The disruption controller, run synchronously: keep PDB status current; the
        CRD controller: a CRD's names accepted and Established (its own write, after the
        one that created the CRD, as the API server's controller makes it)."""
        if resource is CRDS:
            for crd in list(self.store.values(CRDS.key)):
                if not crds.is_established(crd):
                    established = _established(crd)
                    established["metadata"]["resourceVersion"] = self.store.next_resource_version()
                    self.store.put(CRDS.key, ("", crd["metadata"]["name"]), established)
            return
        if resource in (
            PODS,
            PDBS,
            BY_PATH[("apps", "v1", "deployments")],
            BY_PATH[("apps", "v1", "replicasets")],
        ):
            for pdb in list(self.store.values(PDBS.key, namespace)):
                status = disruption.pdb_status(self.store, pdb, self.clock)
                if status != pdb.get("status"):
                    updated = copy.deepcopy(pdb)
                    updated["status"] = status
                    updated["metadata"]["resourceVersion"] = self.store.next_resource_version()
                    self.store.put(PDBS.key, (namespace, pdb["metadata"]["name"]), updated)

    def _validate(self, resource: Resource, obj: Obj, old: Obj | None) -> None:
        errors = apivalidation.validate_object(
            resource.group, resource.kind, obj, namespaced=resource.namespaced, old=old
        )
        if resource.schema is not None:
            errors += crds.validate_custom(_custom_kind(resource), obj)
        elif resource is CRDS:
            errors += _crd_errors(obj)
        if errors:
            raise invalid_object(
                resource, str((obj.get("metadata") or {}).get("name") or ""), errors
            )

    # --- helpers -----------------------------------------------------------------------

    def _existing(self, resource: Resource, namespace: str, name: str) -> Obj:
        found = self.store.get(resource.key, (namespace, name))
        if found is None:
            raise not_found(resource, name)
        return found

    @staticmethod
    def _decoded(resource: Resource, body: Any) -> Obj:
        if resource.read_only:
            raise _read_only(resource)
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be a JSON object")
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if api_version and api_version != resource.group_version:
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version ({resource.group_version})"
            )
        if kind and kind != resource.kind:
            raise bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({resource.kind})"
            )
        # kind and apiVersion first, as the API server writes every object.
        obj = {"kind": resource.kind, "apiVersion": resource.group_version}
        obj.update(copy.deepcopy(body))
        obj["apiVersion"], obj["kind"] = resource.group_version, resource.kind
        decoding.decode(resource, obj)
        return obj

    @staticmethod
    def _check_name(obj: Obj, name: str) -> None:
        given = (obj.get("metadata") or {}).get("name")
        if given and given != name:
            raise bad_request(
                f"the name of the object ({given}) does not match the name on the URL ({name})"
            )

    @staticmethod
    def _check_namespace(resource: Resource, namespace: str, obj: Obj) -> None:
        given = (obj.get("metadata") or {}).get("namespace")
        if resource.namespaced and given and given != namespace:
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )


def _view(resource: Resource) -> Callable[[Obj], Obj] | None:
    """How objects of a view are converted from their stored form (core v1 events)."""
    return (
        events.to_core
        if resource.storage == "events.k8s.io/events" and resource.read_only
        else None
    )


def _read_only(resource: Resource) -> ApiStatus:
    return method_not_allowed(
        f"{resource.plural} ({resource.group_version}) are read-only in the reconcile sandbox: "
        f"write them through events.k8s.io/v1"
    )


def invalid_object_options() -> ApiStatus:
    return ApiStatus(
        422,
        "Invalid",
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch',
        {
            "group": "meta.k8s.io",
            "kind": "PatchOptions",
            "causes": [
                {
                    "reason": "FieldValueRequired",
                    "message": "Required value: is required for apply patch",
                    "field": "fieldManager",
                }
            ],
        },
    )


# --- selectors -----------------------------------------------------------------------------


def _field_value(obj: Obj, path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, bool):
        return "true" if node else "false"
    return "" if node is None else str(node)


def _parse_field_selector(resource: Resource, text: str) -> list[tuple[str, str, bool]]:
    allowed = ("metadata.name", "metadata.namespace", *resource.selectable_fields)
    terms = []
    for part in _split_unescaped(text, ","):
        if not part:
            continue
        for operator in ("!=", "==", "="):
            field, sep, value = part.partition(operator)
            if sep:
                break
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        field = field.strip()
        if field not in allowed:
            if resource.generic_field_selectors:
                raise bad_request(
                    f'"{field}" is not a known field selector: only "metadata.name", "metadata.namespace"'
                )
            raise bad_request(f"field label not supported: {field}")
        unescaped = value.replace("\\,", ",").replace("\\=", "=").replace("\\\\", "\\")
        terms.append((field, unescaped, operator == "!="))
    return terms


def _split_unescaped(text: str, separator: str) -> list[str]:
    parts, current, escaped = [], "", False
    for char in text:
        if escaped:
            current += "\\" + char
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == separator:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return parts


def _matcher(
    resource: Resource, label_selector: str, field_selector: str
) -> Callable[[Obj], bool] | None:
    try:
        selector = parse(label_selector) if label_selector else None
    except SelectorError as e:
        raise bad_request(str(e)) from None
    terms = _parse_field_selector(resource, field_selector) if field_selector else []
    if selector is None and not terms:
        return None
    # Events are selected by upstream's internal field names, whichever API is asked.
    value_of = events.field_value if resource.key == "events.k8s.io/events" else _field_value

    def match(obj: Obj) -> bool:
        if selector is not None and not selector.matches(
            (obj.get("metadata") or {}).get("labels") or {}
        ):
            return False
        return all(
            ((_field_value if f.startswith("metadata.") else value_of)(obj, f) == v) != negate
            for f, v, negate in terms
        )

    return match


def _scale(obj: Obj) -> Obj:
    metadata = obj["metadata"]
    selector = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            k: metadata[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in metadata
        },
        "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 1)},
        "status": {
            "replicas": (obj.get("status") or {}).get("replicas", 0),
            "selector": ",".join(f"{k}={v}" for k, v in sorted(selector.items())),
        },
    }


def _custom_kind(resource: Resource) -> crds.CustomKind:
    return crds.CustomKind(
        f"{resource.plural}.{resource.group}",
        resource.group,
        resource.version,
        resource.plural,
        resource.kind,
        resource.namespaced,
        resource.schema,
    )


def _structural(resource: Resource, obj: Obj) -> None:
    """A custom resource as the API server stores it: fields its schema does not declare
    dropped (pruning), then its defaults filled in."""
    if resource.schema is None:
        return
    for path in sorted(crds.unknown_fields(resource.schema, obj), key=len, reverse=True):
        parent: Any = obj
        for part in path[:-1]:
            parent = parent[part]
        del parent[path[-1]]
    # In place, metadata untouched: the caller holds on to it.
    defaulted = crds.defaulted(resource.schema, obj)
    for key, value in defaulted.items():
        if key != "metadata":
            obj[key] = value


def _established(crd: Obj) -> Obj:
    """The CRD with the status its controller writes once the names are accepted."""
    crd = copy.deepcopy(crd)
    spec = crd.get("spec") or {}
    crd["status"] = {
        "acceptedNames": spec.get("names") or {},
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
            },
        ],
        "storedVersions": [v.get("name") for v in spec.get("versions") or () if v.get("storage")],
    }
    return crd


def _crd_errors(crd: Obj) -> list[apivalidation.FieldError]:
    """What the sandbox checks of a CRD (upstream checks far more; what it does not check
    here it does not serve: a CRD without a group, names or a served version serves
    nothing)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    errors = []
    for field, value in (
        ("spec.group", spec.get("group")),
        ("spec.names.plural", names.get("plural")),
        ("spec.names.kind", names.get("kind")),
    ):
        if not value:
            errors.append(apivalidation.required(field, ""))
    name = (crd.get("metadata") or {}).get("name")
    if not errors and name != f"{names['plural']}.{spec['group']}":
        errors.append(
            apivalidation.invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group')
        )
    errors += [error for error, _ in crds.crd_schema_errors(crd)]
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        errors.append(
            apivalidation.FieldError(
                "Unsupported value",
                "spec.scope",
                spec.get("scope"),
                'supported values: "Cluster", "Namespaced"',
            )
        )
    storage = [v for v in spec.get("versions") or () if isinstance(v, dict) and v.get("storage")]
    if len(storage) != 1:
        errors.append(
            apivalidation.invalid(
                "spec.versions",
                spec.get("versions"),
                "must have exactly one version marked as storage version",
            )
        )
    return errors
