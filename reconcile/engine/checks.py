"""What a plan reveals beyond its changes, as plug-ins: checks see the projected state (the
live cluster with the plan laid over it) and return findings of one type.

The engine knows nothing of GPUs; the GPU domain (gpu/) registers its own checks (driver
image coverage, label fights with their owners) and its node policy (who owns a label,
which change must not be written) through the two protocols here. Whether `apply` may
write depends on a finding's `blocksApply`, never on its kind's name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict

from reconcile.desired.models import DesiredState
from reconcile.diagnostics import Severity
from reconcile.engine.diff import LabelChange
from reconcile.engine.facts import Fact
from reconcile.kube.objects import LiveNode

if TYPE_CHECKING:
    from reconcile.engine.plan import NodePlan, ObjectPlan


class Finding(BaseModel):
    """Something the plan reveals beyond drift, that review must see. `error`: must not
    merge as it is (the pull-request check fails); `warning`: review must see it. Either
    makes `plan` exit 1."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    severity: Severity
    kind: str
    subject: str
    message: str
    # The API server would reject the change (an object conflict, an invalid object...):
    # `apply` then writes nothing at all.
    blocksApply: bool = False


def blocking(findings: Iterable[Finding]) -> list[Finding]:
    """The findings that stop `apply` before its first write."""
    return [f for f in findings if f.blocksApply]


class NodePolicy(Protocol):
    """Domain knowledge the engine consults for each node change."""

    def owner(self, live: LiveNode, key: str, inventory: frozenset[str]) -> str | None:
        """The component that writes `key` on `live` (shown with --show-owner)."""
        ...

    def refusal(self, live: LiveNode, changes: Sequence[LabelChange]) -> str | None:
        """Why these changes must not be written to `live` (apply skips the node and
        reports it unless told otherwise), or None."""
        ...


class NoPolicy:
    """No domain knowledge: no owners, nothing refused."""

    def owner(self, live: LiveNode, key: str, inventory: frozenset[str]) -> str | None:
        return None

    def refusal(self, live: LiveNode, changes: Sequence[LabelChange]) -> str | None:
        return None


# The policy of a plan made without domain knowledge.
NO_POLICY: NodePolicy = NoPolicy()


def overlay(live_labels: Mapping[str, str], changes: Iterable[LabelChange]) -> dict[str, str]:
    """The labels a node carries once `changes` (their label changes) are applied."""
    result = dict(live_labels)
    for change in changes:
        if change.fact is not Fact.LABEL:
            continue
        if change.after is None:
            result.pop(change.key, None)
        else:
            result[change.key] = change.after
    return result


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
    # The pods on the nodes whose labels or taints change (the only pods a change can
    # strand), read once and only if a check asks.
    read_pods: Callable[[], Sequence[dict[str, Any]]] = field(default=lambda: ())
    # Running pods a new NoExecute taint evicts are a warning, not an error that stops
    # apply (--allow-evictions).
    allow_evictions: bool = False

    @cached_property
    def labels_after(self) -> dict[str, dict[str, str]]:
        return projected_labels(self.desired, self.live, self.nodes)

    @cached_property
    def taints_after(self) -> dict[str, tuple[dict[str, Any], ...]]:
        """Every live node's taints as they will be after apply (a node not in the
        cluster yet has none that anyone knows of)."""
        planned = {n.name: n.taints for n in self.nodes if n.taints is not None}
        return {node.name: planned.get(node.name, node.taints) for node in self.live}

    @cached_property
    def pods(self) -> Sequence[dict[str, Any]]:
        return self.read_pods()


# A check: the projected state in, findings out. It reads nothing but the projection.
Check = Callable[[Projection], Iterable[Finding]]


def run_checks(checks: Iterable[Check], projection: Projection) -> list[Finding]:
    return [finding for check in checks for finding in check(projection)]
