"""The annotation budget: a node's annotations after apply, reconcile's inventories
included, may not exceed what the API server accepts."""

from __future__ import annotations

from reconcile.desired.models import DesiredNode, DesiredState
from reconcile.desired.reserved import ANNOTATION_INVENTORY
from reconcile.diagnostics import Severity, Source
from reconcile.engine.budget import annotation_budget_check
from reconcile.engine.checks import Projection
from reconcile.engine.nodes.plan import build_plan
from reconcile.kube.validation import TOTAL_ANNOTATION_SIZE_LIMIT
from tests.fake import FakeCluster

BIG = "x" * (TOTAL_ANNOTATION_SIZE_LIMIT // 2)


def _check(cluster: FakeCluster, annotations: dict[str, str | None]) -> list[str]:
    source = Source("desired/nodes/n1.yaml", 4, 9)
    state = DesiredState(nodes={"n1": DesiredNode("n1", {}, source, annotations=annotations)})
    live = cluster.list_nodes()
    plan = build_plan(state, live)
    projection = Projection(desired=state, live=live, nodes=plan.nodes)
    return [
        f"{f.severity} {f.kind} {f.subject} {f.message}"
        for f in annotation_budget_check(projection)
    ]


def test_what_the_node_already_carries_counts_with_what_the_plan_adds() -> None:
    cluster = FakeCluster()
    cluster.add_node("n1", annotations={"other.io/big": BIG})

    [finding] = _check(cluster, {"a.io/big": BIG})

    assert finding.startswith(
        f"{Severity.ERROR} annotations-too-long n1 its annotations would total"
    )
    assert "(declared in desired/nodes/n1.yaml)" in finding


def test_a_plan_that_removes_enough_fits_and_one_within_the_limit_is_no_finding() -> None:
    cluster = FakeCluster()
    cluster.add_node("n1", annotations={"a.io/old": BIG})
    cluster.patch_node("n1", {"metadata": {"annotations": {ANNOTATION_INVENTORY: "a.io/old"}}})

    assert _check(cluster, {"a.io/old": None, "a.io/new": BIG}) == []
    assert _check(cluster, {"a.io/small": "1"}) == []


def test_the_inventory_annotation_reconcile_writes_counts_too() -> None:
    cluster = FakeCluster()
    # within the limit by a few bytes, until the plan's own inventory annotation is added
    cluster.add_node("n1", annotations={"o.io/a": "x" * (TOTAL_ANNOTATION_SIZE_LIMIT - 20)})

    assert _check(cluster, {"a.io/b": ""}) != []
