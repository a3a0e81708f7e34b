"""The inventory of applied objects: the ConfigMap `default/reconcile-inventory`, one line
per object reconcile applied (`apiVersion kind namespace name`), read by plan and written
by apply, and the label every object reconcile applies carries. A prune deletes only what
the inventory lists and still carries the label.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from reconcile.engine.grants import Rule
from reconcile.kube.api import ObjectApi
from reconcile.kube.objects import ApiResource

MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "reconcile"
INVENTORY_NAMESPACE: Final = "default"
INVENTORY_NAME: Final = "reconcile-inventory"
INVENTORY_KEY: Final = "objects"
# The inventory's; what desired/ declares needs more, which rbac.py derives from the tree.
RBAC: Final = (
    Rule(
        "",
        ("configmaps",),
        ("get", "patch"),
        (INVENTORY_NAME,),
        why="the inventory of applied objects (what --prune may delete): "
        "read by plan, written by apply",
        where=INVENTORY_NAMESPACE,
    ),
    Rule(
        "",
        ("configmaps",),
        ("create",),
        why="the first apply creates the inventory; RBAC cannot limit create "
        "by resourceNames (the name of a new object is not known when create "
        "is authorized), so create on configmaps is granted in this namespace "
        "only",
        where=INVENTORY_NAMESPACE,
    ),
)


CONFIGMAPS: Final = ApiResource("", "v1", "configmaps", "ConfigMap", True)


def inventory_entry(api_version: str, kind: str, namespace: str, name: str) -> str:
    return f"{api_version} {kind} {namespace or '-'} {name}"


def parse_inventory_entry(entry: str) -> tuple[str, str, str, str] | None:
    parts = entry.split()
    if len(parts) != 4:
        return None
    api_version, kind, namespace, name = parts
    return api_version, kind, "" if namespace == "-" else namespace, name


def read_inventory(cluster: ObjectApi) -> tuple[str, ...]:
    found = cluster.get_object(CONFIGMAPS, INVENTORY_NAMESPACE, INVENTORY_NAME)
    if found is None:
        return ()
    raw = str((found.get("data") or {}).get(INVENTORY_KEY) or "")
    return tuple(line for line in raw.splitlines() if line.strip())


def inventory_object(entries: Iterable[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": INVENTORY_NAME,
            "namespace": INVENTORY_NAMESPACE,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
        },
        "data": {INVENTORY_KEY: "\n".join(sorted(entries)) + "\n"},
    }
