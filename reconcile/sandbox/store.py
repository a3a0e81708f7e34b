"""Object storage for the sandbox: one lock, one resourceVersion counter, sorted keys,
and the recent history of writes that watches are served from.

Objects are kept as JSON-compatible dicts together with their encoded form, so that a
LIST page is a join of ready-made strings: listing 10,000 nodes page by page stays
linear. Keys are kept sorted (namespace, name) with bisect, as etcd returns them.

Every write is one event in a bounded history (every resourceVersion is one event, as
every etcd revision is one write): a watch resumes from any resourceVersion the history
still covers, and an older one is answered 410 Expired, as by an API server whose watch
cache (or etcd, after compaction) has let it go. Writers notify `changed`; watchers wait
on it, so a write wakes them at once and an idle watch costs nothing.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import copy
import json
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from reconcile.sandbox.errors import ApiStatus, bad_request

Key = tuple[str, str]  # (namespace, name); namespace is "" for cluster-scoped objects
Obj = dict[str, Any]


def encode(obj: Obj) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


# How many writes the history keeps by default: about what a busy watch cache holds.
DEFAULT_HISTORY: Final = 4096


@dataclass(frozen=True)
class Event:
    """One write as a watch sees it. `obj` is the stored object (for DELETED: its last
    state, carrying the deletion's resourceVersion); `previous` the object it replaced,
    which a watcher whose selector it no longer matches is sent as DELETED."""

    resource_version: int
    type: str  # ADDED, MODIFIED or DELETED
    resource: str  # the storage key of its resource (Resource.key)
    namespace: str
    obj: Obj
    encoded: str
    previous: Obj | None = None


@dataclass
class Page:
    items: list[str]  # encoded objects
    resource_version: str
    continue_token: str | None
    remaining: int | None


class Store:
    def __init__(self, history: int = DEFAULT_HISTORY) -> None:
        if history < 1:
            raise ValueError("the watch history holds at least one event")
        self.lock = threading.RLock()
        # Notified (under `lock`) on every write, and by `wake` when watchers must look up.
        self.changed = threading.Condition(self.lock)
        self._rv = 0
        self._objects: dict[str, dict[Key, Obj]] = {}
        self._encoded: dict[str, dict[Key, str]] = {}
        self._keys: dict[str, list[Key]] = {}
        self._history: deque[Event] = deque(maxlen=history)
        # The newest resourceVersion whose event is no longer in the history: a watch
        # from before it cannot be served.
        self._horizon = 0

    # --- resourceVersion ---------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        return str(self._rv)

    def next_resource_version(self) -> str:
        """The resourceVersion of the next write; the caller stores (or deletes) with it."""
        self._rv += 1
        return str(self._rv)

    # --- history ---------------------------------------------------------------------

    @property
    def horizon(self) -> int:
        """Watches can resume from this resourceVersion or any later one."""
        return self._horizon

    def events_after(self, resource_version: int) -> list[Event] | None:
        """The events after `resource_version`, oldest first; None when the history no
        longer reaches back that far. Callers hold the lock."""
        if resource_version < self._horizon:
            return None
        found: list[Event] = []
        for event in reversed(self._history):
            if event.resource_version <= resource_version:
                break
            found.append(event)
        found.reverse()
        return found

    def compact(self) -> None:
        """Forget the history, as etcd compaction does: only a watch from the current
        resourceVersion (or a fresh LIST's) can start after this."""
        with self.lock:
            self._history.clear()
            self._horizon = self._rv

    def wake(self) -> None:
        """Wake every waiting watcher (to notice it was closed, or the server stopping)."""
        with self.lock:
            self.changed.notify_all()

    def _record(self, event: Event) -> None:
        with self.lock:  # callers hold it already; notifying requires it
            if len(self._history) == self._history.maxlen:
                self._horizon = self._history[0].resource_version
            self._history.append(event)
            self.changed.notify_all()

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
        """Store `obj`, whose metadata.resourceVersion is a fresh `next_resource_version()`.
        Stored objects are never modified afterwards (readers get copies)."""
        objects = self._objects.setdefault(resource, {})
        previous = objects.get(key)
        if previous is None:
            bisect.insort(self._keys.setdefault(resource, []), key)
        objects[key] = obj
        encoded = encode(obj)
        self._encoded.setdefault(resource, {})[key] = encoded
        self._record(
            Event(
                int(obj["metadata"]["resourceVersion"]),
                "ADDED" if previous is None else "MODIFIED",
                resource,
                key[0],
                obj,
                encoded,
                previous,
            )
        )

    def delete(self, resource: str, key: Key) -> Obj | None:
        """Remove an object; the deletion is a write of its own, with its own
        resourceVersion (which the DELETED event's object carries, as etcd's does)."""
        obj = self._objects.get(resource, {}).pop(key, None)
        if obj is None:
            return None
        self._encoded[resource].pop(key, None)
        keys = self._keys[resource]
        del keys[bisect.bisect_left(keys, key)]
        version = self.next_resource_version()
        last = {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}}
        self._record(Event(int(version), "DELETED", resource, key[0], last, encode(last)))
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
