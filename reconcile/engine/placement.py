"""Where pods can land: every Pod and pod template of desired/ against the scheduler's
filters on labels (kube/scheduler.py), plus required pod anti-affinity against a
workload's own replicas, and the plan's placement impact check.

The failure reconcile exists for is silent: remove or mistype a label and new pods stay
Pending hours later. Evaluating every workload against the labels the cluster will have
after apply makes that loud at review time, with the scheduler's own words.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from reconcile import diagnostics as diag
from reconcile.desired.models import DesiredState, Manifest
from reconcile.diagnostics import Diagnostic, Severity
from reconcile.engine.checks import Projection, projected_labels
from reconcile.engine.diff import NodeChange
from reconcile.engine.facts import Fact
from reconcile.engine.findings import Finding
from reconcile.engine.grants import Rule
from reconcile.kube.kinds import ObjectId, apply_rank, workload_id
from reconcile.kube.objects import LiveNode
from reconcile.kube.scheduler import (
    HOSTNAME,
    REASON_ANTI_AFFINITY,
    NodeView,
    eviction_delay,
    filter_reason,
    is_empty_term,
    required_node_affinity_matches,
    scheduler_message,
)
from reconcile.kube.selector import (
    SelectorError,
    from_label_selector,
    parse_int64,
)

# The impact check reads the pods on the nodes a plan changes.
RBAC: Final = (
    Rule("", ("pods",), ("list",), why="pods are listed to find the ones a label change strands"),
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


def _spread_key(template: PodTemplate) -> str | None:
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
class Placement:
    template: PodTemplate
    nodes: tuple[str, ...]
    pending: int
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.pending == 0


def place(template: PodTemplate, nodes: Sequence[NodeView]) -> Placement:
    """Which nodes the workload's pods can land on, and how many replicas cannot."""
    reasons = {
        node.name: filter_reason(template.spec, node, daemon=template.daemon) for node in nodes
    }
    eligible = [node for node in nodes if reasons[node.name] is None]
    names = tuple(node.name for node in eligible)
    if template.daemon:
        pending = 0 if eligible else 1
        reason = (
            None if eligible else scheduler_message(len(nodes), [r for r in reasons.values() if r])
        )
        return Placement(template, names, pending, reason)
    wanted = max(template.replicas, 0)
    key = _spread_key(template)
    if key is None:
        capacity = wanted if eligible else 0
    else:
        domains = {node.labels.get(key, node.name if key == HOSTNAME else "") for node in eligible}
        capacity = len(domains)
    pending = max(0, wanted - capacity)
    if not pending:
        return Placement(template, names, 0)
    # The pods that do not fit see the eligible nodes taken by their own replicas.
    failures = [
        REASON_ANTI_AFFINITY if reasons[n.name] is None else str(reasons[n.name]) for n in nodes
    ]
    return Placement(template, names, pending, scheduler_message(len(nodes), failures))


def workloads(state: DesiredState) -> list[PodTemplate]:
    found = [t for m in state.manifests if (t := pod_template(m.body)) is not None]
    return sorted(found, key=lambda t: (apply_rank(t.kind), t.id))


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


@dataclass(frozen=True)
class RunningPod:
    id: str
    node: str
    spec: Mapping[str, Any] = field(compare=False)


def node_views(
    live: Iterable[LiveNode],
    labels_by_node: Mapping[str, Mapping[str, str]] | None = None,
    taints_by_node: Mapping[str, tuple[Mapping[str, Any], ...]] | None = None,
) -> list[NodeView]:
    """Nodes with the given labels and taints (default: their live ones); a node only in
    `labels_by_node` (declared, not yet joined) is a plain schedulable node."""
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
            views.append(NodeView(name, node_labels, node.unschedulable, tuple(taints)))
    return views


def running_pods(items: Iterable[Mapping[str, Any]]) -> list[RunningPod]:
    """Pods bound to a node and not finished, from a LIST of pods."""
    found = []
    for item in items:
        metadata = item.get("metadata") or {}
        spec = item.get("spec") or {}
        phase = (item.get("status") or {}).get("phase")
        if spec.get("nodeName") and phase not in ("Succeeded", "Failed"):
            identity = workload_id(
                "Pod", str(metadata.get("namespace") or ""), str(metadata.get("name"))
            )
            found.append(RunningPod(identity, str(spec["nodeName"]), spec))
    return found


def impact(
    state: DesiredState,
    before: Sequence[NodeView],
    after: Sequence[NodeView],
    *,
    unchanged: frozenset[ObjectId],
    pods: Sequence[RunningPod] = (),
) -> list[Finding]:
    """What the change does to placement.

    - error: a workload that will not fit after apply (no node, or fewer than its
      replicas), unless it did not fit before either and this plan does not touch it;
    - note: a DaemonSet that no node will run after apply. A DaemonSet has no replica to
      leave Pending (its controller makes a pod per matching node): it waits for its
      nodes to join, which is normal;
    - warning: a running pod whose node will stop matching its required affinity. It
      keeps running (IgnoredDuringExecution), but once it restarts it has nowhere to go.
    """
    found: list[Finding] = []
    for template in workloads(state):
        then = place(template, after)
        if then.ok:
            continue
        if template.identity in unchanged and place(template, before).pending >= then.pending:
            continue  # as unplaceable before as after: not this change's doing
        if template.daemon:
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
        if then.nodes:
            message = f"{then.pending} of {template.replicas} replicas cannot be placed after apply: {then.reason}"
        else:
            message = f"no node will take it after apply: {then.reason}"
        found.append(
            Finding(
                severity=Severity.ERROR, kind="unschedulable", subject=template.id, message=message
            )
        )
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


# How many pods an eviction finding names before "and N more".
EVICTIONS_SHOWN = 5


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
    shown = ", ".join(names[:EVICTIONS_SHOWN])
    if len(names) > EVICTIONS_SHOWN:
        shown += f" and {len(names) - EVICTIONS_SHOWN} more"
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


def impact_check(projection: Projection) -> list[Finding]:
    """The plan's placement impact, as a check: workloads and running pods the change
    strands, and running pods a new NoExecute taint evicts. Pods are read only when
    labels or taints change."""
    state = projection.desired
    if not (state.manifests or projection.nodes):
        return []
    # Annotations are invisible to selectors and tolerations: only label and taint
    # changes can strand a running pod.
    seen = any(c.fact is not Fact.ANNOTATION for n in projection.nodes for c in n.changes)
    pods = running_pods(projection.pods) if seen else []
    touched = {obj.identity for obj in projection.objects}
    before = node_views(projection.live)
    after = node_views(projection.live, projection.labels_after, projection.taints_after)
    return [
        *impact(
            state,
            before,
            after,
            unchanged=frozenset(t.identity for t in workloads(state) if t.identity not in touched),
            pods=pods,
        ),
        *evictions(before, after, pods, allowed=projection.allow_evictions),
    ]


def placement(state: DesiredState, live: Sequence[LiveNode] | None) -> list[Placement]:
    """Where every workload of desired/ lands: against the live nodes with desired/ laid
    over, or (`live` None) against the nodes desired/ declares alone, offline."""
    if live is None:
        declared = {
            name: {k: v for k, v in node.labels.items() if v is not None}
            for name, node in state.nodes.items()
        }
        nodes = node_views([], declared)
    else:
        nodes = node_views(live, projected_labels(state, live))
    return [place(t, nodes) for t in workloads(state)]
