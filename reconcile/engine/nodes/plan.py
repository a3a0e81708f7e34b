"""Node-fact drift: what makes each declared node carry the labels, annotations and taints
desired/ gives it, as the nodes of a `Plan`.

`build_plan` returns a plan of node facts only (objects and findings are added by the plan
operation); `plan_node` one node's changes, or None when it is in sync. A node's plan
records the resourceVersion it was planned against and the facts reconcile manages there
afterwards, read from its inventory annotations and never naming a fact someone else
writes: all that `--prune` may later remove.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Final

from reconcile.desired.models import DesiredNode, DesiredState
from reconcile.desired.reserved import LABEL_INVENTORY, RECONCILE_ANNOTATIONS
from reconcile.diagnostics import EmptyPrune
from reconcile.engine.diff import NodeChange, fact_drift
from reconcile.engine.facts import (
    BY_FACT,
    INVENTORIES,
    RULES,
    Fact,
    parse_shown_key,
    shown_key,
    taints_after,
)
from reconcile.engine.findings import NO_POLICY, NodePolicy
from reconcile.engine.groups import resolve
from reconcile.engine.plan import (
    NO_OPTIONS,
    MissingNode,
    NodePlan,
    Plan,
    PlanOptions,
    PrunableLabel,
)
from reconcile.kube import labels
from reconcile.kube.objects import LiveNode
from reconcile.kube.selector import parse as parse_selector

# Like nfd-master's nfd.node.kubernetes.io/feature-labels: the label keys this tool has set.
INVENTORY_ANNOTATION: Final = LABEL_INVENTORY


def parse_inventory(annotations: dict[str, str]) -> frozenset[str]:
    """The facts reconcile manages on a node, as drift lines name them, from its inventory
    annotations. Never a fact someone else writes, whatever the annotation says (an older
    desired/ could declare them; anyone can edit the annotation): `--prune` must not
    delete kubernetes.io/os, uncordon a node by removing node.kubernetes.io/unschedulable,
    or remove a rollout's marks."""
    if INVENTORIES.isdisjoint(annotations):
        return frozenset()  # a node reconcile has not written: the common case
    found = set()
    for rule in RULES:
        for key in annotations.get(rule.inventory, "").split(","):
            if key and not _owned_by_another(rule.fact, key):
                found.add(shown_key(rule.fact, key))
    return frozenset(found)


def _owned_by_another(fact: Fact, key: str) -> bool:
    """Whether the kubelet, a controller or reconcile's rollouts write this fact."""
    if fact is Fact.LABEL:
        return labels.is_kubelet_owned(key)
    if fact is Fact.ANNOTATION:
        return key in RECONCILE_ANNOTATIONS
    return labels.controller_owned_taint(key.rpartition(":")[0]) is not None


def _labels_in_sync(desired: DesiredNode, live: LiveNode, *, prune: bool) -> bool:
    """The common case of a large fleet, decided without building any change: the node
    declares labels only and carries each as declared (with `prune`, it also has no
    inventory, so nothing it manages can be left over). False means: look closer."""
    if desired.annotations or desired.taints:
        return False
    if prune and not INVENTORIES.isdisjoint(live.annotations):
        return False
    # Every declared (key, value) among the live ones: one subset test of the two item
    # views, in C. A label declared None (absent) is never among them: it looks closer.
    return desired.labels.items() <= live.labels.items()


def plan_node(
    desired: DesiredNode, live: LiveNode, *, prune: bool, policy: NodePolicy = NO_POLICY
) -> NodePlan | None:
    """What makes `live` match `desired`, or None when it already does."""
    if _labels_in_sync(desired, live, prune=prune):
        return None
    inventory = [parse_shown_key(k) for k in parse_inventory(live.annotations)]
    changes: list[NodeChange] = []
    facts = []
    for rule in RULES:
        want, have = rule.desired(desired), rule.live(live)
        owned = frozenset(k for fact, k in inventory if fact is rule.fact)
        undeclared = {k for k in owned if k not in want and k in have}
        drift = fact_drift(rule.fact, want, have, prune=undeclared if prune else ())
        facts.append((rule, want, undeclared))
        if not drift:
            continue
        if rule.fact is Fact.LABEL:  # who writes it: the node policy's knowledge of labels
            drift = [
                c.model_copy(
                    update={
                        "owner": policy.owner(live, c.key, owned),
                        "rollout": policy.disruptive(c.key),
                    }
                )
                for c in drift
            ]
        changes.extend(
            c.model_copy(update={"source": str(desired.source_of(c.shown_key))})
            if c.key in want
            else c  # a prune: nothing declares it
            for c in drift
        )
    if not changes:
        return None  # in sync: what it manages matters only to a write
    managed: set[str] = set()
    for rule, want, undeclared in facts:
        managed |= {shown_key(rule.fact, k) for k, v in want.items() if v is not None}
        if not prune:
            managed |= {shown_key(rule.fact, k) for k in undeclared}  # a later --prune may
    taint_changes = {c.key: c.after for c in changes if c.fact is Fact.TAINT}
    return NodePlan(
        name=live.name,
        resourceVersion=live.resource_version,
        source=str(desired.source),
        changes=tuple(changes),
        inventory=tuple(sorted(managed)),
        refusal=policy.refusal(live, [c for c in changes if c.fact is Fact.LABEL]),
        taints=tuple(taints_after(live.taints, taint_changes)) if taint_changes else None,
    )


def _refuse_empty_label_prune(
    desired: DesiredState, nodes: Iterable[NodePlan], live: Iterable[LiveNode]
) -> None:
    """Refuse a prune that removes every label the inventories of all nodes hold."""
    managed = {
        (node.name, shown)
        for node in live
        for shown in parse_inventory(node.annotations)
        if _live_value(node, shown) is not None
    }
    pruned = {
        (node_plan.name, change.shown_key)
        for node_plan in nodes
        for change in node_plan.changes
        if change.after is None
        and change.key not in BY_FACT[change.fact].desired(desired.nodes[node_plan.name])
    } & managed
    if pruned and pruned == managed:
        shown = ", ".join(f"{node} {key}" for node, key in sorted(pruned)[:5])
        more = f" and {len(pruned) - 5} more" if len(pruned) > 5 else ""
        raise EmptyPrune(
            f"--prune would remove all {len(pruned)} label(s) reconcile manages ({shown}{more}), "
            "because desired/ declares none of them: nothing was changed. Check --desired; "
            "to remove them all on purpose, pass --allow-empty-prune"
        )


def _live_value(node: LiveNode, shown: str) -> str | None:
    fact, key = parse_shown_key(shown)
    return BY_FACT[fact].get(node, key)


def build_plan(
    desired: DesiredState,
    live: Iterable[LiveNode],
    options: PlanOptions = NO_OPTIONS,
    *,
    policy: NodePolicy = NO_POLICY,
) -> Plan:
    """Fact drift of every declared node, in a plan that records `options`. With `prune`,
    also the removal of facts that reconcile set and desired/ no longer declares, on any
    live node whose inventory lists them, declared or not (without it they are
    `prunable`); a prune of every such fact is refused (EmptyPrune) unless
    `allowEmptyPrune`. A declared node the cluster does not have is missing, or absent
    when it is optional or with `allowMissingNodes`. Every live node a NodeGroup
    selects is planned with the group's facts (its own file overriding them). Findings
    come from checks, run on the whole plan by the plan operation."""
    prune = options.prune
    live = list(live)
    desired = resolve(desired, live)
    if options.selector is not None:  # -l: the selected nodes only, by their live labels
        chosen = parse_selector(options.selector)
        live = [node for node in live if chosen.matches(node.labels)]
        names = {node.name for node in live}
        desired = dataclasses.replace(
            desired, nodes={n: w for n, w in desired.nodes.items() if n in names}
        )
    live_by_name = {node.name: node for node in live}
    nodes: list[NodePlan] = []
    missing: list[MissingNode] = []
    absent: list[MissingNode] = []
    prunable: list[PrunableLabel] = []
    for name, want in desired.nodes.items():
        node = live_by_name.get(name)
        if node is None:
            gone = MissingNode(name=name, source=str(want.source))
            (absent if want.optional or options.allowMissingNodes else missing).append(gone)
            continue
        node_plan = plan_node(want, node, prune=prune, policy=policy)
        if node_plan is not None:
            nodes.append(node_plan)
        if not prune:
            for shown in sorted(parse_inventory(node.annotations)):
                fact, key = parse_shown_key(shown)
                value = _live_value(node, shown)
                if key not in BY_FACT[fact].desired(want) and value is not None:
                    prunable.append(PrunableLabel(node=name, key=shown, value=value))
    if prune and not options.allowEmptyPrune:
        _refuse_empty_label_prune(desired, nodes, live)
    return Plan(
        **options.model_dump(),
        nodes=tuple(sorted(nodes, key=lambda n: n.name)),
        missingNodes=tuple(missing),
        absentNodes=tuple(absent),
        prunable=tuple(prunable),
    )
