"""The engine's operations: typed requests in, values out. The CLI parses argv into a
request, calls one operation and renders what it returns; a library user does the same
without argv:

    from reconcile.desired.loader import load_desired
    from reconcile.engine import operations
    from reconcile.gpu import checks as gpu
    from reconcile.kube.client import Cluster

    state, problems = load_desired(Path("desired"))
    cluster = Cluster.connect()
    plan = operations.plan(
        operations.PlanRequest(state), cluster, policy=gpu.policy(state), checks=gpu.ALL_CHECKS
    )

Domain knowledge comes in as a node policy and checks (engine/checks.py); the engine
itself knows nothing of GPUs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from reconcile.desired.models import DesiredState
from reconcile.diagnostics import ReconcileError
from reconcile.engine import budget, placement
from reconcile.engine.apply import (
    ApplyResult,
    apply_objects,
    apply_plan,
    check_fresh,
    check_manifests,
    check_objects_fresh,
    check_saved,
    preflight_objects,
)
from reconcile.engine.checks import NO_POLICY, Check, NodePolicy, Projection, blocking, run_checks
from reconcile.engine.facts import Fact
from reconcile.engine.plan import ClusterIdentity, Plan, build_plan
from reconcile.engine.workloads import ObjectCluster, desired_configs, plan_objects
from reconcile.kube.kinds import ObjectId
from reconcile.kube.objects import LiveNode

# The engine's own checks; domain packages add theirs (gpu.checks.GPU_CHECKS).
ENGINE_CHECKS: tuple[Check, ...] = (placement.impact_check, budget.annotation_budget_check)


class PlanCluster(ObjectCluster, Protocol):
    """What planning and applying need from the cluster (kube.client.Cluster has it)."""

    retries: int

    def identity(self) -> tuple[str, str]: ...

    def list_nodes(self) -> list[LiveNode]: ...

    def get_node(self, name: str) -> LiveNode: ...

    def patch_node(self, name: str, patch: dict[str, object]) -> LiveNode: ...

    def list_all(self, path: str, **query: Any) -> Iterator[dict[str, Any]]: ...

    def pods_on_nodes(self, nodes: Sequence[str]) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class PlanRequest:
    desired: DesiredState
    prune: bool = False
    allow_empty_prune: bool = False
    prune_namespace_contents: bool = False
    force_conflicts: bool = False
    recreate: bool = False
    # Declared nodes absent from the cluster are not drift (nodes come and go).
    allow_missing_nodes: bool = False


def plan(
    request: PlanRequest,
    cluster: PlanCluster,
    *,
    policy: NodePolicy = NO_POLICY,
    checks: Sequence[Check] = ENGINE_CHECKS,
    phase: Callable[[str], None] = lambda name: None,
    live: Sequence[LiveNode] | None = None,
) -> Plan:
    """Label drift for the nodes, the workload objects by server-side dry-run, the
    findings of every check on the projected state, bound to the cluster and the tree.
    `phase` hears the name of each step as it starts (for a progress line). `live` is
    the nodes when the caller holds them already (watch follows them), else they are read."""
    state = request.desired
    # The objects first: their requests (the inventory, each dry-run) go out while the
    # nodes, the long read, may still be coming in (Cluster.read_ahead). The inventory is
    # read even with nothing declared: what a prune would delete is always known, and
    # deleting all of it is refused unless asked for.
    phase(f"planning {len(state.manifests)} object(s) by server-side dry-run")
    objects = plan_objects(
        state,
        cluster,
        prune=request.prune,
        force=request.force_conflicts,
        recreate=request.recreate,
        allow_empty_prune=request.allow_empty_prune,
        prune_namespace_contents=request.prune_namespace_contents,
    )
    phase("reading nodes")
    server, uid = cluster.identity()
    live = list(live) if live is not None else cluster.list_nodes()
    node_part = build_plan(
        state,
        live,
        prune=request.prune,
        allow_empty_prune=request.allow_empty_prune,
        allow_missing_nodes=request.allow_missing_nodes,
        policy=policy,
    )
    projection = Projection(
        desired=state,
        live=live,
        nodes=node_part.nodes,
        objects=tuple(objects.objects),
        read_pods=lambda: cluster.pods_on_nodes(
            [
                n.name
                for n in node_part.nodes
                if any(c.fact is not Fact.ANNOTATION for c in n.changes)
            ]
        ),
    )
    phase("checking the change")
    findings = [*objects.findings, *run_checks(checks, projection)]
    the_plan = node_part.model_copy(
        update={
            "objects": tuple(objects.objects),
            "findings": tuple(findings),
            "prunableObjects": tuple(objects.prunable),
            "inventory": objects.inventory,
            "forceConflicts": request.force_conflicts,
            "pruneNamespaceContents": request.prune_namespace_contents,
        }
    )
    return the_plan.bound(ClusterIdentity(server=server, kubeSystemUID=uid), state.digest)


@dataclass(frozen=True)
class SavedPlan:
    """A saved plan checked against the cluster and the desired/ tree it may be applied to."""

    plan: Plan
    desired: DesiredState | None
    configs: dict[ObjectId, dict[str, Any]]


def open_saved(path: Path, desired: DesiredState | None) -> SavedPlan:
    """The plan at `path`, checked offline: its schema and own digest, and that what it
    holds only by digest (a Secret's configuration) is in `desired` as planned."""
    the_plan = Plan.load(path)
    by_digest = [o.id for o in the_plan.objects if o.manifestDigest is not None]
    if desired is None and by_digest:
        # A saved plan never holds a Secret's values: they come from desired/ again.
        raise ReconcileError(
            f"{path} holds {', '.join(by_digest)} by digest only (a saved plan never holds a "
            "Secret's values) and there is no desired/ tree to read them from: apply it next "
            "to the desired/ tree it was planned from (--desired DIR)"
        )
    configs: dict[ObjectId, dict[str, Any]] = {}
    if desired is not None:
        configs = desired_configs(desired)
        check_manifests(the_plan, configs)
    return SavedPlan(the_plan, desired, configs)


def verify_saved(saved: SavedPlan, cluster: PlanCluster) -> None:
    """Refuse (PlanRefused, StalePlan) a saved plan made for another cluster or from
    another tree, asking for what desired/ and the inventories do not justify, or whose
    nodes and objects moved since."""
    server, uid = cluster.identity()
    live = cluster.list_nodes()
    desired = saved.desired
    check_saved(
        saved.plan,
        ClusterIdentity(server=server, kubeSystemUID=uid),
        live,
        cluster,
        desired,
        desired.digest if desired is not None else None,
    )
    check_fresh(saved.plan, live)
    check_objects_fresh(saved.plan, cluster)


@dataclass(frozen=True)
class ApplyRequest:
    plan: Plan
    # The tree a fresh plan was made from (a node that conflicts is re-planned against
    # it); None for a saved plan, whose nodes are never re-planned.
    desired: DesiredState | None
    saved: bool = False
    configs: dict[ObjectId, dict[str, Any]] = dataclasses.field(default_factory=dict)
    parallel: int = 8
    # Write nodes the node policy refused (--allow-missing-image).
    allow_refused: bool = False


def apply(
    request: ApplyRequest,
    cluster: PlanCluster,
    *,
    policy: NodePolicy = NO_POLICY,
    should_stop: Callable[[], bool] = lambda: False,
    progress: Callable[[int, int], None] | None = None,
) -> ApplyResult:
    """Nodes, then objects; nothing at all when a finding blocks the apply or (for a saved
    plan) the server would reject an object as it will be sent."""
    the_plan = request.plan
    rejected = [f"{f.subject}: {f.message}" for f in blocking(the_plan.findings)]
    if not rejected and request.saved:
        rejected = preflight_objects(the_plan, cluster, saved=True, configs=request.configs)
    if rejected:
        return ApplyResult(rejected=tuple(rejected))
    nodes = apply_plan(
        the_plan,
        cluster,
        desired=None if request.saved else request.desired,
        parallel=request.parallel,
        allow_refused=request.allow_refused,
        policy=policy,
        should_stop=should_stop,
        progress=progress,
    )
    objects = apply_objects(
        the_plan,
        cluster,
        saved=request.saved,
        configs=request.configs,
        should_stop=should_stop,
    )
    return dataclasses.replace(nodes, objects=objects, retries=cluster.retries)
