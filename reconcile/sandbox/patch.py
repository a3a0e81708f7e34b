"""The three PATCH formats of the API server: JSON merge patch (RFC 7386), strategic
merge patch (what `kubectl label/cordon/patch` send) and JSON patch (RFC 6902).

Strategic merge follows the patchStrategy/patchMergeKey tags of the core types for the
lists that carry them (containers by name, conditions by type, ...); every other list
is replaced whole, as upstream. The same table names the keys of server-side apply's
associative lists.
"""

from __future__ import annotations

import copy
from typing import Any, Final

import jsonpatch

# Lists merged item by item, and by which key (k8s.io/api struct tags).
MERGE_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "containers": ("name",),
    "initContainers": ("name",),
    "ephemeralContainers": ("name",),
    "volumes": ("name",),
    "imagePullSecrets": ("name",),
    "env": ("name",),
    "resourceClaims": ("name",),
    "schedulingGates": ("name",),
    "volumeMounts": ("mountPath",),
    "volumeDevices": ("devicePath",),
    "hostAliases": ("ip",),
    "topologySpreadConstraints": ("topologyKey", "whenUnsatisfiable"),
    "conditions": ("type",),
    "addresses": ("type",),
    "ownerReferences": ("uid",),
}
# Lists of scalars merged as sets.
MERGED_SCALAR_LISTS: Final = frozenset({"finalizers", "podCIDRs"})


class PatchError(ValueError):
    """The patch cannot be applied; the message is for the client."""


def list_keys(field: str, items: list[Any]) -> tuple[str, ...] | None:
    """Merge keys for a list field, or None when the list is atomic."""
    if field == "ports":
        dicts = [i for i in items if isinstance(i, dict)]
        if dicts and all("containerPort" in i for i in dicts):
            return ("containerPort", "protocol")
        if dicts and all("port" in i for i in dicts):
            return ("port", "protocol")
        return None
    return MERGE_KEYS.get(field)


def item_key(item: Any, keys: tuple[str, ...]) -> tuple[Any, ...]:
    defaults = {"protocol": "TCP"}
    return tuple(item.get(k, defaults.get(k)) if isinstance(item, dict) else None for k in keys)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        raise PatchError("strategic merge patch must be a JSON object")
    return _smp_map(target if isinstance(target, dict) else {}, patch)


def _smp_map(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any] | None:
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive is not None:
        raise PatchError(f"Unknown patch type: {directive}")
    result = dict(target)
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys",):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            removed = set(map(_hashable, value or ()))
            result[field] = [v for v in result.get(field) or () if _hashable(v) not in removed]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            existing = result.get(key)
            merged = _smp_map(existing if isinstance(existing, dict) else {}, value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _smp_list(key, result.get(key), value)
        else:
            result[key] = value
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _smp_list(field: str, target: Any, patch: list[Any]) -> list[Any]:
    current = target if isinstance(target, list) else []
    if field in MERGED_SCALAR_LISTS:
        merged = list(current)
        for value in patch:
            if value not in merged:
                merged.append(value)
        return merged
    keys = list_keys(field, [*current, *patch])
    if keys is None:
        return copy.deepcopy([v for v in patch if not (isinstance(v, dict) and "$patch" in v)])
    result = [copy.deepcopy(i) for i in current]
    for item in patch:
        if not isinstance(item, dict):
            raise PatchError(f"strategic merge patch: items of {field} must be objects")
        if item.get("$patch") == "replace":
            return [
                copy.deepcopy({k: v for k, v in i.items() if k != "$patch"})
                for i in patch
                if i is not item
            ]
        wanted = item_key(item, keys)
        index = next((i for i, have in enumerate(result) if item_key(have, keys) == wanted), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del result[index]
            continue
        if index is None:
            result.append(_smp_map({}, item))
        else:
            merged_item = _smp_map(result[index], item)
            if merged_item is not None:
                result[index] = merged_item
    return result


def json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise PatchError("json patch must be a JSON array of operations")
    try:
        return jsonpatch.apply_patch(target, operations, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
        raise PatchError(str(e)) from None
    except (TypeError, KeyError, ValueError) as e:
        raise PatchError(f"invalid json patch: {e}") from None


def _hashable(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool) or value is None else repr(value)
