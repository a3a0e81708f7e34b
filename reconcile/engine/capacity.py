"""Will it fit: every replica of every workload of desired/ placed as kube-scheduler
places it, one at a time, each taking its share of the node before the next is placed.

The filters, in the default profile's order, stopping at the first a node fails: the
label filters (kube/scheduler.py: unschedulable, node name, taints, node affinity), then
NodeResourcesFit (kube/resources.py) against the node's allocatable minus what the pods
bound to it request, then required topology spread and required anti-affinity against
the workload's own replicas. A node whose allocatable is unknown (declared in desired/,
not in the cluster) has room for anything: fit is not evaluated there.

What runs already: the pods bound to the nodes, less those of the workloads placed here
(a declared Deployment's pods are its replicas: placing it again must not count them
twice; a pod is the workload's by its controller's owner reference).

Which node among those that fit: the one with the most cpu and memory left (the default
scoring's LeastAllocated), then by name. The scheduler breaks ties at random and scores
more than that, so where a workload that fits alone does not fit behind the others, the
outcome depends on where the others landed: it is said ("fits on some schedules"), not
hidden.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final

from reconcile.kube.kinds import ObjectId, apply_rank, workload_id
from reconcile.kube.resources import (
    CPU,
    MEMORY,
    PODS,
    Resources,
    insufficient,
    pod_requests,
    requested,
    room_for,
)
from reconcile.kube.scheduler import (
    HOSTNAME,
    REASON_ANTI_AFFINITY,
    NodeView,
    filter_reason,
    required_node_affinity_matches,
    scheduler_message,
)
from reconcile.kube.selector import SelectorError, from_label_selector

REASON_SPREAD: Final = "node(s) didn't match pod topology spread constraints"
REASON_SPREAD_LABEL: Final = (
    "node(s) didn't match pod topology spread constraints (missing required label)"
)

# --- workloads ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodTemplate:
    """What a workload asks the scheduler for: a pod spec, how many, with which labels."""

    id: str
    kind: str
    namespace: str
    spec: Mapping[str, Any]
    labels: Mapping[str, str]
    replicas: int
    daemon: bool = False
    # Which object declares it: its group and name complete the identity.
    group: str = ""
    name: str = ""

    @property
    def identity(self) -> ObjectId:
        return ObjectId(self.group, self.kind, self.namespace, self.name)

    @cached_property
    def requests(self) -> Resources:
        """What each of its pods asks of a node."""
        return pod_requests(self.spec)

    def owns(self, pod: RunningPod) -> bool:
        """Whether `pod` is one of this workload's (by its controller's reference)."""
        if pod.namespace != self.namespace:
            return False
        if self.kind == "Pod":
            return pod.owner is None and pod.name == self.name
        if pod.owner is None:
            return False
        kind, name = pod.owner
        if self.kind == "Deployment":  # its ReplicaSets are `<name>-<pod-template-hash>`
            return kind == "ReplicaSet" and name.rpartition("-")[0] == self.name
        if self.kind == "CronJob":  # its Jobs are `<name>-<scheduled time>`
            return kind == "Job" and name.rpartition("-")[0] == self.name
        return (kind, name) == (self.kind, self.name)


def pod_template(manifest: Mapping[str, Any]) -> PodTemplate | None:
    """The pod template of a Pod, Deployment, ReplicaSet, StatefulSet, DaemonSet, Job or
    CronJob manifest; None for other kinds."""
    kind = str(manifest.get("kind", ""))
    metadata = manifest.get("metadata") or {}
    namespace = str(metadata.get("namespace") or "")
    name = str(metadata.get("name", ""))
    identity = workload_id(kind, namespace, name)
    group = str(manifest.get("apiVersion", "")).rpartition("/")[0]
    spec = manifest.get("spec") or {}
    if kind == "Pod":
        labels_ = dict(metadata.get("labels") or {})
        return PodTemplate(identity, kind, namespace, spec, labels_, 1, group=group, name=name)
    if kind == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    template = spec.get("template") or {}
    if kind in ("Deployment", "ReplicaSet", "StatefulSet"):
        replicas = spec.get("replicas", 1)
    elif kind in ("Job", "CronJob"):
        replicas = spec.get("parallelism", 1)
    elif kind == "DaemonSet":
        replicas = 0
    else:
        return None
    labels_ = dict((template.get("metadata") or {}).get("labels") or {})
    return PodTemplate(
        identity,
        kind,
        namespace,
        template.get("spec") or {},
        labels_,
        int(replicas),
        daemon=kind == "DaemonSet",
        group=group,
        name=name,
    )


def workload_order(templates: Iterable[PodTemplate]) -> list[PodTemplate]:
    """In apply order, then by name: the order they are placed in."""
    return sorted(templates, key=lambda t: (apply_rank(t.kind), t.id))


# --- what runs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunningPod:
    id: str
    node: str
    spec: Mapping[str, Any] = field(compare=False)
    namespace: str = ""
    name: str = ""
    labels: Mapping[str, str] = field(default_factory=dict, compare=False)
    # The controller's (kind, name), from metadata.ownerReferences.
    owner: tuple[str, str] | None = None

    @cached_property
    def requests(self) -> Resources:
        return pod_requests(self.spec)


def _controller(metadata: Mapping[str, Any]) -> tuple[str, str] | None:
    for reference in metadata.get("ownerReferences") or ():
        if reference.get("controller"):
            return str(reference.get("kind", "")), str(reference.get("name", ""))
    return None


def running_pods(items: Iterable[Mapping[str, Any]]) -> list[RunningPod]:
    """Pods bound to a node and not finished, from a LIST of pods (the scheduler's own
    cache leaves Succeeded and Failed pods out)."""
    found = []
    for item in items:
        metadata = item.get("metadata") or {}
        spec = item.get("spec") or {}
        phase = (item.get("status") or {}).get("phase")
        if spec.get("nodeName") and phase not in ("Succeeded", "Failed"):
            namespace = str(metadata.get("namespace") or "")
            name = str(metadata.get("name"))
            found.append(
                RunningPod(
                    workload_id("Pod", namespace, name),
                    str(spec["nodeName"]),
                    spec,
                    namespace,
                    name,
                    dict(metadata.get("labels") or {}),
                    _controller(metadata),
                )
            )
    return found


# --- nodes with room -------------------------------------------------------------------------------


@dataclass
class _Node:
    view: NodeView
    allocatable: Resources | None  # None: unknown, anything fits
    used: Resources

    def room(self, request: Mapping[str, int]) -> int | None:
        """How many more pods of `request` fit; None when fit is not evaluated."""
        if self.allocatable is None:
            return None
        return room_for(request, self.allocatable, self.used)

    def shortfall(self, request: Mapping[str, int]) -> list[str]:
        if self.allocatable is None:
            return []
        return insufficient(request, self.allocatable, self.used)

    def free(self, resource: str) -> int | None:
        if self.allocatable is None:
            return None
        return self.allocatable.get(resource, 0) - self.used.get(resource, 0)

    def score(self, request: Mapping[str, int]) -> float:
        """LeastAllocated over cpu and memory with the pod placed: higher is emptier."""
        if self.allocatable is None:
            return 0.0
        parts = []
        for resource in (CPU, MEMORY):
            total = self.allocatable.get(resource, 0)
            if total > 0:
                left = total - self.used.get(resource, 0) - request.get(resource, 0)
                parts.append(max(left, 0) / total)
        return sum(parts) / len(parts) if parts else 0.0

    def take(self, request: Mapping[str, int]) -> None:
        for name, quantity in request.items():
            self.used[name] = self.used.get(name, 0) + quantity
        self.used[PODS] = self.used.get(PODS, 0) + 1


def _nodes(
    views: Sequence[NodeView], pods: Iterable[RunningPod], replaced: Sequence[PodTemplate]
) -> list[_Node]:
    by_node: dict[str, list[Resources]] = {}
    for pod in pods:
        if not any(t.owns(pod) for t in replaced if t.namespace == pod.namespace):
            by_node.setdefault(pod.node, []).append(pod.requests)
    return [
        _Node(
            view,
            dict(view.allocatable) if view.allocatable is not None else None,
            requested(by_node.get(view.name, ())),
        )
        for view in views
    ]


# --- one workload ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    template: PodTemplate
    # The nodes its pods may land on: they pass every filter for its first replica.
    nodes: tuple[str, ...]
    pending: int
    reason: str | None = None
    # How many pods it wants (a DaemonSet: one per node that should run it) and how many
    # are placed.
    wanted: int = 0
    # Placed in full when it was placed alone, not behind the workloads before it: the
    # outcome depends on where the scheduler puts those.
    some_schedules: bool = False

    @property
    def ok(self) -> bool:
        return self.pending == 0

    @property
    def placed(self) -> int:
        return max(self.wanted - self.pending, 0)


def _anti_affinity_key(template: PodTemplate) -> str | None:
    """The topology key of a required anti-affinity against the workload's own pods."""
    anti = ((template.spec.get("affinity") or {}).get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or ()
    for term in anti:
        namespaces = term.get("namespaces") or [template.namespace]
        if template.namespace not in namespaces:
            continue
        try:
            if from_label_selector(term.get("labelSelector")).matches(template.labels):
                return str(term.get("topologyKey") or "")
        except SelectorError:
            continue
    return None


@dataclass(frozen=True)
class _Spread:
    key: str
    max_skew: int


def _spreads(template: PodTemplate) -> list[_Spread]:
    """Its required (DoNotSchedule) topology spread constraints over its own pods."""
    found = []
    for constraint in template.spec.get("topologySpreadConstraints") or ():
        if constraint.get("whenUnsatisfiable", "DoNotSchedule") != "DoNotSchedule":
            continue
        try:
            selector = from_label_selector(constraint.get("labelSelector"))
        except SelectorError:
            continue
        if selector.matches(template.labels):
            found.append(
                _Spread(str(constraint.get("topologyKey")), int(constraint.get("maxSkew", 1)))
            )
    return found


def _domain(node: NodeView, key: str) -> str | None:
    if key == HOSTNAME:
        return node.labels.get(key, node.name)
    return node.labels.get(key)


class _Replicas:
    """One workload's replicas placed one by one over the nodes' room."""

    def __init__(self, template: PodTemplate, nodes: Sequence[_Node]) -> None:
        self.template = template
        self.nodes = nodes
        self.request = template.requests
        self.reasons = {
            n.view.name: filter_reason(template.spec, n.view, daemon=template.daemon) for n in nodes
        }
        self.anti_key = _anti_affinity_key(template)
        self.spreads = _spreads(template)
        self.taken: set[str] = set()  # anti-affinity domains holding a replica
        # per spread constraint: domain -> own replicas there, over the domains of the
        # nodes that pass node affinity (nodeAffinityPolicy Honor, nodeTaintsPolicy Ignore)
        self.counts: list[dict[str, int]] = []
        for spread in self.spreads:
            domains: dict[str, int] = {}
            for n in nodes:
                domain = _domain(n.view, spread.key)
                if domain is not None and required_node_affinity_matches(template.spec, n.view):
                    domains.setdefault(domain, 0)
            self.counts.append(domains)

    def eligible(self) -> list[_Node]:
        return [n for n in self.nodes if self.reasons[n.view.name] is None]

    def why_not(self, node: _Node) -> list[str]:
        """Why the next replica cannot land on `node`, in the filters' order."""
        static = self.reasons[node.view.name]
        if static is not None:
            return [static]
        shortfall = node.shortfall(self.request)
        if shortfall:
            return shortfall
        for spread, counts in zip(self.spreads, self.counts, strict=True):
            domain = _domain(node.view, spread.key)
            if domain is None:
                return [REASON_SPREAD_LABEL]
            lowest = min(counts.values(), default=0)
            if counts.get(domain, 0) + 1 - lowest > spread.max_skew:
                return [REASON_SPREAD]
        if self.anti_key is not None and _domain(node.view, self.anti_key) in self.taken:
            return [REASON_ANTI_AFFINITY]
        return []

    def place_one(self, node: _Node) -> None:
        node.take(self.request)
        if self.anti_key is not None:
            domain = _domain(node.view, self.anti_key)
            if domain is not None:
                self.taken.add(domain)
        for spread, counts in zip(self.spreads, self.counts, strict=True):
            domain = _domain(node.view, spread.key)
            if domain is not None:
                counts[domain] = counts.get(domain, 0) + 1

    def place(self, wanted: int) -> int:
        """Place up to `wanted` replicas; how many landed."""
        if self.spreads or self.anti_key is not None:
            return self._place_scanning(wanted)
        # Without constraints between replicas, the emptiest node that fits, by a heap.
        heap = [
            (-n.score(self.request), n.view.name, i)
            for i, n in enumerate(self.nodes)
            if self.reasons[n.view.name] is None
        ]
        heapq.heapify(heap)
        placed = 0
        while placed < wanted and heap:
            _, _, i = heapq.heappop(heap)
            node = self.nodes[i]
            room = node.room(self.request)
            if room == 0:
                continue
            if room is None:  # fit not evaluated: it takes the rest
                return wanted
            node.take(self.request)
            placed += 1
            if room > 1:
                heapq.heappush(heap, (-node.score(self.request), node.view.name, i))
        return placed

    def _place_scanning(self, wanted: int) -> int:
        placed = 0
        eligible = self.eligible()
        while placed < wanted:
            fits = [n for n in eligible if not self.why_not(n)]
            if not fits:
                break
            best = max(fits, key=lambda n: (n.score(self.request), [-ord(c) for c in n.view.name]))
            self.place_one(best)
            placed += 1
        return placed

    def reason(self, pool: Mapping[str, str]) -> str:
        """The scheduler's message for the next replica, with the pool's free amount of a
        resource that is short everywhere but enough in total."""
        failures = [reason for n in self.nodes for reason in self.why_not(n)]
        message = scheduler_message(len(self.nodes), failures)
        return message + _fragmentation(self.request, self.eligible(), pool)


def _fragmentation(
    request: Mapping[str, int], eligible: Sequence[_Node], pool: Mapping[str, str]
) -> str:
    """` (14 nvidia.com/gpu free in pool a100, at most 6 on one node)` when the nodes it may
    use have enough of a resource between them but none alone."""
    for resource, quantity in request.items():
        if resource in (PODS,) or quantity <= 0:
            continue
        free = [f for n in eligible if (f := n.free(resource)) is not None]
        if not free or max(free) >= quantity or sum(free) < quantity:
            continue
        groups = {pool.get(n.view.name) for n in eligible}
        where = (
            f"in pool {next(iter(groups))}"
            if len(groups) == 1 and None not in groups
            else f"on the {len(eligible)} nodes it may use"
        )
        return f" ({sum(free)} {resource} free {where}, at most {max(free)} on one node)"
    return ""


def _place(template: PodTemplate, nodes: Sequence[_Node], pool: Mapping[str, str]) -> Placement:
    replicas = _Replicas(template, nodes)
    may = tuple(n.view.name for n in nodes if not replicas.why_not(n))
    if template.daemon:
        # One pod per node that should run it, pinned there (the controller adds node
        # affinity to the node): it fits or waits on that node alone.
        should = replicas.eligible()
        stuck = [n for n in should if n.shortfall(template.requests)]
        for node in should:
            if node not in stuck:
                node.take(template.requests)
        if not should:
            failures = [r for n in nodes for r in replicas.why_not(n)]
            return Placement(template, (), 1, scheduler_message(len(nodes), failures), 0)
        reason = None
        if stuck:
            first = stuck[0]
            others = len(nodes) - 1
            reason = scheduler_message(
                len(nodes),
                [
                    *first.shortfall(template.requests),
                    *["node(s) didn't match Pod's node affinity/selector"] * others,
                ],
            )
        return Placement(template, may, len(stuck), reason, len(should))
    wanted = max(template.replicas, 0)
    placed = replicas.place(wanted)
    if placed == wanted:
        return Placement(template, may, 0, None, wanted)
    return Placement(template, may, wanted - placed, replicas.reason(pool), wanted)


def place(
    template: PodTemplate,
    nodes: Sequence[NodeView],
    pods: Sequence[RunningPod] = (),
    pool: Mapping[str, str] | None = None,
) -> Placement:
    """Where one workload's pods land, alone, and how many cannot."""
    return place_all([template], nodes, pods, pool)[0]


def place_all(
    templates: Sequence[PodTemplate],
    nodes: Sequence[NodeView],
    pods: Sequence[RunningPod] = (),
    pool: Mapping[str, str] | None = None,
) -> list[Placement]:
    """Every workload placed in turn, in the order given, each replica taking its share
    of a node before the next. `pods` run already (those of `templates` are replaced);
    `pool` names each node's group for the fragmentation words."""
    groups = pool or {}
    start = _nodes(nodes, pods, templates)
    state = [_Node(n.view, n.allocatable, dict(n.used)) for n in start]
    results = []
    for template in templates:
        result = _place(template, state, groups)
        if not result.ok and not template.daemon and len(templates) > 1:
            alone = _place(
                template, [_Node(n.view, n.allocatable, dict(n.used)) for n in start], groups
            )
            if alone.placed > result.placed:
                result = Placement(
                    template, result.nodes, result.pending, result.reason, result.wanted, True
                )
        results.append(result)
    return results
