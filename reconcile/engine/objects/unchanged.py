"""Whether a server-side apply would leave a live object exactly as it is, decided locally.

The API server's field manager merges an applied configuration into the live object and
then removes the fields its manager owned before but no longer applies. So the apply is a
no-op when the manager's Apply entry already records exactly the configuration's fields,
at the configuration's apiVersion, and every value the configuration sets is already the
live value. Then there is nothing to dry-run: `plan` reports the object in sync and
`apply` sends nothing, as terraform leaves an unchanged resource alone.

The field set is read without the schema: FieldsV1 itself says how each list merges
(`k:` elements of a map list, `v:` values of a set, a bare leaf for an atomic list), and a
configuration whose shape it cannot follow (`i:` items, a key field the configuration
leaves to a default, a value the server normalised) is not judged here: the server's dry
run decides, as before. Any doubt answers False, never True.

Upstream: the fields that are never recorded as owned are the field manager's strip set
(k8s.io/apimachinery pkg/util/managedfields/internal/stripmeta.go).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from reconcile.kube.objects import FIELD_MANAGER, same_json

# stripmeta.go: never part of a manager's field set (`metadata` itself is, as a member,
# but its children are not stripped).
_STRIPPED_TOP: Final = frozenset({"apiVersion", "kind"})
_STRIPPED_METADATA: Final = frozenset(
    {
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    }
)


def applied_entry(
    live: Mapping[str, Any], manager: str = FIELD_MANAGER
) -> Mapping[str, Any] | None:
    """`manager`'s Apply entry on the main resource of `live`, if any."""
    for entry in (live.get("metadata") or {}).get("managedFields") or ():
        if (
            entry.get("manager") == manager
            and entry.get("operation") == "Apply"
            and not entry.get("subresource")
        ):
            return entry  # type: ignore[no-any-return]
    return None


def unchanged_by_apply(
    config: Mapping[str, Any], live: Mapping[str, Any], manager: str = FIELD_MANAGER
) -> bool:
    """Whether applying `config` as `manager` would change nothing in `live`."""
    entry = applied_entry(live, manager)
    if entry is None or entry.get("apiVersion") != config.get("apiVersion"):
        return False
    fields = entry.get("fieldsV1")
    if not isinstance(fields, Mapping):
        return False
    top = {k: v for k, v in config.items() if k not in _STRIPPED_TOP}
    metadata = top.get("metadata")
    if isinstance(metadata, Mapping):
        kept = {k: v for k, v in metadata.items() if k not in _STRIPPED_METADATA}
        if kept:
            top["metadata"] = kept
        else:
            del top["metadata"]
    elif "metadata" in top:
        return False
    return _same(top, live, fields)


def _children(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A FieldsV1 node's children, without the `.` that marks the node itself a member."""
    return {k: v for k, v in fields.items() if k != "."}


def _same(config: Any, live: Any, fields: Any) -> bool:
    """`config` is already in `live`, and `fields` is exactly the set it applies."""
    if not isinstance(fields, Mapping):
        return False
    children = _children(fields)
    if isinstance(config, Mapping):
        if not isinstance(live, Mapping):
            return False
        if set(children) != {f"f:{key}" for key in config}:
            return False
        return all(
            key in live and _same(value, live[key], children[f"f:{key}"])
            for key, value in config.items()
        )
    if isinstance(config, list):
        if not isinstance(live, list) or len(config) != len(live):
            return False
        if not children:  # an atomic list: owned whole, each item as applied
            return all(_within(c, item) for c, item in zip(config, live, strict=True))
        return _same_items(config, live, children)
    return not children and same_json(config, live)


def _same_items(config: list[Any], live: list[Any], children: dict[str, Any]) -> bool:
    """A granular list: each configured item is one `k:` (map list) or `v:` (set) member,
    and the members are exactly the configured items."""
    if len(children) != len(config):
        return False
    unmatched = dict(children)
    for item, live_item in zip(config, live, strict=True):
        key = _member(item, unmatched)
        if key is None:
            return False
        node = unmatched.pop(key)
        if key.startswith("v:"):
            if _children(node) or not same_json(item, live_item):
                return False
        elif not _same(item, live_item, node):
            return False
    return True


def _member(item: Any, members: Mapping[str, Any]) -> str | None:
    """The FieldsV1 member that stands for list `item`, or None."""
    for key in members:
        kind, _, text = key.partition(":")
        try:
            value = json.loads(text)
        except ValueError:
            return None
        if kind == "v" and same_json(item, value):
            return key
        if (
            kind == "k"
            and isinstance(item, Mapping)
            and isinstance(value, Mapping)
            and all(k in item and same_json(item[k], v) for k, v in value.items())
        ):
            return key
    return None


def _within(config: Any, live: Any) -> bool:
    """Every value `config` sets is `live`'s (the server may have defaulted more)."""
    if isinstance(config, Mapping):
        return isinstance(live, Mapping) and all(
            key in live and _within(value, live[key]) for key, value in config.items()
        )
    if isinstance(config, list):
        return (
            isinstance(live, list)
            and len(config) == len(live)
            and all(_within(c, item) for c, item in zip(config, live, strict=True))
        )
    return same_json(config, live)
