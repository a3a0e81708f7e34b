"""Drift between desired and live state, as our own `Change` records.

Label drift is left-scoped: only keys the desired side declares are compared, so labels
that other writers own are never part of a plan. Node labels are a flat map, so a direct
comparison is both exact and fastest at fleet scale; deepdiff is used where structure
is nested (workload objects).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from reconcile.engine.facts import BY_FACT, Fact, shown_key, shown_value


class Action(enum.StrEnum):
    """What a change does."""

    ADD = "add"
    UPDATE = "update"
    REMOVE = "remove"


class NodeChange(BaseModel):
    """One node fact to set or remove: a label, an annotation or a taint (facts.py)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    action: Action
    before: str | None
    after: str | None
    owner: str | None = None
    fact: Fact = Fact.LABEL
    # The desired/ file and position that declares it (a node's file or a NodeGroup's).
    source: str | None = None
    # Writing it makes an operator disrupt the node's workloads (a MIG layout): it is
    # rolled out, never written under running pods that use what it changes.
    rollout: bool = False

    @property
    def path(self) -> tuple[str, ...]:
        return BY_FACT[self.fact].path(self.key)

    @property
    def shown_key(self) -> str:
        """The key as drift lines print it: a label bare, `annotation:`/`taint:` prefixed."""
        return shown_key(self.fact, self.key)

    @property
    def shown_value(self) -> str:
        """The desired value as drift lines print it: `""` when empty, `-` when absent."""
        return shown_value(self.after)


def fact_drift(
    fact: Fact,
    desired: Mapping[str, str | None],
    live: Mapping[str, str],
    prune: Iterable[str] = (),
) -> list[NodeChange]:
    """Changes that make `live` carry `desired`; keys in `prune` are removed if present.

    A missing fact and an empty one are different: `None` (absent) never equals "".
    """
    changes = []
    for key, want in desired.items():
        have = live.get(key)
        if want == have:
            continue
        if want is None:
            action = Action.REMOVE
        elif have is None:
            action = Action.ADD
        else:
            action = Action.UPDATE
        changes.append(NodeChange(key=key, action=action, before=have, after=want, fact=fact))
    for key in prune:
        if key not in desired and key in live:
            changes.append(
                NodeChange(key=key, action=Action.REMOVE, before=live[key], after=None, fact=fact)
            )
    return sorted(changes, key=lambda change: change.key)


class FieldChange(BaseModel):
    """One field of a workload object that apply changes: the full before and after."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: tuple[str | int, ...]
    action: Action
    before: Any = None
    after: Any = None
    # A Secret's value: before and after are digests, and views never show them.
    sensitive: bool = False
    # The field manager (not reconcile) that owns the live value: whom apply takes it from.
    manager: str | None = None

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        document: dict[str, Any] = handler(self)
        if not self.sensitive:
            document.pop("sensitive", None)  # only said where it holds
        if self.manager is None:
            document.pop("manager", None)
        return document

    @property
    def shown_path(self) -> str:
        """`spec.template.spec.containers[0].image`; keys with dots or slashes in brackets."""
        out = ""
        for part in self.path:
            if isinstance(part, int):
                out += f"[{part}]"
            elif _PLAIN_KEY.fullmatch(part):
                out += f".{part}" if out else part
            else:
                out += f"[{json.dumps(part)}]"
        return out

    @property
    def shown_value(self) -> str:
        """Scalars as they are, anything else as JSON, `-` when the field goes away; a
        sensitive value never: `(sensitive value changed)`, as kubectl diff masks it."""
        if self.action is Action.REMOVE:
            return "-"
        if self.sensitive:
            return "(sensitive value)" if self.action is Action.ADD else "(sensitive value changed)"
        return _shown(self.after)

    @property
    def shown_before(self) -> str:
        """The live value, as `shown_value` shows the desired one (`-`: absent)."""
        if self.action is Action.ADD:
            return "-"
        if self.sensitive:
            return "(sensitive value)"
        return _shown(self.before)


def _shown(value: Any) -> str:
    if isinstance(value, str) and value and not any(c.isspace() for c in value):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return json.dumps(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
# What every write changes: never drift.
VOLATILE_METADATA = (
    "managedFields",
    "resourceVersion",
    "generation",
    "uid",
    "creationTimestamp",
    "selfLink",
)


def normalized(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An object without status and the metadata the server rewrites on every write."""
    result = {k: v for k, v in obj.items() if k != "status"}
    metadata = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in VOLATILE_METADATA}
    result["metadata"] = metadata
    return result


def object_drift(
    manifest: Mapping[str, Any],
    live: Mapping[str, Any],
    result: Mapping[str, Any],
    owned: Mapping[str, Any] | None = None,
) -> list[FieldChange]:
    """What applying `manifest` changes: live against the server's dry-run `result`.

    Both sides went through the same defaulting, so defaults never show as drift. Only
    fields the manifest sets, or that this field manager owned before (`owned`, its
    FieldsV1 in live managedFields: what it stopped setting is removed), are reported.
    """
    before, after = normalized(live), normalized(result)
    if _identical(before, after):
        return []  # what DeepDiff would find: nothing (the common case, an object in sync)
    from deepdiff import DeepDiff  # imported here: label-only commands skip its cost

    diff = DeepDiff(before, after, view="tree", verbose_level=2)
    changes: dict[tuple[str | int, ...], FieldChange] = {}
    for kind, levels in diff.items():
        for level in levels:
            path = tuple(level.path(output_format="list"))
            if kind.startswith("iterable_item"):
                # A list whose length changes is a change of the list, shown whole.
                path = path[:-1]
                changes[path] = FieldChange(
                    path=path,
                    action=Action.UPDATE,
                    before=_at(before, path),
                    after=_at(after, path),
                )
            elif kind == "dictionary_item_added":
                changes[path] = FieldChange(path=path, action=Action.ADD, after=level.t2)
            elif kind == "dictionary_item_removed":
                changes[path] = FieldChange(path=path, action=Action.REMOVE, before=level.t1)
            else:
                changes[path] = FieldChange(
                    path=path, action=Action.UPDATE, before=level.t1, after=level.t2
                )
    in_scope = [
        change
        for change in changes.values()
        if _set_by(change.path, manifest) or (owned is not None and owns(change.path, owned, live))
    ]
    return sorted(in_scope, key=lambda c: tuple(str(p) for p in c.path))


def _identical(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down: where DeepDiff reports nothing (== alone
    would also call 1 and 1.0, or 1 and True, the same; DeepDiff reports a type change)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_identical(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(_identical(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def manifest_drift(manifest: Mapping[str, Any], live: Mapping[str, Any]) -> list[FieldChange]:
    """Without a dry-run (the server refused one): the fields the manifest sets that live
    does not carry as set. Server defaults inside lists may show; it is a diagnosis aid."""
    changes = []
    for path, want in _leaves(manifest):
        have = _at(live, path, default=_ABSENT)
        if want == {} and isinstance(have, dict):
            continue  # an empty map applied sets nothing in the live one (defaults stay)
        if have is _ABSENT:
            changes.append(FieldChange(path=path, action=Action.ADD, after=want))
        elif have != want:
            changes.append(FieldChange(path=path, action=Action.UPDATE, before=have, after=want))
    return changes


_ABSENT: Any = object()


def _leaves(
    data: Any, prefix: tuple[str | int, ...] = ()
) -> list[tuple[tuple[str | int, ...], Any]]:
    if isinstance(data, dict) and data:
        found = []
        for key, value in data.items():
            found.extend(_leaves(value, (*prefix, key)))
        return found
    if isinstance(data, list) and data and all(isinstance(item, dict) for item in data):
        found = []
        for index, item in enumerate(data):
            found.extend(_leaves(item, (*prefix, index)))
        return found
    return [(prefix, data)]


def _at(data: Any, path: tuple[str | int, ...], default: Any = None) -> Any:
    for part in path:
        if isinstance(part, str):
            present = isinstance(data, dict) and part in data
        else:
            present = isinstance(data, list) and 0 <= part < len(data)
        if not present:
            return default
        data = data[part]
    return data


def _set_by(path: tuple[str | int, ...], manifest: Any) -> bool:
    """Whether `path` is a field the manifest sets (or lies inside a value it sets)."""
    node = manifest
    for part in path:
        if isinstance(node, dict):
            if part not in node:
                return False
            node = node[part]
        elif isinstance(node, list):
            if not (isinstance(part, int) and part < len(node)):
                return True  # inside a list the manifest sets
            node = node[part]
        else:
            return True
    return True


def owns(path: tuple[str | int, ...], fields: Mapping[str, Any], live: Any) -> bool:
    """Whether FieldsV1 `fields` (one manager's) covers `path` of the live object."""
    node: Mapping[str, Any] = fields
    data = live
    for part in path:
        if not node:
            return True  # a leaf: owned whole
        if isinstance(part, str):
            key = f"f:{part}"
            if key not in node:
                return False
            node = node[key]
            data = data.get(part) if isinstance(data, dict) else None
            continue
        item = data[part] if isinstance(data, list) and part < len(data) else None
        match = None
        for key, child in node.items():
            kind, _, text = key.partition(":")
            if kind == "k" and isinstance(item, dict):
                if all(item.get(k) == v for k, v in json.loads(text).items()):
                    match = child
            elif kind == "v" and json.loads(text) == item:
                return True
        if match is None:
            return False
        node, data = match, item
    return True
