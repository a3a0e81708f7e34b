"""Executes a `Plan`: one atomic PATCH per drifted node, guarded by its resourceVersion.

Two ways in, as in terraform:
- a fresh plan (no plan file): a 409 means another writer got there first; the node is
  read again and re-planned, and written again only if the drift is still there;
- a saved plan: it must still describe the cluster. Every planned node is checked before
  anything is written, and a node that moves on while applying stops with "plan is
  stale" instead of overwriting a newer value with an old decision.

A change counts as applied only when the object the server returns carries it.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from reconcile import sensitive
from reconcile.diagnostics import Conflict, NotFound, ReconcileError, StalePlan
from reconcile.diff import LabelChange
from reconcile.models import DesiredState, LiveNode
from reconcile.plan import MissingNode, NodePlan, ObjectPlan, Plan, plan_node
from reconcile.workloads import (
    CONFIGMAPS,
    INVENTORY_NAME,
    INVENTORY_NAMESPACE,
    ObjectCluster,
    inventory_object,
)

MAX_CONFLICT_RETRIES: Final = 5


class NodeWriter(Protocol):
    """What apply needs from the cluster (cluster.Cluster provides it)."""

    def list_nodes(self) -> list[LiveNode]: ...

    def get_node(self, name: str) -> LiveNode: ...

    def patch_node(self, name: str, patch: dict[str, object]) -> LiveNode: ...


@dataclass(frozen=True)
class NodeResult:
    name: str
    applied: tuple[LabelChange, ...] = ()
    error: str | None = None
    conflicts: int = 0


@dataclass(frozen=True)
class ApplyResult:
    nodes: tuple[NodeResult, ...] = ()
    missingNodes: tuple[MissingNode, ...] = ()
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

    def lines(self) -> Iterable[tuple[str, LabelChange]]:
        for node in self.nodes:
            for change in node.applied:
                yield node.name, change

    def object_lines(self) -> Iterable[str]:
        for obj in self.objects:
            yield from obj.lines


def check_fresh(plan: Plan, live: Iterable[LiveNode]) -> None:
    """Raise StalePlan when any planned node changed since the plan was made."""
    versions = {node.name: node.resource_version for node in live}
    _refuse_moved(
        [_moved(node.name, node.resourceVersion, versions.get(node.name)) for node in plan.nodes]
    )


def _moved(subject: str, planned: str | None, now: str | None) -> str | None:
    """How `subject` moved since the plan, or None when it did not."""
    if now == planned:
        return None
    shown = "deleted" if now is None else f"resourceVersion {planned} -> {now}"
    return f"{subject} ({shown})"


def _refuse_moved(moved: Iterable[str | None]) -> None:
    if found := [m for m in moved if m]:
        raise StalePlan(
            "plan is stale: " + ", ".join(found) + " changed since the plan was made; "
            "nothing was applied. Run `reconcile plan` again."
        )


def refusal(node_plan: NodePlan, *, allow_missing_image: bool) -> NodeResult | None:
    """A node apply must not converge: its changes move it onto an image that is not built."""
    if node_plan.unsupportedImage is None or allow_missing_image:
        return None
    return NodeResult(
        node_plan.name,
        error=(
            f"refused: these changes move the node onto driver image {node_plan.unsupportedImage}, "
            "which is not in the support matrix; add the image first, or pass --allow-missing-image"
        ),
    )


def apply_plan(
    plan: Plan,
    cluster: NodeWriter,
    *,
    desired: DesiredState | None = None,
    parallel: int = 1,
    allow_missing_image: bool = False,
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
        refused = refusal(node_plan, allow_missing_image=allow_missing_image)
        if refused is not None:
            result = refused
        elif desired is None:
            result = _apply_saved(node_plan, cluster)
        else:
            want = desired.nodes[node_plan.name]
            result = _apply_fresh(
                node_plan,
                cluster,
                lambda live: plan_node(want, live, prune=plan.prune, matrix=desired.matrix_tags),
                allow_missing_image=allow_missing_image,
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
    return ApplyResult(nodes=results, missingNodes=plan.missingNodes, skipped=skipped)


def _confirmed(node_plan: NodePlan, returned: LiveNode, conflicts: int) -> NodeResult:
    missing = node_plan.converged(returned)
    if missing:
        keys = ", ".join(change.key for change in missing)
        return NodeResult(
            node_plan.name,
            applied=tuple(c for c in node_plan.changes if c not in missing),
            error=f"the server's answer does not carry {keys}",
            conflicts=conflicts,
        )
    return NodeResult(node_plan.name, applied=node_plan.changes, conflicts=conflicts)


def _apply_saved(node_plan: NodePlan, cluster: NodeWriter) -> NodeResult:
    try:
        returned = cluster.patch_node(node_plan.name, node_plan.patch())
    except Conflict:
        # Either someone else wrote the node, or our own write went through and its answer
        # was lost (the retry then meets the new resourceVersion). Only the node can tell.
        try:
            live = cluster.get_node(node_plan.name)
        except ReconcileError as e:
            return NodeResult(node_plan.name, error=str(e))
        if not node_plan.converged(live):
            return NodeResult(node_plan.name, applied=node_plan.changes, conflicts=1)
        return NodeResult(
            node_plan.name,
            error="plan is stale: the node changed after the plan was made; nothing applied to it",
        )
    except ReconcileError as e:
        return NodeResult(node_plan.name, error=str(e))
    return _confirmed(node_plan, returned, 0)


def _apply_fresh(
    node_plan: NodePlan,
    cluster: NodeWriter,
    replan: Callable[[LiveNode], NodePlan | None],
    *,
    allow_missing_image: bool,
) -> NodeResult:
    current: NodePlan | None = node_plan
    conflicts = 0
    live: LiveNode | None = None
    while current is not None:
        refused = refusal(current, allow_missing_image=allow_missing_image)
        if refused is not None:
            return refused
        try:
            returned = cluster.patch_node(current.name, current.patch())
        except Conflict:
            conflicts += 1
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
    # The node matches now: another writer got there, or a write of ours whose answer was
    # lost. What was drift when planned and is in place now changed during this run.
    assert live is not None
    in_place = tuple(c for c in node_plan.changes if live.labels.get(c.key) == c.after)
    return NodeResult(node_plan.name, applied=in_place, conflicts=conflicts)


# --- workload objects --------------------------------------------------------------------


@dataclass(frozen=True)
class ObjectResult:
    id: str
    lines: tuple[str, ...] = ()
    error: str | None = None


def check_objects_fresh(plan: Plan, cluster: ObjectCluster) -> None:
    """Raise StalePlan when an object of a saved plan changed (or appeared) since."""
    moved: list[str | None] = []
    for obj in plan.objects:
        live = cluster.get_object(obj.resource, obj.namespace, obj.name)
        now = str(live["metadata"].get("resourceVersion")) if live is not None else None
        if obj.action == "create":
            moved.append(None if now is None else f"{obj.id} (created by someone else since)")
        else:
            moved.append(_moved(obj.id, obj.resourceVersion, now))
    _refuse_moved(moved)


def check_manifests(plan: Plan, configs: Mapping[str, dict[str, Any]]) -> None:
    """Raise StalePlan when an object the plan holds only by digest (a Secret) is no
    longer declared in desired/ exactly as planned: its configuration comes from there."""
    moved: list[str | None] = []
    for obj in plan.objects:
        if obj.manifestDigest is None:
            continue
        config = configs.get(obj.id)
        if config is None:
            moved.append(f"{obj.id} (no longer in desired/)")
        elif sensitive.manifest_digest(config) != obj.manifestDigest:
            moved.append(f"{obj.id} (changed in desired/)")
    _refuse_moved(moved)


def _body(
    obj: ObjectPlan, *, precondition: bool, configs: Mapping[str, dict[str, Any]]
) -> dict[str, Any]:
    config = obj.manifest
    if obj.manifestDigest is not None:
        config = configs.get(obj.id)
        if config is None or sensitive.manifest_digest(config) != obj.manifestDigest:
            raise StalePlan(f"plan is stale: {obj.id} is not in desired/ as planned")
    body = copy.deepcopy(config or {})
    if precondition and obj.resourceVersion and obj.action == "update":
        body.setdefault("metadata", {})["resourceVersion"] = obj.resourceVersion
    return body


def preflight_objects(
    plan: Plan,
    cluster: ObjectCluster,
    *,
    saved: bool,
    configs: Mapping[str, dict[str, Any]] | None = None,
) -> list[str]:
    """Dry-run every create and update as it will be sent: the problems, if any."""
    problems = []
    for obj in plan.objects:
        if obj.action not in ("create", "update"):
            continue
        try:
            cluster.apply_object(
                obj.resource,
                _body(obj, precondition=saved, configs=configs or {}),
                dry_run=True,
                force=plan.forceConflicts,
            )
        except NotFound as e:
            if obj.action == "update" or "namespaces" not in e.message:
                problems.append(f"{obj.id}: {e.message}")
            # else: its namespace is created first by this same apply
        except ReconcileError as e:
            problems.append(f"{obj.id}: {getattr(e, 'message', '') or e}")
    return problems


def apply_objects(
    plan: Plan,
    cluster: ObjectCluster,
    *,
    saved: bool,
    configs: Mapping[str, dict[str, Any]] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> tuple[ObjectResult, ...]:
    """Apply creates and updates in kind order, then prunes in reverse; then the inventory.
    `configs` holds, by object id, the configuration of objects the plan holds only by
    digest (`workloads.desired_configs`)."""
    results: list[ObjectResult] = []
    for obj in plan.objects:
        if should_stop():
            return tuple(results)  # the rest, and the inventory, wait for the next run
        try:
            if obj.action in ("prune", "recreate"):
                cluster.delete_object(obj.resource, obj.namespace, obj.name)
            if obj.action != "prune":
                cluster.apply_object(
                    obj.resource,
                    _body(obj, precondition=saved, configs=configs or {}),
                    force=plan.forceConflicts,
                )
        except Conflict as e:
            reason = (
                "plan is stale: the object changed after the plan was made" if saved else e.message
            )
            results.append(ObjectResult(obj.id, error=reason))
            continue
        except ReconcileError as e:
            results.append(ObjectResult(obj.id, error=getattr(e, "message", "") or str(e)))
            continue
        results.append(ObjectResult(obj.id, lines=tuple(obj.lines())))
    if plan.inventory is not None and not any(r.error for r in results):
        try:
            cluster.apply_object(CONFIGMAPS, inventory_object(plan.inventory), force=True)
        except ReconcileError as e:
            results.append(
                ObjectResult(f"ConfigMap/{INVENTORY_NAMESPACE}/{INVENTORY_NAME}", error=str(e))
            )
    return tuple(results)
