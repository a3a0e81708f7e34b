"""One request's failure as reconcile's own exception, and whether to try it again.

API errors are translated here, once, into reconcile's own exceptions, keeping the
server's Status reason and message and never a header, token or kubeconfig contents; a
Secret value the server's message quotes is struck out by the `redact` the caller passes
(see sensitive.py). Transport failures name the server, the request and the timeout.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import urllib3
from kubernetes.client.exceptions import ApiException

from reconcile.diagnostics import (
    ApiError,
    ClusterUnreachable,
    Conflict,
    Invalid,
    NotFound,
    ReconcileError,
    TooManyRequests,
)

T = TypeVar("T")

_ERRORS: Final[dict[int, type[ApiError]]] = {
    404: NotFound,
    409: Conflict,
    422: Invalid,
    429: TooManyRequests,
}


def unchanged(text: str) -> str:
    """`text` itself: the redaction of a caller that knows no secrets."""
    return text


def translate(error: ApiException, redact: Callable[[str], str] = unchanged) -> ApiError:
    """Our exception for an API failure: status, reason, message and causes only, with
    `redact` applied to every text the server wrote."""
    status = int(error.status or 0)
    body: dict[str, Any] = {}
    if error.body:
        try:
            parsed = json.loads(error.body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            body = parsed
    reason = redact(str(body.get("reason") or error.reason or ""))
    message = redact(str(body.get("message") or ""))
    details = body.get("details") or {}
    causes = tuple(
        {str(k): redact(str(v)) for k, v in c.items()}
        for c in details.get("causes") or ()
        if isinstance(c, dict)
    )
    retry_after = None
    headers = error.headers or {}
    raw_retry = headers.get("Retry-After") if hasattr(headers, "get") else None
    if raw_retry:
        try:
            retry_after = float(raw_retry)
        except ValueError:
            retry_after = None
    return _ERRORS.get(status, ApiError)(status, reason, message, causes, retry_after)


class ConnectFailed(ClusterUnreachable):
    """No connection at all (refused, unreachable): likely a wrong address, retried little."""


@dataclass(frozen=True)
class Request:
    """What an error about a request names: the server, the request, the timeout."""

    server: str
    method: str
    path: str
    timeout: float | None
    by_deadline: bool = False  # the overall --timeout left less than --request-timeout
    whose: str = ""  # whose credentials it carries: `user "alice" (context "lab")`


def call(fn: Callable[[], T], request: Request, redact: Callable[[str], str] = unchanged) -> T:
    """What `fn` returns; an ApiError (or ClusterUnreachable, ConnectFailed) for what the
    client or urllib3 raised, naming `request` and never the client's own exception."""
    try:
        return fn()
    except ApiException as e:
        if not e.status:
            raise ClusterUnreachable(
                f"{request.method} {request.path} to {request.server} failed: "
                f"{redact(str(e.reason))}"
            ) from None
        error = translate(e, redact)
        if error.status in (401, 403):
            error.args = (_refused(error, request),)
        raise error from None
    except urllib3.exceptions.HTTPError as e:
        reason = getattr(e, "reason", None) or e
        kind = (
            ConnectFailed
            if isinstance(reason, urllib3.exceptions.NewConnectionError)
            else ClusterUnreachable
        )
        raise kind(_describe_transport_error(e, request)) from None


# Answers worth another try: the server is busy, restarting or briefly unwell.
TRANSIENT_STATUS: Final = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter, bounded by attempts and the overall deadline."""

    attempts: int = 10
    connect_attempts: int = 3
    base: float = 0.1
    cap: float = 2.0

    def delay(self, error: ReconcileError, attempt: int, remaining: float | None) -> float | None:
        """Seconds to wait before the next try, or None when the error is final."""
        if isinstance(error, ConnectFailed):
            if attempt + 1 >= self.connect_attempts:
                return None
        elif isinstance(error, ClusterUnreachable):
            pass
        elif not isinstance(error, ApiError) or error.status not in TRANSIENT_STATUS:
            return None
        elif any(c.get("reason") == "DisruptionBudget" for c in error.causes):
            return None  # a budget refusing an eviction: the caller decides when to retry
        if attempt + 1 >= self.attempts:
            return None
        wait = random.uniform(0, min(self.cap, self.base * 2**attempt))
        if isinstance(error, ApiError) and error.retry_after is not None:
            wait = error.retry_after  # the server said when
        if remaining is not None and wait >= remaining:
            return None
        return wait


def _refused(error: ApiError, request: Request) -> str:
    """A 401 or 403 naming the server and whose credentials it refused, as kubectl's
    `error: You must be logged in to the server (Unauthorized)` does not."""
    whose = request.whose or "the kubeconfig's user"
    answer = f"{error.status} {error.reason}".rstrip()
    if error.status == 401:
        said = f"{error.message}: " if error.message and error.message != error.reason else ""
        return f"the API server {request.server} refused the credentials of {whose}: {said}{answer}"
    said = f"{error.message} " if error.message else ""
    return (
        f"the API server {request.server} does not allow {whose} to {request.method} "
        f"{request.path}: {said}({answer})"
    )


def _seconds(value: float) -> str:
    return f"{value:g}s"


def _describe_transport_error(error: urllib3.exceptions.HTTPError, request: Request) -> str:
    reason = getattr(error, "reason", None) or error
    asked = f"{request.method} {request.path}"
    if isinstance(reason, urllib3.exceptions.NewConnectionError):
        return (
            f"cannot connect to the API server {request.server} (connection refused or host "
            "unreachable): check the server address in the kubeconfig and that the cluster is up"
        )
    if isinstance(reason, urllib3.exceptions.TimeoutError):
        within = f" within {_seconds(request.timeout)}" if request.timeout else ""
        option = "--timeout" if request.by_deadline else "--request-timeout"
        return (
            f"the API server {request.server} did not answer {asked}{within}: if it is slow "
            f"rather than down, raise {option}"
        )
    return f"{asked} to {request.server} failed: {type(reason).__name__}"
