"""Executes a `Plan`: one atomic PATCH per drifted node, guarded by its resourceVersion.

Two ways in, as in terraform:
- a fresh plan (no plan file): a 409 means another writer got there first; the node is
  read again and re-planned, and written again only if the drift is still there;
- a saved plan: it must still describe the cluster. Every planned node is checked before
  anything is written, and a node that moves on while applying stops with "plan is
  stale" instead of overwriting a newer value with an old decision.

A change counts as applied only when the object the server returns carries it, and is
reported only by the run that made it: a change another writer made first (a 409 whose
re-read shows it in place, an apply that found the object already created, a delete that
found it gone) is a note, not a line, so two applies at once print each change once.

Whether a saved plan may be applied at all is engine/saved.py's question.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final

from reconcile.desired.models import DesiredState
from reconcile.diagnostics import Conflict, NotFound, ReconcileError, StalePlan
from reconcile.engine.diff import NodeChange
from reconcile.engine.findings import NO_POLICY, NodePolicy
from reconcile.engine.groups import node_facts
from reconcile.engine.nodes.plan import plan_node
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
from reconcile.engine.plan import MissingNode, NodePlan, ObjectAction, ObjectPlan, Plan
from reconcile.kube import sensitive
from reconcile.kube.api import NodeApi, ObjectApi
from reconcile.kube.kinds import ObjectId
from reconcile.kube.objects import LiveNode

DONE_BY_OTHERS: Final = (
    "already in place (another writer, or an earlier run): not applied by this run"
)

MAX_CONFLICT_RETRIES: Final = 5


@dataclass(frozen=True)
class NodeResult:
    name: str
    applied: tuple[NodeChange, ...] = ()
    error: str | None = None
    conflicts: int = 0
    # Said on stderr: e.g. the drift was gone because another writer fixed it first.
    note: str | None = None


@dataclass(frozen=True)
class ApplyResult:
    nodes: tuple[NodeResult, ...] = ()
    missingNodes: tuple[MissingNode, ...] = ()
    # Declared, absent, and allowed to be: noted, not a failure.
    absentNodes: tuple[MissingNode, ...] = ()
    objects: tuple[ObjectResult, ...] = ()
    # Objects the API server would reject: when any, nothing at all was written.
    rejected: tuple[str, ...] = field(default_factory=tuple)
    # Nodes not started because the run was told to stop.
    skipped: tuple[str, ...] = field(default_factory=tuple)
    retries: int = 0

    @property
    def failed(self) -> tuple[NodeResult, ...]:
        return tuple(n for n in self.nodes if n.error is not None)

    @property
    def failed_objects(self) -> tuple[ObjectResult, ...]:
        return tuple(o for o in self.objects if o.error is not None)

    @property
    def ok(self) -> bool:
        return not (
            self.failed or self.missingNodes or self.failed_objects or self.rejected or self.skipped
        )

    def lines(self) -> Iterable[tuple[str, NodeChange]]:
        for node in self.nodes:
            for change in node.applied:
                yield node.name, change

    def changed_objects(self) -> Iterable[ObjectPlan]:
        """The objects this run changed, in apply order."""
        for obj in self.objects:
            if obj.changed is not None:
                yield obj.changed


def refusal(node_plan: NodePlan, *, allow_refused: bool) -> NodeResult | None:
    """A node apply must not converge: the node policy refused its changes."""
    if node_plan.refusal is None or allow_refused:
        return None
    return NodeResult(node_plan.name, error=node_plan.refusal)


def apply_plan(
    plan: Plan,
    cluster: NodeApi,
    *,
    desired: DesiredState | None = None,
    parallel: int = 1,
    allow_refused: bool = False,
    policy: NodePolicy = NO_POLICY,
    should_stop: Callable[[], bool] = lambda: False,
    progress: Callable[[int, int], None] | None = None,
) -> ApplyResult:
    """Apply every node of `plan`, at most `parallel` at a time. With `desired`, a
    conflicting node is re-planned; without it (a saved plan) a node that moved is stale.
    Once `should_stop()` says so, nodes not yet started are left for the next run."""
    done = [0]
    lock = threading.Lock()

    def one(node_plan: NodePlan) -> NodeResult | None:
        if should_stop():
            return None  # not started: the next run picks it up
        result = apply_node(
            node_plan,
            cluster,
            desired=desired,
            prune=plan.prune,
            allow_refused=allow_refused,
            policy=policy,
        )
        if progress is not None:
            with lock:
                done[0] += 1
                progress(done[0], len(plan.nodes))
        return result

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        outcomes = list(pool.map(one, plan.nodes))
    results = tuple(r for r in outcomes if r is not None)
    skipped = tuple(n.name for n, r in zip(plan.nodes, outcomes, strict=True) if r is None)
    return ApplyResult(
        nodes=results,
        missingNodes=plan.missingNodes,
        absentNodes=plan.absentNodes,
        skipped=skipped,
    )


def apply_node(
    node_plan: NodePlan,
    cluster: NodeApi,
    *,
    desired: DesiredState | None,
    prune: bool,
    allow_refused: bool = False,
    policy: NodePolicy = NO_POLICY,
) -> NodeResult:
    """One node of a plan written: one merge PATCH guarded by its resourceVersion. With
    `desired`, a 409 re-reads the node and re-plans it (written again only if drift is
    left); without it (a saved plan) a node that moved is stale."""
    refused = refusal(node_plan, allow_refused=allow_refused)
    if refused is not None:
        return refused
    if desired is None:
        return _apply_saved(node_plan, cluster)
    return _apply_fresh(
        node_plan,
        cluster,
        lambda live: _replan(desired, live, prune=prune, policy=policy),
        allow_refused=allow_refused,
    )


def _replan(
    desired: DesiredState, live: LiveNode, *, prune: bool, policy: NodePolicy
) -> NodePlan | None:
    """The node planned again as it is now: its groups decided on its labels now."""
    want = node_facts(desired, live)
    return None if want is None else plan_node(want, live, prune=prune, policy=policy)


def _confirmed(node_plan: NodePlan, returned: LiveNode, conflicts: int) -> NodeResult:
    missing = node_plan.converged(returned)
    if missing:
        keys = ", ".join(change.shown_key for change in missing)
        return NodeResult(
            node_plan.name,
            applied=tuple(c for c in node_plan.changes if c not in missing),
            error=f"the server's answer does not carry {keys}",
            conflicts=conflicts,
        )
    return NodeResult(node_plan.name, applied=node_plan.changes, conflicts=conflicts)


def _apply_saved(node_plan: NodePlan, cluster: NodeApi) -> NodeResult:
    try:
        returned = cluster.patch_node(node_plan.name, node_plan.patch())
    except Conflict as conflict:
        # Either someone else wrote the node, or our own write went through and its answer
        # was lost (the retry then meets the new resourceVersion). Only the node can tell.
        try:
            live = cluster.get_node(node_plan.name)
        except ReconcileError as e:
            return NodeResult(node_plan.name, error=str(e))
        if not node_plan.converged(live):
            if conflict.after_lost_answer:  # our own write went through; its answer was lost
                return NodeResult(node_plan.name, applied=node_plan.changes, conflicts=1)
            return NodeResult(node_plan.name, conflicts=1, note=DONE_BY_OTHERS)
        return NodeResult(
            node_plan.name,
            error="plan is stale: the node changed after the plan was made; nothing applied to it",
        )
    except ReconcileError as e:
        return NodeResult(node_plan.name, error=str(e))
    return _confirmed(node_plan, returned, 0)


def _apply_fresh(
    node_plan: NodePlan,
    cluster: NodeApi,
    replan: Callable[[LiveNode], NodePlan | None],
    *,
    allow_refused: bool,
) -> NodeResult:
    current: NodePlan | None = node_plan
    conflicts = 0
    ours_maybe = False  # a write of ours may have landed with its answer lost
    live: LiveNode | None = None
    while current is not None:
        refused = refusal(current, allow_refused=allow_refused)
        if refused is not None:
            return refused
        try:
            returned = cluster.patch_node(current.name, current.patch())
        except Conflict as e:
            conflicts += 1
            ours_maybe = ours_maybe or e.after_lost_answer
            if conflicts > MAX_CONFLICT_RETRIES:
                return NodeResult(
                    node_plan.name,
                    error=f"kept conflicting with other writers ({conflicts} times); try again",
                    conflicts=conflicts,
                )
            try:
                live = cluster.get_node(current.name)
            except ReconcileError as e:
                return NodeResult(node_plan.name, error=str(e), conflicts=conflicts)
            current = replan(live)
            continue
        except ReconcileError as e:
            return NodeResult(node_plan.name, error=str(e), conflicts=conflicts)
        return _confirmed(current, returned, conflicts)
    # The node matches now: a write of ours whose answer was lost, or another writer.
    if live is not None and ours_maybe:
        missing = node_plan.converged(live)
        in_place = tuple(c for c in node_plan.changes if c not in missing)
        return NodeResult(node_plan.name, applied=in_place, conflicts=conflicts)
    return NodeResult(node_plan.name, conflicts=conflicts, note=DONE_BY_OTHERS)


# --- workload objects --------------------------------------------------------------------


@dataclass(frozen=True)
class ObjectResult:
    id: str
    # The object as this run changed it (its planned changes), when it did.
    changed: ObjectPlan | None = None
    error: str | None = None
    note: str | None = None


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
    """Dry-run every create and update as it will be sent: the problems, if any."""
    problems = []
    for obj in plan.objects:
        if not obj.action.dry_runs:
            continue
        try:
            cluster.apply_object(
                obj.resource,
                _body(obj, precondition=saved, configs=configs or {}),
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


def apply_objects(
    plan: Plan,
    cluster: ObjectApi,
    *,
    saved: bool,
    configs: Mapping[ObjectId, dict[str, Any]] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> tuple[ObjectResult, ...]:
    """Apply creates and updates in kind order, then prunes in reverse; then the inventory.

    Every object about to be created is recorded in the inventory first: an apply that
    stops half-way never leaves an object that a later --prune cannot find. `configs`
    holds, by object id, the configuration of objects the plan holds only by digest
    (`objects.plan.desired_configs`)."""
    inventory_id = f"ConfigMap/{INVENTORY_NAMESPACE}/{INVENTORY_NAME}"
    try:
        _record_before_creating(plan, cluster)
    except ReconcileError as e:
        return (ObjectResult(inventory_id, error=str(e)),)
    results: list[ObjectResult] = []
    for obj in plan.objects:
        if should_stop():
            return tuple(results)  # the rest, and the inventory, wait for the next run
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
