"""The GPU domain's operations: typed requests in, values out, no printing. The label audit,
each node's driver image tag, the support matrix's coverage of the live GPU nodes, the
report, and one node's driver upgrade in the GPU Operator's order."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from reconcile.desired.models import DesiredState, Manifest
from reconcile.desired.writer import write_labels
from reconcile.diagnostics import ReconcileError
from reconcile.engine.grants import Rule
from reconcile.engine.plan import NodePlan, Plan
from reconcile.gpu import drivers
from reconcile.gpu.drivers import AuditFinding, Coverage
from reconcile.gpu.journal import Step, conflicts
from reconcile.gpu.lock import RBAC as LOCK_RBAC
from reconcile.gpu.lock import RolloutLock
from reconcile.gpu.rollout import Rollout, RolloutPlan, RolloutRequest, Work
from reconcile.gpu.upgrade import RBAC as UPGRADE_RBAC
from reconcile.gpu.upgrade import (
    Declared,
    NodeOps,
    PodToEvict,
    Upgrade,
    UpgradeFailed,
    UpgradeRefused,
    at_target,
)
from reconcile.kube.api import NodeApi
from reconcile.kube.objects import LiveNode

# What the GPU commands ask of the API server beyond the engine's operations (audit and a
# pool's upgrade list nodes as plan does); `reconcile rbac` merges them into its Roles.
RBAC: Final = (
    Rule("", ("nodes",), ("get",), why="upgrade, rollout and `drivers tag` read one node"),
    *UPGRADE_RBAC,
    *LOCK_RBAC,
    Rule(
        "batch",
        ("jobs",),
        ("create", "get"),
        why="rollout --gate job= runs a Job of desired/gates/ on each node of a batch",
    ),
)


def _gpu_nodes(cluster: NodeApi) -> list[LiveNode]:
    return sorted(cluster.list_nodes(label_selector=drivers.GPU_NODES), key=lambda n: n.name)


def audit(cluster: NodeApi) -> list[AuditFinding]:
    """The GPU label conventions on every live GPU node (nvidia.com/gpu.present=true)."""
    return drivers.audit((n.name, n.labels, n.allocatable) for n in _gpu_nodes(cluster))


@dataclass(frozen=True)
class Tag:
    node: str
    tag: str | None
    problem: str | None = None  # why the tag cannot be built (a part is missing or empty)


def tags(cluster: NodeApi, node: str | None = None) -> list[Tag]:
    """The precompiled driver image tag of `node`, or of every GPU node."""
    nodes = [cluster.get_node(node)] if node else _gpu_nodes(cluster)
    found = []
    for item in nodes:
        try:
            found.append(Tag(item.name, drivers.node_tag(item.name, item.labels)))
        except drivers.TagError as e:
            found.append(Tag(item.name, None, str(e)))
    return found


NO_MATRIX: Final = "no support matrix in desired/drivers/ (a DriverSupportMatrix .yaml or a .csv)"


def _need_matrix(state: DesiredState) -> None:
    """ReconcileError when desired/ declares no support matrix: nothing can be judged
    against one (SKEW= would read 0, as if every image existed)."""
    if not state.matrix:
        raise ReconcileError(NO_MATRIX)


def image_audit(state: DesiredState, cluster: NodeApi) -> list[Coverage]:
    """Every live GPU node's image against the support matrix desired/ declares."""
    _need_matrix(state)
    return drivers.coverage(((n.name, n.labels) for n in _gpu_nodes(cluster)), state.matrix_tags)


@dataclass(frozen=True)
class ReportNode:
    name: str
    tag: str | None
    upgrade_state: str | None
    problem: str | None = None


@dataclass(frozen=True)
class Report:
    """A summary computed now: GPU nodes, those whose image is missing, matrix rows."""

    nodes: tuple[ReportNode, ...]
    skew: int
    matrix_rows: int


def report(state: DesiredState, cluster: NodeApi) -> Report:
    """The summary of `reconcile report`; ReconcileError without a support matrix, as
    `drivers audit` refuses."""
    _need_matrix(state)
    nodes = _gpu_nodes(cluster)
    coverage = {
        c.node: c for c in drivers.coverage(((n.name, n.labels) for n in nodes), state.matrix_tags)
    }
    return Report(
        nodes=tuple(
            ReportNode(
                n.name,
                coverage[n.name].tag,
                n.labels.get(drivers.UPGRADE_STATE),
                coverage[n.name].problem if coverage[n.name].tag is None else None,
            )
            for n in nodes
        ),
        skew=sum(1 for c in coverage.values() if c.tag is not None and not c.covered),
        matrix_rows=len(state.matrix),
    )


# --- one node's driver upgrade ------------------------------------------------------------


@dataclass(frozen=True)
class UpgradeRequest:
    node: str
    version: str  # MAJOR.MINOR.REV
    desired: DesiredState
    root: Path  # the desired/ directory, for --write-desired
    dry_run: bool = False
    timeout: float = 300.0
    ignore_daemonsets: bool = False
    force: bool = False
    write_desired: bool = False


def declared_budgets(state: DesiredState) -> Declared:
    """The PodDisruptionBudgets desired/ declares, with where each field is written."""
    found: dict[tuple[str, str], Callable[[str], str]] = {}
    for manifest in state.manifests:
        if manifest.kind == "PodDisruptionBudget" and manifest.api_version.startswith("policy/"):
            found[(manifest.namespace, manifest.name)] = functools.partial(_field_at, manifest)
    return found


def _field_at(manifest: Manifest, name: str) -> str:
    return str(manifest.at(("spec", name)))


class UpgradeInterrupted(ReconcileError):
    """Ctrl-C during an upgrade: the node is at a state a rerun resumes from."""


def upgrade(
    request: UpgradeRequest,
    cluster: NodeApi,
    emit: Callable[[Step], None],
    note: Callable[[str], None],
    *,
    lock: RolloutLock | None = None,
) -> None:
    """Preflight (image in the matrix, budgets), then the operator's states one by one,
    each emitted as it happens; with `dry_run`, the steps it would take. Raises
    UpgradeRefused/UpgradeFailed/UpgradeInterrupted, or a ReconcileError naming the state
    a rerun resumes from."""
    state, node = request.desired, request.node
    if not state.matrix:
        raise ReconcileError(
            "no support matrix in desired/drivers/: the target image cannot be checked"
        )
    lock = lock or RolloutLock(cluster)
    binding = lock.binding()
    job = Upgrade(
        cluster,
        node,
        request.version,
        state.matrix_tags,
        emit,
        note,
        timeout=request.timeout,
        ignore_daemonsets=request.ignore_daemonsets,
        force=request.force,
        declared=declared_budgets(state),
        binding=binding,
    )
    live = cluster.get_node(node)
    if problems := conflicts(binding, [node]):
        raise UpgradeRefused("; ".join(problems) + " (nothing was changed)")
    wanted = job.driver_labels()
    if at_target(live, request.version):
        note(f"{node} is already on driver {request.version}: nothing to do")
        _desired_note(
            request, wanted, write=request.write_desired and not request.dry_run, note=note
        )
        return
    start, tag, evictions = job.preflight(live)
    _preflight_notes(note, node, live, start, tag, evictions)
    if request.dry_run:
        for step in job.planned_steps(start, tag, evictions):
            emit(step)
        _desired_note(request, wanted, write=False, note=note)
        return
    try:
        lock.acquire([node], "driver", request.version)
        done = lock.renewing(lambda: note(f"lost the upgrade's Lease {lock.ref}"))
        try:
            job.run(start, tag, evictions)
        finally:
            done()
            lock.release(cluster.list_nodes())
    except KeyboardInterrupt as e:
        raise UpgradeInterrupted(
            f"interrupted: {node} is at {job.state or 'its previous state'}; rerun the same "
            "command to resume"
        ) from e
    except UpgradeFailed:
        raise
    except ReconcileError as e:
        raise ReconcileError(
            f"{e}: {node} stopped at {job.state or 'its previous state'}; rerun the same "
            "command to resume"
        ) from e
    _desired_note(request, wanted, write=request.write_desired, note=note)


def _preflight_notes(
    note: Callable[[str], None],
    node: str,
    live: LiveNode,
    start: int,
    tag: str,
    evictions: list[PodToEvict],
) -> None:
    note(f"preflight: driver image {tag} is in the support matrix")
    if start > 0:
        note(f"resuming the upgrade of {node} at {Upgrade.PHASES[start].name} (its journal)")
    if evictions:
        pods = ", ".join(p.id for p in evictions)
        note(f"preflight: the budgets allow evicting {len(evictions)} pod(s): {pods}")


def _desired_note(
    request: UpgradeRequest, wanted: dict[str, str], *, write: bool, note: Callable[[str], None]
) -> None:
    """Say when git still declares the old driver (the next apply would revert it), or fix it."""
    declared = request.desired.nodes.get(request.node)
    if declared is None:
        return
    stale = {k: v for k, v in wanted.items() if k in declared.labels and declared.labels[k] != v}
    if not stale:
        return
    where = declared.source.file
    if write:
        changed = write_labels(request.root, declared, stale)
        note(f"{where}: set {', '.join(f'{k}={stale[k]}' for k in changed)}: commit it")
        return
    olds = ", ".join(f"{k}={declared.labels[k]}" for k in stale)
    note(
        f"{where} still declares {olds}: the next `reconcile apply` reverts this upgrade. "
        "Change the file too (rerun without --no-write-desired: the upgrade writes it)"
    )


# --- a pool's driver rollout --------------------------------------------------------------


def rollout_plan(request: RolloutRequest, work: Work, ops: NodeOps) -> tuple[Rollout, RolloutPlan]:
    """The whole rollout preflighted before any write: UpgradeRefused naming every
    problem, or the rollout and its batches."""
    job = Rollout(request, work, ops)
    return job, job.preflight()


def fresh_replan(state: DesiredState, plan: Plan) -> Callable[[LiveNode], NodePlan | None]:
    """A node planned again as it is now, from desired/ with the plan's options and the
    GPU policy (what `apply` does after a conflict)."""
    from reconcile.engine.groups import node_facts
    from reconcile.engine.nodes.plan import plan_node
    from reconcile.gpu.checks import policy

    node_policy = policy(state)

    def replan(live: LiveNode) -> NodePlan | None:
        want = node_facts(state, live)
        return None if want is None else plan_node(want, live, prune=plan.prune, policy=node_policy)

    return replan


def with_declared(ops: NodeOps, desired: DesiredState) -> NodeOps:
    """`ops` knowing the budgets desired/ declares (their advice names the file)."""
    return replace(ops, declared=declared_budgets(desired))


def stale_driver_note(
    state: DesiredState, version: str, nodes: Sequence[str], live: Sequence[LiveNode]
) -> str | None:
    """When desired/ declares another driver than `version` for any of `nodes` (in a
    node's own file, or in the NodeGroup that gives the node the key), one note naming
    every such file and what it declares: the next apply would revert those nodes."""
    from reconcile.engine.facts import shown_value
    from reconcile.engine.groups import compiled

    major, minor, rev = drivers.split_driver_version(version)
    wanted = {drivers.DRIVER_MAJOR: major, drivers.DRIVER_MINOR: minor, drivers.DRIVER_REV: rev}
    selectors = compiled(state.groups)
    labels_of = {n.name: n.labels for n in live}
    # By file (and group): the old values it declares, and for how many of the nodes.
    stale: dict[str, tuple[dict[str, str | None], set[str]]] = {}
    for name in nodes:
        own = state.nodes.get(name)
        groups = [g for g, s in selectors if s.matches(labels_of.get(name, {}))]
        for key, value in wanted.items():
            # A node's own file overrides its groups, key by key (groups never disagree).
            if own is not None and key in own.labels:
                declarer, where = own, own.source.file
            else:
                group = next((g for g in groups if key in g.node.labels), None)
                if group is None:
                    continue
                declarer, where = group.node, f"{group.node.source.file} (NodeGroup {group.name})"
            if declarer.labels[key] != value:
                olds, covered = stale.setdefault(where, ({}, set()))
                olds[key] = declarer.labels[key]
                covered.add(name)
    if not stale:
        return None
    files = "; ".join(
        f"{where} {', '.join(f'{k}={shown_value(v)}' for k, v in sorted(olds.items()))} "
        f"for {len(covered)} node(s)"
        for where, (olds, covered) in sorted(stale.items())
    )
    return (
        f"desired/ still declares the old driver: {files}. The next `reconcile apply` "
        "reverts this upgrade unless they change too: "
        "`reconcile upgrade` writes them unless given --no-write-desired (a dry run never writes)"
    )


def write_driver_labels(
    state: DesiredState, root: Path, version: str, upgraded: Sequence[str], live: Sequence[LiveNode]
) -> tuple[list[str], list[str]]:
    """After a rollout: the driver labels of the `upgraded` nodes in desired/, where they
    are declared (a node's file, or the NodeGroup that gives them), comments and order
    kept. (files changed as `file: key=value, ...`, notes on what was left alone: a group
    that also covers nodes not upgraded)."""
    from reconcile.engine.groups import compiled

    major, minor, rev = drivers.split_driver_version(version)
    wanted = {drivers.DRIVER_MAJOR: major, drivers.DRIVER_MINOR: minor, drivers.DRIVER_REV: rev}
    declarers = [state.nodes[n] for n in upgraded if n in state.nodes]
    notes = []
    for group, selector in compiled(state.groups):
        members = {n.name for n in live if selector.matches(n.labels)}
        if not members & set(upgraded) or not any(k in group.node.labels for k in wanted):
            continue
        others = sorted(members - set(upgraded))
        if others:
            notes.append(
                f"{group.node.source.file}: NodeGroup {group.name} also covers {', '.join(others)}, "
                "which were not upgraded: not edited"
            )
            continue
        declarers.append(group.node)
    written = []
    for declared in declarers:
        stale = {
            k: v for k, v in wanted.items() if k in declared.labels and declared.labels[k] != v
        }
        if stale:
            changed = write_labels(root, declared, stale)
            if changed:
                written.append(
                    f"{declared.source.file}: " + ", ".join(f"{k}={stale[k]}" for k in changed)
                )
    return written, notes
