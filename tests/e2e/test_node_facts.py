"""Labels, annotations and taints are one kind of thing to the engine: a fact at a path of
the node, written in one guarded request, confirmed from the server's answer."""

from __future__ import annotations

from reconcile.desired.models import DesiredNode, DesiredState
from reconcile.diagnostics import Source
from reconcile.engine import operations
from reconcile.kube.client import Cluster
from tests.conftest import ClusterFactory
from tests.support import lab_objects


def test_annotations_and_taints_apply_in_one_request_and_converge(
    make_cluster: ClusterFactory,
) -> None:
    cluster = make_cluster([o for o in lab_objects("lab") if o["kind"] == "Node"])
    state = DesiredState(
        nodes={
            "lab-node-0": DesiredNode(
                "lab-node-0",
                {"example.com/pool": "a100"},
                Source("desired/nodes/lab-node-0.yaml", 4, 9),
                annotations={"example.com/owner": "ml platform"},
                taints={"nvidia.com/gpu:NoSchedule": "present"},
            )
        }
    )
    client = Cluster.connect(str(cluster.kubeconfig))
    try:
        plan = operations.plan(operations.PlanRequest(state), client)
        [node_plan] = plan.nodes
        assert [c.shown_key for c in node_plan.changes] == [
            "example.com/pool",
            "annotation:example.com/owner",
            "taint:nvidia.com/gpu:NoSchedule",
        ]
        if cluster.sandbox is not None:
            cluster.sandbox.clear_requests()
        result = operations.apply(operations.ApplyRequest(plan, desired=state), client)
        assert result.ok, result
        if cluster.sandbox is not None:
            writes = [r for r in cluster.sandbox.requests if r.method == "PATCH" and not r.dry_run]
            assert [(w.resource, w.status) for w in writes] == [("nodes", 200)]
        live = cluster.node("lab-node-0")
        assert live["metadata"]["labels"]["example.com/pool"] == "a100"
        assert live["metadata"]["annotations"]["example.com/owner"] == "ml platform"
        assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in live[
            "spec"
        ]["taints"]
        again = operations.plan(operations.PlanRequest(state), client)
        assert again.nodes == ()
    finally:
        client.close()
