"""Where pods land and whether they fit: every Pod and pod template of desired/ placed
replica by replica (engine/capacity.py) on the nodes as they will be after apply (their
labels, taints and, through the domain's policy, the room a MIG layout gives them); the
plan's impact check (workloads left without a node or without room, running pods
stranded or evicted); and what a batch of nodes drained leaves (`drain_room`).

The failure reconcile exists for is silent: remove or mistype a label and new pods stay
Pending hours later. Evaluating every workload against the labels the cluster will have
after apply makes that loud at review time, with the scheduler's own words.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from reconcile import diagnostics as diag
from reconcile.desired.models import DesiredState, Manifest
from reconcile.diagnostics import Diagnostic, Severity
from reconcile.engine import groups
from reconcile.engine.capacity import (
    Placement,
    PodTemplate,
    RunningPod,
    landing,
    place_all,
    pod_template,
    running_pods,
    workload_order,
)
from reconcile.engine.checks import Projection, projected_labels
from reconcile.engine.diff import NodeChange
from reconcile.engine.facts import Fact
from reconcile.engine.findings import Finding, named
from reconcile.engine.grants import Rule
from reconcile.kube import dra
from reconcile.kube.kinds import ObjectId
from reconcile.kube.objects import LiveNode
from reconcile.kube.resources import PODS, Resources, requested, resources
from reconcile.kube.scheduler import (
    HOSTNAME,
    NodeView,
    eviction_delay,
    is_empty_term,
    required_node_affinity_matches,
)
from reconcile.kube.selector import parse_int64

# The impact check reads the pods on the nodes a plan changes.
RBAC: Final = (
    Rule("", ("pods",), ("list",), why="pods are listed to find the ones a label change strands"),
)


# The findings about where workloads land and the room they find: the PR markdown's
# "Capacity" section.
CAPACITY_STRANDED: Final = "capacity-stranded"
CAPACITY_KINDS: Final = frozenset(
    {"unschedulable", "daemonset-no-nodes", CAPACITY_STRANDED, "affinity-lost", "eviction"}
)


def workloads(state: DesiredState) -> list[PodTemplate]:
    return workload_order(t for m in state.manifests if (t := pod_template(m.body)) is not None)


# --- what the API server admits but can never schedule ---------------------------------------


def _affinity_terms(
    spec: Mapping[str, Any],
) -> list[tuple[tuple[str | int, ...], Mapping[str, Any]]]:
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    base: tuple[str | int, ...] = (
        "affinity",
        "nodeAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "nodeSelectorTerms",
    )
    return [
        ((*base, i), term or {}) for i, term in enumerate(required.get("nodeSelectorTerms") or ())
    ]


def _spec_path(manifest: Manifest) -> tuple[str | int, ...]:
    kind = manifest.kind
    if kind == "Pod":
        return ("spec",)
    if kind == "CronJob":
        return ("spec", "jobTemplate", "spec", "template", "spec")
    return ("spec", "template", "spec")


def desired_diagnostics(state: DesiredState) -> list[Diagnostic]:
    """Affinity the API server admits but that can never (or never as meant) schedule."""
    found: list[Diagnostic] = []
    for manifest in state.manifests:
        template = pod_template(manifest.body)
        if template is None:
            continue
        base = _spec_path(manifest)
        terms = _affinity_terms(template.spec)
        identity = f'{manifest.kind} "{manifest.name}"'
        if terms and all(is_empty_term(term) for _, term in terms):
            found.append(
                diag.error(
                    f"{identity}: every node selector term is empty: it can never be scheduled",
                    manifest.at((*base, *terms[0][0])),
                    "an empty term matches no node; give it matchExpressions",
                )
            )
        for path, term in terms:
            expressions = list(term.get("matchExpressions") or ())
            # An Exists in the same term gates it: on the key itself, or on another key such
            # as nvidia.com/gpu.present (the labs' any-gpu-job) that only GPU nodes carry.
            gated = any(e.get("operator") == "Exists" for e in expressions)
            for j, expression in enumerate(expressions):
                where = manifest.at((*base, *path, "matchExpressions", j))
                operator = expression.get("operator")
                values = [str(v) for v in expression.get("values") or ()]
                if operator in ("Gt", "Lt") and values and parse_int64(values[0]) is None:
                    found.append(
                        diag.error(
                            f"{identity}: {operator} {values[0]!r} on {expression.get('key')} is not an integer: "
                            "the API server admits it, the scheduler never matches it",
                            where,
                            "Gt and Lt compare labels as integers: write a whole number",
                        )
                    )
                if operator == "NotIn" and not gated:
                    found.append(
                        diag.warning(
                            f"{identity}: NotIn on {expression.get('key')} also matches nodes without that "
                            "label (non-GPU nodes too)",
                            where,
                            f"add `{{key: {expression.get('key')}, operator: Exists}}` (or an Exists on "
                            "nvidia.com/gpu.present) to the same term to stay on GPU nodes",
                        )
                    )
    return found


# A live node's allocatable once it carries these labels (a MIG layout repartitions its
# GPUs): the domain's NodePolicy.allocatable.
Allocatable = Callable[[LiveNode, Mapping[str, str]], Mapping[str, str]]


def _as_is(live: LiveNode, labels: Mapping[str, str]) -> Mapping[str, str]:
    return live.allocatable


def node_views(
    live: Iterable[LiveNode],
    labels_by_node: Mapping[str, Mapping[str, str]] | None = None,
    taints_by_node: Mapping[str, tuple[Mapping[str, Any], ...]] | None = None,
    allocatable: Allocatable = _as_is,
) -> list[NodeView]:
    """Nodes with the given labels and taints (default: their live ones) and what they
    offer pods with those labels; a node only in `labels_by_node` (declared, not yet
    joined) is a plain schedulable node whose room is not known."""
    views = []
    live_by_name = {node.name: node for node in live}
    names = sorted(set(live_by_name) | set(labels_by_node or {}))
    for name in names:
        node = live_by_name.get(name)
        node_labels = dict(
            (labels_by_node or {}).get(name, node.labels if node is not None else {})
        )
        node_labels.setdefault(HOSTNAME, name)
        if node is None:
            views.append(NodeView(name, node_labels))
        else:
            taints = (taints_by_node or {}).get(name, node.taints)
            offered = allocatable(node, node_labels) if node.allocatable else None
            views.append(
                NodeView(
                    name,
                    node_labels,
                    node.unschedulable,
                    tuple(taints),
                    resources(offered) if offered is not None else None,
                )
            )
    return views


def _replicas(result: Placement) -> str:
    return f"{result.placed}/{result.wanted} placed"


def impact(
    state: DesiredState,
    before: Sequence[NodeView],
    after: Sequence[NodeView],
    *,
    unchanged: frozenset[ObjectId],
    pods: Sequence[RunningPod] = (),
    pool: Mapping[str, str] | None = None,
    rolled_out: frozenset[str] = frozenset(),
    label_writers: Mapping[tuple[str, str], str] | None = None,
) -> list[Finding]:
    """What the change does to placement and room. `label_writers`: (node, key) -> who
    changes that label other than reconcile (the NodeFeatureRules nfd-master applies), for
    the message of a workload stranded by it.

    - error: a workload that will not fit after apply (no node, no room, or fewer than
      its replicas), unless it did not fit before either and this plan does not touch it;
      the numbers before and after in the message;
    - note: a DaemonSet that no node will run after apply. A DaemonSet has no replica to
      leave Pending (its controller makes a pod per matching node): it waits for its
      nodes to join, which is normal;
    - warning: a running pod whose node will stop matching its required affinity. It
      keeps running (IgnoredDuringExecution), but once it restarts it has nowhere to go;
    - error that blocks apply: a node whose room shrinks below what its running pods
      hold (a MIG layout that takes away the GPUs they use), unless the change is
      `rolled_out` there (the domain's own finding says what to do then).
    """
    found: list[Finding] = []
    templates = workloads(state)
    then_all = place_all(templates, after, pods, pool)
    now_all: list[Placement] | None = None
    for i, (template, then) in enumerate(zip(templates, then_all, strict=True)):
        if then.ok:
            continue
        if now_all is None:
            now_all = place_all(templates, before, pods, pool)
        now = now_all[i]
        if template.identity in unchanged and now.pending >= then.pending:
            continue  # as unplaceable before as after: not this change's doing
        if template.daemon:
            if then.wanted:
                message = (
                    f"{then.pending} of its {then.wanted} node(s) will have no room for its pod "
                    f"after apply ({now.pending} before): {then.reason}"
                )
                found.append(
                    Finding(
                        severity=Severity.ERROR,
                        kind="unschedulable",
                        subject=template.id,
                        message=message,
                    )
                )
                continue
            found.append(
                Finding(
                    severity=Severity.NOTE,
                    kind="daemonset-no-nodes",
                    subject=template.id,
                    message=f"no node will run it after apply ({then.reason}); "
                    "its pods start as matching nodes join",
                )
            )
            continue
        schedules = " (fits on some schedules)" if then.some_schedules else ""
        if then.nodes or then.placed:
            message = (
                f"{then.pending} of {then.wanted} replicas cannot be placed after apply "
                f"({_replicas(then)}; before: {_replicas(now)}){schedules}: {then.reason}"
            )
        else:
            message = f"no node will take it after apply ({_replicas(now)} before){schedules}: {then.reason}"
        message += _selected_labels_lost(template, now, then, before, after, label_writers or {})
        # Where the scheduler uses what is not modelled, review must see it, not fail on it.
        severity = Severity.ERROR if then.evaluated else Severity.WARNING
        found.append(
            Finding(severity=severity, kind="unschedulable", subject=template.id, message=message)
        )
    found.extend(_affinity_lost(before, after, pods))
    found.extend(_overcommitted(before, after, [p for p in pods if p.node not in rolled_out]))
    return found


SHOWN_NODES: Final = 3  # nodes named in a stranded workload's message, at most


def _selected_labels_lost(
    template: PodTemplate,
    now: Placement,
    then: Placement,
    before: Sequence[NodeView],
    after: Sequence[NodeView],
    writers: Mapping[tuple[str, str], str],
) -> str:
    """` Where it fitted before: lab-node-1 loses example.com/gpu=true (NodeFeatureRule
    gpu/one).`: on the nodes the workload fitted before and not after, the labels its node
    selector or required node affinity names that the change removes or rewrites;
    nothing when none does."""
    keys = _selected_keys(template.spec)
    if not keys:
        return ""
    before_by_name = {n.name: n for n in before}
    after_by_name = {n.name: n for n in after}
    parts = []
    for name in sorted(set(now.nodes) - set(then.nodes)):
        old, new = before_by_name.get(name), after_by_name.get(name)
        if old is None or new is None:
            continue
        lost = []
        for key in sorted(keys):
            was, will = old.labels.get(key), new.labels.get(key)
            if was is None or was == will:
                continue
            change = f"loses {key}={was}" if will is None else f"{key} {was} -> {will}"
            writer = writers.get((name, key))
            lost.append(f"{change} ({writer})" if writer else change)
        if lost:
            parts.append(f"{name} {', '.join(lost)}")
    if not parts:
        return ""
    more = len(parts) - SHOWN_NODES
    shown = "; ".join(parts[:SHOWN_NODES]) + (f"; and {more} more node(s)" if more > 0 else "")
    return f" Where it fitted before: {shown}."


def _selected_keys(spec: Mapping[str, Any]) -> set[str]:
    """The label keys a pod's nodeSelector and required node affinity name."""
    keys = {str(k) for k in (spec.get("nodeSelector") or {})}
    for _, term in _affinity_terms(spec):
        for requirement in term.get("matchExpressions") or ():
            if isinstance(requirement, Mapping) and requirement.get("key"):
                keys.add(str(requirement["key"]))
    return keys


def _affinity_lost(
    before: Sequence[NodeView], after: Sequence[NodeView], pods: Sequence[RunningPod]
) -> list[Finding]:
    found = []
    before_by_name = {node.name: node for node in before}
    after_by_name = {node.name: node for node in after}
    for pod in pods:
        then_node, now_node = after_by_name.get(pod.node), before_by_name.get(pod.node)
        if then_node is None or now_node is None:
            continue
        if required_node_affinity_matches(
            pod.spec, now_node
        ) and not required_node_affinity_matches(pod.spec, then_node):
            found.append(
                Finding(
                    severity=Severity.WARNING,
                    kind="affinity-lost",
                    subject=pod.id,
                    message=(
                        f"keeps running on {pod.node} (IgnoredDuringExecution), but {pod.node} will no "
                        "longer match its required node affinity: a restart will not be placed"
                    ),
                )
            )
    return found


def _overcommitted(
    before: Sequence[NodeView], after: Sequence[NodeView], pods: Sequence[RunningPod]
) -> list[Finding]:
    """Nodes whose allocatable after apply is less than what the pods bound to them
    request, where it was enough before: those pods lose what they run on."""
    before_by_name = {node.name: node for node in before}
    by_node: dict[str, list[RunningPod]] = {}
    for pod in pods:
        by_node.setdefault(pod.node, []).append(pod)
    found = []
    for node in after:
        was = before_by_name.get(node.name)
        on_node = by_node.get(node.name)
        if was is None or not on_node or node.allocatable is None or was.allocatable is None:
            continue
        if node.allocatable == was.allocatable:
            continue
        used = requested(pod.requests for pod in on_node)
        short = [
            name
            for name, quantity in used.items()
            if name != PODS
            and quantity > node.allocatable.get(name, 0)
            and quantity <= was.allocatable.get(name, 0)
        ]
        if not short:
            continue
        shown = ", ".join(
            f"{used[name]} {name} (it will offer {node.allocatable.get(name, 0)}, "
            f"{was.allocatable.get(name, 0)} now)"
            for name in sorted(short)
        )
        holders = sorted(
            pod.id.removeprefix("Pod/")
            for pod in on_node
            if any(pod.requests.get(n) for n in short)
        )
        names = named(holders)
        found.append(
            Finding(
                severity=Severity.ERROR,
                kind=CAPACITY_STRANDED,
                subject=node.name,
                message=f"its running pods request {shown} after apply: {names} lose what they run on; "
                "drain the node first, or change it when they are gone",
                blocksApply=True,
            )
        )
    return found


def _shown_taint(taint: Mapping[str, Any]) -> str:
    """As `kubectl taint` writes it: `key=value:Effect`, `key:Effect` without a value."""
    value = taint.get("value") or ""
    return f"{taint.get('key')}{'=' + str(value) if value else ''}:{taint.get('effect')}"


def evictions(
    before: Sequence[NodeView],
    after: Sequence[NodeView],
    pods: Sequence[RunningPod],
    *,
    allowed: bool = False,
) -> list[Finding]:
    """Running pods a NoExecute taint of the change evicts: one finding per node and
    taint that is new, or whose value changes (a toleration may match by value), naming
    the pods it evicts, each with when (`eviction_delay`: at once, or after its
    tolerationSeconds). An error that blocks apply; a warning when `allowed`
    (--allow-evictions)."""
    before_by_name = {node.name: node for node in before}
    by_node: dict[str, list[RunningPod]] = {}
    for pod in pods:
        by_node.setdefault(pod.node, []).append(pod)
    found: list[Finding] = []
    for node in after:
        was = before_by_name.get(node.name)
        on_node = by_node.get(node.name)
        if was is None or not on_node:
            continue
        old = {(t.get("key"), t.get("effect"), t.get("value") or "") for t in was.taints}
        for taint in node.taints:
            if taint.get("effect") != "NoExecute":
                continue
            if (taint.get("key"), taint.get("effect"), taint.get("value") or "") in old:
                continue  # already there: whatever it evicts is not this change's doing
            evicted = [
                (pod, eviction_delay(pod.spec, node.taints))
                for pod in sorted(on_node, key=lambda p: p.id)
                if eviction_delay(pod.spec, (taint,)) is not None
            ]
            if evicted:
                found.append(_eviction(node.name, taint, evicted, allowed=allowed))
    return found


def _eviction(
    node: str,
    taint: Mapping[str, Any],
    evicted: Sequence[tuple[RunningPod, int | None]],
    *,
    allowed: bool,
) -> Finding:
    names = [
        pod.id.removeprefix("Pod/") + (f" (after {delay}s)" if delay else "")
        for pod, delay in evicted
    ]
    shown = named(names)
    which = "that do not tolerate it"
    if any(delay for _, delay in evicted):
        which += " (or only for their tolerationSeconds)"
    message = f"taint {_shown_taint(taint)} evicts {len(names)} running pod(s) {which}: {shown}"
    return Finding(
        severity=Severity.WARNING if allowed else Severity.ERROR,
        kind="eviction",
        subject=node,
        message=message + ("" if allowed else "; --allow-evictions accepts it"),
        blocksApply=not allowed,
    )


def adds_no_execute(changes: Iterable[NodeChange]) -> bool:
    """Whether `changes` put a NoExecute taint on the node or change its value: what
    may evict running pods (nothing else a node change does evicts anything)."""
    return any(
        c.fact is Fact.TAINT and c.after is not None and c.key.endswith(":NoExecute")
        for c in changes
    )


def taint_evictions(
    live: Sequence[LiveNode],
    taints_after: Mapping[str, Sequence[Mapping[str, Any]]],
    pod_items: Iterable[Mapping[str, Any]],
    *,
    allowed: bool = False,
) -> list[Finding]:
    """`evictions` of `live` nodes once they carry `taints_after` (node -> its whole
    taint list; a node not in it keeps its own), from a LIST of the pods on them."""
    return evictions(
        node_views(live),
        node_views(live, None, {name: tuple(t) for name, t in taints_after.items()}),
        running_pods(pod_items),
        allowed=allowed,
    )


def candidates(templates: Sequence[PodTemplate], *views: Sequence[NodeView]) -> set[str]:
    """The nodes any of `templates` may land on in any of `views` (labels and taints):
    where the room they find is read."""
    return {name for nodes in views for name in landing(templates, nodes)}


def impact_check(projection: Projection) -> list[Finding]:
    """The plan's placement impact, as a check: workloads the change leaves without a node
    or without room, running pods it strands, and running pods a new NoExecute taint
    evicts. Pods are read only when something changes: on the nodes the change touches,
    and where a declared workload may land when one changes or the nodes do."""
    state = projection.desired
    if not (state.manifests or projection.nodes):
        return []
    # Annotations are invisible to selectors, tolerations and room: only label and taint
    # changes can strand a running pod.
    changed = [
        n.name for n in projection.nodes if any(c.fact is not Fact.ANNOTATION for c in n.changes)
    ]
    touched = {obj.identity for obj in projection.objects}
    templates = workloads(state)
    before = node_views(projection.live)
    after = node_views(
        projection.live,
        projection.labels_after,
        projection.taints_after,
        projection.policy.allocatable,
    )
    where: set[str] = set(changed)
    if templates and (changed or any(t.identity in touched for t in templates)):
        where |= candidates(templates, before, after)
    pods = running_pods(projection.pods_on(where)) if where else []
    return [
        *impact(
            state,
            before,
            after,
            unchanged=frozenset(t.identity for t in templates if t.identity not in touched),
            pods=pods,
            pool=groups.pools(state.groups, projection.live) if state.groups else None,
            rolled_out=frozenset(
                n.name for n in projection.nodes if any(c.rollout for c in n.changes)
            ),
            label_writers={
                (p.node, p.key): "NodeFeatureRule " + ", ".join(p.rules)
                for p in projection.predicted
                if p.rules
            },
        ),
        *evictions(before, after, pods, allowed=projection.allow_evictions),
    ]


def after_views(
    state: DesiredState, live: Sequence[LiveNode] | None, allocatable: Allocatable = _as_is
) -> list[NodeView]:
    """The nodes as they will be after apply: the live ones with desired/ laid over (and
    what `allocatable` says they offer then), or (`live` None) the nodes desired/
    declares alone, offline, where room is not known."""
    if live is None:
        declared = {
            name: {k: v for k, v in node.labels.items() if v is not None}
            for name, node in state.nodes.items()
        }
        return node_views([], declared)
    return node_views(live, projected_labels(state, live), allocatable=allocatable)


def placement(
    state: DesiredState,
    live: Sequence[LiveNode] | None,
    pods: Iterable[Mapping[str, Any]] = (),
    allocatable: Allocatable = _as_is,
    *,
    nodes: Sequence[NodeView] | None = None,
    claims: dra.Cluster | None = None,
    runtime_classes: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Placement]:
    """Where every workload of desired/ lands, replica by replica, and how many cannot, on
    `nodes` (default: `after_views` of `live`) with the room `pods` leave them."""
    if nodes is None:
        nodes = after_views(state, live, allocatable)
    pool = groups.pools(state.groups, live) if live is not None else None
    return place_all(workloads(state), nodes, running_pods(pods), pool, claims, runtime_classes)


@dataclass(frozen=True)
class DrainRoom:
    """What taking `batch` down leaves: the resources asked about (by their name's prefix)
    free on the other schedulable nodes, and the evicted pods that would find no room
    there."""

    batch: tuple[str, ...]
    free: Mapping[str, int]
    no_room: tuple[str, ...]


def drain_room(
    live: Sequence[LiveNode],
    batch: Iterable[str],
    pod_items: Iterable[Mapping[str, Any]],
    evicted: Iterable[str],
    counted: str,
) -> DrainRoom:
    """The batch's nodes cordoned and the pods named in `evicted` (`Pod/<ns>/<name>`) gone
    from them: what the others offer, and which evicted pods (their controllers make them
    again, the same spec) would not be placed on them. `counted` is the prefix of the
    resources whose free amount is summed (the GPU domain's `nvidia.com/`)."""
    down = frozenset(batch)
    gone = frozenset(evicted)
    views = [
        replace(view, unschedulable=True) if view.name in down else view
        for view in node_views(live)
    ]
    running = running_pods(pod_items)
    staying = [pod for pod in running if pod.id not in gone]
    used: dict[str, list[Resources]] = {}
    for pod in staying:
        used.setdefault(pod.node, []).append(pod.requests)
    free: dict[str, int] = {}
    for view in views:
        if view.unschedulable or view.allocatable is None:
            continue
        holding = requested(used.get(view.name, ()))
        for name, quantity in view.allocatable.items():
            if name.startswith(counted):
                free[name] = free.get(name, 0) + max(quantity - holding.get(name, 0), 0)
    replacements = [
        PodTemplate(
            pod.id,
            "Pod",
            pod.namespace,
            {k: v for k, v in pod.spec.items() if k != "nodeName"},
            pod.labels,
            1,
            name=pod.name,
        )
        for pod in running
        if pod.id in gone
    ]
    placed = place_all(replacements, views, staying)
    return DrainRoom(
        tuple(sorted(down)),
        dict(sorted(free.items())),
        tuple(r.template.id.removeprefix("Pod/") for r in placed if not r.ok),
    )
