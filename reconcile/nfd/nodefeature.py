"""One node's features: its NodeFeature objects merged as nfd-master merges them, and the
merged result as the one NodeFeature document `nfd eval --features` reads.

A port of getAndMergeNodeFeatures (pkg/nfd-master/nfd-master.go, NFD_COMMIT) and of the
MergeInto methods of api/nfd/v1alpha1/feature.go. nfd-master lists the NodeFeature objects
labelled `nfd.node.kubernetes.io/node-name=<node>` in every namespace (its informer
watches them all), sorts them: those in its own namespace first, then by name, then by
namespace; deep-copies the first one's spec and merges each following spec into it, the
later object winning:

- flags: the union of the elements;
- attributes: the later value of an element replaces the earlier one;
- instances: appended, in object order;
- spec.labels: each object's keys put under feature.node.kubernetes.io first (the
  DisableAutoPrefix gate off, its default), then the later value replaces the earlier;
  with `restrictions.denyNodeFeatureLabels`, the labels of every object that is not
  nfd-worker's own (named after the node, in nfd-master's namespace) are dropped.

A feature whose `elements` is absent (Go's nil) stays nil unless another object gives it
elements, as the Go merge leaves it. The namespace selector of
`restrictions.nodeFeatureNamespaceSelector` is not applied: pass only the objects it
selects.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Final

from reconcile.nfd import NFD_NAMESPACE
from reconcile.nfd.master import FEATURE_NS, add_ns
from reconcile.nfd.model import API_VERSION, Features, NodeFeature, RuleError, parse_node_feature

NODE_NAME_LABEL: Final = "nfd.node.kubernetes.io/node-name"


def _meta(obj: Mapping[str, Any]) -> tuple[str, str, str | None]:
    """(namespace, name, node-name label) of an object; "" and None where absent."""
    if not isinstance(obj, Mapping):
        return "", "", None  # parse_node_feature says what it is instead
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    labels = meta.get("labels")
    node = labels.get(NODE_NAME_LABEL) if isinstance(labels, Mapping) else None
    return (
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        node if isinstance(node, str) else None,
    )


def merge_into(source: Features, target: Features) -> None:
    """feature.go Features.MergeInto: `source` merged into `target`, `source` winning."""
    for name, flags in source.flags.items():
        if flags is None:
            target.flags.setdefault(name, None)
        else:
            target.flags[name] = (target.flags.get(name) or set()) | flags
    for name, attrs in source.attributes.items():
        if attrs is None:
            target.attributes.setdefault(name, None)
        else:
            target.attributes[name] = {**(target.attributes.get(name) or {}), **attrs}
    for name, instances in source.instances.items():
        if instances is None:
            target.instances.setdefault(name, None)
        else:
            target.instances[name] = [
                *(target.instances.get(name) or []),
                *(dict(i) for i in instances),
            ]


def merge_node_features(
    objects: Sequence[Mapping[str, Any]],
    *,
    node: str | None = None,
    namespace: str = NFD_NAMESPACE,
    deny_node_feature_labels: bool = False,
    source: str = "NodeFeature",
) -> NodeFeature:
    """The NodeFeature nfd-master evaluates the rules against for one node, from that
    node's NodeFeature objects (plain dicts, as a list or a file holds them).

    With `node`, only the objects labelled `nfd.node.kubernetes.io/node-name=<node>`
    count (nfd-master's selector); without it, every object counts and the node is the
    one their labels name (objects naming two nodes are a RuleError), else the first
    object's name. `namespace` is nfd-master's own. The result is named after the node;
    its labels are prefixed. No object: no features and no labels, as nfd-master then
    evaluates the rules. RuleError (naming `source`) for an object the CRD would refuse.
    """
    found: list[tuple[str, str, NodeFeature]] = []
    nodes: set[str] = set()
    for obj in objects:
        ns, name, labelled = _meta(obj)
        if node is not None and labelled != node:
            continue
        if labelled is not None:
            nodes.add(labelled)
        found.append((ns, name, parse_node_feature(obj, source)))
    if node is None and len(nodes) > 1:
        raise RuleError(
            f"{source}: NodeFeature objects of several nodes ({', '.join(sorted(nodes))}): "
            "give one node's"
        )
    found.sort(key=lambda o: (o[0] != namespace, o[1], o[0]))
    name = node or next(iter(nodes), None) or (found[0][1] if found else "")
    features = Features()
    labels: dict[str, str] = {}
    for index, (ns, obj_name, parsed) in enumerate(found):
        own = ns == namespace and obj_name == name
        if index == 0:
            features = copy.deepcopy(parsed.features)
        else:
            merge_into(parsed.features, features)
        if not deny_node_feature_labels or own:
            labels.update(add_ns(parsed.labels, FEATURE_NS))
    return NodeFeature(name, features, labels)


def node_feature_document(merged: NodeFeature) -> dict[str, Any]:
    """`merged` as one NodeFeature object (keys sorted, instances in their order) that
    `merge_node_features([document])` reads back as the same features and labels: a nil
    feature is written without `elements`."""

    def elements(value: Any) -> dict[str, Any]:
        return {} if value is None else {"elements": value}

    features = merged.features
    return {
        "apiVersion": API_VERSION,
        "kind": "NodeFeature",
        "metadata": {"name": merged.name, "labels": {NODE_NAME_LABEL: merged.name}},
        "spec": {
            "features": {
                "flags": {
                    k: elements(None if v is None else {f: {} for f in sorted(v)})
                    for k, v in sorted(features.flags.items())
                },
                "attributes": {
                    k: elements(None if v is None else dict(sorted(v.items())))
                    for k, v in sorted(features.attributes.items())
                },
                "instances": {
                    k: elements(
                        None if v is None else [{"attributes": dict(sorted(i.items()))} for i in v]
                    )
                    for k, v in sorted(features.instances.items())
                },
            },
            "labels": dict(sorted(merged.labels.items())),
        },
    }
