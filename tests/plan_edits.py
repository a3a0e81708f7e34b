"""Edits of a saved plan's document, one place at a time, that its schema still admits:
what someone who recomputes the digest could write into a plan file. The tests walk them
all and expect each to be refused with nothing written (engine/saved.py)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any, Final

Place = tuple[str | int, ...]

# A NoExecute taint: the first thing an edited plan would add to a node.
EVIL: Final = {"key": "evil", "value": "x", "effect": "NoExecute"}

# What a field holds instead of null or an empty list.
_INSTEAD_OF_NONE: Final[dict[str, Any]] = {
    "taints": [EVIL],
    "inventory": [],
    "manifest": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
    "manifestDigest": "sha256:" + "0" * 64,
    "takenFrom": ["kubectl-edit"],
    "changes": [{"path": ["data", "x"], "action": "add", "before": None, "after": "x"}],
}
_OTHER: Final[dict[str, dict[str, str]]] = {
    "action": {"add": "update", "update": "remove", "remove": "add"},
    "fact": {"label": "annotation", "annotation": "taint", "taint": "label"},
}
_OTHER_OBJECT_ACTION: Final = {"create": "update", "update": "recreate", "prune": "update"}
# Leaving a whole entry out is no edit to refuse: apply writes less then, and nothing that
# planning does not give (like drift that appeared since the plan was made).
_WHOLE_ENTRIES: Final = (("nodes",), ("objects",))


def places(document: dict[str, Any], *, walked: int | None = None) -> list[Place]:
    """Every place apply takes something from: in every node entry, object entry and the
    object inventory, every scalar; every list also as one element shorter (`-`) and one
    longer; every mapping of a manifest with one key more. `walked`: how many elements of
    each list are walked into (the others are of the same kind)."""
    return [
        p
        for part in ("nodes", "objects", "inventory")
        for p in _walk(document[part], (part,), walked)
    ]


def _walk(value: Any, where: Place, walked: int | None) -> Iterator[Place]:
    if not isinstance(value, dict) or "manifest" in where:  # a model takes no other keys
        yield where
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, (*where, key), walked)
    elif isinstance(value, list):
        for index, item in enumerate(value[:walked]):
            yield from _walk(item, (*where, index), walked)
        if value and where not in _WHOLE_ENTRIES:
            yield (*where, "-")


def edited(document: dict[str, Any], where: Place) -> dict[str, Any]:
    """A copy of `document` with the value at `where` changed (a list: one element added;
    `-`: the last one removed)."""
    document = copy.deepcopy(document)
    *parent_path, last = where
    parent: Any = document
    for step in parent_path:
        parent = parent[step]
    if last == "-":
        parent.pop()
        return document
    value = parent[last]
    name = next((str(s) for s in reversed(where) if isinstance(s, str)), "")
    if len(where) == 3 and where[::2] == ("objects", "action"):
        parent[last] = _OTHER_OBJECT_ACTION[value]
    elif isinstance(value, bool):
        parent[last] = not value
    elif isinstance(value, int | float):
        parent[last] = value + 1
    elif isinstance(value, str):
        parent[last] = _OTHER.get(name, {}).get(value, value + "x")
    elif value is None:
        parent[last] = _INSTEAD_OF_NONE.get(name, "x")
    elif isinstance(value, list):
        value.append(json.loads(json.dumps(value[0])) if value else _INSTEAD_OF_NONE[name][0])
        if isinstance(value[-1], str):
            value[-1] += "x"
    else:
        value["example.com/edited"] = "x"
    return document


def entry_for(document: dict[str, Any], node: str, resource_version: str) -> dict[str, Any]:
    """A copy of `document` with one more node entry: for `node`, at its resourceVersion,
    with no changes, a NoExecute taint and the first entry's inventory."""
    document = copy.deepcopy(document)
    entry = dict(document["nodes"][0], name=node, resourceVersion=resource_version)
    document["nodes"].append(dict(entry, changes=[], taints=[EVIL]))
    return document
