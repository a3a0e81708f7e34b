"""Workload objects written by server-side apply: creates and updates in kind order, then
prunes in reverse, then the inventory, every object about to be created recorded in it
first.

A saved plan's object that moved since is stale, never overwritten; a fresh plan's
update that conflicts is planned again against the object as it is now (plan.py). A
change is reported only by the run that made it: one another writer made first (an apply
that found the object already created, a delete that found it gone) is a note, not a
line, so two applies at once print each change once.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from reconcile.diagnostics import Conflict, NotFound, ReconcileError, StalePlan
from reconcile.engine.objects import custom
from reconcile.engine.objects.inventory import (
    CONFIGMAPS,
    INVENTORY_NAME,
    INVENTORY_NAMESPACE,
    inventory_entry,
    inventory_object,
    read_inventory,
)
from reconcile.engine.objects.plan import replan_object
from reconcile.engine.objects.prune import NEVER_PRUNED
from reconcile.engine.plan import ObjectAction, ObjectPlan, Plan
from reconcile.engine.results import DONE_BY_OTHERS, MAX_CONFLICT_RETRIES, ObjectResult
from reconcile.kube import sensitive
from reconcile.kube.api import ObjectApi
from reconcile.kube.crds import CustomKind
from reconcile.kube.kinds import ObjectId


def _config(obj: ObjectPlan, configs: Mapping[ObjectId, dict[str, Any]]) -> dict[str, Any]:
    """The configuration to apply: the plan's own, or desired/'s for one held by digest."""
    if obj.manifestDigest is None:
        return obj.manifest or {}
    config = configs.get(obj.identity)
    if config is None or sensitive.manifest_digest(config) != obj.manifestDigest:
        raise StalePlan(f"plan is stale: {obj.id} is not in desired/ as planned")
    return config


def _body(
    obj: ObjectPlan, *, precondition: bool, configs: Mapping[ObjectId, dict[str, Any]]
) -> dict[str, Any]:
    body = copy.deepcopy(_config(obj, configs))
    if precondition and obj.resourceVersion and obj.action is ObjectAction.UPDATE:
        body.setdefault("metadata", {})["resourceVersion"] = obj.resourceVersion
    return body


def preflight_objects(
    plan: Plan,
    cluster: ObjectApi,
    *,
    saved: bool,
    configs: Mapping[ObjectId, dict[str, Any]] | None = None,
) -> list[str]:
    """Dry-run every create and update as it will be sent: the problems, if any. A
    custom resource whose kind a CRD of the plan defines and the server does not serve
    yet is dry-run by apply_objects, once that CRD is established."""
    return _preflight(plan.objects, plan, cluster, saved=saved, configs=configs or {})


def _preflight(
    objects: Iterable[ObjectPlan],
    plan: Plan,
    cluster: ObjectApi,
    *,
    saved: bool,
    configs: Mapping[ObjectId, dict[str, Any]],
) -> list[str]:
    problems = []
    pending = _pending_kinds(plan, cluster)
    for obj in objects:
        if not obj.action.dry_runs or (obj.apiVersion, obj.kind) in pending:
            continue
        try:
            cluster.apply_object(
                obj.resource,
                _body(obj, precondition=saved, configs=configs),
                dry_run=True,
                force=plan.forceConflicts,
            )
        except NotFound as e:
            if obj.action is ObjectAction.UPDATE or "namespaces" not in e.message:
                problems.append(f"{obj.id}: {e.message}")
            # else: its namespace is created first by this same apply
        except ReconcileError as e:
            problems.append(f"{obj.id}: {getattr(e, 'message', '') or e}")
    return problems


def _pending_kinds(plan: Plan, cluster: ObjectApi) -> dict[tuple[str, str], CustomKind]:
    """The kinds CRDs of the plan define that the server does not serve yet."""
    kinds = custom.plan_kinds(o.manifest for o in plan.objects if o.action.dry_runs)
    if not kinds:
        return {}
    discovery = cluster.discovery()
    return {
        key: kind
        for key, kind in kinds.items()
        if any((o.apiVersion, o.kind) == key for o in plan.objects)
        and discovery.resource_for(*key) is None
    }


def apply_objects(
    plan: Plan,
    cluster: ObjectApi,
    *,
    saved: bool,
    configs: Mapping[ObjectId, dict[str, Any]] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    served_wait: float = 60.0,
) -> tuple[ObjectResult, ...]:
    """Apply creates and updates in kind order, then prunes in reverse; then the inventory.

    Every object about to be created is recorded in the inventory first: an apply that
    stops half-way never leaves an object that a later --prune cannot find. `configs`
    holds, by object id, the configuration of objects the plan holds only by digest
    (`objects.plan.desired_configs`).

    The first custom resource of a kind a CRD of the plan defines, not served yet, waits
    (up to `served_wait` seconds) until that CRD is established and its kind served; then
    every object left is dry-run, and if the server would reject any, none is applied."""
    inventory_id = f"ConfigMap/{INVENTORY_NAMESPACE}/{INVENTORY_NAME}"
    try:
        _record_before_creating(plan, cluster)
    except ReconcileError as e:
        return (ObjectResult(inventory_id, error=str(e)),)
    results: list[ObjectResult] = []
    pending = _pending_kinds(plan, cluster)
    for index, obj in enumerate(plan.objects):
        if should_stop():
            return tuple(results)  # the rest, and the inventory, wait for the next run
        waited = pending.pop((obj.apiVersion, obj.kind), None)
        if waited is not None:
            refused = _await_served(
                waited, plan, plan.objects[index:], cluster, saved, configs or {}, served_wait
            )
            if refused:
                return (*results, *refused)
        try:
            results.append(
                _apply_object(obj, cluster, configs or {}, saved=saved, force=plan.forceConflicts)
            )
        except Conflict as e:
            reason = (
                "plan is stale: the object changed after the plan was made" if saved else e.message
            )
            results.append(ObjectResult(obj.id, error=reason))
        except ReconcileError as e:
            results.append(ObjectResult(obj.id, error=getattr(e, "message", "") or str(e)))
    if plan.inventory is not None and not any(r.error for r in results):
        try:
            cluster.apply_object(CONFIGMAPS, inventory_object(plan.inventory), force=True)
        except ReconcileError as e:
            results.append(ObjectResult(inventory_id, error=str(e)))
    return tuple(results)


def _await_served(
    waited: CustomKind,
    plan: Plan,
    rest: Iterable[ObjectPlan],
    cluster: ObjectApi,
    saved: bool,
    configs: Mapping[ObjectId, dict[str, Any]],
    timeout: float,
) -> list[ObjectResult]:
    """Wait until `waited` is served, then dry-run what is left to apply: what stops the
    apply here, if anything (nothing after this point is applied then)."""
    rest = list(rest)
    try:
        custom.wait_served(waited, cluster, timeout=timeout)
    except ReconcileError as e:
        return [ObjectResult(rest[0].id, error=str(e))]
    problems = _preflight(rest, plan, cluster, saved=saved, configs=configs)
    return [ObjectResult(p.partition(": ")[0], error=p.partition(": ")[2]) for p in problems]


def _record_before_creating(plan: Plan, cluster: ObjectApi) -> None:
    new = {
        inventory_entry(o.apiVersion, o.kind, o.namespace, o.name)
        for o in plan.objects
        if o.action.creates
    }
    if not new:
        return
    current = set(read_inventory(cluster))
    if not new <= current:
        cluster.apply_object(CONFIGMAPS, inventory_object(current | new), force=True)


def _apply_object(
    obj: ObjectPlan,
    cluster: ObjectApi,
    configs: Mapping[ObjectId, dict[str, Any]],
    *,
    saved: bool,
    force: bool,
) -> ObjectResult:
    """One object: its lines when this run changed it, a note when another writer had."""
    if obj.action is ObjectAction.PRUNE:
        if (obj.apiVersion, obj.kind) in NEVER_PRUNED:  # whatever a plan says
            return ObjectResult(obj.id, error="a Node is never pruned")
        if cluster.delete_object(obj.resource, obj.namespace, obj.name):
            return ObjectResult(obj.id, changed=obj)
        return ObjectResult(obj.id, note=f"deleted by another writer first: {DONE_BY_OTHERS}")
    if obj.action is ObjectAction.RECREATE:
        cluster.delete_object(obj.resource, obj.namespace, obj.name)
        _wait_gone(obj, cluster)
    if obj.action.creates:
        if cluster.apply_created(
            obj.resource, _body(obj, precondition=False, configs=configs), force=force
        ):
            return ObjectResult(obj.id, changed=obj)
        return ObjectResult(obj.id, note=f"created by another writer first: {DONE_BY_OTHERS}")
    current = obj
    for _ in range(MAX_CONFLICT_RETRIES):
        try:
            cluster.apply_object(
                current.resource, _body(current, precondition=True, configs=configs), force=force
            )
        except Conflict as e:
            if saved or not _moved_on(e):
                raise
            replanned = replan_object(current, _config(current, configs), cluster)
            if replanned is None:
                return ObjectResult(obj.id, note=DONE_BY_OTHERS)
            if replanned.action is ObjectAction.CREATE:
                return _apply_object(replanned, cluster, configs, saved=saved, force=force)
            current = replanned
            continue
        return ObjectResult(obj.id, changed=current)
    return ObjectResult(
        obj.id,
        error=f"kept conflicting with other writers ({MAX_CONFLICT_RETRIES} times); try again",
    )


# How long a recreate waits for the old object to go: a pod's graceful deletion waits for
# its kubelet (terminationGracePeriodSeconds, 30 s by default).
RECREATE_WAIT: Final = 120.0


def _wait_gone(obj: ObjectPlan, cluster: ObjectApi, *, timeout: float = RECREATE_WAIT) -> None:
    """Until the deleted object is gone: deletion is graceful (a pod stays Terminating
    until its kubelet confirms), and creating it anew before then would update the old
    one instead, which a pod refuses."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while cluster.get_object(obj.resource, obj.namespace, obj.name) is not None:
        if time.monotonic() > deadline:
            raise ReconcileError(
                f"{obj.id} was deleted but is still there after {timeout:g}s "
                "(graceful deletion not finished): run apply again once it is gone"
            )
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


def _moved_on(error: Conflict) -> bool:
    """A 409 from the resourceVersion precondition, not a field-ownership conflict."""
    return "has been modified" in error.message
