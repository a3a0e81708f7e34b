"""Workload objects from desired/workloads: planning by server-side dry-run, applying with
server-side apply (field manager `reconcile`), and pruning by inventory.

Drift is what the API server says applying would change: the dry-run result against the
live object, both defaulted by the same server, so defaults never show as drift. Every
object reconcile applies carries `app.kubernetes.io/managed-by: reconcile` and is
recorded in an inventory (the ConfigMap `default/reconcile-inventory`); `--prune` deletes
an object only if it is in that inventory, no longer in desired/, and still labelled.

Pruning is guarded: deleting every object of the inventory at once (an empty checkout, a
wrong --desired) needs --allow-empty-prune, and a Namespace is not pruned while desired/
still declares objects in it, nor while it holds objects reconcile does not manage
(unless --prune-namespace-contents). A Node is never pruned, whatever the inventory says
(desired/ declares node facts in node files and groups, never as a Node object).

A Secret's values never reach a plan (see sensitive.py): live, dry-run and desired
objects are compared with every value replaced by a digest, server messages about them
are redacted, and the plan keeps a digest of the configuration instead of the
configuration, which apply reads from desired/ again.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from reconcile import diagnostics as diag
from reconcile.desired.models import DesiredState, Manifest
from reconcile.diagnostics import (
    ApiError,
    Conflict,
    Diagnostic,
    EmptyPrune,
    Invalid,
    NotFound,
    Severity,
)
from reconcile.engine.diff import FieldChange, manifest_drift, object_drift
from reconcile.engine.findings import Finding
from reconcile.engine.grants import Rule
from reconcile.engine.plan import NO_OPTIONS, ObjectAction, ObjectPlan, PlanOptions
from reconcile.kube import sensitive
from reconcile.kube import validation as apivalidation
from reconcile.kube.api import ObjectApi, ResourceFinder
from reconcile.kube.kinds import (
    BUILTIN_NAMESPACED,
    ObjectId,
    apply_rank,
    unknown_builtin_kind,
    workload_id,
)
from reconcile.kube.objects import FIELD_MANAGER, ApiResource

MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "reconcile"
INVENTORY_NAMESPACE: Final = "default"
INVENTORY_NAME: Final = "reconcile-inventory"
INVENTORY_KEY: Final = "objects"
# The inventory's; what desired/ declares needs more, which rbac.py derives from the tree.
RBAC: Final = (
    Rule(
        "",
        ("configmaps",),
        ("get", "patch"),
        (INVENTORY_NAME,),
        why="the inventory of applied objects (what --prune may delete): "
        "read by plan, written by apply",
        where=INVENTORY_NAMESPACE,
    ),
    Rule(
        "",
        ("configmaps",),
        ("create",),
        why="the first apply creates the inventory; RBAC cannot limit create "
        "by resourceNames (the name of a new object is not known when create "
        "is authorized), so create on configmaps is granted in this namespace "
        "only",
        where=INVENTORY_NAMESPACE,
    ),
)
# Kinds --prune never deletes, whatever an (older) inventory lists: deleting a Node
# deregisters a machine, and node facts are not objects (desired/nodes, desired/groups).
NEVER_PRUNED: Final = frozenset({("v1", "Node")})
CONFIGMAPS: Final = ApiResource("", "v1", "configmaps", "ConfigMap", True)
NAMESPACES: Final = ApiResource("", "v1", "namespaces", "Namespace", False)

# What the control plane puts in every namespace by itself: not content a person made.
NAMESPACE_DEFAULTS: Final = frozenset(
    {
        ("", "ServiceAccount", "default"),
        ("", "ConfigMap", "kube-root-ca.crt"),
        # OpenShift (and MicroShift) publish their service CA the same way.
        ("", "ConfigMap", "openshift-service-ca.crt"),
    }
)
# Kinds that record or mirror other objects rather than being made by anyone.
NAMESPACE_BOOKKEEPING: Final = frozenset(
    {("", "Event"), ("events.k8s.io", "Event"), ("", "Endpoints"), ("", "PodTemplate")}
)


def applied_config(manifest: Manifest) -> dict[str, Any]:
    """The configuration reconcile applies: the manifest, labelled as managed by reconcile."""
    config = copy.deepcopy(manifest.body)
    labels = config.setdefault("metadata", {}).setdefault("labels", {}) or {}
    labels[MANAGED_BY_LABEL] = MANAGED_BY
    config["metadata"]["labels"] = labels
    return config


def inventory_entry(api_version: str, kind: str, namespace: str, name: str) -> str:
    return f"{api_version} {kind} {namespace or '-'} {name}"


def parse_inventory_entry(entry: str) -> tuple[str, str, str, str] | None:
    parts = entry.split()
    if len(parts) != 4:
        return None
    api_version, kind, namespace, name = parts
    return api_version, kind, "" if namespace == "-" else namespace, name


def reconcile_fields(live: Mapping[str, Any]) -> dict[str, Any] | None:
    """FieldsV1 of reconcile's own apply entry in the live object, if any."""
    for entry in (live.get("metadata") or {}).get("managedFields") or ():
        if entry.get("manager") == FIELD_MANAGER and entry.get("operation") == "Apply":
            return dict(entry.get("fieldsV1") or {})
    return None


def is_immutable(error: ApiError) -> bool:
    """A 422 that says a field cannot change in place (pods, selectors, ...)."""
    text = " ".join([error.message, *(str(c.get("message", "")) for c in error.causes)])
    return "immutable" in text or "may not change fields" in text


@dataclass
class ObjectPlanning:
    objects: list[ObjectPlan] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    prunable: list[str] = field(default_factory=list)
    never_pruned: list[str] = field(default_factory=list)
    inventory: tuple[str, ...] | None = None


@dataclass(frozen=True)
class _Target:
    manifest: Manifest
    resource: ApiResource
    config: dict[str, Any]

    @property
    def identity(self) -> ObjectId:
        return ObjectId(self.resource.group, self.resource.kind, self.namespace, self.manifest.name)

    @property
    def id(self) -> str:
        return str(self.identity)

    @property
    def namespace(self) -> str:
        return self.manifest.namespace if self.resource.namespaced else ""

    @property
    def sensitive(self) -> bool:
        return sensitive.is_sensitive(self.resource.api_version, self.resource.kind)


def plan_objects(
    state: DesiredState,
    cluster: ObjectApi,
    options: PlanOptions = NO_OPTIONS,
) -> ObjectPlanning:
    """Plan every manifest with `options`: one LIST per kind and namespace, one dry-run
    apply per object that exists (and per new object whose namespace exists), then the
    prune candidates.
    The inventory is read even when desired/ declares nothing, so that what a prune would
    delete is always known."""
    planning = ObjectPlanning()
    discovery = cluster.discovery()
    targets = _targets(state.manifests, discovery, planning)
    live = _live(targets, cluster)
    declared_namespaces = {t.manifest.name for t in targets if t.resource.kind == "Namespace"}
    # Namespaces desired/ uses but does not create: one GET each (not a LIST of every
    # namespace), so the role needs `get` on exactly those names (see rbac.py).
    existing_namespaces: dict[str, bool] = {}
    for target in targets:
        current = live.get(target.identity)
        if current is None:
            if target.resource.namespaced and target.namespace not in declared_namespaces:
                if target.namespace not in existing_namespaces:
                    existing_namespaces[target.namespace] = (
                        cluster.get_object(NAMESPACES, "", target.namespace) is not None
                    )
                if not existing_namespaces[target.namespace]:
                    planning.findings.append(
                        _finding(
                            "namespace-missing",
                            target,
                            f"namespace {target.namespace} does not exist and desired/ does not create it",
                        )
                    )
                    continue
            _plan_create(
                target, cluster, declared_namespaces, planning, force=options.forceConflicts
            )
        else:
            _plan_update(
                target,
                current,
                cluster,
                planning,
                force=options.forceConflicts,
                recreate=options.recreate,
            )
    _plan_prune(
        state,
        targets,
        discovery,
        cluster,
        planning,
        prune=options.prune,
        allow_empty_prune=options.allowEmptyPrune,
        prune_namespace_contents=options.pruneNamespaceContents,
    )
    return planning


def _finding(
    kind: str, target: _Target, message: str, live: Mapping[str, Any] | None = None
) -> Finding:
    """Something the API server would reject: apply writes nothing while it stands."""
    if target.sensitive:
        # The cluster layer redacts what it saw; this also covers messages made offline.
        found = sensitive.values(target.config) | sensitive.values(live or {})
        message = sensitive.redact(message, found)
    return Finding(
        severity=Severity.ERROR,
        kind=kind,
        subject=target.id,
        message=f"{message} ({target.manifest.source})",
        blocksApply=True,
    )


def _targets(
    manifests: Iterable[Manifest], discovery: ResourceFinder, planning: ObjectPlanning
) -> list[_Target]:
    targets = []
    for manifest in manifests:
        resource = discovery.resource_for(manifest.api_version, manifest.kind)
        if resource is None:
            planning.findings.append(
                Finding(
                    severity=Severity.ERROR,
                    blocksApply=True,
                    kind="unknown-kind",
                    subject=workload_id(manifest.kind, manifest.namespace, manifest.name),
                    message=f"the API server does not serve apiVersion {manifest.api_version} kind {manifest.kind} ({manifest.source})",
                )
            )
            continue
        targets.append(_Target(manifest, resource, applied_config(manifest)))
    return sorted(
        targets,
        key=lambda t: (apply_rank(t.resource.kind), t.resource.kind, t.namespace, t.manifest.name),
    )


def _live(targets: list[_Target], cluster: ObjectApi) -> dict[ObjectId, dict[str, Any]]:
    """The live objects of every (kind, namespace) the targets live in: one LIST each."""
    found: dict[ObjectId, dict[str, Any]] = {}
    seen: set[tuple[str, str, str]] = set()
    for target in targets:
        key = (target.resource.api_version, target.resource.plural, target.namespace)
        if key in seen:
            continue
        seen.add(key)
        for item in cluster.list_objects(target.resource, target.namespace):
            metadata = item.get("metadata") or {}
            item.setdefault("apiVersion", target.resource.api_version)
            item.setdefault("kind", target.resource.kind)
            resource = target.resource
            namespace = metadata.get("namespace") or ""
            found[ObjectId(resource.group, resource.kind, namespace, metadata["name"])] = item
    return found


def _object_plan(
    target: _Target,
    action: ObjectAction,
    *,
    version: str | None = None,
    changes: Iterable[FieldChange] = (),
) -> ObjectPlan:
    changes = _marked(changes, is_sensitive=target.sensitive)
    return ObjectPlan(
        apiVersion=target.resource.api_version,
        kind=target.resource.kind,
        namespace=target.namespace,
        name=target.manifest.name,
        plural=target.resource.plural,
        namespaced=target.resource.namespaced,
        source=str(target.manifest.source),
        action=action,
        resourceVersion=version,
        changes=tuple(changes),
        manifest=None if target.sensitive else target.config,
        manifestDigest=sensitive.manifest_digest(target.config) if target.sensitive else None,
    )


def _marked(changes: Iterable[FieldChange], *, is_sensitive: bool) -> list[FieldChange]:
    """The changes, those of a sensitive object's sensitive fields marked as such."""
    if not is_sensitive:
        return list(changes)
    return [
        c.model_copy(update={"sensitive": True}) if sensitive.is_sensitive_path(c.path) else c
        for c in changes
    ]


class _Compared:
    """What drift is computed from: for a sensitive object, copies whose values are
    digests salted with the live object's UID (the same salt on every side, so equal
    values still compare equal)."""

    def __init__(
        self, config: Mapping[str, Any], live: Mapping[str, Any], *, is_sensitive: bool
    ) -> None:
        self.config = config
        self.live = live
        self.sensitive = is_sensitive
        self.salt = str((live.get("metadata") or {}).get("uid") or "")

    def __call__(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        if not self.sensitive:
            return dict(obj)
        return sensitive.masked(obj, self.salt)

    def scope(self) -> dict[str, Any]:
        """The fields the configuration sets, for scoping drift."""
        config = self(self.config)
        return sensitive.secret_scope(config) if self.sensitive else config

    def manifest_drift(self) -> list[FieldChange]:
        return manifest_drift(self(self.config), self(self.live))

    def update_drift(self, result: Mapping[str, Any]) -> list[FieldChange]:
        """What the dry-run `result` of applying the configuration changes in the live
        object, among the fields reconcile sets or set before."""
        return object_drift(
            self.scope(), self(self.live), self(result), owned=reconcile_fields(self.live)
        )


def _plan_create(
    target: _Target,
    cluster: ObjectApi,
    declared_namespaces: set[str],
    planning: ObjectPlanning,
    *,
    force: bool,
) -> None:
    if target.resource.namespaced and target.namespace in declared_namespaces:
        # Its namespace is created by this same apply: the server cannot dry-run it yet,
        # so check it offline with the API server's rules.
        errors = apivalidation.validate_object(
            target.resource.group, target.resource.kind, target.config, namespaced=True
        )
        if errors:
            planning.findings.append(
                _finding("object-invalid", target, apivalidation.aggregate(errors))
            )
            return
    else:
        try:
            cluster.apply_object(target.resource, target.config, dry_run=True, force=force)
        except NotFound as e:
            planning.findings.append(_finding("namespace-missing", target, e.message))
            return
        except ApiError as e:
            planning.findings.append(_finding("object-invalid", target, e.message or str(e)))
            return
    planning.objects.append(_object_plan(target, ObjectAction.CREATE))


def _plan_update(
    target: _Target,
    live: dict[str, Any],
    cluster: ObjectApi,
    planning: ObjectPlanning,
    *,
    force: bool,
    recreate: bool,
) -> None:
    version = str((live.get("metadata") or {}).get("resourceVersion") or "")
    compared = _Compared(target.config, live, is_sensitive=target.sensitive)
    try:
        result = cluster.apply_object(target.resource, target.config, dry_run=True, force=force)
    except Conflict as e:
        recreatable = recreate and _needs_recreate(target, cluster)
        refusal = ("object-conflict", f"{e.message}; --force-conflicts takes ownership")
    except Invalid as e:
        if not is_immutable(e):
            planning.findings.append(
                _finding("object-invalid", target, e.message or str(e), live=live)
            )
            return
        recreatable = recreate
        refusal = (
            "object-immutable",
            f"cannot change in place: {e.message}; --recreate deletes and creates it",
        )
    except ApiError as e:
        planning.findings.append(_finding("object-invalid", target, e.message or str(e), live=live))
        return
    else:
        changes = compared.update_drift(result)
        if changes:
            planning.objects.append(
                _object_plan(target, ObjectAction.UPDATE, version=version, changes=changes)
            )
        return
    # The server refuses the update as it stands: recreate it where allowed (deleted and
    # created anew, whoever owned its fields does not matter), else say why and show the
    # manifest's drift.
    changes = compared.manifest_drift()
    if recreatable:
        planning.objects.append(
            _object_plan(target, ObjectAction.RECREATE, version=version, changes=changes)
        )
        return
    kind, message = refusal
    planning.findings.append(_finding(kind, target, message, live=live))
    planning.objects.append(
        _object_plan(target, ObjectAction.UPDATE, version=version, changes=changes)
    )


def _needs_recreate(target: _Target, cluster: ObjectApi) -> bool:
    """Whether the change, conflicts set aside, is one the server refuses to make in place."""
    try:
        cluster.apply_object(target.resource, target.config, dry_run=True, force=True)
    except Invalid as e:
        return is_immutable(e)
    except ApiError:
        return False
    return False


def read_inventory(cluster: ObjectApi) -> tuple[str, ...]:
    found = cluster.get_object(CONFIGMAPS, INVENTORY_NAMESPACE, INVENTORY_NAME)
    if found is None:
        return ()
    raw = str((found.get("data") or {}).get(INVENTORY_KEY) or "")
    return tuple(line for line in raw.splitlines() if line.strip())


def _plan_prune(
    state: DesiredState,
    targets: list[_Target],
    discovery: ResourceFinder,
    cluster: ObjectApi,
    planning: ObjectPlanning,
    *,
    prune: bool,
    allow_empty_prune: bool,
    prune_namespace_contents: bool,
) -> None:
    current = read_inventory(cluster)
    wanted = {
        inventory_entry(t.resource.api_version, t.resource.kind, t.namespace, t.manifest.name)
        for t in targets
    }
    kept: set[str] = set(wanted)
    prunes: list[ObjectPlan] = []
    for entry in current:
        if entry in wanted:
            continue
        parsed = parse_inventory_entry(entry)
        if parsed is None:
            continue
        api_version, kind, namespace, name = parsed
        if (api_version, kind) in NEVER_PRUNED:
            planning.never_pruned.append(workload_id(kind, namespace, name))
            continue  # not kept: the next apply drops the entry from the inventory
        resource = discovery.resource_for(api_version, kind)
        if resource is None:
            continue
        live = cluster.get_object(resource, namespace, name)
        labels = ((live or {}).get("metadata") or {}).get("labels") or {}
        if live is None or labels.get(MANAGED_BY_LABEL) != MANAGED_BY:
            continue  # gone, or no longer ours: never deleted
        object_id = workload_id(kind, namespace, name)
        if not prune:
            planning.prunable.append(object_id)
            kept.add(entry)
            continue
        prunes.append(
            ObjectPlan(
                apiVersion=api_version,
                kind=kind,
                namespace=namespace,
                name=name,
                plural=resource.plural,
                namespaced=resource.namespaced,
                source="",
                action=ObjectAction.PRUNE,
                resourceVersion=str(live["metadata"].get("resourceVersion") or ""),
            )
        )
    if prunes and not allow_empty_prune and not wanted & set(current):
        shown = ", ".join(p.id for p in prunes[:5]) + (
            f" and {len(prunes) - 5} more" if len(prunes) > 5 else ""
        )
        raise EmptyPrune(
            f"--prune would delete all {len(prunes)} object(s) reconcile manages ({shown}), "
            "because desired/ declares none of them: nothing was changed. Check --desired; "
            "to delete them all on purpose, pass --allow-empty-prune"
        )
    for pruned in (p for p in prunes if p.kind == "Namespace" and not p.namespaced):
        planning.findings.extend(
            _namespace_prune_findings(
                pruned.name,
                targets,
                current,
                discovery,
                cluster,
                prune_namespace_contents=prune_namespace_contents,
            )
        )
    prunes.sort(key=lambda p: (apply_rank(p.kind), p.kind, p.namespace, p.name), reverse=True)
    planning.objects.extend(prunes)
    inventory = tuple(sorted(kept))
    if state.manifests or current:
        planning.inventory = inventory if inventory != tuple(sorted(current)) else None


def _namespace_prune_findings(
    namespace: str,
    targets: list[_Target],
    inventory: Iterable[str],
    discovery: ResourceFinder,
    cluster: ObjectApi,
    *,
    prune_namespace_contents: bool,
) -> list[Finding]:
    """Why deleting `namespace` would take more with it than the plan shows: objects
    desired/ still declares there, or live objects reconcile does not manage."""
    subject = workload_id("Namespace", "", namespace)
    declared = sorted(t.id for t in targets if t.resource.namespaced and t.namespace == namespace)
    if declared:
        return [
            Finding(
                severity=Severity.ERROR,
                blocksApply=True,
                kind="prune-namespace-in-use",
                subject=subject,
                message=(
                    f"desired/ no longer declares this namespace but still declares "
                    f"{len(declared)} object(s) in it ({', '.join(declared)}): deleting it "
                    "deletes them too. Declare the Namespace again, or remove those objects"
                ),
            )
        ]
    if prune_namespace_contents:
        return []
    managed = set()
    for entry in inventory:
        parsed = parse_inventory_entry(entry)
        if parsed is not None and parsed[2] == namespace:
            managed.add((parsed[0].rpartition("/")[0], parsed[1], parsed[3]))
    others: Counter[str] = Counter()
    unreadable: list[str] = []
    for resource in discovery.namespaced_listable():
        if (resource.group, resource.kind) in NAMESPACE_BOOKKEEPING:
            continue
        try:
            items = cluster.list_objects(resource, namespace)
        except ApiError:
            unreadable.append(resource.plural)
            continue
        for item in items:
            metadata = item.get("metadata") or {}
            identity = (resource.group, resource.kind, str(metadata.get("name")))
            if identity in managed or identity in NAMESPACE_DEFAULTS:
                continue
            if metadata.get("ownerReferences"):
                continue  # goes with its owner, which is counted itself
            others[resource.kind] += 1
    if not others and not unreadable:
        return []
    parts = [f"{n} {kind}" for kind, n in sorted(others.items())]
    if unreadable:
        parts.append(f"unknown ({', '.join(sorted(unreadable))} could not be listed)")
    return [
        Finding(
            severity=Severity.ERROR,
            blocksApply=True,
            kind="prune-namespace-not-empty",
            subject=subject,
            message=(
                f"the namespace holds {sum(others.values())} object(s) reconcile does not "
                f"manage ({', '.join(parts)}): deleting it deletes them too. Pass "
                "--prune-namespace-contents to delete it anyway"
            ),
        )
    ]


def _unknown_kinds(state: DesiredState) -> list[Diagnostic]:
    """Offline: a kind a built-in apiVersion does not serve, with the nearest one that it
    does (`plan` asks discovery, where an unknown kind is an error)."""
    found = []
    for manifest in state.manifests:
        nearest = unknown_builtin_kind(manifest.api_version, manifest.kind)
        if nearest is None:
            continue
        found.append(
            diag.warning(
                f"{manifest.api_version} serves no kind {manifest.kind} that reconcile knows",
                manifest.at(("kind",)),
                f"did you mean {nearest}?" if nearest else "check apiVersion and kind",
            )
        )
    return found


def desired_diagnostics(state: DesiredState) -> list[Diagnostic]:
    """Offline: namespaced objects whose namespace desired/ does not create may be fine
    (the namespace may exist already); say so once per namespace, at its first object.
    `plan` says whether it exists."""
    created = {m.name for m in state.manifests if m.kind == "Namespace"}
    users: dict[str, list[Manifest]] = {}
    for manifest in state.manifests:
        namespaced = BUILTIN_NAMESPACED.get((manifest.api_version, manifest.kind), True)
        if not namespaced or not manifest.namespace:
            continue
        if manifest.namespace not in created and manifest.namespace not in SYSTEM_NAMESPACES:
            users.setdefault(manifest.namespace, []).append(manifest)
    return [
        *_unknown_kinds(state),
        *(
            diag.warning(
                f"namespace {namespace} is not created by desired/",
                found[0].at(("metadata", "namespace")),
                f"{len(found)} object(s) here live in it, so it must already exist in the cluster "
                "(`reconcile plan` checks); declare a Namespace document to manage it",
            )
            for namespace, found in users.items()
        ),
    ]


# Namespaces every cluster has from its first moment.
SYSTEM_NAMESPACES: Final = frozenset({"default", "kube-node-lease", "kube-public", "kube-system"})


def inventory_object(entries: Iterable[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": INVENTORY_NAME,
            "namespace": INVENTORY_NAMESPACE,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
        },
        "data": {INVENTORY_KEY: "\n".join(sorted(entries)) + "\n"},
    }


def desired_configs(state: DesiredState) -> dict[ObjectId, dict[str, Any]]:
    """Object identity -> the configuration apply sends, for the objects a plan holds only
    by digest (Secrets): apply takes them from desired/."""
    return {
        m.identity: applied_config(m)
        for m in state.manifests
        if sensitive.is_sensitive(m.api_version, m.kind)
    }


def replan_object(obj: ObjectPlan, config: dict[str, Any], cluster: ObjectApi) -> ObjectPlan | None:
    """An update planned again against the object as it is now (after a 409): the same
    action with the live resourceVersion and changes, or None when it needs nothing."""
    live = cluster.get_object(obj.resource, obj.namespace, obj.name)
    if live is None:
        return obj.model_copy(
            update={"action": ObjectAction.CREATE, "resourceVersion": None, "changes": ()}
        )
    result = cluster.apply_object(obj.resource, config, dry_run=True)
    is_sensitive = sensitive.is_sensitive(obj.apiVersion, obj.kind)
    changes = _marked(
        _Compared(config, live, is_sensitive=is_sensitive).update_drift(result),
        is_sensitive=is_sensitive,
    )
    if not changes:
        return None
    version = str((live.get("metadata") or {}).get("resourceVersion") or "")
    return obj.model_copy(update={"resourceVersion": version, "changes": tuple(changes)})
