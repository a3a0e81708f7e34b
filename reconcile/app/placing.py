"""`placement`'s reading: the nodes, with desired/ laid over, and the pods already bound
to the ones a workload may land on (the room they leave), one read of each."""

from __future__ import annotations

from reconcile.desired.models import DesiredState
from reconcile.engine import placement
from reconcile.engine.capacity import Placement
from reconcile.engine.checks import projected_labels
from reconcile.gpu import checks
from reconcile.kube.api import NodeApi


def place_on(state: DesiredState, cluster: NodeApi) -> list[Placement]:
    """Every workload of `state` placed on the cluster's nodes as they will be after
    apply: their labels, and the room a MIG layout of desired/ gives them."""
    live = cluster.list_nodes()
    policy = checks.policy(state)
    nodes = placement.node_views(live, projected_labels(state, live), None, policy.allocatable)
    where = placement.candidates(placement.workloads(state), nodes)
    pods = cluster.pods_on_nodes(sorted(where)) if where else []
    return placement.placement(state, live, pods, policy.allocatable)
