"""Events: stored as events.k8s.io/v1, also read through core v1 (`kubectl get events`,
`kubectl describe`), as kube-apiserver keeps one Event and converts it for either API.

What is here, checked against v1.36: the fields the API server fills in on an
events.k8s.io Event (deprecatedSource {}, null deprecated timestamps, regarding {}), the
core v1 form of a stored Event (note -> message, regarding -> involvedObject,
reportingController -> reportingComponent, ...), and the field selectors of both APIs,
which upstream evaluates on the one internal Event (so `source` matches the reporting
controller of an Event that has no deprecated source).
"""

from __future__ import annotations

from typing import Any, Final

Obj = dict[str, Any]

# events.k8s.io/v1 Event fields in the order the API server writes them.
_V1_ORDER: Final[tuple[str, ...]] = (
    "kind",
    "apiVersion",
    "metadata",
    "eventTime",
    "series",
    "reportingController",
    "reportingInstance",
    "action",
    "reason",
    "regarding",
    "related",
    "note",
    "type",
    "deprecatedSource",
    "deprecatedFirstTimestamp",
    "deprecatedLastTimestamp",
    "deprecatedCount",
)
# Written even when empty (no omitempty upstream); the rest are dropped when empty.
_ALWAYS: Final[dict[str, Any]] = {
    "eventTime": None,
    "regarding": {},
    "deprecatedSource": {},
    "deprecatedFirstTimestamp": None,
    "deprecatedLastTimestamp": None,
}
_REFERENCE_ORDER: Final = (
    "kind",
    "namespace",
    "name",
    "uid",
    "apiVersion",
    "resourceVersion",
    "fieldPath",
)


def _reference(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    known = {k: value[k] for k in _REFERENCE_ORDER if value.get(k) not in (None, "")}
    return {**known, **{k: v for k, v in value.items() if k not in _REFERENCE_ORDER}}


def normalize(obj: Obj) -> None:
    """Fill in and order an events.k8s.io Event as the API server stores it."""
    for key, default in _ALWAYS.items():
        if obj.get(key) is None:
            obj[key] = {} if isinstance(default, dict) else None
    for key in ("regarding", "related"):
        if key in obj:
            obj[key] = _reference(obj[key])
    for key, value in list(obj.items()):
        if key in _ALWAYS or key in ("kind", "apiVersion", "metadata"):
            continue
        if value is None or value == "" or (key == "deprecatedCount" and value == 0):
            del obj[key]  # omitempty
    ordered = {k: obj[k] for k in _V1_ORDER if k in obj}
    rest = {k: v for k, v in obj.items() if k not in ordered}
    obj.clear()
    obj.update(ordered)
    obj.update(rest)


def to_core(obj: Obj) -> Obj:
    """The core v1 Event of a stored events.k8s.io Event."""
    core: Obj = {"kind": "Event", "apiVersion": "v1", "metadata": obj.get("metadata") or {}}
    core["involvedObject"] = obj.get("regarding") or {}
    for source, target in (("reason", "reason"), ("note", "message")):
        if obj.get(source):
            core[target] = obj[source]
    core["source"] = obj.get("deprecatedSource") or {}
    core["firstTimestamp"] = obj.get("deprecatedFirstTimestamp")
    core["lastTimestamp"] = obj.get("deprecatedLastTimestamp")
    if obj.get("deprecatedCount"):
        core["count"] = obj["deprecatedCount"]
    if obj.get("type"):
        core["type"] = obj["type"]
    core["eventTime"] = obj.get("eventTime")
    for key in ("series", "action", "related"):
        if obj.get(key):
            core[key] = obj[key]
    core["reportingComponent"] = obj.get("reportingController") or ""
    core["reportingInstance"] = obj.get("reportingInstance") or ""
    return core


# Field selectors. Upstream converts an events.k8s.io label to the internal name first.
CORE_FIELDS: Final = (
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)
V1_FIELDS: Final = {
    **{f"regarding.{k}": f"involvedObject.{k}" for k in _REFERENCE_ORDER},
    "reason": "reason",
    "reportingController": "reportingComponent",
    "type": "type",
}


def field_value(obj: Obj, field: str) -> str:
    """The value of a (core or events.k8s.io) field selector label on a stored Event."""
    field = V1_FIELDS.get(field, field)
    if field.startswith("involvedObject."):
        return str((obj.get("regarding") or {}).get(field.split(".", 1)[1]) or "")
    if field == "reportingComponent":
        return str(obj.get("reportingController") or "")
    if field == "source":
        source = (obj.get("deprecatedSource") or {}).get("component")
        return str(source or obj.get("reportingController") or "")
    return str(obj.get(field) or "")
