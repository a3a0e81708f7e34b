"""Object storage for the sandbox: one lock, one resourceVersion counter, sorted keys.

Objects are kept as JSON-compatible dicts together with their encoded form, so that a
LIST page is a join of ready-made strings: listing 10,000 nodes page by page stays
linear. Keys are kept sorted (namespace, name) with bisect, as etcd returns them.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import copy
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from reconcile.sandbox.errors import ApiStatus, bad_request

Key = tuple[str, str]  # (namespace, name); namespace is "" for cluster-scoped objects
Obj = dict[str, Any]


def encode(obj: Obj) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


@dataclass
class Page:
    items: list[str]  # encoded objects
    resource_version: str
    continue_token: str | None
    remaining: int | None


class Store:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._rv = 0
        self._objects: dict[str, dict[Key, Obj]] = {}
        self._encoded: dict[str, dict[Key, str]] = {}
        self._keys: dict[str, list[Key]] = {}

    # --- resourceVersion ---------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        return str(self._rv)

    def next_resource_version(self) -> str:
        self._rv += 1
        return str(self._rv)

    # --- reads -------------------------------------------------------------------------

    def get(self, resource: str, key: Key) -> Obj | None:
        """A deep copy of the stored object (callers may modify it), or None."""
        found = self._objects.get(resource, {}).get(key)
        return copy.deepcopy(found) if found is not None else None

    def peek(self, resource: str, key: Key) -> Obj | None:
        """The stored object itself, read-only, for checks that must not pay for a copy."""
        return self._objects.get(resource, {}).get(key)

    def encoded(self, resource: str, key: Key) -> str | None:
        return self._encoded.get(resource, {}).get(key)

    def values(self, resource: str, namespace: str | None = None) -> Iterator[Obj]:
        """Stored objects in key order (read-only), optionally within one namespace."""
        objects = self._objects.get(resource, {})
        keys = self._keys.get(resource, [])
        if namespace is None:
            for key in keys:
                yield objects[key]
            return
        start = bisect.bisect_left(keys, (namespace, ""))
        for key in keys[start:]:
            if key[0] != namespace:
                return
            yield objects[key]

    def count(self, resource: str) -> int:
        return len(self._keys.get(resource, []))

    def page(
        self,
        resource: str,
        *,
        namespace: str | None,
        match: Callable[[Obj], bool] | None,
        limit: int,
        token: str | None,
    ) -> Page:
        keys = self._keys.get(resource, [])
        objects = self._objects.get(resource, {})
        encoded = self._encoded.get(resource, {})
        list_rv = self.resource_version
        if token:
            list_rv, after = _decode_continue(token)
            start = bisect.bisect_right(keys, after)
        elif namespace is not None:
            start = bisect.bisect_left(keys, (namespace, ""))
        else:
            start = 0
        items: list[str] = []
        index = start
        while index < len(keys):
            key = keys[index]
            if namespace is not None and key[0] != namespace:
                index = len(keys) if key[0] > namespace else index + 1
                continue
            index += 1
            if match is not None and not match(objects[key]):
                continue
            items.append(encoded[key])
            if limit and len(items) >= limit:
                break
        more = limit and len(items) >= limit and _has_more(keys, index, namespace, match, objects)
        if not more:
            return Page(items, list_rv, None, None)
        last = keys[index - 1]
        remaining = None
        if match is None and namespace is None:
            remaining = len(keys) - index
        return Page(items, list_rv, _encode_continue(list_rv, last), remaining)

    # --- writes (callers hold the lock and have validated the object) -----------------

    def put(self, resource: str, key: Key, obj: Obj) -> None:
        objects = self._objects.setdefault(resource, {})
        if key not in objects:
            bisect.insort(self._keys.setdefault(resource, []), key)
        objects[key] = obj
        self._encoded.setdefault(resource, {})[key] = encode(obj)

    def delete(self, resource: str, key: Key) -> Obj | None:
        obj = self._objects.get(resource, {}).pop(key, None)
        if obj is None:
            return None
        self._encoded[resource].pop(key, None)
        keys = self._keys[resource]
        del keys[bisect.bisect_left(keys, key)]
        return obj


def _has_more(
    keys: list[Key],
    index: int,
    namespace: str | None,
    match: Callable[[Obj], bool] | None,
    objects: dict[Key, Obj],
) -> bool:
    """Whether any matching object follows `index` (the real server checks the same)."""
    for key in keys[index:]:
        if namespace is not None and key[0] != namespace:
            return False
        if match is None or match(objects[key]):
            return True
    return False


def _encode_continue(resource_version: str, last: Key) -> str:
    start = f"{last[0]}/{last[1]}" if last[0] else last[1]
    payload = {"v": "meta.k8s.io/v1", "rv": int(resource_version), "start": start + "\x00"}
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[str, Key]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        payload = json.loads(raw)
        start = str(payload["start"]).rstrip("\x00")
        rv = str(int(payload["rv"]))
    except (binascii.Error, ValueError, KeyError, TypeError) as e:
        raise _bad_continue(e) from None
    namespace, _, name = start.rpartition("/")
    return rv, (namespace, name)


def _bad_continue(error: Exception) -> ApiStatus:
    return bad_request(f"continue key is not valid: {error}")
