"""What reconcile knows about kinds offline."""

from __future__ import annotations

import pytest

from reconcile.kube.kinds import BUILTIN_NAMESPACED, plural
from reconcile.sandbox.resources import RESOURCES


@pytest.mark.parametrize(
    ("kind", "resource"),
    [
        ("NetworkPolicy", "networkpolicies"),
        ("Ingress", "ingresses"),
        ("IngressClass", "ingressclasses"),
        ("Endpoints", "endpoints"),
        ("EndpointSlice", "endpointslices"),
        ("Gateway", "gateways"),
        ("HorizontalPodAutoscaler", "horizontalpodautoscalers"),
    ],
)
def test_the_resource_name_of_a_kind(kind: str, resource: str) -> None:
    assert plural(kind) == resource


def test_every_kind_the_sandbox_serves_has_the_resource_name_it_serves_it_under() -> None:
    served = {r.kind: r.plural for r in RESOURCES}
    assert {kind: plural(kind) for kind in served} == served
    assert {kind for _, kind in BUILTIN_NAMESPACED} & served.keys()
