"""`placement`'s reading: the nodes, with desired/ laid over, the pods already bound to
the ones a workload may land on (the room they leave), and, when a workload asks for
them, the RuntimeClasses (pod overhead) and the DRA objects (devices), one read of each."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

from reconcile.desired.models import DesiredState
from reconcile.diagnostics import NotFound
from reconcile.engine import placement
from reconcile.engine.capacity import Placement, PodTemplate
from reconcile.gpu import checks
from reconcile.kube import dra
from reconcile.kube.client.cluster import Cluster

RUNTIME_CLASSES: Final = "/apis/node.k8s.io/v1/runtimeclasses"
DRA: Final = {
    "ResourceSlice": "/apis/resource.k8s.io/v1/resourceslices",
    "DeviceClass": "/apis/resource.k8s.io/v1/deviceclasses",
    "ResourceClaim": "/apis/resource.k8s.io/v1/resourceclaims",
    "ResourceClaimTemplate": "/apis/resource.k8s.io/v1/resourceclaimtemplates",
}


def _listed(cluster: Cluster, kind: str, path: str) -> Iterator[Mapping[str, Any]]:
    """Every object at `path`, each with its kind (a LIST's items carry none); nothing
    where the cluster does not serve the resource."""
    try:
        for item in cluster.list_all(path):
            yield {"kind": kind, **item}
    except NotFound:
        return


def _declared(state: DesiredState, kinds: Iterable[str]) -> list[Mapping[str, Any]]:
    wanted = set(kinds)
    return [m.body for m in state.manifests if m.kind in wanted]


def _runtime_classes(
    state: DesiredState, cluster: Cluster, templates: list[PodTemplate]
) -> dict[str, Mapping[str, Any]]:
    if not any(t.spec.get("runtimeClassName") for t in templates):
        return {}
    found = [
        *_listed(cluster, "RuntimeClass", RUNTIME_CLASSES),
        *_declared(state, ["RuntimeClass"]),
    ]
    return {str((c.get("metadata") or {}).get("name")): c for c in found}


def _claims(
    state: DesiredState, cluster: Cluster, templates: list[PodTemplate]
) -> dra.Cluster | None:
    if not any(t.spec.get("resourceClaims") for t in templates):
        return None
    live = [obj for kind, path in DRA.items() for obj in _listed(cluster, kind, path)]
    # desired/ declared last: what apply will make (a template, a class) wins over the live.
    return dra.Cluster.of([*live, *_declared(state, DRA)])


def place_on(state: DesiredState, cluster: Cluster) -> list[Placement]:
    """Every workload of `state` placed on the cluster's nodes as they will be after
    apply: their labels, and the room a MIG layout of desired/ gives them."""
    live = cluster.list_nodes()
    nodes = placement.after_views(state, live, checks.policy(state).allocatable)
    templates = placement.workloads(state)
    where = placement.candidates(templates, nodes)
    pods = cluster.pods_on_nodes(sorted(where)) if where else []
    return placement.placement(
        state,
        live,
        pods,
        nodes=nodes,
        claims=_claims(state, cluster, templates),
        runtime_classes=_runtime_classes(state, cluster, templates),
    )
