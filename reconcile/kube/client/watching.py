"""A watch's chunked answer read as events: newline-delimited JSON, one event a line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import urllib3

from reconcile.diagnostics import ApiError, ClusterUnreachable, ReconcileError
from reconcile.kube.client.transport import Request


@dataclass(frozen=True)
class WatchEvent:
    """One event of a watch: ADDED, MODIFIED, DELETED or BOOKMARK, and the object."""

    type: str
    object: dict[str, Any]

    @property
    def resource_version(self) -> str:
        return str((self.object.get("metadata") or {}).get("resourceVersion") or "")


class WatchExpired(ReconcileError):
    """410 Gone: the server no longer keeps the resourceVersion a watch asked for."""


def lines(stream: Any) -> Iterator[bytes]:
    """The newline-delimited JSON documents of a chunked watch answer."""
    pending = b""
    for chunk in stream.stream(amt=None, decode_content=True):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        yield from (line for line in complete if line.strip())
    if pending.strip():
        yield pending


def events(documents: Iterator[bytes], request: Request) -> Iterator[WatchEvent]:
    """The events of a watch's `documents` (see `lines`). ClusterUnreachable when the
    stream breaks or sends a line that is not JSON, WatchExpired for an ERROR event of 410,
    ApiError for another."""
    while True:
        try:
            line = next(documents)
        except StopIteration:
            return
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise ClusterUnreachable(
                f"the watch {request.path} on {request.server} broke: {type(e).__name__}"
            ) from None
        try:
            event = json.loads(line)
        except ValueError:
            raise ClusterUnreachable(
                f"the watch {request.path} on {request.server} sent a line that is not JSON"
            ) from None
        kind, obj = str(event.get("type") or ""), event.get("object") or {}
        if kind == "ERROR":
            status = int(obj.get("code") or 0)
            message = f"{obj.get('message') or ''} ({status} {obj.get('reason') or ''})"
            if status == 410:
                raise WatchExpired(message)
            raise ApiError(status, str(obj.get("reason") or ""), str(obj.get("message") or ""))
        yield WatchEvent(kind, obj)
