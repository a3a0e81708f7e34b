"""A node as the API server sends it, decoded straight into what reconcile reads of it.

A Node's JSON is mostly what reconcile never looks at: the status (images, addresses,
capacity, the kubelet's conditions) and the managedFields of every writer. At fleet scale
decoding all of it into dicts costs more than the request, and the dicts then hold several
times the memory of the JSON itself. msgspec decodes the JSON against the typed shape
below, building Python objects only for the fields named in it and skipping the rest
unbuilt: the labels, annotations, taints, readiness and resourceVersion a plan compares.

Who wrote a label (managedFields) is needed only for the lines of a plan: of each entry
that touches labels, the raw JSON of its `f:labels` is kept, copied out of the page so the
page's buffer is released (once for every node with the same set), and decoded when a
line asks (`LiveNode.label_managers`).
"""

from __future__ import annotations

import functools
from typing import Any, Final

import msgspec

from reconcile.kube.objects import Lazy, LiveNode

_NO_LABELS: Final = msgspec.Raw(b"")


class _FieldsMetadata(msgspec.Struct):
    labels: msgspec.Raw = msgspec.field(default=_NO_LABELS, name="f:labels")


class _Fields(msgspec.Struct):
    metadata: _FieldsMetadata = msgspec.field(default_factory=_FieldsMetadata, name="f:metadata")


class _Managed(msgspec.Struct):
    manager: str = ""
    time: str = ""
    fieldsV1: _Fields = msgspec.field(default_factory=_Fields)


class _Metadata(msgspec.Struct):
    name: str = ""
    resourceVersion: str = ""
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    managedFields: list[_Managed] | None = None


class _Condition(msgspec.Struct):
    type: str = ""
    status: str = ""


class _Status(msgspec.Struct):
    conditions: list[_Condition] | None = None
    allocatable: dict[str, str] | None = None
    capacity: dict[str, str] | None = None


class _Spec(msgspec.Struct):
    unschedulable: bool = False
    taints: list[dict[str, Any]] | None = None


class _Node(msgspec.Struct):
    metadata: _Metadata = msgspec.field(default_factory=_Metadata)
    spec: _Spec = msgspec.field(default_factory=_Spec)
    status: _Status = msgspec.field(default_factory=_Status)


class _ListMetadata(msgspec.Struct):
    resourceVersion: str = ""
    continue_: str = msgspec.field(default="", name="continue")


class _NodeList(msgspec.Struct):
    items: list[_Node] | None = None  # the list's metadata is PageHead's


class _ObjectMetadata(msgspec.Struct):
    name: str = ""
    namespace: str = ""
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    resourceVersion: str = ""


class _Specified(msgspec.Struct):
    apiVersion: str = ""
    kind: str = ""
    metadata: _ObjectMetadata = msgspec.field(default_factory=_ObjectMetadata)
    spec: Any = None


class _SpecifiedList(msgspec.Struct):
    items: list[_Specified] | None = None  # the list's metadata is PageHead's


class PageHead(msgspec.Struct, frozen=True):
    """What the next page of a LIST needs of this one: its list metadata."""

    metadata: _ListMetadata = msgspec.field(default_factory=_ListMetadata)

    @property
    def continue_(self) -> str:
        return self.metadata.continue_

    @property
    def resource_version(self) -> str:
        return self.metadata.resourceVersion


_NODE: Final = msgspec.json.Decoder(_Node)
_NODE_LIST: Final = msgspec.json.Decoder(_NodeList)
_PAGE_HEAD: Final = msgspec.json.Decoder(PageHead)
_FIELDS: Final = msgspec.json.Decoder(dict[str, Any] | None)
_SPECIFIED_LIST: Final = msgspec.json.Decoder(_SpecifiedList)


# One string object for each label key and value, and one copy of each writer's label
# set (f:labels lists keys, not values: a pool's nodes share it), however many nodes
# carry them. msgspec shares short keys only; a fleet's labels repeat across nodes.
_strings: dict[str, str] = {}
_fields: dict[bytes, bytes] = {}
_SHARED_AT_MOST: Final = 200_000


def _shared_fields(raw: msgspec.Raw) -> bytes:
    data = bytes(raw)
    found = _fields.get(data)
    if found is None:
        if len(_fields) >= _SHARED_AT_MOST:
            return data
        found = _fields[data] = data
    return found


def _label_managers(entries: list[tuple[str, str, bytes]]) -> dict[str, str]:
    """label key -> the field manager that wrote it last, from each writer's raw
    `fieldsV1["f:metadata"]["f:labels"]`."""
    found: dict[str, tuple[str, str]] = {}
    for manager, when, raw in entries:
        for field in _FIELDS.decode(raw) or ():
            if field.startswith("f:"):
                key = field[2:]
                if key not in found or when >= found[key][1]:
                    found[key] = (manager, when)
    return {key: manager for key, (manager, _) in found.items()}


def _live(node: _Node) -> LiveNode:
    metadata = node.metadata
    labels = metadata.labels or {}
    if len(_strings) < _SHARED_AT_MOST:  # one bounded table; past it, labels as decoded
        keep = _strings.setdefault
        labels = {keep(k, k): keep(v, v) for k, v in labels.items()}
    writers = [
        (entry.manager, entry.time, _shared_fields(entry.fieldsV1.metadata.labels))
        for entry in metadata.managedFields or ()
        if entry.fieldsV1.metadata.labels is not _NO_LABELS
    ]
    conditions = node.status.conditions or ()
    return LiveNode(
        name=metadata.name,
        resource_version=metadata.resourceVersion,
        labels=labels,
        annotations=metadata.annotations or {},
        unschedulable=node.spec.unschedulable,
        taints=tuple(node.spec.taints or ()),
        label_managers=Lazy(functools.partial(_label_managers, writers)),
        ready=any(c.type == "Ready" and c.status == "True" for c in conditions),
        allocatable=node.status.allocatable or {},
        capacity=node.status.capacity or {},
    )


def node(data: bytes) -> LiveNode:
    """A Node's JSON (a GET, a PATCH's answer, a watch event's object)."""
    return _live(_NODE.decode(data))


def page_nodes(data: bytes) -> list[LiveNode]:
    """The nodes of a NodeList's JSON, one page of a LIST (its token and version are
    `page_head`'s)."""
    return [_live(item) for item in _NODE_LIST.decode(data).items or ()]


def page_specs(data: bytes) -> list[dict[str, Any]]:
    """The objects of a list's JSON (one page of a LIST), each as its apiVersion, kind,
    spec and the metadata that names and selects it (name, namespace, labels,
    annotations, resourceVersion), as dicts: the rest (managedFields, status) is checked
    as JSON and skipped unbuilt. For objects read by their spec alone and many at a time
    (every node's NodeFeature)."""
    found = []
    for item in _SPECIFIED_LIST.decode(data).items or ():
        meta = item.metadata
        metadata: dict[str, Any] = {"name": meta.name}
        if meta.namespace:
            metadata["namespace"] = meta.namespace
        for key, value in (("labels", meta.labels), ("annotations", meta.annotations)):
            if value is not None:
                metadata[key] = value
        metadata["resourceVersion"] = meta.resourceVersion
        obj: dict[str, Any] = {"apiVersion": item.apiVersion, "kind": item.kind}
        obj["metadata"] = metadata
        if item.spec is not None:
            obj["spec"] = item.spec
        found.append(obj)
    return found


def page_head(data: bytes) -> PageHead:
    """A NodeList's metadata alone, its items checked as JSON and skipped: enough to ask
    for the next page before this one is decoded."""
    return _PAGE_HEAD.decode(data)


def node_from_json(item: dict[str, Any]) -> LiveNode:
    """A Node already decoded into dicts (a watch event's object)."""
    return node(msgspec.json.encode(item))
