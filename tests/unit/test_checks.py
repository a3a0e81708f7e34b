"""What checks see: the live cluster with the plan laid over it, and pods read once and
only when a check asks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reconcile.desired.models import DesiredNode, DesiredState
from reconcile.diagnostics import Severity, Source
from reconcile.engine.checks import Check, Projection, projected_labels, run_checks
from reconcile.engine.findings import Finding
from reconcile.engine.nodes.plan import build_plan
from reconcile.engine.plan import PlanOptions
from tests.fake import FakeCluster


def _desired(**nodes: dict[str, str | None]) -> DesiredState:
    return DesiredState(
        nodes={
            name: DesiredNode(name, labels, Source(f"desired/nodes/{name}.yaml", 4, 9))
            for name, labels in nodes.items()
        }
    )


def test_labels_after_are_live_with_the_plan_laid_over_and_declared_nodes_not_yet_there() -> None:
    cluster = FakeCluster()
    cluster.add_node("n1", {"a.io/x": "0", "a.io/gone": "1", "a.io/kept": "k"})
    state = _desired(n1={"a.io/x": "1", "a.io/gone": None}, n9={"a.io/x": "9"})
    live = cluster.list_nodes()
    plan = build_plan(state, live, PlanOptions(allowMissingNodes=True))

    assert Projection(desired=state, live=live, nodes=plan.nodes).labels_after == {
        "n1": {"a.io/x": "1", "a.io/kept": "k"},
        "n9": {"a.io/x": "9"},
    }
    # without a plan: desired laid over live
    assert projected_labels(state, live)["n1"] == {"a.io/x": "1", "a.io/kept": "k"}


def test_a_planned_node_carries_exactly_its_planned_changes_not_desired_again() -> None:
    cluster = FakeCluster()
    cluster.add_node("n1", {"a.io/x": "0", "a.io/y": "0"})
    state = _desired(n1={"a.io/x": "1", "a.io/y": "1"})
    live = cluster.list_nodes()
    [planned] = build_plan(state, live).nodes
    only_x = planned.model_copy(update={"changes": planned.changes[:1]})

    labels = Projection(desired=state, live=live, nodes=[only_x]).labels_after

    assert labels == {"n1": {"a.io/x": "1", "a.io/y": "0"}}


def test_taints_after_are_the_planned_list_for_planned_nodes_and_live_for_others() -> None:
    cluster = FakeCluster()
    taint = {"key": "gpu", "effect": "NoSchedule"}
    cluster.add_node("n1")
    cluster.add_node("n2", taints=[taint])
    source = Source("desired/nodes/n1.yaml", 4, 9)
    state = DesiredState(nodes={"n1": DesiredNode("n1", {}, source, taints={"gpu:NoSchedule": ""})})
    live = cluster.list_nodes()

    projection = Projection(desired=state, live=live, nodes=build_plan(state, live).nodes)

    assert projection.taints_after == {"n1": (taint,), "n2": (taint,)}


def test_pods_are_read_once_and_only_when_a_check_asks() -> None:
    cluster = FakeCluster()
    cluster.add_node("n1")
    cluster.add_node("n2")
    cluster.add_pod("default", "p1", "n1")
    cluster.add_pod("default", "p2", "n2")
    reads: list[list[str]] = []

    def read_pods(names: Sequence[str]) -> Sequence[dict[str, Any]]:
        reads.append(list(names))
        return cluster.pods_on_nodes(names)

    def labels_only(projection: Projection) -> list[Finding]:
        return []

    def pods_on(*names: str) -> Check:
        def check(projection: Projection) -> list[Finding]:
            return [
                Finding(
                    severity=Severity.WARNING, kind="pod", subject=p["metadata"]["name"], message=""
                )
                for p in projection.pods_on(names)
                if p["spec"]["nodeName"] in names
            ]

        return check

    projection = Projection(desired=DesiredState(), live=cluster.list_nodes(), read_pods=read_pods)
    assert run_checks([labels_only], projection) == [] and reads == []
    found = run_checks([labels_only, pods_on("n1", "n2"), pods_on("n1"), pods_on("n2")], projection)
    assert [f.subject for f in found] == ["p1", "p2", "p1", "p2"]
    assert reads == [["n1", "n2"]]  # the nodes a later check asks for were read already
