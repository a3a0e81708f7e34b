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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

from reconcile.diagnostics import Conflict, ReconcileError, StalePlan
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
from reconcile.engine.objects.targets import DRY_RUNS_AT_ONCE
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


# What apply writes before it dry-runs the rest, when the cluster lacks it: what the
# server needs before it can dry-run objects of the plan (their kind, their namespace).
_STAGED_KINDS: Final = frozenset(
    {("v1", "Namespace"), ("apiextensions.k8s.io/v1", "CustomResourceDefinition")}
)


@dataclass(frozen=True)
class DryRun:
    """The server's dry run of a plan's objects: what it refused (`id: message`), and what
    it could not dry-run yet (custom resources of a CRD the plan creates, objects in a
    Namespace it creates) until the staged objects are written."""

    refused: tuple[str, ...] = ()
    deferred: tuple[ObjectPlan, ...] = ()


def staged_objects(plan: Plan, cluster: ObjectApi) -> tuple[ObjectPlan, ...]:
    """What apply writes first: the CRDs and Namespaces the cluster lacks, and the CRDs
    whose update makes a kind of the plan served."""
    pending = {kind.crd for kind in _pending_kinds(plan, cluster).values()}
    return tuple(
        o
        for o in plan.objects
        if (o.apiVersion, o.kind) in _STAGED_KINDS
        and (o.action is ObjectAction.CREATE or (o.action.dry_runs and o.name in pending))
    )


def dry_run_objects(
    plan: Plan,
    cluster: ObjectApi,
    *,
    saved: bool,
    configs: Mapping[ObjectId, dict[str, Any]] | None = None,
    only: Iterable[ObjectPlan] | None = None,
    after_staging: bool = False,
) -> DryRun:
    """Every object of the plan (or `only` these) dry-run by the server as it will be
    sent, DRY_RUNS_AT_ONCE at a time: creates and updates by server-side apply
    (`dryRun=All`, the same field manager and force), prunes and recreates by a dry-run
    delete. An object the server cannot dry-run before the staged objects are written
    (its kind not served yet; unless `after_staging`, its namespace one the plan creates)
    is deferred, not refused."""
    objects = list(plan.objects if only is None else only)
    pending = _pending_kinds(plan, cluster)
    new_namespaces = (
        set()
        if after_staging
        else {
            o.name
            for o in plan.objects
            if o.kind == "Namespace" and o.action is ObjectAction.CREATE
        }
    )
    deferred = [
        o
        for o in objects
        if o.action.dry_runs
        and (
            (o.apiVersion, o.kind) in pending
            or (o.namespaced and o.namespace in new_namespaces and o.kind != "Namespace")
        )
    ]
    later = {o.id for o in deferred}
    asked = [o for o in objects if o.id not in later and _dry_runnable(o)]

    def one(obj: ObjectPlan) -> str | None:
        try:
            _dry_run(obj, cluster, plan, saved=saved, configs=configs or {})
        except StalePlan:
            raise
        except ReconcileError as e:
            return f"{obj.id}: {getattr(e, 'message', '') or e}"
        return None

    with ThreadPoolExecutor(max_workers=DRY_RUNS_AT_ONCE) as pool:
        refused = [r for r in pool.map(one, asked) if r is not None]
    return DryRun(tuple(refused), tuple(deferred))


def _dry_runnable(obj: ObjectPlan) -> bool:
    if obj.action.dry_runs:
        return True
    # A Node is never pruned, whatever a plan says: apply refuses it without asking.
    return (obj.apiVersion, obj.kind) not in NEVER_PRUNED


def _dry_run(
    obj: ObjectPlan,
    cluster: ObjectApi,
    plan: Plan,
    *,
    saved: bool,
    configs: Mapping[ObjectId, dict[str, Any]],
) -> None:
    if not obj.action.dry_runs:
        # A delete that finds the object gone is what deleting wanted.
        cluster.delete_object(obj.resource, obj.namespace, obj.name, dry_run=True)
        return
    cluster.apply_object(
        obj.resource,
        _body(obj, precondition=saved, configs=configs),
        dry_run=True,
        force=plan.forceConflicts or bool(obj.takenFrom),
    )


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


def apply_staged(
    plan: Plan,
    staged: Iterable[ObjectPlan],
    cluster: ObjectApi,
    *,
    configs: Mapping[ObjectId, dict[str, Any]] | None = None,
    served_wait: float = 60.0,
) -> tuple[ObjectResult, ...]:
    """The staged objects written (recorded in the inventory first), then, for every kind
    of the plan they make served, a wait (up to `served_wait` seconds) until its CRD is
    Established and discovery serves it: custom resources sent in the first moments after
    their CRD is created may skip validation (kubernetes/kubernetes#104090). The results;
    one with an error stops the apply."""
    staged = list(staged)
    if not staged:
        return ()
    pending = _pending_kinds(plan, cluster)
    try:
        _record_before_creating(plan, cluster, among=staged)
    except ReconcileError as e:
        return (ObjectResult(f"ConfigMap/{INVENTORY_NAMESPACE}/{INVENTORY_NAME}", error=str(e)),)
    results = []
    for obj in staged:
        try:
            results.append(
                _apply_object(obj, cluster, configs or {}, saved=False, force=plan.forceConflicts)
            )
        except ReconcileError as e:
            return (*results, ObjectResult(obj.id, error=getattr(e, "message", "") or str(e)))
    for key, kind in pending.items():
        try:
            custom.wait_served(kind, cluster, timeout=served_wait)
        except ReconcileError as e:
            waiting = next(o for o in plan.objects if (o.apiVersion, o.kind) == key)
            return (*results, ObjectResult(waiting.id, error=str(e)))
    return tuple(results)


def preflight_objects(
    plan: Plan,
    cluster: ObjectApi,
    *,
    saved: bool,
    configs: Mapping[ObjectId, dict[str, Any]] | None = None,
) -> list[str]:
    """The problems the server's dry run of the plan's objects finds (dry_run_objects);
    what it cannot dry-run yet is left out."""
    return list(dry_run_objects(plan, cluster, saved=saved, configs=configs).refused)


def apply_objects(
    plan: Plan,
    cluster: ObjectApi,
    *,
    saved: bool,
    configs: Mapping[ObjectId, dict[str, Any]] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    served_wait: float = 60.0,
    done: Iterable[ObjectResult] = (),
) -> tuple[ObjectResult, ...]:
    """Apply creates and updates in kind order, then prunes in reverse; then the inventory.

    Every object about to be created is recorded in the inventory first: an apply that
    stops half-way never leaves an object that a later --prune cannot find. `configs`
    holds, by object id, the configuration of objects the plan holds only by digest
    (`objects.plan.desired_configs`). `done` is what apply_staged wrote already: kept
    in place among the results, not written again.

    Called without staging first (watch), the first custom resource of a kind a CRD of
    the plan defines, not served yet, waits (up to `served_wait` seconds) until that CRD
    is established and its kind served; then every object left is dry-run, and if the
    server would reject any, none is applied."""
    inventory_id = f"ConfigMap/{INVENTORY_NAMESPACE}/{INVENTORY_NAME}"
    written = {r.id: r for r in done}
    try:
        _record_before_creating(plan, cluster)
    except ReconcileError as e:
        return (*written.values(), ObjectResult(inventory_id, error=str(e)))
    results: list[ObjectResult] = []
    pending = _pending_kinds(plan, cluster)
    for index, obj in enumerate(plan.objects):
        if obj.id in written:
            results.append(written[obj.id])
            continue
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
    problems = dry_run_objects(
        plan, cluster, saved=saved, configs=configs, only=rest, after_staging=True
    ).refused
    return [ObjectResult(p.partition(": ")[0], error=p.partition(": ")[2]) for p in problems]


def _record_before_creating(
    plan: Plan, cluster: ObjectApi, *, among: Iterable[ObjectPlan] | None = None
) -> None:
    new = {
        inventory_entry(o.apiVersion, o.kind, o.namespace, o.name)
        for o in (plan.objects if among is None else among)
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
                current.resource,
                _body(current, precondition=True, configs=configs),
                # Fields people changed are taken back (the plan says whose).
                force=force or bool(current.takenFrom),
            )
        except Conflict as e:
            if saved or not _moved_on(e):
                raise
            replanned = replan_object(current, _config(current, configs), cluster, force=force)
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
