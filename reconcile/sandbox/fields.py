"""Field ownership (metadata.managedFields) and server-side apply.

A field set is a set of paths in FieldsV1 notation (`f:metadata`, `k:{"name":"c"}`,
`v:"x"`); leaves are owned, lists with merge keys are owned item by item, every other
list whole. What this models of structured-merge-diff:

- an Update (create, PUT, PATCH) takes ownership of every field whose value it changed,
  away from whoever owned it;
- an Apply owns exactly the fields of its configuration; a field it sets to a value
  different from the live one while another manager owns it is a conflict (409) unless
  forced; fields it applied before and no longer sets are removed, unless another
  manager still owns them.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from reconcile.sandbox.errors import ApiStatus
from reconcile.sandbox.patch import MERGED_SCALAR_LISTS, item_key, list_keys

PathT = tuple[str, ...]
# Fields that are the server's business, never owned by anyone.
_UNTRACKED_METADATA: Final = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "selfLink",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    }
)


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _key_json(item: dict[str, Any], keys: tuple[str, ...]) -> str:
    values = dict(zip(keys, item_key(item, keys), strict=True))
    return json.dumps(
        {k: v for k, v in sorted(values.items()) if v is not None}, separators=(",", ":")
    )


def leaf_values(obj: dict[str, Any]) -> dict[PathT, str]:
    """Every owned path of an object with its JSON-encoded value (list items: "")."""
    found: dict[PathT, str] = {}
    for key, value in obj.items():
        if key in ("apiVersion", "kind", "status"):
            continue
        tracked = value
        if key == "metadata" and isinstance(value, dict):
            tracked = {k: v for k, v in value.items() if k not in _UNTRACKED_METADATA}
            if not tracked:
                continue
        _walk(tracked, (f"f:{key}",), key, found)
    return found


def _walk(value: Any, path: PathT, field: str, found: dict[PathT, str]) -> None:
    if isinstance(value, dict) and value:
        for key, child in value.items():
            _walk(child, (*path, f"f:{key}"), key, found)
        return
    if isinstance(value, list) and value:
        if field in MERGED_SCALAR_LISTS:
            for item in value:
                found[(*path, "v:" + json.dumps(item))] = ""
            return
        keys = list_keys(field, value)
        if keys is not None and all(isinstance(i, dict) for i in value):
            for item in value:
                item_path = (*path, "k:" + _key_json(item, keys))
                found[item_path] = ""
                for key, child in item.items():
                    _walk(child, (*item_path, f"f:{key}"), key, found)
            return
    found[path] = json.dumps(value, sort_keys=True, separators=(",", ":"))


def to_fields_v1(paths: set[PathT]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for part in path:
            node = node.setdefault(part, {})
        if path and path[-1].startswith("k:"):
            node.setdefault(".", {})
    return tree


def from_fields_v1(tree: dict[str, Any], prefix: PathT = ()) -> set[PathT]:
    paths: set[PathT] = set()
    for part, child in tree.items():
        if part == ".":
            paths.add(prefix)
            continue
        path = (*prefix, part)
        if isinstance(child, dict) and child:
            paths |= from_fields_v1(child, path)
        else:
            paths.add(path)
    return paths


def show_path(path: PathT) -> str:
    """fieldpath.Path.String(): `.spec.containers[name="c"].image`."""
    out = []
    for part in path:
        kind, _, text = part.partition(":")
        if kind == "f":
            out.append("." + text)
        elif kind == "k":
            keys = json.loads(text)
            out.append("[" + ",".join(f"{k}={json.dumps(v)}" for k, v in keys.items()) + "]")
        elif kind == "v":
            out.append(f"[={text}]")
    return "".join(out)


@dataclass
class Entry:
    manager: str
    operation: str  # "Apply" or "Update"
    api_version: str
    time: str
    fields: set[PathT]
    subresource: str = ""

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(self.fields),
        }
        if self.subresource:
            entry["subresource"] = self.subresource
        return entry

    def describe(self) -> str:
        """printManager of a conflict: `"kubectl-edit" using apps/v1` (Update) or `"x"` (Apply).
        The API server names the manager by its identifier, which leaves the time out (a
        real v1.36 answered `conflict with "kubectl-patch" using v1`)."""
        shown = json.dumps(self.manager)
        if self.subresource:
            shown += f' with subresource "{self.subresource}"'
        if self.operation == "Update":
            return f"{shown} using {self.api_version}"
        return shown


def entries_of(obj: dict[str, Any]) -> list[Entry]:
    entries = []
    for raw in (obj.get("metadata") or {}).get("managedFields") or ():
        if not isinstance(raw, dict):
            continue
        entries.append(
            Entry(
                manager=str(raw.get("manager", "")),
                operation=str(raw.get("operation", "Update")),
                api_version=str(raw.get("apiVersion", "")),
                time=str(raw.get("time", "")),
                fields=from_fields_v1(raw.get("fieldsV1") or {}),
                subresource=str(raw.get("subresource", "")),
            )
        )
    return entries


def store_entries(obj: dict[str, Any], entries: list[Entry]) -> None:
    kept = [e for e in entries if e.fields]
    obj.setdefault("metadata", {})["managedFields"] = [e.to_json() for e in kept]


def _entry(
    entries: list[Entry], manager: str, operation: str, api_version: str, subresource: str = ""
) -> Entry:
    """The entry of (manager, operation, subresource), as the API server keys them: one
    manager writing through `scale` and through the object has two."""
    for entry in entries:
        if (entry.manager, entry.operation, entry.subresource) == (
            manager,
            operation,
            subresource,
        ):
            entry.api_version = api_version
            entry.time = now()
            return entry
    entry = Entry(manager, operation, api_version, now(), set(), subresource)
    entries.append(entry)
    return entry


def record_update(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    manager: str,
    api_version: str,
    subresource: str = "",
) -> None:
    """Give `manager` (operation Update, through `subresource` when one: `status`, `scale`)
    every field whose value the write changed."""
    entries = entries_of(old) if old is not None else []
    before = leaf_values(old) if old is not None else {}
    after = leaf_values(new)
    changed = {p for p, v in after.items() if before.get(p) != v}
    gone = set(before) - set(after)
    for entry in entries:
        entry.fields -= gone
        entry.fields -= changed
    if changed:
        _entry(entries, manager, "Update", api_version, subresource).fields |= changed
    store_entries(new, entries)


class ApplyConflict(ApiStatus):
    pass


def _conflict(conflicts: list[tuple[Entry, PathT]]) -> ApplyConflict:
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f"conflict with {e.describe()}",
            "field": show_path(p),
        }
        for e, p in conflicts
    ]
    if len(conflicts) == 1:
        entry, path = conflicts[0]
        message = (
            f"Apply failed with 1 conflict: conflict with {entry.describe()}: {show_path(path)}"
        )
    else:
        by_manager: dict[str, list[str]] = {}
        for entry, path in conflicts:
            by_manager.setdefault(entry.describe(), []).append(show_path(path))
        lines = []
        for manager in sorted(by_manager):
            lines.append(f"conflicts with {manager}:")
            lines.extend(f"- {p}" for p in by_manager[manager])
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return ApplyConflict(409, "Conflict", message, {"causes": causes})


def server_side_apply(
    live: dict[str, Any] | None,
    config: dict[str, Any],
    *,
    manager: str,
    api_version: str,
    force: bool,
) -> dict[str, Any]:
    """The object after `manager` applies `config` to `live` (None: create)."""
    entries = entries_of(live) if live is not None else []
    wanted = leaf_values(config)
    current = leaf_values(live) if live is not None else {}
    conflicts = [
        (entry, path)
        for path, value in sorted(wanted.items())
        if path in current and current[path] != value
        for entry in entries
        if entry.manager != manager and path in entry.fields
    ]
    if conflicts and not force:
        raise _conflict(conflicts)
    for entry, path in conflicts:
        entry.fields.discard(path)
    mine = _entry(entries, manager, "Apply", api_version)
    others: set[PathT] = set()
    for entry in entries:
        if entry is not mine:
            others |= entry.fields
    dropped = sorted(mine.fields - set(wanted) - others, key=len, reverse=True)
    result: dict[str, Any] = json.loads(json.dumps(live)) if live is not None else {}
    for path in dropped:
        _remove(result, path)
    result = _merge(result, config)
    # Fields this apply changed are no longer owned by Update managers that set them.
    changed = {p for p, v in wanted.items() if current.get(p) != v}
    for entry in entries:
        if entry is not mine and entry.operation == "Update":
            entry.fields -= changed
    mine.fields = set(wanted)
    store_entries(result, entries)
    return result


def _merge(live: Any, config: Any, field: str = "") -> Any:
    if isinstance(config, dict):
        base = dict(live) if isinstance(live, dict) else {}
        for key, value in config.items():
            base[key] = _merge(base.get(key), value, key)
        return base
    if isinstance(config, list):
        if field in MERGED_SCALAR_LISTS and isinstance(live, list):
            return list(live) + [v for v in config if v not in live]
        keys = list_keys(field, config)
        if keys is not None and isinstance(live, list) and all(isinstance(i, dict) for i in config):
            merged = list(live)
            for item in config:
                wanted = item_key(item, keys)
                index = next(
                    (i for i, have in enumerate(merged) if item_key(have, keys) == wanted), None
                )
                if index is None:
                    merged.append(item)
                else:
                    merged[index] = _merge(merged[index], item)
            return merged
    return config


def _remove(obj: Any, path: PathT) -> None:
    parents = list(_descend(obj, path[:-1]))
    if not parents:
        return
    container = parents[-1]
    kind, _, text = path[-1].partition(":")
    if kind == "f" and isinstance(container, dict):
        container.pop(text, None)
    elif kind in ("k", "v") and isinstance(container, list):
        index = _find(container, kind, text, path[-2] if len(path) > 1 else "")
        if index is not None:
            del container[index]


def _descend(obj: Any, path: PathT) -> Iterator[Any]:
    node = obj
    yield node
    for i, part in enumerate(path):
        kind, _, text = part.partition(":")
        if kind == "f" and isinstance(node, dict) and text in node:
            node = node[text]
        elif kind in ("k", "v") and isinstance(node, list):
            index = _find(node, kind, text, path[i - 1] if i else "")
            if index is None:
                return
            node = node[index]
        else:
            return
        yield node


def _find(items: list[Any], kind: str, text: str, field_part: str) -> int | None:
    if kind == "v":
        wanted = json.loads(text)
        return next((i for i, v in enumerate(items) if v == wanted), None)
    field = field_part.partition(":")[2]
    keys = list_keys(field, items)
    if keys is None:
        return None
    for i, item in enumerate(items):
        if isinstance(item, dict) and _key_json(item, keys) == text:
            return i
    return None
