"""The NFD objects a cluster holds: one node's NodeFeature objects (merged as nfd-master
merges them) and the NodeFeatureRule objects, read through `kube.api.ObjectApi`.

A cluster without NFD's CRDs serves neither kind: that is a ReconcileError saying so,
never an empty answer that would read as "no features".
"""

from __future__ import annotations

from typing import Any, Final

from reconcile.diagnostics import ReconcileError
from reconcile.kube.api import ObjectApi
from reconcile.kube.objects import ApiResource
from reconcile.nfd import NFD_NAMESPACE
from reconcile.nfd.model import API_VERSION, NodeFeature
from reconcile.nfd.nodefeature import NODE_NAME_LABEL, merge_node_features

NODE_FEATURE: Final = "NodeFeature"
NODE_FEATURE_RULE: Final = "NodeFeatureRule"
_GROUP: Final = API_VERSION.partition("/")[0]


def nfd_resource(cluster: ObjectApi, kind: str) -> ApiResource:
    """The resource serving NFD's `kind`; ReconcileError when the cluster has no such CRD."""
    resource = cluster.discovery().resource_for(API_VERSION, kind)
    if resource is None:
        plural = f"{kind.lower()}s.{_GROUP}"
        raise ReconcileError(
            f"the cluster serves no {API_VERSION} {kind}: Node Feature Discovery's CRDs "
            f"are not installed (no CustomResourceDefinition {plural})"
        )
    return resource


def node_feature_objects(cluster: ObjectApi, node: str) -> list[dict[str, Any]]:
    """Every NodeFeature object of `node` (labelled nfd.node.kubernetes.io/node-name), in
    every namespace, as nfd-master's informer lists them."""
    resource = nfd_resource(cluster, NODE_FEATURE)
    return cluster.list_objects(resource, "", label_selector=f"{NODE_NAME_LABEL}={node}")


def read_node_features(
    cluster: ObjectApi,
    node: str,
    *,
    namespace: str = NFD_NAMESPACE,
    deny_node_feature_labels: bool = False,
) -> NodeFeature:
    """`node`'s NodeFeature objects merged (`merge_node_features`); ReconcileError when
    the CRD is absent or no object names the node (nfd-worker does not run there)."""
    objects = node_feature_objects(cluster, node)
    if not objects:
        raise ReconcileError(
            f"no {API_VERSION} NodeFeature object is labelled {NODE_NAME_LABEL}={node}: "
            "nfd-worker has published nothing for that node"
        )
    return merge_node_features(
        objects,
        node=node,
        namespace=namespace,
        deny_node_feature_labels=deny_node_feature_labels,
        source=f"the cluster's NodeFeature objects of node {node}",
    )


def node_feature_rules(cluster: ObjectApi) -> list[dict[str, Any]]:
    """Every NodeFeatureRule object (cluster-scoped), sorted by name."""
    resource = nfd_resource(cluster, NODE_FEATURE_RULE)
    found = cluster.list_objects(resource)
    return sorted(found, key=lambda o: str((o.get("metadata") or {}).get("name", "")))
