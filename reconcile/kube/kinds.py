"""What reconcile knows about Kubernetes kinds without asking a cluster: whether each
built-in kind is namespaced (for offline `validate`) and the order to apply them in.

With a cluster, discovery answers the first question for any kind, custom ones included;
this table is the offline fallback and never overrides discovery.
"""

from __future__ import annotations

import difflib
from typing import Final, NamedTuple

# (apiVersion, kind) -> namespaced, for the built-in kinds people put in manifests.
BUILTIN_NAMESPACED: Final[dict[tuple[str, str], bool]] = {
    ("v1", "Namespace"): False,
    ("v1", "Node"): False,
    ("v1", "PersistentVolume"): False,
    ("v1", "Pod"): True,
    ("v1", "ConfigMap"): True,
    ("v1", "Secret"): True,
    ("v1", "Service"): True,
    ("v1", "ServiceAccount"): True,
    ("v1", "PersistentVolumeClaim"): True,
    ("v1", "LimitRange"): True,
    ("v1", "ResourceQuota"): True,
    ("v1", "Endpoints"): True,
    ("v1", "ReplicationController"): True,
    ("apps/v1", "Deployment"): True,
    ("apps/v1", "ReplicaSet"): True,
    ("apps/v1", "StatefulSet"): True,
    ("apps/v1", "DaemonSet"): True,
    ("apps/v1", "ControllerRevision"): True,
    ("batch/v1", "Job"): True,
    ("batch/v1", "CronJob"): True,
    ("policy/v1", "PodDisruptionBudget"): True,
    ("autoscaling/v2", "HorizontalPodAutoscaler"): True,
    ("autoscaling/v1", "HorizontalPodAutoscaler"): True,
    ("networking.k8s.io/v1", "Ingress"): True,
    ("networking.k8s.io/v1", "IngressClass"): False,
    ("networking.k8s.io/v1", "NetworkPolicy"): True,
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): False,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): False,
    ("rbac.authorization.k8s.io/v1", "Role"): True,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): True,
    ("storage.k8s.io/v1", "StorageClass"): False,
    ("scheduling.k8s.io/v1", "PriorityClass"): False,
    ("node.k8s.io/v1", "RuntimeClass"): False,
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): False,
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"): False,
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"): False,
    ("coordination.k8s.io/v1", "Lease"): True,
    ("discovery.k8s.io/v1", "EndpointSlice"): True,
    ("resource.k8s.io/v1", "DeviceClass"): False,
    ("resource.k8s.io/v1", "ResourceSlice"): False,
    ("resource.k8s.io/v1", "ResourceClaim"): True,
    ("resource.k8s.io/v1", "ResourceClaimTemplate"): True,
}

# Kinds whose resource name is not the lowercased kind plus the English plural ending.
IRREGULAR_PLURALS: Final[dict[str, str]] = {"Endpoints": "endpoints"}


def plural(kind: str) -> str:
    """The resource name of a kind (`NetworkPolicy` -> `networkpolicies`), as the API
    server names every built-in kind and CRDs almost always are; offline, without discovery."""
    if kind in IRREGULAR_PLURALS:
        return IRREGULAR_PLURALS[kind]
    singular = kind.lower()
    if singular.endswith(("s", "x", "ch", "sh")):
        return singular + "es"
    if singular.endswith("y") and singular[-2:-1] not in ("a", "e", "i", "o", "u"):
        return singular[:-1] + "ies"
    return singular + "s"


# Helm's install order: what others depend on goes first; pruning runs it backwards.
APPLY_ORDER: Final[tuple[str, ...]] = (
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "StatefulSet",
    "Job",
    "CronJob",
    "IngressClass",
    "Ingress",
    "APIService",
)
_RANK: Final = {kind: rank for rank, kind in enumerate(APPLY_ORDER)}


def unknown_builtin_kind(api_version: str, kind: str) -> str | None:
    """For a kind a built-in apiVersion does not serve (as far as this table knows): the
    nearest kind it does, or "" when none is close. None when the pair is known, or the
    apiVersion is not a built-in one (custom resources are for discovery to judge)."""
    served = [k for (v, k) in BUILTIN_NAMESPACED if v == api_version]
    if not served or kind in served:
        return None
    nearest = difflib.get_close_matches(kind, served, n=1, cutoff=0.7)
    return nearest[0] if nearest else ""


def apply_rank(kind: str) -> int:
    """Position of a kind in apply order; kinds not listed (custom ones) come last."""
    return _RANK.get(kind, len(APPLY_ORDER))


def workload_id(kind: str, namespace: str, name: str) -> str:
    """`Pod/nfd-lab/a100-job`; a cluster-scoped object without the namespace, as kubectl
    names it: `Namespace/nfd-lab`, `ClusterRole/viewer` (a name holds no `/`: unambiguous)."""
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


class ObjectId(NamedTuple):
    """Which object: (group, kind, namespace, name), as the API server tells objects apart.
    The version is not part of it (one object is served in every version of its group);
    the group is (an Istio Gateway is not a Gateway API Gateway). Shown as `Kind/ns/name`,
    the drift-line contract."""

    group: str
    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, api_version: str, kind: str, namespace: str, name: str) -> ObjectId:
        return cls(api_version.rpartition("/")[0], kind, namespace, name)

    def __str__(self) -> str:
        return workload_id(self.kind, self.namespace, self.name)
