"""Server-side printing: the `meta.k8s.io/v1 Table` that `kubectl get` asks for, with the
columns the real API server prints for the kinds reconcile works with."""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from typing import Any, Final

from reconcile.sandbox import events

Obj = dict[str, Any]
Column = tuple[str, str, int, Callable[[Obj], Any]]  # name, type, priority (1 = -o wide), cell


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = int(seconds)
    if s < 0:
        return "<invalid>"
    if s < 60 * 2:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = hours // 24
        return f"{days // 365}y{days % 365}d" if days % 365 else f"{days // 365}y"
    return f"{hours // 24 // 365}y"


def _since(timestamp: Any) -> str:
    """translateTimestampSince (and its MicroTime twin): `<unknown>` when unset."""
    if not timestamp:
        return "<unknown>"
    layout = "%Y-%m-%dT%H:%M:%S.%fZ" if "." in str(timestamp) else "%Y-%m-%dT%H:%M:%SZ"
    when = datetime.datetime.strptime(str(timestamp), layout).replace(tzinfo=datetime.UTC)
    return human_duration((datetime.datetime.now(datetime.UTC) - when).total_seconds())


def _age(obj: Obj) -> str:
    return _since((obj.get("metadata") or {}).get("creationTimestamp"))


def _core_event(obj: Obj) -> Obj:
    return obj if obj.get("apiVersion") == "v1" else events.to_core(obj)


def _event_cells(obj: Obj) -> list[Any]:
    """printEvent: the columns of `kubectl get events`, the same for both Event APIs."""
    event = _core_event(obj)
    first = (
        _since(event.get("firstTimestamp"))
        if event.get("firstTimestamp")
        else _since(event.get("eventTime"))
    )
    last = _since(event.get("lastTimestamp")) if event.get("lastTimestamp") else first
    count = event.get("count") or 0
    series = event.get("series")
    if isinstance(series, dict):
        last, count = _since(series.get("lastObservedTime")), series.get("count") or 0
    elif not count:
        count = 1  # a singleton event of the new API has no count
    involved = event.get("involvedObject") or {}
    kind = str(involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = event.get("source") or {}
    component = source.get("component") or event.get("reportingComponent") or ""
    instance = source.get("host") or event.get("reportingInstance") or ""
    return [
        last,
        event.get("type") or "",
        event.get("reason") or "",
        target,
        involved.get("fieldPath") or "",
        f"{component}, {instance}" if instance else component,
        str(event.get("message") or "").strip(),
        first,
        count,
        _name(obj),
    ]


def _event_cell(index: int) -> Callable[[Obj], Any]:
    return lambda obj: _event_cells(obj)[index]


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _condition(obj: Obj, kind: str) -> dict[str, Any]:
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if condition.get("type") == kind:
            return dict(condition)
    return {}


def _node_status(obj: Obj) -> str:
    ready = _condition(obj, "Ready").get("status")
    status = "Ready" if ready == "True" else "NotReady" if ready == "False" else "Unknown"
    if (obj.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    return status


def _node_roles(obj: Obj) -> str:
    roles = sorted(
        key.split("/", 1)[1]
        for key in (obj.get("metadata") or {}).get("labels") or {}
        if key.startswith("node-role.kubernetes.io/")
    )
    return ",".join(roles) or "<none>"


def _address(obj: Obj, kind: str) -> str:
    for address in (obj.get("status") or {}).get("addresses") or ():
        if address.get("type") == kind:
            return str(address.get("address"))
    return "<none>"


def _pod_ready(obj: Obj) -> str:
    containers = (obj.get("spec") or {}).get("containers") or []
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    ready = sum(1 for s in statuses if s.get("ready"))
    if not statuses and _condition(obj, "Ready").get("status") == "True":
        ready = len(containers)
    return f"{ready}/{len(containers)}"


def _pod_status(obj: Obj) -> str:
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    return str((obj.get("status") or {}).get("phase") or "Pending")


def _int_or_none(value: Any) -> Any:
    return "N/A" if value is None else value


def _deployment_ready(obj: Obj) -> str:
    status = obj.get("status") or {}
    return f"{status.get('readyReplicas', 0)}/{(obj.get('spec') or {}).get('replicas', 0)}"


COLUMNS: Final[dict[str, list[Column]]] = {
    "Node": [
        ("Name", "string", 0, _name),
        ("Status", "string", 0, _node_status),
        ("Roles", "string", 0, _node_roles),
        ("Age", "string", 0, _age),
        (
            "Version",
            "string",
            0,
            lambda o: ((o.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", ""),
        ),
        ("Internal-IP", "string", 1, lambda o: _address(o, "InternalIP")),
        ("External-IP", "string", 1, lambda o: _address(o, "ExternalIP")),
        (
            "OS-Image",
            "string",
            1,
            lambda o: ((o.get("status") or {}).get("nodeInfo") or {}).get("osImage", ""),
        ),
        (
            "Kernel-Version",
            "string",
            1,
            lambda o: ((o.get("status") or {}).get("nodeInfo") or {}).get("kernelVersion", ""),
        ),
    ],
    "Pod": [
        ("Name", "string", 0, _name),
        ("Ready", "string", 0, _pod_ready),
        ("Status", "string", 0, _pod_status),
        ("Restarts", "string", 0, lambda o: "0"),
        ("Age", "string", 0, _age),
        ("IP", "string", 1, lambda o: (o.get("status") or {}).get("podIP") or "<none>"),
        ("Node", "string", 1, lambda o: (o.get("spec") or {}).get("nodeName") or "<none>"),
    ],
    "Deployment": [
        ("Name", "string", 0, _name),
        ("Ready", "string", 0, _deployment_ready),
        ("Up-to-date", "integer", 0, lambda o: (o.get("status") or {}).get("updatedReplicas", 0)),
        ("Available", "integer", 0, lambda o: (o.get("status") or {}).get("availableReplicas", 0)),
        ("Age", "string", 0, _age),
    ],
    "PodDisruptionBudget": [
        ("Name", "string", 0, _name),
        (
            "Min Available",
            "string",
            0,
            lambda o: _int_or_none((o.get("spec") or {}).get("minAvailable")),
        ),
        (
            "Max Unavailable",
            "string",
            0,
            lambda o: _int_or_none((o.get("spec") or {}).get("maxUnavailable")),
        ),
        (
            "Allowed Disruptions",
            "integer",
            0,
            lambda o: (o.get("status") or {}).get("disruptionsAllowed", 0),
        ),
        ("Age", "string", 0, _age),
    ],
    "Event": [
        (name, "string", priority, _event_cell(i))
        for i, (name, priority) in enumerate(
            (
                ("Last Seen", 0),
                ("Type", 0),
                ("Reason", 0),
                ("Object", 0),
                ("Subobject", 1),
                ("Source", 1),
                ("Message", 0),
                ("First Seen", 1),
                ("Count", 1),
                ("Name", 1),
            )
        )
    ],
    "Lease": [
        ("Name", "string", 0, _name),
        ("Holder", "string", 0, lambda o: (o.get("spec") or {}).get("holderIdentity") or ""),
        ("Age", "string", 0, _age),
    ],
    "Namespace": [
        ("Name", "string", 0, _name),
        ("Status", "string", 0, lambda o: (o.get("status") or {}).get("phase", "Active")),
        ("Age", "string", 0, _age),
    ],
}
DEFAULT_COLUMNS: Final[list[Column]] = [("Name", "string", 0, _name), ("Age", "string", 0, _age)]


def wants_table(accept: str) -> bool:
    return any("as=Table" in part and "g=meta.k8s.io" in part for part in accept.split(","))


def table(
    kind: str,
    encoded: list[str],
    resource_version: str,
    continue_token: str | None,
    *,
    columns: bool = True,
) -> dict[str, Any]:
    """A Table of the objects; without its column definitions (null) for the events of a
    watch after its first, as the API server sends them."""
    definitions = COLUMNS.get(kind, DEFAULT_COLUMNS)
    rows = []
    for text in encoded:
        obj = json.loads(text)
        partial = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
        rows.append(
            {
                "cells": [cell(obj) for _, _, _, cell in definitions],
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": partial,
                },
            }
        )
    metadata: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        metadata["continue"] = continue_token
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": [
            {
                "name": name,
                "type": kind_,
                "format": "name" if name == "Name" else "",
                "description": "",
                "priority": priority,
            }
            for name, kind_, priority, _ in definitions
        ]
        if columns
        else None,
        "rows": rows,
    }
