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
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Final

from reconcile.kube import dra
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

NOT_EVALUATED: Final = "not evaluated"
# A pod pinned to one node by its required affinity on metadata.name (a DaemonSet's):
# NodeAffinity's PreFilter narrows the nodes, and the others say this.
REASON_PINNED: Final = "node(s) didn't satisfy plugin(s) [NodeAffinity]"
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


_TEMPLATED: Final = frozenset(
    ("Pod", "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob")
)


def _mapping(value: Any) -> Mapping[str, Any]:
    """VALUE when it is an object; {} for what is not (validation refuses it elsewhere)."""
    return value if isinstance(value, Mapping) else {}


def pod_template(manifest: Mapping[str, Any]) -> PodTemplate | None:
    """The pod template of a Pod, Deployment, ReplicaSet, StatefulSet, DaemonSet, Job or
    CronJob manifest; None for other kinds."""
    kind = str(manifest.get("kind", ""))
    metadata = manifest.get("metadata") or {}
    namespace = str(metadata.get("namespace") or "")
    name = str(metadata.get("name", ""))
    identity = workload_id(kind, namespace, name)
    group = str(manifest.get("apiVersion", "")).rpartition("/")[0]
    if kind not in _TEMPLATED:
        return None  # any other kind's spec may be anything its schema allows, a string too
    spec = _mapping(manifest.get("spec"))
    if kind == "Pod":
        labels_ = dict(metadata.get("labels") or {})
        return PodTemplate(identity, kind, namespace, spec, labels_, 1, group=group, name=name)
    if kind == "CronJob":
        spec = _mapping(_mapping(spec.get("jobTemplate")).get("spec"))
    template = _mapping(spec.get("template"))
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


def with_overhead(
    template: PodTemplate, runtime_classes: Mapping[str, Mapping[str, Any]]
) -> PodTemplate:
    """The template as the RuntimeClass admission plugin admits its pods: `spec.overhead`
    set from the RuntimeClass it names (`overhead.podFixed`), when it sets none."""
    name = template.spec.get("runtimeClassName")
    if not name or "overhead" in template.spec:
        return template
    fixed = ((runtime_classes.get(str(name)) or {}).get("overhead") or {}).get("podFixed")
    if not fixed:
        return template
    return replace(template, spec={**template.spec, "overhead": fixed})


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


class _Node:
    """A node and what the pods bound to it use, as placement goes on."""

    __slots__ = ("_key", "_keys", "_offered", "allocatable", "at", "used", "view")

    def __init__(
        self,
        at: int,
        view: NodeView,
        allocatable: Resources | None,
        used: Resources,
        keys: dict[tuple[Any, ...], int],
    ) -> None:
        self.at = at  # its place in the list of nodes: the key of the filters' answers
        self.view = view
        self.allocatable = allocatable  # None: unknown, anything fits
        self.used = used
        self._keys = keys  # shared by the nodes of one placement
        self._offered = None if allocatable is None else tuple(sorted(allocatable.items()))
        self._key: int | None = None

    @property
    def key(self) -> int:
        """Nodes with the same key answer every fit question alike: what they offer and
        what they hold, numbered (an int hashes at once; the state it stands for does not)."""
        if self._key is None:
            state = (self._offered, tuple(sorted(self.used.items())))
            self._key = self._keys.setdefault(state, len(self._keys))
        return self._key

    def copy(self) -> _Node:
        return _Node(self.at, self.view, self.allocatable, dict(self.used), self._keys)

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
        self._key = None


def _at(node: _Node) -> int:
    return node.at


def _classes(nodes: Iterable[_Node]) -> dict[int, list[_Node]]:
    """`nodes` grouped by what they offer and use: a fleet's nodes fall in a few groups,
    and a question of fit is asked once per group."""
    groups: dict[int, list[_Node]] = {}
    for node in nodes:
        key = node.key
        found = groups.get(key)
        if found is None:
            groups[key] = [node]
        else:
            found.append(node)
    return groups


def _owner_keys(pod: RunningPod) -> list[tuple[str, str, str]]:
    """(namespace, kind, name) of the declared workloads `pod` may be a replica of."""
    if pod.owner is None:
        return [(pod.namespace, "Pod", pod.name)]
    kind, name = pod.owner
    keys = [(pod.namespace, kind, name)]
    if kind == "ReplicaSet":  # a Deployment's are `<name>-<pod-template-hash>`
        keys.append((pod.namespace, "Deployment", name.rpartition("-")[0]))
    elif kind == "Job":  # a CronJob's are `<name>-<scheduled time>`
        keys.append((pod.namespace, "CronJob", name.rpartition("-")[0]))
    return keys


def _nodes(
    views: Sequence[NodeView], pods: Iterable[RunningPod], replaced: Sequence[PodTemplate]
) -> list[_Node]:
    """The nodes with what the pods bound to them use, less the pods of `replaced`."""
    declared = {(t.namespace, t.kind, t.name) for t in replaced}
    by_node: dict[str, list[Resources]] = {}
    for pod in pods:
        if not any(key in declared for key in _owner_keys(pod)):
            by_node.setdefault(pod.node, []).append(pod.requests)
    keys: dict[tuple[Any, ...], int] = {}
    return [
        _Node(
            i,
            view,
            dict(view.allocatable) if view.allocatable is not None else None,
            requested(by_node.get(view.name, ())),
            keys,
        )
        for i, view in enumerate(views)
    ]


@dataclass
class _Answer:
    """The label filters' answer for every node: each node's reason (None: it passes),
    the nodes that pass, and the reasons of those that do not."""

    reasons: Sequence[str | None]
    eligible: tuple[int, ...]
    failures: tuple[str, ...]
    # The eligible nodes as they were before placement began, grouped once: asked by every
    # workload selecting as this answer does that stays Pending (`_alone`).
    _start: dict[int, list[_Node]] | None = field(default=None, compare=False)

    def start_groups(self, eligible: Callable[[], list[_Node]]) -> dict[int, list[_Node]]:
        """The eligible nodes as they were before placement began, grouped (once)."""
        if self._start is None:
            self._start = _classes(eligible())
        return self._start

    @classmethod
    def of(cls, reasons: Sequence[str | None]) -> _Answer:
        return cls(
            reasons,
            tuple(i for i, r in enumerate(reasons) if r is None),
            tuple(r for r in reasons if r is not None),
        )


class _Filters:
    """The label filters' answer for each node, once per distinct way of asking: the
    workloads of a fleet select their nodes in a handful of ways."""

    def __init__(self, views: Sequence[NodeView]) -> None:
        self.views = views
        self.answers: dict[str, _Answer] = {}

    def answer(self, template: PodTemplate) -> _Answer:
        spec = template.spec
        key = json.dumps(
            [
                template.daemon,
                spec.get("nodeName"),
                spec.get("nodeSelector"),
                (spec.get("affinity") or {}).get("nodeAffinity"),
                spec.get("tolerations"),
            ],
            sort_keys=True,
            default=str,
        )
        found = self.answers.get(key)
        if found is None:
            found = self.answers[key] = _Answer.of(
                [filter_reason(spec, view, daemon=template.daemon) for view in self.views]
            )
        return found


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
    # False when the scheduler would use something not modelled here (the reason says
    # what): the pending replicas may or may not be placed.
    evaluated: bool = True
    # Where each placed replica landed, in the order placed (the scheduler may choose
    # otherwise among equal nodes).
    landed: tuple[str, ...] = ()

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


# What a topology spread constraint may say that is not modelled here.
_SPREAD_UNMODELLED: Final = {
    "minDomains": "minDomains",
    "matchLabelKeys": "matchLabelKeys",
    "nodeTaintsPolicy": "nodeTaintsPolicy",
    "nodeAffinityPolicy": "nodeAffinityPolicy",
}


def unmodelled(template: PodTemplate) -> list[str]:
    """What the scheduler would use for this pod that the simulation does not model: its
    outcome is then said to be not evaluated, never guessed."""
    spec = template.spec
    found = []
    if spec.get("schedulingGates"):
        found.append("scheduling gates (its pods wait until they are removed)")
    affinity = spec.get("affinity") or {}
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    if (affinity.get("podAffinity") or {}).get(required):
        found.append("required pod affinity")
    anti = (affinity.get("podAntiAffinity") or {}).get(required) or ()
    own = _anti_affinity_key(template)
    if len(anti) > (1 if own is not None else 0):
        found.append("required pod anti-affinity against other pods")
    for constraint in spec.get("topologySpreadConstraints") or ():
        if constraint.get("whenUnsatisfiable", "DoNotSchedule") != "DoNotSchedule":
            continue
        named = [shown for key, shown in _SPREAD_UNMODELLED.items() if key in constraint]
        if named:
            found.append(f"topology spread with {', '.join(named)}")
    containers = [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]
    if any(p.get("hostPort") for c in containers for p in c.get("ports") or ()):
        found.append("host ports (NodePorts)")
    if any("persistentVolumeClaim" in v or "ephemeral" in v for v in spec.get("volumes") or ()):
        found.append("volumes claimed from storage (VolumeBinding, VolumeZone)")
    return found


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

    def __init__(
        self,
        template: PodTemplate,
        nodes: Sequence[_Node],
        answer: _Answer,
        claims: dra.Cluster | None = None,
    ) -> None:
        self.template = template
        # The DRA plugin's view when the pod asks for devices (None: not evaluated here).
        self.claims = claims if template.spec.get("resourceClaims") else None
        self.pod = {"metadata": {"name": template.name}, "spec": template.spec}
        self._devices: dict[int, dra.Answer] = {}  # per node, until a replica takes devices
        self.landed: list[str] = []
        # A DRA answer that is the pod's outcome, not a node's (an error, not evaluated).
        self.outcome: dra.Answer | None = None
        self.nodes = nodes  # every node, each at its `at`
        self.request = template.requests
        self.answer = answer
        self.reasons = answer.reasons
        self._eligible: list[_Node] | None = None
        self._groups: dict[int, list[_Node]] | None = None
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

    @property
    def constrained(self) -> bool:
        """Whether where one replica lands changes where the next may (spread,
        anti-affinity, devices): then nodes are asked one by one, else a group of alike
        nodes at once."""
        return bool(self.spreads) or self.anti_key is not None or self.claims is not None

    def devices(self, node: _Node) -> dra.Answer:
        """The DRA plugin's answer for the next replica on `node`."""
        assert self.claims is not None
        found = self._devices.get(node.at)
        if found is None:
            labels = node.view.labels
            namespace = self.template.namespace or "default"
            found = dra.allocate(self.pod, namespace, node.view.name, labels, self.claims)
            self._devices[node.at] = found
        return found

    def eligible(self) -> list[_Node]:
        """The nodes that pass the label filters."""
        if self._eligible is None:
            self._eligible = [self.nodes[i] for i in self.answer.eligible]
        return self._eligible

    def groups(self) -> dict[int, list[_Node]]:
        """The eligible nodes grouped alike, as they are now (placing regroups them)."""
        if self._groups is None:
            self._groups = _classes(self.eligible())
        return self._groups

    def why_not(self, node: _Node) -> list[str]:
        """Why the next replica cannot land on `node`, in the filters' order."""
        static = self.reasons[node.at]
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
        if self.claims is not None:
            devices = self.devices(node)
            if devices.verdict is dra.Verdict.UNSCHEDULABLE:
                return [devices.reason]
            if not devices.fits:
                self.outcome = self.outcome or devices
                return [devices.reason]
        return []

    def eligible_failures(self) -> tuple[list[_Node], list[str]]:
        """The nodes that pass the label filters, and why the next replica fits on none
        of those where it does not (per group of alike nodes when unconstrained)."""
        eligible = self.eligible()
        if self.constrained:
            return eligible, [r for n in eligible for r in self.why_not(n)]
        failures: list[str] = []
        for members in self.groups().values():
            for reason in members[0].shortfall(self.request):
                failures.extend([reason] * len(members))
        return eligible, failures

    def may(self) -> tuple[str, ...]:
        """The nodes the next replica may land on, in name order."""
        eligible = self.eligible()
        if self.constrained:
            return tuple(n.view.name for n in eligible if not self.why_not(n))
        fitting = [m for m in self.groups().values() if not m[0].shortfall(self.request)]
        if len(fitting) == 1:
            return tuple(n.view.name for n in fitting[0])
        return tuple(n.view.name for n in sorted((n for m in fitting for n in m), key=_at))

    def _deallocated(self, eligible: Sequence[_Node]) -> bool:
        """The DRA plugin's PostFilter: when no node fits, a claim of the pod allocated
        for a node it cannot use, and reserved by no pod, is deallocated and the pod
        tried again. Whether that freed anything."""
        if self.claims is None:
            return False
        namespace = self.template.namespace or "default"
        nodes = [(n.view.name, n.view.labels) for n in eligible]
        _, after = dra.evaluate(self.pod, namespace, nodes, self.claims)
        if after is self.claims:
            return False
        self.claims = after
        self._devices.clear()
        return True

    def place_one(self, node: _Node) -> None:
        node.take(self.request)
        if self.claims is not None:
            namespace = self.template.namespace or "default"
            self.claims = self.claims.taking(self.devices(node), namespace)
            self._devices.clear()
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
        if self.constrained:
            return self._place_scanning(wanted)
        # Unconstrained: the emptiest group of alike nodes that has room (a heap of
        # groups), one of its nodes taking the replica and joining the group it now
        # belongs to.
        groups = {key: list(members) for key, members in self.groups().items()}
        self._groups = None  # regrouped as replicas land
        heap: list[tuple[float, str, int]] = []
        for key, members in groups.items():
            room = members[0].room(self.request)
            if room is None:  # fit not evaluated: it takes every replica
                self.landed.extend([members[0].view.name] * (wanted - len(self.landed)))
                return wanted
            if room > 0:
                members.reverse()  # popped from the end: the first by name first
                heap.append((-members[-1].score(self.request), members[-1].view.name, key))
        heapq.heapify(heap)
        placed = 0
        while placed < wanted and heap:
            _, _, key = heapq.heappop(heap)
            members = groups[key]
            if not members:
                continue
            node = members.pop()
            node.take(self.request)
            self.landed.append(node.view.name)
            placed += 1
            if members:
                heapq.heappush(heap, (-members[-1].score(self.request), members[-1].view.name, key))
            joined = groups.setdefault(node.key, [])
            joined.append(node)
            if len(joined) == 1 and (node.room(self.request) or 0) > 0:
                heapq.heappush(heap, (-node.score(self.request), node.view.name, node.key))
        return placed

    def _place_scanning(self, wanted: int) -> int:
        placed = 0
        eligible = self.eligible()
        while placed < wanted:
            fits = [n for n in eligible if not self.why_not(n)]
            if not fits and self.outcome is None and self._deallocated(eligible):
                fits = [n for n in eligible if not self.why_not(n)]
            if not fits or self.outcome is not None:
                break
            best = max(fits, key=lambda n: (n.score(self.request), [-ord(c) for c in n.view.name]))
            self.place_one(best)
            self.landed.append(best.view.name)
            placed += 1
        return placed

    def alone(self, wanted: int) -> int:
        """How many replicas land on these nodes, this workload alone (the nodes are not
        written to). Unconstrained replicas are alike: that is how many fit in all."""
        if self.constrained:
            fresh = list(self.nodes)
            for i in self.answer.eligible:
                fresh[i] = self.nodes[i].copy()
            return _Replicas(self.template, fresh, self.answer, self.claims).place(wanted)
        total = 0
        for members in self.groups().values():
            room = members[0].room(self.request)
            if room is None:
                return wanted
            total += room * len(members)
        return min(total, wanted)

    def reason(self, pool: Mapping[str, str]) -> str:
        """The scheduler's message for the next replica, with the pool's free amount of a
        resource that is short everywhere but enough in total."""
        eligible, failures = self.eligible_failures()
        if self.outcome is not None:
            return _pod_outcome(self.outcome, len(self.nodes))
        message = scheduler_message(len(self.nodes), [*self.answer.failures, *failures])
        return message + _fragmentation(self.request, eligible, self.groups(), pool)


def _pod_outcome(answer: dra.Answer, total: int) -> str:
    """What a DRA answer that is not a node's says for the pod: PreFilter's refusal in
    FitError's words, a Filter error as the condition says it, a pod held back before
    any node is tried, or what is not evaluated here."""
    if answer.verdict is dra.Verdict.REFUSED:
        return f"0/{total} nodes are available: {answer.reason}."
    if answer.verdict is dra.Verdict.HELD:
        return f"held back before scheduling, no node tried: {answer.reason}"
    if answer.verdict is dra.Verdict.NOT_EVALUATED:
        return f"{NOT_EVALUATED}: {answer.reason}"
    return answer.reason


def _fragmentation(
    request: Mapping[str, int],
    eligible: Sequence[_Node],
    groups: Mapping[int, Sequence[_Node]],
    pool: Mapping[str, str],
) -> str:
    """` (14 nvidia.com/gpu free in pool a100, at most 6 on one node)` when the nodes it may
    use have enough of a resource between them but none alone."""
    classes = groups.values()
    for resource, quantity in request.items():
        if resource == PODS or quantity <= 0:
            continue
        free = [(f, len(m)) for m in classes if (f := m[0].free(resource)) is not None]
        most = max((f for f, _ in free), default=None)
        total = sum(max(f, 0) * count for f, count in free)
        if most is None or most >= quantity or total < quantity:
            continue
        pools = {pool.get(n.view.name) for n in eligible}
        where = (
            f"in pool {next(iter(pools))}"
            if len(pools) == 1 and None not in pools
            else f"on the {len(eligible)} nodes it may use"
        )
        return f" ({total} {resource} free {where}, at most {most} on one node)"
    return ""


def _place(
    template: PodTemplate,
    nodes: Sequence[_Node],
    answer: _Answer,
    pool: Mapping[str, str],
    claims: dra.Cluster | None = None,
) -> tuple[Placement, dra.Cluster | None]:
    """The workload's placement (not evaluated where it uses what is not modelled), and
    the devices the cluster has allocated after it."""
    result, replicas = _placed(template, nodes, answer, pool, claims)
    features = unmodelled(template)
    if features and result.evaluated:
        reason = f"{NOT_EVALUATED}: {', '.join(features)}; the filters modelled place "
        reason += f"{result.placed}/{result.wanted}"
        if result.reason:
            reason += f": {result.reason}"
        result = replace(result, evaluated=False, reason=reason)
    return result, replicas.claims if replicas.claims is not None else claims


def _placed(
    template: PodTemplate,
    nodes: Sequence[_Node],
    answer: _Answer,
    pool: Mapping[str, str],
    claims: dra.Cluster | None,
) -> tuple[Placement, _Replicas]:
    replicas = _Replicas(template, nodes, answer, claims)
    may = replicas.may()
    if template.daemon:
        # One pod per node that should run it, pinned there (the controller adds node
        # affinity to the node): it fits or waits on that node alone.
        should = replicas.eligible()
        if not should:
            return Placement(
                template, (), 1, scheduler_message(len(nodes), answer.failures), 0
            ), replicas
        shortfalls = {key: m[0].shortfall(template.requests) for key, m in _classes(should).items()}
        stuck = [n for n in should if shortfalls[n.key]]
        landing = [n for n in should if not shortfalls[n.key]]
        for node in landing:
            node.take(template.requests)
        reason = None
        if stuck:
            reason = scheduler_message(
                len(nodes),
                [*shortfalls[stuck[0].key], *[REASON_PINNED] * (len(nodes) - 1)],
            )
        landed = tuple(n.view.name for n in landing)
        return Placement(template, may, len(stuck), reason, len(should), landed=landed), replicas
    wanted = max(template.replicas, 0)
    placed = replicas.place(wanted)
    if placed == wanted:
        return Placement(template, may, 0, None, wanted, landed=tuple(replicas.landed)), replicas
    outcome = replicas.outcome
    evaluated = outcome is None or outcome.verdict is not dra.Verdict.NOT_EVALUATED
    reason = replicas.reason(pool)
    landed = tuple(replicas.landed)
    return Placement(
        template, may, wanted - placed, reason, wanted, evaluated=evaluated, landed=landed
    ), replicas


def _alone(
    template: PodTemplate, start: Sequence[_Node], answer: _Answer, claims: dra.Cluster | None
) -> int:
    """How many of its replicas land on the nodes as they were before any workload here
    took its share."""
    replicas = _Replicas(template, start, answer, claims)
    if not replicas.constrained:  # the nodes as they were, grouped once per answer
        replicas._groups = answer.start_groups(replicas.eligible)
    return replicas.alone(max(template.replicas, 0))


def landing(templates: Sequence[PodTemplate], views: Sequence[NodeView]) -> set[str]:
    """The nodes any of `templates` may land on by the label filters (asked once per
    distinct way of selecting, as placing them asks)."""
    filters = _Filters(views)
    return {views[i].name for t in templates for i in filters.answer(t).eligible}


def place(
    template: PodTemplate,
    nodes: Sequence[NodeView],
    pods: Sequence[RunningPod] = (),
    pool: Mapping[str, str] | None = None,
    claims: dra.Cluster | None = None,
) -> Placement:
    """Where one workload's pods land, alone, and how many cannot."""
    return place_all([template], nodes, pods, pool, claims)[0]


def place_all(
    templates: Sequence[PodTemplate],
    nodes: Sequence[NodeView],
    pods: Sequence[RunningPod] = (),
    pool: Mapping[str, str] | None = None,
    claims: dra.Cluster | None = None,
    runtime_classes: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Placement]:
    """Every workload placed in turn, in the order given, each replica taking its share
    of a node before the next. `pods` run already (those of `templates` are replaced);
    `pool` names each node's group for the fragmentation words; `claims` is what the DRA
    plugin reads (slices, classes, claims, templates): without it a pod's resource claims
    are not evaluated; `runtime_classes` (name -> RuntimeClass) give a pod naming one its
    overhead, as the RuntimeClass admission plugin does."""
    groups = pool or {}
    templates = [with_overhead(t, runtime_classes or {}) for t in templates]
    start = _nodes(nodes, pods, templates)
    state = [n.copy() for n in start]
    filters = _Filters(nodes)
    results = []
    devices = claims
    for template in templates:
        answer = filters.answer(template)
        result, devices = _place(template, state, answer, groups, devices)
        contested = not result.ok and not template.daemon and len(templates) > 1
        if contested and _alone(template, start, answer, claims) > result.placed:
            result = replace(result, some_schedules=True)
        results.append(result)
    return results
