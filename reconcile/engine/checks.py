"""What a plan reveals beyond its changes, as plug-ins: checks see the projected state (the
live cluster with the plan laid over it) and return findings of one type.

The engine knows nothing of GPUs; the GPU domain (gpu/) registers its own checks (driver
image coverage, label fights with their owners) and its node policy (who owns a label,
which change must not be written) through the two protocols here. Whether `apply` may
write depends on a finding's `blocksApply`, never on its kind's name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from reconcile.desired.models import DesiredState
from reconcile.engine.findings import NO_POLICY, Finding, NodePolicy, overlay
from reconcile.kube.objects import LiveNode

if TYPE_CHECKING:
    from reconcile.engine.plan import NodePlan, ObjectPlan, PredictedLabel


def projected_labels(
    desired: DesiredState, live: Iterable[LiveNode], planned: Iterable[NodePlan] | None = None
) -> dict[str, dict[str, str]]:
    """Every node's labels as they will be after apply, and for a node declared but not
    (yet) in the cluster, what desired declares. With `planned`, the live labels with the
    plan's own changes laid over, prunes included; without, desired laid over live."""
    projected = {node.name: dict(node.labels) for node in live}
    if planned is not None:
        for node_plan in planned:
            projected[node_plan.name] = overlay(
                projected.get(node_plan.name, {}), node_plan.changes
            )
    for name, want in desired.nodes.items():
        if planned is not None and name in projected:
            continue
        labels_ = projected.setdefault(name, {})
        for key, value in want.labels.items():
            if value is None:
                labels_.pop(key, None)
            else:
                labels_[key] = value
    return projected


@dataclass(frozen=True)
class Projection:
    """What a check sees: desired, live, the planned changes, and what reads it may need."""

    desired: DesiredState
    live: Sequence[LiveNode]
    nodes: Sequence[NodePlan] = ()
    objects: Sequence[ObjectPlan] = ()
    # The pods bound to the named nodes (those a change can strand or evict, those where
    # a workload finds its room), read only if a check asks (`pods_on`).
    read_pods: Callable[[Sequence[str]], Sequence[dict[str, Any]]] = field(default=lambda names: ())
    # Running pods a new NoExecute taint evicts are a warning, not an error that stops
    # apply (--allow-evictions).
    allow_evictions: bool = False
    # What each node will offer pods once it carries its labels after apply.
    policy: NodePolicy = NO_POLICY
    # The labels nfd-master will write or remove once the tree's NodeFeatureRules apply.
    predicted: Sequence[PredictedLabel] = ()
    _read: dict[frozenset[str], Sequence[dict[str, Any]]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @cached_property
    def labels_after(self) -> dict[str, dict[str, str]]:
        """Every node's labels after apply, and after nfd-master applies the rules."""
        projected = projected_labels(self.desired, self.live, self.nodes)
        for label in self.predicted:
            labels_ = projected.setdefault(label.node, {})
            if label.value is None:
                labels_.pop(label.key, None)
            else:
                labels_[label.key] = label.value
        return projected

    @cached_property
    def taints_after(self) -> dict[str, tuple[dict[str, Any], ...]]:
        """Every live node's taints as they will be after apply (a node not in the
        cluster yet has none that anyone knows of)."""
        planned = {n.name: n.taints for n in self.nodes if n.taints is not None}
        return {node.name: planned.get(node.name, node.taints) for node in self.live}

    def pods_on(self, names: Iterable[str]) -> Sequence[dict[str, Any]]:
        """The pods bound to `names` (and maybe others: callers look at each pod's node),
        read once: a check asking for nodes a read covered already gets that read."""
        wanted = frozenset(names)
        for read, pods in self._read.items():
            if wanted <= read:
                return pods
        pods = self._read[wanted] = self.read_pods(sorted(wanted))
        return pods


# A check: the projected state in, findings out. It reads nothing but the projection.
Check = Callable[[Projection], Iterable[Finding]]


def run_checks(checks: Iterable[Check], projection: Projection) -> list[Finding]:
    return [finding for check in checks for finding in check(projection)]
