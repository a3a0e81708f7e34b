"""Node groups: which facts each live node must carry, from the groups its live labels
select and its own NodeFeatures file.

Precedence is explicit: a node's own file overrides the groups, key by key; two groups
that select the same node and disagree on a fact are an error naming the node, the fact
and both groups (nothing is planned, so nothing is applied). Membership is decided on the
live labels each time a node is planned, so a node that joins a pool later is covered.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Final

from reconcile.desired.models import DesiredGroup, DesiredNode, DesiredState
from reconcile.diagnostics import ReconcileError, Source
from reconcile.engine.facts import RULES, Fact, shown_key
from reconcile.kube import labels
from reconcile.kube.objects import LiveNode
from reconcile.kube.selector import Selector, from_label_selector

# The fields of DesiredNode that hold each kind of fact.
_FIELDS: Final = {Fact.LABEL: "labels", Fact.ANNOTATION: "annotations", Fact.TAINT: "taints"}


class GroupConflict(ReconcileError):
    """Two node groups select one node and disagree on a fact."""


def compiled(groups: Iterable[DesiredGroup]) -> list[tuple[DesiredGroup, Selector]]:
    return [(g, from_label_selector(g.selector.model_dump())) for g in groups]


def node_facts(
    desired: DesiredState,
    live: LiveNode,
    selectors: list[tuple[DesiredGroup, Selector]] | None = None,
) -> DesiredNode | None:
    """What `live` must carry (None: nothing declared for it)."""
    own = desired.nodes.get(live.name)
    if not desired.groups:
        return own
    members = [g for g, s in (selectors or compiled(desired.groups)) if s.matches(live.labels)]
    if not members:
        return own
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


def _conflict(node: str, fact: Fact, key: str, first: DesiredGroup, second: DesiredGroup) -> str:
    def said(group: DesiredGroup) -> str:
        value = getattr(group.node, _FIELDS[fact])[key]
        said = "-" if value is None else labels.shown(repr(value), quote=False)
        return f"group {group.name} ({group.node.source.file}) says {said}"

    return f"{node} {shown_key(fact, key)}: {said(first)}, {said(second)}"


def resolve(desired: DesiredState, live: Iterable[LiveNode]) -> DesiredState:
    """`desired` with the facts of every live node its groups select laid in (nodes only
    declared by their own files, live or not, stay as declared)."""
    if not desired.groups:
        return desired
    selectors = compiled(desired.groups)
    nodes: dict[str, DesiredNode] = dict(desired.nodes)
    for node in live:
        facts = node_facts(desired, node, selectors)
        if facts is not None:
            nodes[node.name] = facts
    return replace(desired, nodes=dict(sorted(nodes.items())))
