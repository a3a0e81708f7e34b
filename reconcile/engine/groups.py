"""Node groups: which facts each live node must carry, from the groups its live labels
select and its own NodeFeatures file.

Precedence is explicit: a node's own file overrides the groups, key by key; two groups
that select the same node and disagree on a fact are an error naming the node, the fact
and both groups (nothing is planned, so nothing is applied). Membership is decided on the
live labels each time a node is planned, so a node that joins a pool later is covered.

A live node that nothing declares any more (its group file or its own file deleted, or
relabelled out of a pool) but whose inventory annotations list facts reconcile wrote
there is declared with no facts at all: what reconcile wrote is then prunable there as on
any declared node, and every consumer (plan, apply's re-plan after a 409, a saved plan's
justification, watch) sees it the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Final

from reconcile.desired.models import DesiredGroup, DesiredNode, DesiredState
from reconcile.diagnostics import ReconcileError, Source
from reconcile.engine.facts import INVENTORIES, RULES, Fact, shown_key
from reconcile.kube import labels
from reconcile.kube.objects import LiveNode
from reconcile.kube.selector import Selector, from_label_selector

# The fields of DesiredNode that hold each kind of fact.
_FIELDS: Final = {Fact.LABEL: "labels", Fact.ANNOTATION: "annotations", Fact.TAINT: "taints"}


class GroupConflict(ReconcileError):
    """Two node groups select one node and disagree on a fact."""


def compiled(groups: Iterable[DesiredGroup]) -> list[tuple[DesiredGroup, Selector]]:
    return [(g, from_label_selector(g.selector.model_dump())) for g in groups]


def pools(groups: Iterable[DesiredGroup], nodes: Iterable[LiveNode]) -> dict[str, str]:
    """node -> the NodeGroup it is in, for the nodes exactly one group selects."""
    selectors = compiled(groups)
    found: dict[str, str] = {}
    for node in nodes:
        members = [g.name for g, s in selectors if s.matches(node.labels)]
        if len(members) == 1:
            found[node.name] = members[0]
    return found


def node_facts(
    desired: DesiredState,
    live: LiveNode,
    selectors: list[tuple[DesiredGroup, Selector]] | None = None,
) -> DesiredNode | None:
    """What `live` must carry: None when nothing declares it and reconcile manages
    nothing there; no facts at all (`undeclared`) when nothing declares it any more but
    its inventory lists facts reconcile wrote."""
    own = desired.nodes.get(live.name)
    if not desired.groups:
        return own if own is not None else undeclared(live)
    members = [g for g, s in (selectors or compiled(desired.groups)) if s.matches(live.labels)]
    if not members:
        return own if own is not None else undeclared(live)
    facts: dict[Fact, dict[str, str | None]] = {fact: {} for fact in _FIELDS}
    sources: dict[tuple[Fact, str], DesiredGroup] = {}
    conflicts = []
    for group in members:
        for rule in RULES:
            for key, value in rule.desired(group.node).items():
                first = sources.get((rule.fact, key))
                if first is not None and facts[rule.fact][key] != value:
                    conflicts.append(_conflict(live.name, rule.fact, key, first, group))
                    continue
                facts[rule.fact][key] = value
                sources[(rule.fact, key)] = group
    if conflicts:
        raise GroupConflict("; ".join(conflicts) + ": nothing was planned")
    where: dict[str, Source] = {
        shown_key(fact, key): group.node.source_of(shown_key(fact, key))
        for (fact, key), group in sources.items()
    }
    if own is not None:  # the node's own file overrides the groups, key by key
        for rule in RULES:
            facts[rule.fact].update(rule.desired(own))
            where.update(
                {
                    shown_key(rule.fact, k): own.source_of(shown_key(rule.fact, k))
                    for k in rule.desired(own)
                }
            )
    label_sources = {k: v for k, v in where.items() if ":" not in k}
    source = own.source if own is not None else members[0].node.source
    return DesiredNode(
        live.name,
        facts[Fact.LABEL],
        source,
        label_sources,
        annotations=facts[Fact.ANNOTATION],
        taints=facts[Fact.TAINT],
        fact_sources={k: v for k, v in where.items() if ":" in k},
    )


def undeclared(live: LiveNode) -> DesiredNode | None:
    """A node nothing in desired/ declares: None when reconcile wrote nothing there (the
    common case, decided on the annotation keys alone), else a declaration of no facts,
    so that what its inventory lists is prunable (`source` empty: no file declares it)."""
    if INVENTORIES.isdisjoint(live.annotations):
        return None
    return DesiredNode(live.name, {}, UNDECLARED)


# The source of a node nothing declares any more: no file.
UNDECLARED: Final = Source("")


def _conflict(node: str, fact: Fact, key: str, first: DesiredGroup, second: DesiredGroup) -> str:
    def said(group: DesiredGroup) -> str:
        value = getattr(group.node, _FIELDS[fact])[key]
        said = "-" if value is None else labels.shown(repr(value), quote=False)
        return f"group {group.name} ({group.node.source.file}) says {said}"

    return f"{node} {shown_key(fact, key)}: {said(first)}, {said(second)}"


def resolve(desired: DesiredState, live: Iterable[LiveNode]) -> DesiredState:
    """`desired` with the facts of every live node its groups select laid in (nodes only
    declared by their own files, live or not, stay as declared), and every live node
    nothing declares any more but whose inventory lists facts, declared with none."""
    if not desired.groups:
        # One membership test a node: a fleet declared node by node pays no more.
        gone = [
            facts
            for node in live
            if node.name not in desired.nodes and (facts := undeclared(node)) is not None
        ]
        if not gone:
            return desired
        nodes = {**desired.nodes, **{facts.name: facts for facts in gone}}
        return replace(desired, nodes=dict(sorted(nodes.items())))
    selectors = compiled(desired.groups)
    nodes = dict(desired.nodes)
    for node in live:
        facts = node_facts(desired, node, selectors)
        if facts is not None:
            nodes[node.name] = facts
    return replace(desired, nodes=dict(sorted(nodes.items())))
