"""Node facts as values at paths: labels, annotations and taints read, shown and written
the same way, applied to FakeCluster's nodes."""

from __future__ import annotations

import pytest

from reconcile.desired.models import DesiredNode, DesiredState
from reconcile.desired.reserved import ANNOTATION_INVENTORY, TAINT_INVENTORY
from reconcile.diagnostics import Source
from reconcile.engine.facts import (
    BY_FACT,
    Fact,
    parse_shown_key,
    shown_key,
    shown_value,
    taints_after,
)
from reconcile.engine.nodes.apply import apply_plan
from reconcile.engine.nodes.plan import build_plan
from tests.fake import FakeCluster

OTHERS = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "t0"}


def _node(
    *, annotations: dict[str, str | None] | None = None, taints: dict[str, str | None] | None = None
) -> DesiredState:
    source = Source("desired/nodes/n1.yaml", 4, 9)
    node = DesiredNode("n1", {}, source, annotations=annotations or {}, taints=taints or {})
    return DesiredState(nodes={"n1": node})


def test_a_taint_is_added_beside_anothers_and_removed_leaving_it_in_place() -> None:
    cluster = FakeCluster()
    cluster.add_node("n1", taints=[OTHERS])
    state = _node(taints={"gpu:NoSchedule": "true"})

    apply_plan(build_plan(state, cluster.list_nodes()), cluster, desired=state)
    after = cluster.get_node("n1")
    assert after.taints == (OTHERS, {"key": "gpu", "effect": "NoSchedule", "value": "true"})
    assert after.annotations[TAINT_INVENTORY] == "gpu:NoSchedule"

    removed = _node(taints={"gpu:NoSchedule": None})
    apply_plan(build_plan(removed, cluster.list_nodes()), cluster, desired=removed)
    assert cluster.get_node("n1").taints == (OTHERS,)


def test_an_annotation_is_written_and_recorded_but_never_read_back_as_a_fact() -> None:
    cluster = FakeCluster()
    cluster.add_node("n1")
    state = _node(annotations={"a.io/note": "hello world"})

    [node] = apply_plan(build_plan(state, cluster.list_nodes()), cluster, desired=state).nodes

    live = cluster.get_node("n1")
    assert [(c.fact, c.key, c.after) for c in node.applied] == [
        (Fact.ANNOTATION, "a.io/note", "hello world")
    ]
    assert live.annotations[ANNOTATION_INVENTORY] == "a.io/note"
    rule = BY_FACT[Fact.ANNOTATION]
    assert rule.live(live) == {"a.io/note": "hello world"}  # the inventory is no fact
    assert rule.get(live, ANNOTATION_INVENTORY) is None
    assert not build_plan(state, cluster.list_nodes()).nodes


def test_the_last_taint_of_a_key_and_effect_wins_as_the_api_server_reads_them() -> None:
    cluster = FakeCluster()
    first, last = (
        {"key": "k", "effect": "NoSchedule", "value": "1"},
        {"key": "k", "effect": "NoSchedule", "value": "2"},
    )
    live = cluster.add_node("n1", taints=[first, last])
    rule = BY_FACT[Fact.TAINT]
    assert rule.get(live, "k:NoSchedule") == rule.live(live)["k:NoSchedule"] == "2"
    assert rule.path("k:NoSchedule") == ("spec", "taints", "k:NoSchedule")


def test_taints_after_keeps_untouched_taints_and_the_time_a_changed_one_was_added() -> None:
    live = [OTHERS, {"key": "gpu", "effect": "NoSchedule", "value": "a"}]
    assert taints_after(live, {OTHERS["key"] + ":NoExecute": "x", "new:NoSchedule": ""}) == [
        {**OTHERS, "value": "x"},
        {"key": "gpu", "effect": "NoSchedule", "value": "a"},
        {"key": "new", "effect": "NoSchedule"},
    ]
    assert taints_after(live, {"gpu:NoSchedule": None}) == [OTHERS]


@pytest.mark.parametrize(
    ("fact", "key", "shown"),
    [
        (Fact.LABEL, "nvidia.com/gpu.product", "nvidia.com/gpu.product"),
        (Fact.ANNOTATION, "a.io/note", "annotation:a.io/note"),
        (Fact.TAINT, "dedicated:NoSchedule", "taint:dedicated:NoSchedule"),
    ],
)
def test_a_shown_key_names_its_fact_and_parses_back(fact: Fact, key: str, shown: str) -> None:
    assert shown_key(fact, key) == shown
    assert parse_shown_key(shown) == (fact, key)


def test_values_are_shown_so_absent_empty_and_odd_text_are_told_apart() -> None:
    assert [shown_value(v) for v in (None, "", "a.b/c:1", "two words")] == [
        "-",
        '""',
        "a.b/c:1",
        '"two words"',
    ]
