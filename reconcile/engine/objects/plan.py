"""Workload objects planned by server-side dry-run (field manager `reconcile`).

Drift is what the API server says applying would change: the dry-run result against the
live object, both defaulted by the same server, so defaults never show as drift. Every
configuration reconcile applies carries `app.kubernetes.io/managed-by: reconcile`.
`plan_objects` returns the creates, updates and recreates in apply order, the prunes
after them (prune.py), the findings of what the server would reject, and the inventory to
record; `replan_object` an update planned again against the object as it is now.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

from reconcile import diagnostics as diag
from reconcile.desired.models import DesiredState, Manifest
from reconcile.desired.problems import manifest_path
from reconcile.diagnostics import (
    ApiError,
    Conflict,
    Diagnostic,
    Invalid,
    NotFound,
    Severity,
    Source,
)
from reconcile.engine.diff import FieldChange, manifest_drift, object_drift, owns
from reconcile.engine.findings import Finding
from reconcile.engine.objects import custom
from reconcile.engine.objects.inventory import MANAGED_BY, MANAGED_BY_LABEL
from reconcile.engine.objects.prune import plan_prune
from reconcile.engine.objects.targets import DRY_RUNS_AT_ONCE, ObjectPlanning, Target
from reconcile.engine.objects.unchanged import applied_entry, unchanged_by_apply
from reconcile.engine.plan import NO_OPTIONS, ObjectAction, ObjectPlan, PlanOptions
from reconcile.kube import crds, sensitive
from reconcile.kube import validation as apivalidation
from reconcile.kube.api import ObjectApi, ResourceFinder
from reconcile.kube.crds import CustomKind
from reconcile.kube.kinds import (
    BUILTIN_NAMESPACED,
    ObjectId,
    apply_rank,
    unknown_builtin_kind,
    workload_id,
)
from reconcile.kube.objects import FIELD_MANAGER, ApiResource
from reconcile.kube.validation import FieldError

NAMESPACES: Final = ApiResource("", "v1", "namespaces", "Namespace", False)


def applied_config(manifest: Manifest) -> dict[str, Any]:
    """The configuration reconcile applies: the manifest, labelled as managed by reconcile."""
    config = copy.deepcopy(manifest.body)
    labels = config.setdefault("metadata", {}).setdefault("labels", {}) or {}
    labels[MANAGED_BY_LABEL] = MANAGED_BY
    config["metadata"]["labels"] = labels
    return config


def reconcile_fields(live: Mapping[str, Any]) -> dict[str, Any] | None:
    """FieldsV1 of reconcile's own apply entry in the live object, if any."""
    entry = applied_entry(live)
    return None if entry is None else dict(entry.get("fieldsV1") or {})


def is_immutable(error: ApiError) -> bool:
    """A 422 that says a field cannot change in place (pods, selectors, ...)."""
    text = " ".join([error.message, *(str(c.get("message", "")) for c in error.causes)])
    return "immutable" in text or "may not change fields" in text


def plan_objects(
    state: DesiredState,
    cluster: ObjectApi,
    options: PlanOptions = NO_OPTIONS,
) -> ObjectPlanning:
    """Plan every manifest with `options`: one LIST per kind and namespace, one dry-run
    apply per object that exists (and per new object whose namespace exists),
    DRY_RUNS_AT_ONCE at a time, each object's results in the targets' order, then the
    prune candidates.
    The inventory is read even when desired/ declares nothing, so that what a prune would
    delete is always known."""
    planning = ObjectPlanning()
    discovery = cluster.discovery()
    tree_kinds = custom.tree_kinds(state.manifests)
    targets = _targets(state.manifests, discovery, planning, tree_kinds)
    live = _live(targets, cluster)
    changing = custom.changing_kinds(
        tree_kinds,
        (
            live[t.identity]
            for t in targets
            if t.identity in live and crds.is_crd(t.resource.api_version, t.resource.kind)
        ),
    )
    declared_namespaces = {t.manifest.name for t in targets if t.resource.kind == "Namespace"}
    # Namespaces desired/ uses but does not create: one GET each (not a LIST of every
    # namespace), so the role needs `get` on exactly those names (see rbac.py).
    existing_namespaces: dict[str, bool] = {}
    # Each target's own findings and objects, merged in the targets' order once planned.
    planned: list[ObjectPlanning | Target] = []
    for target in targets:
        if (
            target.identity not in live
            and target.resource.namespaced
            and target.namespace not in declared_namespaces
        ):
            if target.namespace not in existing_namespaces:
                existing_namespaces[target.namespace] = (
                    cluster.get_object(NAMESPACES, "", target.namespace) is not None
                )
            if not existing_namespaces[target.namespace]:
                missing = (
                    f"namespace {target.namespace} does not exist and desired/ does not create it"
                )
                planned.append(
                    ObjectPlanning(findings=[_finding("namespace-missing", target, missing)])
                )
                continue
        planned.append(target)

    def one(target: Target) -> ObjectPlanning:
        own = ObjectPlanning()
        current = live.get(target.identity)
        if current is None:
            _plan_create(target, cluster, declared_namespaces, own, force=options.forceConflicts)
        else:
            _plan_update(
                target,
                current,
                cluster,
                own,
                force=options.forceConflicts,
                recreate=options.recreate,
                changing=changing.get((target.manifest.api_version, target.manifest.kind)),
            )
        return own

    for own in _each(one, planned):
        planning.findings += own.findings
        planning.objects += own.objects
    plan_prune(
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


def _each(
    one: Callable[[Target], ObjectPlanning], planned: list[ObjectPlanning | Target]
) -> Iterator[ObjectPlanning]:
    """`one` of every target of `planned`, DRY_RUNS_AT_ONCE at a time, and what is planned
    already as it is, in `planned`'s order. An error stops what has not started."""
    pool = ThreadPoolExecutor(max_workers=DRY_RUNS_AT_ONCE, thread_name_prefix="reconcile-plan")
    try:
        futures = [
            item if isinstance(item, ObjectPlanning) else pool.submit(one, item) for item in planned
        ]
        for future in futures:
            yield future if isinstance(future, ObjectPlanning) else future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _finding(
    kind: str,
    target: Target,
    message: str,
    live: Mapping[str, Any] | None = None,
    *,
    error: ApiError | None = None,
) -> Finding:
    """Something the API server would reject: apply writes nothing while it stands. At
    the line of the field `error` is about, when the manifest writes it; else at the
    document's first line."""
    where = target.manifest.source if error is None else rejected_at(target.manifest, error)
    hint = None if error is None else null_hint(error)
    if hint:
        message = f"{message}; {hint}"
    if target.sensitive:
        # The cluster layer redacts what it saw; this also covers messages made offline.
        found = sensitive.values(target.config) | sensitive.values(live or {})
        message = sensitive.redact(message, found)
    return Finding(
        severity=Severity.ERROR,
        kind=kind,
        subject=target.id,
        message=f"{message} ({where})",
        blocksApply=True,
    )


def _refused_offline(
    target: Target,
    message: str,
    errors: Sequence[FieldError],
    live: Mapping[str, Any] | None = None,
) -> Finding:
    """An object-invalid finding for what was refused here, not by the server: at the
    first field error's line, as the server's 422 would be."""
    causes = tuple({"field": e.field} for e in errors)
    return _finding(
        "object-invalid", target, message, live, error=Invalid(422, "Invalid", message, causes)
    )


# The field of an error that names none in its causes: a CRD's schema validation
# (`spec.validator.plugin in body must be of type object: "null"`), and server-side
# apply's typed conversion (`failed to create typed patch object (ns/name; apps/v1,
# Kind=Deployment): .spec.replicas: expected numeric (int or float), got string`).
_FIELD_IN_MESSAGE: Final = (
    re.compile(r"(?:^|: )([A-Za-z][^\s:]*) in body "),
    re.compile(r"failed to create typed patch object \([^)]*\): (\.[^\s:]+): "),
)
_NULL_TYPE: Final = re.compile(r'must be of type (object|array): "null"')


def rejected_fields(error: ApiError) -> list[str]:
    """The field paths a rejection names, as the API server writes them, causes first."""
    found = [str(c["field"]) for c in error.causes if c.get("field")]
    for text in (error.message, *(str(c.get("message", "")) for c in error.causes)):
        found += [m.group(1) for pattern in _FIELD_IN_MESSAGE if (m := pattern.search(text))]
    return found


def rejected_at(manifest: Manifest, error: ApiError) -> Source:
    """Where the manifest writes the first field `error` names that it has (the key's
    line and column), else its document's first line."""
    for name in rejected_fields(error):
        path = manifest_path(name, manifest.body)
        if path:
            return manifest.at(path, key=True)
    return manifest.source


def null_hint(error: ApiError) -> str | None:
    """What to write instead of a null where the schema wants an object or a list."""
    for text in (error.message, *(str(c.get("message", "")) for c in error.causes)):
        if m := _NULL_TYPE.search(text):
            return f"write {'{}' if m.group(1) == 'object' else '[]'} or remove the key"
    return None


def _targets(
    manifests: Iterable[Manifest],
    discovery: ResourceFinder,
    planning: ObjectPlanning,
    tree_kinds: Mapping[tuple[str, str], CustomKind],
) -> list[Target]:
    """Each manifest with the resource serving it; a custom resource whose CRD is in the
    tree but not served yet is pending (created after its CRD, never dry-run first)."""
    targets = []
    for manifest in manifests:
        resource = discovery.resource_for(manifest.api_version, manifest.kind)
        defined = tree_kinds.get((manifest.api_version, manifest.kind))
        if resource is None and defined is not None:
            targets.append(
                Target(manifest, custom.resource(defined), applied_config(manifest), pending=True)
            )
            continue
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
        targets.append(Target(manifest, resource, applied_config(manifest)))
    return sorted(
        targets,
        key=lambda t: (apply_rank(t.resource.kind), t.resource.kind, t.namespace, t.manifest.name),
    )


def _live(targets: list[Target], cluster: ObjectApi) -> dict[ObjectId, dict[str, Any]]:
    """The live objects of every (kind, namespace) the targets live in: one LIST each."""
    found: dict[ObjectId, dict[str, Any]] = {}
    seen: set[tuple[str, str, str]] = set()
    for target in targets:
        key = (target.resource.api_version, target.resource.plural, target.namespace)
        if target.pending or key in seen:
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
    target: Target,
    action: ObjectAction,
    *,
    version: str | None = None,
    changes: Iterable[FieldChange] = (),
    taken_from: tuple[str, ...] = (),
    checked_offline: bool = False,
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
        takenFrom=taken_from or None,
        manifest=None if target.sensitive else target.config,
        manifestDigest=sensitive.manifest_digest(target.config) if target.sensitive else None,
        checkedOffline=checked_offline or None,
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
    target: Target,
    cluster: ObjectApi,
    declared_namespaces: set[str],
    planning: ObjectPlanning,
    *,
    force: bool,
) -> None:
    if target.pending:
        # Validated offline against its CRD's schema (custom.desired_diagnostics).
        planning.findings.append(
            Finding(
                severity=Severity.WARNING,
                kind="not-dry-run",
                subject=target.id,
                message=(
                    f"checked offline only (not dry-run): the API server does not serve "
                    f"{target.resource.api_version} {target.resource.kind} until "
                    f"CustomResourceDefinition {target.resource.plural}.{target.resource.group} "
                    f"in desired/ is applied; apply writes that CRD first, waits until it is "
                    f"established, and dry-runs this before writing anything else "
                    f"({target.manifest.source})"
                ),
            )
        )
    elif target.resource.namespaced and target.namespace in declared_namespaces:
        # Its namespace is created by this same apply: the server cannot dry-run it yet,
        # so check it offline with the API server's rules.
        errors = apivalidation.validate_object(
            target.resource.group, target.resource.kind, target.config, namespaced=True
        )
        if errors:
            planning.findings.append(
                _refused_offline(target, apivalidation.aggregate(errors), errors)
            )
            return
    else:
        try:
            cluster.apply_object(target.resource, target.config, dry_run=True, force=force)
        except NotFound as e:
            planning.findings.append(_finding("namespace-missing", target, e.message))
            return
        except ApiError as e:
            planning.findings.append(
                _finding("object-invalid", target, e.message or str(e), error=e)
            )
            return
    offline = target.pending or (
        target.resource.namespaced and target.namespace in declared_namespaces
    )
    planning.objects.append(_object_plan(target, ObjectAction.CREATE, checked_offline=offline))


# The field managers kubectl writes as when a person changes an object by hand, with or
# without a subresource (`"kubectl" with subresource "scale"`: `kubectl scale`, and any
# command that names no manager of its own, is `kubectl`, the user agent's name), and the
# one the API server gives fields set before any server-side apply. A field one of them
# owns is drift a person made: apply takes it back without --force-conflicts. Any other
# manager is a controller (an HPA owning `replicas`): taking its field needs
# --force-conflicts. (kubectl's managers: staging/src/k8s.io/kubectl/pkg/cmd/*, each
# command's `FieldManager` default.)
PEOPLE: Final = frozenset(
    {
        "kubectl",
        "kubectl-annotate",
        "kubectl-client-side-apply",
        "kubectl-create",
        "kubectl-edit",
        "kubectl-label",
        "kubectl-patch",
        "kubectl-replace",
        "kubectl-rollout",
        "kubectl-set",
        "before-first-apply",
    }
)
# A 409 cause's message: `conflict with "kubectl-edit" using apps/v1` (the manager
# Go-quoted, as the API server's printManager writes it; an Apply manager has no `using`).
_CONFLICT_WITH: Final = re.compile(r'^conflict with ("(?:[^"\\]|\\.)*")')


def conflicting_managers(error: Conflict) -> tuple[str, ...] | None:
    """The field managers a server-side apply conflict names (its causes), sorted; None
    when it names none (a 409 that is not a field conflict, or one not understood)."""
    found = set()
    for cause in error.causes:
        if cause.get("reason") != "FieldManagerConflict":
            continue
        match = _CONFLICT_WITH.match(str(cause.get("message") or ""))
        if match is None:
            return None
        try:
            found.add(str(json.loads(match.group(1))))
        except ValueError:
            return None
    return tuple(sorted(found)) or None


def dry_run_update(
    resource: ApiResource, config: dict[str, Any], cluster: ObjectApi, *, force: bool
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The dry-run result of applying `config`, and the people (PEOPLE) whose fields it
    takes back: a conflict with people only is dry-run again with force. A conflict with
    any other manager is raised as it is."""
    try:
        return cluster.apply_object(resource, config, dry_run=True, force=force), ()
    except Conflict as e:
        managers = conflicting_managers(e)
        if managers is None or not set(managers) <= PEOPLE:
            raise
    return cluster.apply_object(resource, config, dry_run=True, force=True), managers


def _plan_update(
    target: Target,
    live: dict[str, Any],
    cluster: ObjectApi,
    planning: ObjectPlanning,
    *,
    force: bool,
    recreate: bool,
    changing: CustomKind | None = None,
) -> None:
    """`changing`: the kind as the tree's CRD, which apply writes first, defines it with
    another schema than the cluster's: the update is judged by its rules too."""
    if unchanged_by_apply(target.config, live):
        return  # in sync: the server would find nothing to change (unchanged.py)
    version = str((live.get("metadata") or {}).get("resourceVersion") or "")
    compared = _Compared(target.config, live, is_sensitive=target.sensitive)

    def refused(kind: str, message: str, error: ApiError, changes: list[FieldChange]) -> None:
        """A blocking finding, and the update it stops, with `changes` shown."""
        planning.findings.append(_finding(kind, target, message, live=live, error=error))
        planning.objects.append(
            _object_plan(target, ObjectAction.UPDATE, version=version, changes=changes)
        )

    try:
        result, taken_from = dry_run_update(target.resource, target.config, cluster, force=force)
    except Conflict as e:
        # A controller owns a field the configuration changes. What forcing would change
        # is still shown exactly (a forced dry-run writes nothing); the finding names the
        # manager, as the server's message does.
        try:
            forced = cluster.apply_object(target.resource, target.config, dry_run=True, force=True)
            changes = _with_managers(compared.update_drift(forced), live)
        except Invalid as forced_error:
            if recreate and is_immutable(forced_error):
                planning.objects.append(
                    _object_plan(
                        target,
                        ObjectAction.RECREATE,
                        version=version,
                        changes=compared.manifest_drift(),
                    )
                )
                return
            changes = compared.manifest_drift()
        except ApiError:
            changes = _with_managers(compared.manifest_drift(), live)
        refused("object-conflict", f"{e.message}; --force-conflicts takes ownership", e, changes)
        return
    except Invalid as e:
        if not is_immutable(e):
            planning.findings.append(
                _finding("object-invalid", target, e.message or str(e), live=live, error=e)
            )
            return
        # The server refuses the update as it stands: recreate it where allowed (deleted
        # and created anew, whoever owned its fields does not matter), else say why and
        # show the manifest's drift.
        changes = compared.manifest_drift()
        if recreate:
            planning.objects.append(
                _object_plan(target, ObjectAction.RECREATE, version=version, changes=changes)
            )
            return
        message = f"cannot change in place: {e.message}; --recreate deletes and creates it"
        refused("object-immutable", message, e, changes)
        return
    except ApiError as e:
        planning.findings.append(
            _finding("object-invalid", target, e.message or str(e), live=live, error=e)
        )
        return
    if changing is not None and (errors := custom.update_rule_errors(changing, result, live)):
        message = (
            f'{target.resource.kind}.{target.resource.group} "{target.manifest.name}" is '
            f"invalid: {apivalidation.aggregate(errors)} (by the rules of "
            f"CustomResourceDefinition {changing.crd} in desired/, which apply writes first; "
            "the cluster's dry run still judges by the schema it serves)"
        )
        planning.findings.append(_refused_offline(target, message, errors, live))
        return
    changes = compared.update_drift(result)
    if changes:
        planning.objects.append(
            _object_plan(
                target,
                ObjectAction.UPDATE,
                version=version,
                changes=_with_managers(changes, live),
                taken_from=taken_from,
            )
        )


def _with_managers(changes: Iterable[FieldChange], live: Mapping[str, Any]) -> list[FieldChange]:
    """The changes, each with the field manager (not reconcile) that owns its live value."""
    return [
        c.model_copy(update={"manager": owner}) if (owner := field_owner(c.path, live)) else c
        for c in changes
    ]


def field_owner(path: tuple[str | int, ...], live: Mapping[str, Any]) -> str | None:
    """The field manager other than reconcile that owns `path` of `live` (per its
    managedFields; the first by name when several share it), or None."""
    owners = sorted(
        str(entry.get("manager"))
        for entry in (live.get("metadata") or {}).get("managedFields") or ()
        if entry.get("manager") != FIELD_MANAGER
        and entry.get("fieldsV1")
        and owns(path, entry["fieldsV1"], live)
    )
    return owners[0] if owners else None


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
        *custom.desired_diagnostics(state),
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


def desired_configs(state: DesiredState) -> dict[ObjectId, dict[str, Any]]:
    """Object identity -> the configuration apply sends, for the objects a plan holds only
    by digest (Secrets): apply takes them from desired/."""
    return {
        m.identity: applied_config(m)
        for m in state.manifests
        if sensitive.is_sensitive(m.api_version, m.kind)
    }


def replan_object(
    obj: ObjectPlan, config: dict[str, Any], cluster: ObjectApi, *, force: bool = False
) -> ObjectPlan | None:
    """An update planned again against the object as it is now (after a 409): the same
    action with the live resourceVersion and changes (and the people it takes them back
    from), or None when it needs nothing."""
    live = cluster.get_object(obj.resource, obj.namespace, obj.name)
    if live is None:
        return obj.model_copy(
            update={"action": ObjectAction.CREATE, "resourceVersion": None, "changes": ()}
        )
    result, taken_from = dry_run_update(obj.resource, config, cluster, force=force)
    is_sensitive = sensitive.is_sensitive(obj.apiVersion, obj.kind)
    changes = _marked(
        _Compared(config, live, is_sensitive=is_sensitive).update_drift(result),
        is_sensitive=is_sensitive,
    )
    if not changes:
        return None
    version = str((live.get("metadata") or {}).get("resourceVersion") or "")
    return obj.model_copy(
        update={
            "resourceVersion": version,
            "changes": tuple(_with_managers(changes, live)),
            "takenFrom": taken_from or None,
        }
    )
