"""WATCH on every collection, streamed as kube-apiserver v1.36 streams it.

A watch is newline-delimited JSON events, `{"type": ..., "object": ...}`, over a chunked
200 response. What the stream holds, checked against a real v1.36 API server:

- from a resourceVersion N: every write after N, oldest first (N itself excluded);
- with resourceVersion unset or "0" (or sendInitialEvents=true): first an ADDED event for
  every object that exists, in key order, then the writes after that moment; with
  allowWatchBookmarks, the initial events end with a BOOKMARK annotated
  `k8s.io/initial-events-end: "true"` (1.36 defaults sendInitialEvents to true for such
  legacy requests);
- a write that makes an object start (stop) matching the watch's selectors is sent as
  ADDED (DELETED, with the object as it was before, at the write's resourceVersion);
- a DELETED object is its last state, carrying the deletion's resourceVersion;
- with allowWatchBookmarks: a BOOKMARK every `bookmark_interval` seconds (upstream: about
  a minute) and one 2 s before timeoutSeconds runs out, but only once something was
  written after the watch opened (upstream: past the last event it replayed on opening);
  its object is the kind's empty object with only metadata.resourceVersion set, as
  upstream serializes it (no periodic bookmarks for Events, which upstream does not cache);
- a resourceVersion older than the retained history: one ERROR event, a 410 Expired
  Status `too old resource version: N (H)`, and the end of the stream; one newer than the
  store's: after 3 s, a 504 `Too large resource version`;
- timeoutSeconds ends the stream cleanly (the terminating chunk); so do the server
  stopping and `close` (a test breaking streams to exercise a client's reconnect).

A `Table` watch (kubectl get -w) sends each object as a one-row Table, the column
definitions only in the first event.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from reconcile.kube.validation import FieldError, forbidden, not_supported
from reconcile.sandbox import tables
from reconcile.sandbox.errors import ApiStatus, list_options_invalid
from reconcile.sandbox.resources import Resource
from reconcile.sandbox.store import Event, Obj, Store, encode

INITIAL_EVENTS_END: Final = "k8s.io/initial-events-end"
NOT_OLDER_THAN: Final = "NotOlderThan"
# How long the API server waits for its cache to reach a resourceVersion from the future.
TOO_LARGE_WAIT: Final = 3.0
# An idle watch checks this often whether its client is still there.
LIVENESS: Final = 5.0

# The empty object of each kind as v1.36 serializes it in a BOOKMARK (zero values included).
_ZERO_TEMPLATE = {"metadata": {}, "spec": {"containers": None}}
BOOKMARK_BODIES: Final[dict[str, dict[str, Any]]] = {
    "Namespace": {"spec": {}, "status": {}},
    "Node": {
        "spec": {},
        "status": {
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": "",
                "osImage": "",
                "containerRuntimeVersion": "",
                "kubeletVersion": "",
                "kubeProxyVersion": "",
                "operatingSystem": "",
                "architecture": "",
            },
        },
    },
    "Pod": {"spec": {"containers": None}, "status": {}},
    "Service": {"spec": {}, "status": {"loadBalancer": {}}},
    "Deployment": {
        "spec": {"replicas": 0, "selector": None, "template": _ZERO_TEMPLATE, "strategy": {}},
        "status": {},
    },
    "ReplicaSet": {
        "spec": {"replicas": 0, "selector": None, "template": _ZERO_TEMPLATE},
        "status": {"replicas": 0},
    },
    "DaemonSet": {
        "spec": {"selector": None, "template": _ZERO_TEMPLATE, "updateStrategy": {}},
        "status": {
            "currentNumberScheduled": 0,
            "numberMisscheduled": 0,
            "desiredNumberScheduled": 0,
            "numberReady": 0,
        },
    },
    "StatefulSet": {
        "spec": {
            "replicas": 0,
            "selector": None,
            "template": _ZERO_TEMPLATE,
            "serviceName": "",
            "updateStrategy": {},
        },
        "status": {"replicas": 0, "availableReplicas": 0},
    },
    "Job": {"spec": {"template": _ZERO_TEMPLATE}, "status": {}},
    "CronJob": {
        "spec": {
            "schedule": "",
            "jobTemplate": {"metadata": {}, "spec": {"template": _ZERO_TEMPLATE}},
        },
        "status": {},
    },
    "PodDisruptionBudget": {
        "spec": {},
        "status": {
            "disruptionsAllowed": 0,
            "currentHealthy": 0,
            "desiredHealthy": 0,
            "expectedPods": 0,
        },
    },
    "ClusterRole": {"rules": None},
    "Role": {"rules": None},
    "ClusterRoleBinding": {"roleRef": {"apiGroup": "", "kind": "", "name": ""}},
    "RoleBinding": {"roleRef": {"apiGroup": "", "kind": "", "name": ""}},
    "Lease": {"spec": {}},
}
# Annotations the empty object carries (its defaulting sets them).
_BOOKMARK_ANNOTATIONS: Final = {"DaemonSet": {"deprecated.daemonset.template.generation": "0"}}


def _go_bool(text: str | None) -> bool | None:
    """strconv.ParseBool, as query parameters are decoded; None when absent or not a bool."""
    if text in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if text in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    return None


def is_watch(query: dict[str, str]) -> bool:
    return bool(_go_bool(query.get("watch")))


@dataclass(frozen=True)
class WatchOptions:
    resource_version: str
    send_initial_events: bool | None
    allow_bookmarks: bool
    timeout: float  # seconds until the stream ends
    label_selector: str
    field_selector: str


def options(query: dict[str, str]) -> WatchOptions:
    """The watch's ListOptions, refused as the API server refuses them (422, 500)."""
    send_initial = _go_bool(query.get("sendInitialEvents"))
    match = query.get("resourceVersionMatch") or ""
    errors: list[FieldError] = []
    if send_initial is not None and match != NOT_OLDER_THAN:
        errors.append(
            forbidden(
                "resourceVersionMatch",
                f"sendInitialEvents requires setting resourceVersionMatch to {NOT_OLDER_THAN}",
            )
        )
    if match:
        if send_initial is None:
            errors.append(
                forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                )
            )
        if match != NOT_OLDER_THAN:
            errors.append(not_supported("resourceVersionMatch", match, [NOT_OLDER_THAN]))
        if query.get("continue"):
            errors.append(
                forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                )
            )
    if errors:
        raise list_options_invalid(errors)
    version = query.get("resourceVersion") or ""
    if version and not (version.isascii() and version.isdigit()):
        # Upstream's answer, a 500 without a reason (the cacher fails to parse it).
        raise ApiStatus(
            500,
            "",
            f'resourceVersion: Invalid value: "{version}": strconv.ParseUint: '
            f'parsing "{version}": invalid syntax',
        )
    try:
        timeout = float(int(query["timeoutSeconds"])) if "timeoutSeconds" in query else 0.0
    except ValueError:
        timeout = 0.0
    if timeout == 0:
        # Upstream: a random timeout between --min-request-timeout (30 min) and twice that.
        timeout = 1800.0 * (1 + random.random())
    return WatchOptions(
        resource_version=version,
        send_initial_events=send_initial,
        allow_bookmarks=bool(_go_bool(query.get("allowWatchBookmarks"))),
        timeout=max(timeout, 0.0),
        label_selector=query.get("labelSelector", ""),
        field_selector=query.get("fieldSelector", ""),
    )


def _event_line(kind: str, encoded: str) -> bytes:
    return ('{"type":"' + kind + '","object":' + encoded + "}\n").encode()


def _error_line(status: ApiStatus) -> bytes:
    return _event_line("ERROR", json.dumps(status.status(), separators=(",", ":")))


def expired(requested: int, horizon: int) -> ApiStatus:
    return ApiStatus(410, "Expired", f"too old resource version: {requested} ({horizon})")


def too_large(requested: int, current: int) -> ApiStatus:
    return ApiStatus(
        504,
        "Timeout",
        f"Timeout: Too large resource version: {requested}, current: {current}",
        {
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
    )


class Watch:
    """One watch stream: where it starts, what it selects, and its state while it runs.

    `run` is called in the connection's thread and writes through `send`; it holds the
    store's lock only to read the history, never while writing to the client."""

    def __init__(
        self,
        store: Store,
        resource: Resource,
        namespace: str | None,
        opts: WatchOptions,
        *,
        match: Callable[[Obj], bool] | None,
        convert: Callable[[Obj], Obj] | None,
        as_table: bool,
        bookmark_interval: float,
        bookmarks_served: bool = True,
    ) -> None:
        self._store = store
        self.resource = resource
        self._namespace = namespace
        self._opts = opts
        self._match = match
        self._convert = convert
        self._as_table = as_table
        self._columns_sent = False
        self._interval = bookmark_interval
        self._bookmarks = opts.allow_bookmarks and bookmarks_served
        self._closed = threading.Event()
        self.abrupt = False

    # --- control ---------------------------------------------------------------------

    def close(self, *, abrupt: bool = False) -> None:
        """End the stream: cleanly (the terminating chunk), or abruptly (the connection
        cut mid-stream, as a dying server or proxy leaves it)."""
        self.abrupt = self.abrupt or abrupt
        self._closed.set()
        self._store.wake()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    # --- the stream ------------------------------------------------------------------

    def run(self, send: Callable[[bytes], None], alive: Callable[[], bool]) -> None:
        """Stream until the timeout, `close`, or the client leaving."""
        store = self._store
        started = time.monotonic()
        deadline = started + self._opts.timeout
        opts = self._opts
        initial = (
            opts.send_initial_events
            if opts.send_initial_events is not None
            else opts.resource_version in ("", "0")
        )
        wanted = int(opts.resource_version or 0)
        snapshot: list[tuple[Obj, str]] = []
        refusal: ApiStatus | None = None
        with store.lock:
            if wanted:
                limit = min(deadline, started + TOO_LARGE_WAIT)
                while int(store.resource_version) < wanted and not self.closed:
                    remaining = limit - time.monotonic()
                    if remaining <= 0:
                        break
                    store.changed.wait(remaining)
            current = int(store.resource_version)
            position = wanted or current
            if wanted > current:
                refusal = too_large(wanted, current)
            elif initial:
                position = current
                key = self.resource.key
                for obj in store.values(key, self._namespace):
                    if self._selects(obj):
                        metadata = obj["metadata"]
                        name = (metadata.get("namespace") or "", metadata["name"])
                        snapshot.append((obj, store.encoded(key, name) or encode(obj)))
            elif position < store.horizon:
                refusal = expired(position, store.horizon)
        if self.closed or time.monotonic() >= deadline:
            return
        if refusal is not None:
            send(_error_line(refusal))
            return
        # Upstream sends a bookmark only past the last event it replayed on registering the
        # watch (here: every write so far), so that one arrives once something was written
        # while the watch was open.
        replayed = current
        plain = self._convert is None and not self._as_table
        for obj, encoded in snapshot:
            send(_event_line("ADDED", encoded) if plain else self._line("ADDED", obj))
        if initial and opts.allow_bookmarks:
            send(self._bookmark(position, initial_end=True))
        next_bookmark = self._next_bookmark(time.monotonic(), deadline)
        while True:
            with store.lock:
                events = store.events_after(position)
                if events == [] and not self.closed:
                    now = time.monotonic()
                    wake = min(deadline, next_bookmark, now + LIVENESS)
                    if wake > now:
                        store.changed.wait(wake - now)
                    events = store.events_after(position)
                current = int(store.resource_version)
            if self.closed:
                return
            if events is None:
                # The history moved past this watcher before it read it: upstream drops a
                # watcher that cannot keep up, and its client sees the stream end.
                return
            sent = False
            for event in events:
                line = self._translate(event)
                if line is not None:
                    send(line)
                    sent = True
            position = max(position, current)
            now = time.monotonic()
            if now >= deadline:
                return
            if now >= next_bookmark:
                if position > replayed:
                    send(self._bookmark(position))
                    sent = True
                next_bookmark = self._next_bookmark(now, deadline)
            if not sent and not alive():
                return

    def _next_bookmark(self, now: float, deadline: float) -> float:
        """Upstream's nextBookmarkTime: every interval, and 2 s before the deadline."""
        if not self._bookmarks:
            return math.inf
        due = min(now + self._interval, deadline - 2.0)
        return due if due > now else math.inf

    def _selects(self, obj: Obj) -> bool:
        """Selectors apply to the stored object (for a view too: upstream selects on the
        one internal object, whichever API it is read through)."""
        return self._match is None or self._match(obj)

    def _translate(self, event: Event) -> bytes | None:
        """The event this watcher is sent for a write, if any."""
        if event.resource != self.resource.key:
            return None
        if self._namespace is not None and event.namespace != self._namespace:
            return None
        plain = self._convert is None and not self._as_table
        kind = event.type
        if kind == "MODIFIED" and self._match is not None:
            selected = self._selects(event.obj)
            was_selected = self._selects(event.previous or {})
            if not selected and was_selected and event.previous is not None:
                # What the watcher last saw of it, at the resourceVersion of the write.
                previous = event.previous
                version = str(event.resource_version)
                gone = {
                    **previous,
                    "metadata": {**previous["metadata"], "resourceVersion": version},
                }
                return self._line("DELETED", gone)
            if not selected:
                return None
            kind = "MODIFIED" if was_selected else "ADDED"
        elif not self._selects(event.obj):
            return None
        return _event_line(kind, event.encoded) if plain else self._line(kind, event.obj)

    def _line(self, kind: str, stored: Obj) -> bytes:
        obj = self._convert(stored) if self._convert else stored
        encoded = encode(obj)
        if self._as_table:
            table = tables.table(
                self.resource.kind,
                [encoded],
                str(obj["metadata"].get("resourceVersion", "")),
                None,
                columns=not self._columns_sent,
            )
            self._columns_sent = True
            encoded = encode(table)
        return _event_line(kind, encoded)

    def _bookmark(self, resource_version: int, *, initial_end: bool = False) -> bytes:
        kind = self.resource.kind
        metadata: dict[str, Any] = {"resourceVersion": str(resource_version)}
        annotations = dict(_BOOKMARK_ANNOTATIONS.get(kind, {}))
        if initial_end:
            annotations[INITIAL_EVENTS_END] = "true"
        if annotations:
            metadata["annotations"] = annotations
        body = {
            "kind": kind,
            "apiVersion": self.resource.group_version,
            "metadata": metadata,
            **BOOKMARK_BODIES.get(kind, {}),
        }
        return _event_line("BOOKMARK", encode(body))
