"""Node facts written: one atomic PATCH per drifted node, guarded by its resourceVersion.

Two ways in, as in terraform:
- a fresh plan (no plan file): a 409 means another writer got there first; the node is
  read again and re-planned, and written again only if the drift is still there;
- a saved plan: it must still describe the cluster. Every planned node is checked before
  anything is written (saved.py), and a node that moves on while applying stops with
  "plan is stale" instead of overwriting a newer value with an old decision.

A change counts as applied only when the node the server returns carries it, and is
reported only by the run that made it: a change another writer made first (a 409 whose
re-read shows it in place) is a note, not a line, so two applies at once print each
change once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from reconcile.desired.models import DesiredState
from reconcile.diagnostics import Conflict, NotFound, ReconcileError
from reconcile.engine.findings import NO_POLICY, NodePolicy
from reconcile.engine.groups import node_facts
from reconcile.engine.nodes.plan import plan_node
from reconcile.engine.plan import NodePlan, Plan
from reconcile.engine.results import DONE_BY_OTHERS, MAX_CONFLICT_RETRIES, ApplyResult, NodeResult
from reconcile.kube.api import NodeApi
from reconcile.kube.objects import LiveNode


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


def dry_run_nodes(
    plan: Plan, cluster: NodeApi, *, parallel: int = 8, allow_refused: bool = False
) -> list[str]:
    """Every node patch of `plan` dry-run by the server (`dryRun=All`) as it will be sent,
    at most `parallel` at a time: what it refuses, as `node: message`. A conflict is not a
    refusal (the write re-plans or reports the node); nor is a node gone since, nor one
    the node policy refused (apply reports both without asking)."""

    def one(node_plan: NodePlan) -> str | None:
        if refusal(node_plan, allow_refused=allow_refused) is not None:
            return None
        try:
            cluster.patch_node(node_plan.name, node_plan.patch(), dry_run=True)
        except (Conflict, NotFound):
            return None
        except ReconcileError as e:
            return f"{node_plan.name}: {getattr(e, 'message', '') or e}"
        return None

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        return [r for r in pool.map(one, plan.nodes) if r is not None]


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
