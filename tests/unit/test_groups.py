"""Node groups: membership on live labels, a node's own file overriding its groups key by
key, conflicts between groups, and nodes nothing declares any more, planned and applied
against FakeCluster."""

from __future__ import annotations

import pytest

from reconcile.desired.models import DesiredGroup, DesiredNode, DesiredState, LabelSelector
from reconcile.desired.reserved import LABEL_INVENTORY
from reconcile.diagnostics import Source
from reconcile.engine.groups import UNDECLARED, GroupConflict, node_facts, resolve
from reconcile.engine.nodes.apply import apply_plan
from reconcile.engine.nodes.plan import build_plan
from reconcile.engine.plan import PlanOptions
from tests.fake import FakeCluster


def _group(name: str, pool: str, **labels: str | None) -> DesiredGroup:
    facts = DesiredNode(name, dict(labels), Source(f"desired/groups/{name}.yaml", 4, 9))
    return DesiredGroup(name, LabelSelector(matchLabels={"pool": pool}), facts)


def _own(name: str, **labels: str | None) -> DesiredNode:
    return DesiredNode(name, dict(labels), Source(f"desired/nodes/{name}.yaml", 4, 9))


def test_a_node_joining_a_pool_later_is_planned_with_the_groups_facts() -> None:
    cluster = FakeCluster()
    cluster.add_node("n1", {"pool": "a"})
    cluster.add_node("n2", {"pool": "b"})
    state = DesiredState(groups=(_group("a", "a", **{"a.io/tier": "gold"}),))

    apply_plan(build_plan(state, cluster.list_nodes()), cluster, desired=state)
    assert "a.io/tier" not in cluster.get_node("n2").labels
    cluster.patch_node("n2", {"metadata": {"labels": {"pool": "a"}}})  # joins the pool
    result = apply_plan(build_plan(state, cluster.list_nodes()), cluster, desired=state)

    assert [(name, c.key) for name, c in result.lines()] == [("n2", "a.io/tier")]
    assert {n.name: n.labels.get("a.io/tier") for n in cluster.list_nodes()} == {
        "n1": "gold",
        "n2": "gold",
    }


def test_a_nodes_own_file_overrides_its_groups_key_by_key_and_says_where() -> None:
    cluster = FakeCluster()
    live = cluster.add_node("n1", {"pool": "a"})
    state = DesiredState(
        nodes={"n1": _own("n1", **{"a.io/tier": "silver"})},
        groups=(_group("a", "a", **{"a.io/tier": "gold", "a.io/zone": "z1"}),),
    )

    facts = node_facts(state, live)

    assert facts is not None
    assert facts.labels == {"a.io/tier": "silver", "a.io/zone": "z1"}
    assert facts.source_of("a.io/tier").file == "desired/nodes/n1.yaml"
    assert facts.source_of("a.io/zone").file == "desired/groups/a.yaml"


def test_two_groups_that_disagree_on_a_node_name_both_and_plan_nothing() -> None:
    cluster = FakeCluster()
    cluster.add_node("n1", {"pool": "a"})
    gold = _group("gold", "a", **{"a.io/tier": "gold"})
    none = _group("none", "a", **{"a.io/tier": None})

    with pytest.raises(GroupConflict) as raised:
        build_plan(DesiredState(groups=(gold, none)), cluster.list_nodes())

    assert str(raised.value) == (
        "n1 a.io/tier: group gold (desired/groups/gold.yaml) says 'gold', "
        "group none (desired/groups/none.yaml) says -: nothing was planned"
    )
    assert cluster.writes == []


def test_groups_that_agree_on_a_node_are_no_conflict() -> None:
    cluster = FakeCluster()
    live = cluster.add_node("n1", {"pool": "a"})
    one = _group("one", "a", **{"a.io/tier": "gold"})
    two = _group("two", "a", **{"a.io/tier": "gold", "a.io/x": "1"})

    facts = node_facts(DesiredState(groups=(one, two)), live)

    assert facts is not None and facts.labels == {"a.io/tier": "gold", "a.io/x": "1"}


def test_a_node_no_longer_declared_keeps_what_reconcile_wrote_prunable() -> None:
    cluster = FakeCluster()
    cluster.add_node("n1", {"pool": "a"})
    cluster.add_node("n2", {"pool": "b"})  # nothing ever declared it
    state = DesiredState(groups=(_group("a", "a", **{"a.io/tier": "gold"}),))
    apply_plan(build_plan(state, cluster.list_nodes()), cluster, desired=state)
    assert cluster.get_node("n1").annotations[LABEL_INVENTORY] == "a.io/tier"

    resolved = resolve(DesiredState(), cluster.list_nodes())  # the group file deleted

    assert list(resolved.nodes) == ["n1"]
    assert (resolved.nodes["n1"].labels, resolved.nodes["n1"].source) == ({}, UNDECLARED)
    [prunable] = build_plan(DesiredState(), cluster.list_nodes()).prunable
    assert (prunable.node, prunable.key, prunable.value) == ("n1", "a.io/tier", "gold")
    pruned = build_plan(
        DesiredState(), cluster.list_nodes(), PlanOptions(prune=True, allowEmptyPrune=True)
    )
    apply_plan(pruned, cluster, desired=DesiredState())
    assert "a.io/tier" not in cluster.get_node("n1").labels
