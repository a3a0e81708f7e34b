"""The engine's operations: typed requests in, values out. The CLI parses argv into a
request, calls one operation and renders what it returns; a library user does the same
without argv:

    from reconcile.desired.reader import load_desired
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from reconcile.desired.models import DesiredState
from reconcile.diagnostics import ReconcileError
from reconcile.engine import budget, nfdrules, placement, saved
from reconcile.engine.checks import Check, Projection, run_checks
from reconcile.engine.findings import NO_POLICY, NodePolicy, blocking
from reconcile.engine.grants import Rule
from reconcile.engine.nodes.apply import apply_plan, dry_run_nodes
from reconcile.engine.nodes.plan import build_plan
from reconcile.engine.objects.apply import (
    apply_objects,
    apply_staged,
    dry_run_objects,
    staged_objects,
)
from reconcile.engine.objects.inventory import read_inventory
from reconcile.engine.objects.plan import desired_configs, plan_objects
from reconcile.engine.objects.targets import DRY_RUNS_AT_ONCE
from reconcile.engine.plan import NO_OPTIONS, ClusterIdentity, Plan, PlanOptions
from reconcile.engine.results import ApplyResult
from reconcile.kube.api import NodeApi, ObjectApi
from reconcile.kube.kinds import ObjectId
from reconcile.kube.objects import LiveNode

# Read to identify the cluster: the UID of kube-system is fixed for a cluster's lifetime.
IDENTITY_NAMESPACE: Final = "kube-system"
# What plan and apply ask of the API server, whatever desired/ holds (objects/inventory.py
# and placement.py declare what they add).
RBAC: Final = (
    Rule(
        "",
        ("nodes",),
        ("get", "list", "patch"),
        why="node labels: one paginated LIST to plan, one PATCH per drifted node",
    ),
    Rule(
        "",
        ("namespaces",),
        ("get",),
        (IDENTITY_NAMESPACE,),
        why="the UID of kube-system identifies the cluster",
    ),
)

# The engine's own checks; domain packages add theirs (gpu.checks.GPU_CHECKS).
ENGINE_CHECKS: tuple[Check, ...] = (placement.impact_check, budget.annotation_budget_check)


class PlanCluster(NodeApi, ObjectApi, Protocol):
    """What planning and applying need from the cluster (kube.client.Cluster has it):
    nodes and objects, which cluster it is, and how many requests it tried again."""

    retries: int

    def identity(self) -> tuple[str, str]:
        """(API server URL, UID of the kube-system namespace)."""
        ...


@dataclass(frozen=True)
class PlanRequest:
    desired: DesiredState
    options: PlanOptions = NO_OPTIONS

    def but(self, **changes: bool) -> PlanRequest:
        """The request with options changed (`prune=False`)."""
        return dataclasses.replace(self, options=self.options.model_copy(update=changes))


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
    nfd_reads = nfdrules.Reads(state, cluster)
    phase(f"planning {len(state.manifests)} object(s) by server-side dry-run")
    objects = plan_objects(state, cluster, request.options)
    phase("reading nodes")
    server, uid = cluster.identity()
    live = list(live) if live is not None else cluster.list_nodes()
    node_part = build_plan(state, live, request.options, policy=policy)
    predicted = nfdrules.predict(
        state,
        cluster,
        live,
        pruned=objects.prunable if request.options.prune else (),
        reads=nfd_reads,
    )
    projection = Projection(
        desired=state,
        live=live,
        nodes=node_part.nodes,
        objects=tuple(objects.objects),
        read_pods=cluster.pods_on_nodes,
        allow_evictions=request.options.allowEvictions,
        policy=policy,
        predicted=tuple(predicted.labels),
    )
    phase("checking the change")
    findings = [*objects.findings, *predicted.findings, *run_checks(checks, projection)]
    the_plan = node_part.model_copy(
        update={
            "objects": tuple(objects.objects),
            "findings": tuple(findings),
            "prunableObjects": tuple(objects.prunable),
            "neverPruned": tuple(objects.never_pruned),
            "inventory": objects.inventory,
            "predicted": tuple(predicted.labels) or None,
        }
    )
    return the_plan.bound(ClusterIdentity(server=server, kubeSystemUID=uid), state.digest)


@dataclass(frozen=True)
class SavedPlan:
    """A saved plan with the desired/ tree it is applied from: the tree's digest must be
    the one it was planned from, and a Secret's configuration comes from it again."""

    plan: Plan
    desired: DesiredState
    configs: dict[ObjectId, dict[str, Any]]


def open_saved(plan: Plan, desired: DesiredState | None, *, key: bytes | None = None) -> SavedPlan:
    """A saved plan (schema and digest already checked: saved.load), checked offline: its
    signature under the plan key, and that the tree it is applied from is there and holds
    what the plan holds only by digest (a Secret's configuration)."""
    saved.check_signature(plan, key, "the plan")
    if desired is None:
        # Re-planning needs the tree: a plan is never applied on its own word.
        raise ReconcileError(
            "a saved plan is applied from the desired/ tree it was planned from, and there is "
            "none here: nothing was applied. Apply it from that checkout (--desired DIR)"
        )
    configs = desired_configs(desired)
    saved.check_manifests(plan, configs)
    return SavedPlan(plan, desired, configs)


def verify_saved(
    opened: SavedPlan,
    cluster: PlanCluster,
    request: PlanRequest,
    *,
    policy: NodePolicy = NO_POLICY,
    checks: Sequence[Check] = ENGINE_CHECKS,
) -> Plan:
    """The saved plan as it may be applied here, with the findings of planning now; or
    PlanRefused (another cluster, tree or options; not what planning gives now) or
    StalePlan (a planned node or object moved since). `request` holds the options apply
    was given; its tree is replaced by the saved plan's."""
    server, uid = cluster.identity()
    desired = opened.desired
    saved.check_origin(
        opened.plan,
        ClusterIdentity(server=server, kubeSystemUID=uid),
        desired.digest,
        request.options,
    )
    live = cluster.list_nodes()
    saved.check_fresh(opened.plan, live)
    saved.check_objects_fresh(opened.plan, cluster)
    replanned = plan(
        dataclasses.replace(request, desired=desired),
        cluster,
        policy=policy,
        checks=checks,
        live=live,
    )
    saved.refuse_differences(opened.plan, replanned, live, lambda: read_inventory(cluster))
    # What blocks the apply is decided now, not by what the file says.
    return opened.plan.model_copy(update={"findings": replanned.findings})


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
    # How long apply waits for a CRD it applied to be established and served (--timeout).
    served_wait: float = 60.0


def apply(
    request: ApplyRequest,
    cluster: PlanCluster,
    *,
    policy: NodePolicy = NO_POLICY,
    should_stop: Callable[[], bool] = lambda: False,
    progress: Callable[[int, int], None] | None = None,
) -> ApplyResult:
    """Staged, so that a refusal never leaves a partial apply:

    1. every node patch and every object the server can dry-run now is dry-run
       (`dryRun=All`, as it will be sent); a refusal writes nothing at all;
    2. the CRDs and Namespaces the cluster lacks are written, and each CRD waited for
       until Established and served;
    3. what could not be dry-run before (custom resources of those CRDs, objects in those
       Namespaces) is dry-run; a refusal leaves only the objects of step 2 written;
    4. the nodes, then the objects.

    Nothing at all is written when a finding blocks the apply."""
    the_plan = request.plan
    rejected = [f"{f.subject}: {f.message}" for f in blocking(the_plan.findings)]
    if rejected:
        return ApplyResult(rejected=tuple(rejected))
    checked = dry_run_objects(the_plan, cluster, saved=request.saved, configs=request.configs)
    refused = [
        *dry_run_nodes(
            the_plan, cluster, parallel=DRY_RUNS_AT_ONCE, allow_refused=request.allow_refused
        ),
        *checked.refused,
    ]
    if refused:
        return ApplyResult(rejected=tuple(refused))
    staged = apply_staged(
        the_plan,
        staged_objects(the_plan, cluster),
        cluster,
        configs=request.configs,
        served_wait=request.served_wait,
    )
    if any(r.error for r in staged) or should_stop():
        return ApplyResult(objects=staged, retries=cluster.retries)
    if checked.deferred:
        later = dry_run_objects(
            the_plan,
            cluster,
            saved=request.saved,
            configs=request.configs,
            only=checked.deferred,
            after_staging=True,
        )
        if later.refused or later.deferred:
            refused = [*later.refused, *(f"{o.id}: could not be dry-run" for o in later.deferred)]
            return ApplyResult(objects=staged, rejected=tuple(refused), retries=cluster.retries)
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
        served_wait=request.served_wait,
        done=staged,
    )
    return dataclasses.replace(nodes, objects=objects, retries=cluster.retries)
