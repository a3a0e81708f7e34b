"""REST paths built from names, each name checked before it becomes a path segment."""

from __future__ import annotations

from typing import Final
from urllib.parse import quote

from reconcile.diagnostics import InvalidName
from reconcile.kube import validation as apivalidation
from reconcile.kube.objects import ApiResource
from reconcile.kube.validation import NAME_DNS_LABEL, NAME_DNS_SUBDOMAIN, NAME_PATH_SEGMENT

PODS: Final = ApiResource("", "v1", "pods", "Pod", namespaced=True)
LEASES: Final = ApiResource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
EVENTS: Final = ApiResource("events.k8s.io", "v1", "events", "Event", namespaced=True)


def node_segment(name: str) -> str:
    """A node name as one URL path segment, after checking it is a valid node name."""
    return _segment(name, "node", NAME_DNS_SUBDOMAIN)


def namespace_segment(namespace: str) -> str:
    """A namespace as one URL path segment, after checking it is a DNS-1123 label."""
    return _segment(namespace, "namespace", NAME_DNS_LABEL)


def _segment(name: str, what: str, rule: str) -> str:
    # Names come from argv, desired/ and the cluster's own answers (pods on a node, the
    # inventory): `../namespaces/kube-system` must never become another path.
    problem = apivalidation.name_problem(name, what, rule)
    if problem:
        raise InvalidName(problem)
    return quote(name, safe="")


def collection_path(resource: ApiResource, namespace: str) -> str:
    """The path of a collection: in `namespace`, or across every namespace when empty."""
    return resource.path(namespace_segment(namespace) if namespace else "")


def object_path(resource: ApiResource, namespace: str, name: str) -> str:
    """The path of one object. Every kind's names are at least path segments (the rule
    per kind is checked offline, on desired/); namespaces are DNS-1123 labels."""
    segment = _segment(name, resource.kind, NAME_PATH_SEGMENT)
    return resource.path(namespace_segment(namespace) if namespace else "", segment)
