"""The only module that talks to the API server (and the only one importing `kubernetes`).

Reads are paginated LISTs; writes are PATCHes that carry a resourceVersion precondition.
Responses are read as raw JSON rather than the client's generated models: at fleet
scale (thousands of nodes) building pydantic models for every node costs more than the
request itself, and reconcile needs only a handful of fields.

API errors are translated here, once, into reconcile's own exceptions, keeping the
server's Status reason and message and never a header, token or kubeconfig contents; a
Secret value the server's message quotes is struck out (see sensitive.py).
"""

from __future__ import annotations

import binascii
import functools
import json
import math
import os
import random
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar
from urllib.parse import quote

import urllib3
from kubernetes import config
from kubernetes.client.api_client import ApiClient
from kubernetes.client.configuration import Configuration
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.kube_config import ConfigNode, KubeConfigLoader, KubeConfigMerger

from reconcile.diagnostics import (
    ApiError,
    ClusterUnreachable,
    ConfigError,
    Conflict,
    Invalid,
    InvalidName,
    NotFound,
    ReconcileError,
    TooManyRequests,
    without_userinfo,
)
from reconcile.kube import sensitive, wire
from reconcile.kube import validation as apivalidation
from reconcile.kube.objects import FIELD_MANAGER, ApiResource, LiveNode, NodeEvent
from reconcile.kube.validation import NAME_DNS_LABEL, NAME_DNS_SUBDOMAIN, NAME_PATH_SEGMENT

PAGE_SIZE: Final = 500
PAGES_AHEAD: Final = 4  # pages of a LIST of nodes fetched and not yet decoded, at most
MERGE_PATCH: Final = "application/merge-patch+json"
USER_AGENT: Final = "reconcile/0.1"

T = TypeVar("T")

REFRESH_INTERVAL: Final = 1.0  # seconds between two runs of the client's refresh hook

_ERRORS: Final[dict[int, type[ApiError]]] = {
    404: NotFound,
    409: Conflict,
    422: Invalid,
    429: TooManyRequests,
}


def _unchanged(text: str) -> str:
    return text


def translate(error: ApiException, redact: Callable[[str], str] = _unchanged) -> ApiError:
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
class _Request:
    """What an error about a request names: the server, the request, the timeout."""

    server: str
    method: str
    path: str
    timeout: float | None
    by_deadline: bool = False  # the overall --timeout left less than --request-timeout


class _Configuration(Configuration):
    """The client's configuration, its refresh hook run at most once a second.

    The client's kubeconfig and in-cluster loaders give the configuration a hook that
    runs before every request: it renews a token that is due, then sets every setting
    again (and installs itself anew), the host among them, whose setter reads the proxy
    variables of the whole environment once more. That is about 0.3 ms of CPU a request,
    a quarter of a PATCH's. A token is renewed well before it expires (by the kubeconfig
    loader five minutes early, in a pod every minute), so a hook run at most once a
    second renews every token as before."""

    _refresh_hook: Callable[[Configuration], None] | None = None
    _refresh_due: float = -math.inf

    # The client's stubs type the attribute as None, the value it starts with.
    @property  # type: ignore[override]
    def refresh_api_key_hook(self) -> Callable[[Configuration], None] | None:
        return self._refresh if self._refresh_hook is not None else None

    @refresh_api_key_hook.setter
    def refresh_api_key_hook(self, hook: Callable[[Configuration], None] | None) -> None:
        self._refresh_hook = hook

    def _refresh(self, configuration: Configuration) -> None:
        # No lock: two threads that both find it due both run it, as every request did.
        now = time.monotonic()
        hook = self._refresh_hook
        if hook is None or now < self._refresh_due:
            return
        self._refresh_due = now + REFRESH_INTERVAL
        hook(configuration)


def _head(data: bytes) -> tuple[wire.PageHead, bytes]:
    return wire.page_head(data), data


def _call(fn: Callable[[], T], request: _Request, redact: Callable[[str], str] = _unchanged) -> T:
    try:
        return fn()
    except ApiException as e:
        if not e.status:
            raise ClusterUnreachable(
                f"{request.method} {request.path} to {request.server} failed: "
                f"{redact(str(e.reason))}"
            ) from None
        raise translate(e, redact) from None
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


def _seconds(value: float) -> str:
    return f"{value:g}s"


def _describe_transport_error(error: urllib3.exceptions.HTTPError, request: _Request) -> str:
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


class Cluster:
    """A connection to one API server, built from a kubeconfig or in-cluster credentials.

    Requests go through the official client's ApiClient (configuration, credentials and
    their refresh, TLS, connection pool) with paths built here: the generated typed API
    classes would cost most of a second of start-up to import, for no gain.
    """

    def __init__(
        self,
        api_client: ApiClient,
        *,
        request_timeout: float | None = None,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.api_client = api_client
        self.request_timeout = request_timeout
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.retry = retry or RetryPolicy()
        self.retries = 0  # transient failures tried again, for reports
        self.requests = 0
        self._lock = threading.Lock()
        # Every Secret value sent or received, to strike out of the server's messages.
        self.redactor = sensitive.Redactor()
        self._ahead: _ReadAhead | None = None
        self._server: str | None = None

    @classmethod
    def connect(
        cls,
        kubeconfig: str | None = None,
        context: str | None = None,
        *,
        request_timeout: float | None = 30.0,
        timeout: float | None = None,
        in_cluster: bool = False,
    ) -> Cluster:
        """Credentials as kubectl finds them: the one --kubeconfig file, else $KUBECONFIG
        (several files joined by ':', missing ones skipped), else ~/.kube/config, and in
        a pod the service account (the only way with `in_cluster`)."""
        configuration = _Configuration()
        if in_cluster:
            paths = []
        elif kubeconfig:
            if not Path(kubeconfig).is_file():
                raise ConfigError(f"kubeconfig not found: {kubeconfig}")
            paths = [kubeconfig]
        else:
            listed = os.environ.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser())
            paths = [p for p in dict.fromkeys(listed.split(os.pathsep)) if p and Path(p).is_file()]
        try:
            if paths:
                _load_kubeconfig(paths, context, configuration)
            elif os.environ.get("KUBERNETES_SERVICE_HOST") or in_cluster:
                config.load_incluster_config(client_configuration=configuration)
            else:
                raise ConfigError(
                    "no kubeconfig found: pass --kubeconfig, set KUBECONFIG, or create "
                    "~/.kube/config (or run `reconcile sandbox` for a local cluster)"
                )
        except ConfigError:
            raise
        except ConfigException as e:
            raise ConfigError(f"cannot use kubeconfig: {_config_problem(e)}") from None
        except Exception as e:  # what the client's YAML and base64 decoding raise
            shown = ", ".join(paths) or "(in-cluster)"
            raise ConfigError(f"cannot use kubeconfig {shown}: {_broken_config(e)}") from None
        configuration.retries = False  # retries are decided by reconcile, not urllib3
        if _skips_tls_verification(configuration):
            _silence_insecure_warnings(str(configuration.host))
        api_client = ApiClient(configuration)
        api_client.user_agent = USER_AGENT
        return cls(api_client, request_timeout=request_timeout, timeout=timeout)

    @property
    def tls_verified(self) -> bool:
        """False when the kubeconfig says insecure-skip-tls-verify for an https server:
        the caller says so once (urllib3's per-request warning is silenced for it)."""
        return not _skips_tls_verification(self.api_client.configuration)

    @property
    def server(self) -> str:
        """The API server's URL as it may be shown: without a user or password in it."""
        if self._server is None:  # worked out once: every request's errors name it
            self._server = without_userinfo(str(self.api_client.configuration.host))
        return self._server

    def identity(self) -> tuple[str, str]:
        """(API server URL, UID of the kube-system namespace): which cluster this is. The
        URL can differ between a laptop and a pod; the namespace UID is the cluster's own."""
        if self._ahead is not None and (read := self._ahead.take("identity")) is not None:
            return read.result()  # type: ignore[no-any-return]
        return self._read_identity()

    def _read_identity(self) -> tuple[str, str]:
        kube_system = self.request("GET", "/api/v1/namespaces/kube-system")
        return self.server, str((kube_system.get("metadata") or {}).get("uid") or "")

    def read_ahead(self) -> None:
        """Start reading what every plan reads first, every node and the cluster's
        identity, at once on threads of their own while the caller reads desired/: the
        next `identity()` and `list_nodes()` take what was read instead of asking again.
        It only reads; `stop_reading_ahead()` ends it between two pages."""
        self._ahead = _ReadAhead(self)

    def stop_reading_ahead(self, *, wait: bool = True) -> None:
        """Stop the read ahead (after the request in flight) and forget what it read.
        Without `wait`, only tell it to stop (several clusters are told at once, then
        waited for: none reads on while another's request in flight is awaited)."""
        ahead = self._ahead
        if ahead is None:
            return
        ahead.stop(wait=wait)
        if wait:
            self._ahead = None

    def close(self) -> None:
        self.api_client.close()

    # --- raw requests -------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        decode: Callable[[bytes], Any] | None = None,
    ) -> Any:
        """One API request; the decoded JSON answer, or our exception for a failure."""
        return self.request_with_status(
            method, path, query=query, body=body, content_type=content_type, decode=decode
        )[1]

    def request_with_status(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        decode: Callable[[bytes], Any] | None = None,
    ) -> tuple[int, Any]:
        """One API request: the HTTP status and the decoded JSON answer (by `decode`, for
        answers that are never Secrets and are read into their own shape: nodes)."""
        headers = {"Accept": "application/json", "Accept-Encoding": "gzip"}
        if body is not None:
            headers["Content-Type"] = content_type
            self.redactor.learn(body)
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        method, url, headers, body, _ = self.api_client.param_serialize(
            method,
            path,
            query_params=params,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )

        def send(timeout: float | None) -> tuple[int, Any]:
            response = self.api_client.call_api(
                method, url, header_params=headers, body=body, _request_timeout=timeout
            )
            response.read()
            if not 200 <= response.status <= 299:
                raise ApiException.from_response(http_resp=response, body=None, data=None)
            if decode is not None:
                try:
                    return response.status, decode(response.data or b"")
                except ValueError as e:
                    raise self._not_an_answer(method, path, e) from None
            answer = json.loads(response.data) if response.data else None
            self.redactor.learn(answer)
            return response.status, answer

        # Every write reconcile makes is safe to repeat: node patches carry a resourceVersion
        # precondition (a write whose answer was lost comes back 409 and is re-planned),
        # server-side apply and merge patches of our own labels are idempotent, and a
        # repeated eviction or delete finds the pod gone.
        attempt = 0
        sent_unanswered = False  # a write went out and its answer never came
        while True:
            with self._lock:
                self.requests += 1
            try:
                timeout = self._timeout(method, path)
                limited = timeout is not None and timeout != self.request_timeout
                described = _Request(self.server, method, path, timeout, limited)
                return _call(functools.partial(send, timeout), described, self.redactor)
            except ReconcileError as error:
                if isinstance(error, Conflict) and sent_unanswered:
                    error.after_lost_answer = True
                wait = self.retry.delay(error, attempt, self._remaining())
                if wait is None:
                    raise
                if method != "GET" and isinstance(error, ClusterUnreachable):
                    sent_unanswered = sent_unanswered or not isinstance(error, ConnectFailed)
                with self._lock:
                    self.retries += 1
                time.sleep(wait)
                attempt += 1

    def _remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def _timeout(self, method: str, path: str) -> float | None:
        remaining = self._remaining()
        if remaining is None:
            return self.request_timeout
        if remaining <= 0:
            raise ClusterUnreachable(
                f"the overall --timeout ran out before {method} {path} to {self.server} "
                "was answered: raise --timeout"
            )
        return min(self.request_timeout or remaining, remaining)

    def list_all(
        self, path: str, *, page_size: int = PAGE_SIZE, **query: Any
    ) -> Iterator[dict[str, Any]]:
        """Every item of a collection, one page at a time (ceil(N / page_size) requests)."""
        for page in self._pages(path, page_size=page_size, **query):
            yield from page.get("items") or ()

    def _pages(
        self, path: str, *, page_size: int = PAGE_SIZE, **query: Any
    ) -> Iterator[dict[str, Any]]:
        token: str | None = None
        while True:
            page = self.request("GET", path, query={**query, "limit": page_size, "continue": token})
            yield page
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    def watch(
        self, path: str, *, resource_version: str, timeout_seconds: int = 300, **query: Any
    ) -> Iterator[WatchEvent]:
        """The changes to a collection after `resource_version`, as the server streams them
        (bookmarks on), until it ends the stream after `timeout_seconds`. WatchExpired when
        the server no longer keeps that version (LIST again); ClusterUnreachable when the
        stream breaks."""
        params = {
            **query,
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_seconds,
        }
        method, url, headers, _, _ = self.api_client.param_serialize(
            "GET",
            path,
            query_params=[(k, v) for k, v in params.items() if v is not None],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        described = _Request(self.server, "GET", f"{path}?watch=true", self.request_timeout)
        with self._lock:
            self.requests += 1
        # The read timeout outlasts the server's own end of the stream.
        read = timeout_seconds + (self.request_timeout or 30.0)
        connect = self.request_timeout or 30.0

        def opened() -> Any:
            response = self.api_client.call_api(
                method, url, header_params=headers, _request_timeout=(connect, read)
            )
            if not 200 <= response.status <= 299:
                response.read()
                raise ApiException.from_response(http_resp=response, body=None, data=None)
            return response.response

        try:
            stream = _call(opened, described, self.redactor)
        except ApiError as e:
            if e.status == 410:
                raise WatchExpired(str(e)) from None
            raise
        try:
            yield from _watch_events(_lines(stream), described)
        finally:
            stream.release_conn()

    # --- nodes --------------------------------------------------------------------------

    def list_nodes(
        self, *, label_selector: str | None = None, page_size: int = PAGE_SIZE
    ) -> list[LiveNode]:
        """Every node, one paginated LIST (or what `read_ahead` read of them)."""
        if label_selector is None and self._ahead is not None:
            read = self._ahead.take("nodes")
            if read is not None:
                return read.result()  # type: ignore[no-any-return]
        return self.list_nodes_at(label_selector=label_selector, page_size=page_size)[0]

    def list_nodes_at(
        self,
        *,
        label_selector: str | None = None,
        page_size: int = PAGE_SIZE,
        stop: threading.Event | None = None,
    ) -> tuple[list[LiveNode], str]:
        """Every node, and the resourceVersion of the list: where a watch of them starts.
        Each page is decoded into the fields a plan reads (wire.py), the rest skipped, on
        a thread of its own while the next page is asked for: the API server prepares a
        page while the last one is decoded. At most PAGES_AHEAD pages wait undecoded.
        `stop` set ends it before the next page (ReadStopped)."""
        pages: list[Future[list[LiveNode]]] = []
        token: str | None = None
        version = ""
        with ThreadPoolExecutor(1, thread_name_prefix="reconcile-decode") as decoder:
            while True:
                if stop is not None and stop.is_set():
                    raise ReadStopped("the read of the nodes was stopped")
                query = {"labelSelector": label_selector, "limit": page_size, "continue": token}
                head, data = self.request("GET", "/api/v1/nodes", query=query, decode=_head)
                if len(pages) >= PAGES_AHEAD:
                    pages[-PAGES_AHEAD].result()
                pages.append(decoder.submit(self._page_nodes, data))
                version = head.resource_version or version
                token = head.continue_
                if not token:
                    break
        return [node for page in pages for node in page.result()], version

    def _page_nodes(self, data: bytes) -> list[LiveNode]:
        try:
            return wire.page_nodes(data)
        except ValueError as e:
            raise self._not_an_answer("GET", "/api/v1/nodes", e) from None

    def _not_an_answer(self, method: str, path: str, error: ValueError) -> ReconcileError:
        """What msgspec says of a body not in the shape of the answer."""
        return ReconcileError(
            f"{method} {path} to {self.server}: the answer is not what an API server sends "
            f"({error})"
        )

    def watch_nodes(
        self, resource_version: str, *, timeout_seconds: int = 300
    ) -> Iterator[NodeEvent]:
        """The nodes' changes after `resource_version` (see `watch`)."""
        for event in self.watch(
            "/api/v1/nodes", resource_version=resource_version, timeout_seconds=timeout_seconds
        ):
            node = None if event.type == "BOOKMARK" else wire.node_from_json(event.object)
            yield NodeEvent(event.type, event.resource_version, node)

    def get_node(self, name: str) -> LiveNode:
        return self.request(  # type: ignore[no-any-return]
            "GET", f"/api/v1/nodes/{node_segment(name)}", decode=wire.node
        )

    def patch_node(self, name: str, patch: dict[str, Any]) -> LiveNode:
        """A JSON merge patch (null deletes); a resourceVersion in it is a precondition."""
        return self.request(  # type: ignore[no-any-return]
            "PATCH",
            f"/api/v1/nodes/{node_segment(name)}",
            body=patch,
            content_type=MERGE_PATCH,
            decode=wire.node,
        )

    # --- any object ---------------------------------------------------------------------

    def discovery(self) -> Discovery:
        return Discovery(self)

    def get_object(self, resource: ApiResource, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(self.request("GET", _object_path(resource, namespace, name)))
        except NotFound:
            return None

    def list_objects(
        self, resource: ApiResource, namespace: str = "", *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        path = resource.path(namespace_segment(namespace) if namespace else "")
        return list(self.list_all(path, labelSelector=label_selector))

    def apply_object(
        self,
        resource: ApiResource,
        body: dict[str, Any],
        *,
        dry_run: bool = False,
        force: bool = False,
    ) -> dict[str, Any]:
        """Server-side apply as field manager `reconcile` (conflicts are a 409 unless forced)."""
        return self._apply(resource, body, dry_run=dry_run, force=force)[1]

    def apply_created(self, resource: ApiResource, body: dict[str, Any], *, force: bool) -> bool:
        """Server-side apply of an object planned as new: True when this request created
        it (201), False when it already existed (200: someone else created it first)."""
        status, _ = self._apply(resource, body, dry_run=False, force=force)
        return status == 201

    def _apply(
        self, resource: ApiResource, body: dict[str, Any], *, dry_run: bool, force: bool
    ) -> tuple[int, dict[str, Any]]:
        metadata = body.get("metadata") or {}
        path = _object_path(
            resource, str(metadata.get("namespace") or ""), str(metadata.get("name"))
        )
        query = {
            "fieldManager": FIELD_MANAGER,
            "force": "true" if force else None,
            "dryRun": "All" if dry_run else None,
        }
        status, answer = self.request_with_status(
            "PATCH", path, query=query, body=body, content_type=APPLY_PATCH
        )
        return status, dict(answer)

    # --- pods, budgets, evictions ---------------------------------------------------------

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        """Every pod bound to `node`, all namespaces: one paginated LIST."""
        node_segment(node)  # a name with a comma would add a selector of its own
        return list(self.list_all("/api/v1/pods", fieldSelector=f"spec.nodeName={node}"))

    def pods_on_nodes(self, nodes: Sequence[str]) -> list[dict[str, Any]]:
        """Every pod bound to one of `nodes`, in as few requests as it can: a
        `spec.nodeName` LIST per node while that is fewer requests than a paginated LIST
        of every pod (one `limit=1` request counts them), else that LIST, filtered."""
        if not nodes:
            return []
        probe = self.request("GET", "/api/v1/pods", query={"limit": 1})
        items = probe.get("items") or []
        metadata = probe.get("metadata") or {}
        if not metadata.get("continue"):
            wanted = set(nodes)
            return [p for p in items if (p.get("spec") or {}).get("nodeName") in wanted]
        remaining = metadata.get("remainingItemCount")
        pages = (
            math.ceil((len(items) + int(remaining)) / PAGE_SIZE) if remaining is not None else None
        )
        if pages is not None and len(nodes) < pages:
            return [pod for node in sorted(set(nodes)) for pod in self.pods_on(node)]
        wanted = set(nodes)
        return [
            p
            for p in self.list_all("/api/v1/pods")
            if (p.get("spec") or {}).get("nodeName") in wanted
        ]

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(self.request("GET", _object_path(PODS, namespace, name)))
        except NotFound:
            return None

    def budgets(self, namespace: str) -> list[dict[str, Any]]:
        path = f"/apis/policy/v1/namespaces/{namespace_segment(namespace)}/poddisruptionbudgets"
        return list(self.list_all(path))

    def evict(self, namespace: str, name: str) -> None:
        """policy/v1 Eviction: the API server deletes the pod only if its budgets allow
        (TooManyRequests otherwise). Never a plain delete."""
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        path = _object_path(PODS, namespace, name) + "/eviction"
        self.request("POST", path, body=body)

    # --- leases and events (watch) ----------------------------------------------------------

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get_object(LEASES, namespace, name)

    def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self.request("POST", LEASES.path(namespace_segment(namespace)), body=body))

    def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT: the body's metadata.resourceVersion is a precondition (Conflict when stale)."""
        return dict(self.request("PUT", _object_path(LEASES, namespace, name), body=body))

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        self.request("POST", EVENTS.path(namespace_segment(namespace)), body=body)

    def delete_object(self, resource: ApiResource, namespace: str, name: str) -> bool:
        """Delete; False when it was already gone (what deleting wanted, done by another)."""
        try:
            self.request("DELETE", _object_path(resource, namespace, name))
        except NotFound:
            return False
        return True


class ReadStopped(ReconcileError):
    """A read ahead was stopped before it finished (its caller needs it no more)."""


class _ReadAhead:
    """The reads a plan makes first, each made on a thread of its own at once: every
    node (the long one, asked for first) and the cluster's identity. Each is taken once;
    after that the cluster asks again."""

    def __init__(self, cluster: Cluster) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        reads: dict[str, Callable[[], Any]] = {
            "nodes": lambda: cluster.list_nodes_at(stop=self._stop)[0],
            "identity": cluster._read_identity,
        }
        self._reads: dict[str, Future[Any]] = {name: Future() for name in reads}
        self._threads = [
            threading.Thread(
                target=self._run,
                args=(self._reads[name], name, read),
                name=f"reconcile-read-{name}",
                daemon=True,
            )
            for name, read in reads.items()
        ]
        for thread in self._threads:
            thread.start()

    def _run(self, future: Future[Any], name: str, read: Callable[[], Any]) -> None:
        try:
            if self._stop.is_set():
                raise ReadStopped(f"the read of {name} was stopped")
            future.set_result(read())
        except BaseException as e:  # the taker sees it, as if it had asked itself
            future.set_exception(e)

    def take(self, name: str) -> Future[Any] | None:
        """The read of `name`, once (None when it was taken already)."""
        with self._lock:
            return self._reads.pop(name, None)

    def stop(self, *, wait: bool = True) -> None:
        self._stop.set()
        if wait:
            for thread in self._threads:
                thread.join()


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


def _lines(stream: Any) -> Iterator[bytes]:
    """The newline-delimited JSON documents of a chunked watch answer."""
    pending = b""
    for chunk in stream.stream(amt=None, decode_content=True):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        yield from (line for line in complete if line.strip())
    if pending.strip():
        yield pending


def _watch_events(lines: Iterator[bytes], request: _Request) -> Iterator[WatchEvent]:
    while True:
        try:
            line = next(lines)
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


def node_segment(name: str) -> str:
    """A node name as one URL path segment, after checking it is a valid node name."""
    return _segment(name, "node", NAME_DNS_SUBDOMAIN)


def namespace_segment(namespace: str) -> str:
    return _segment(namespace, "namespace", NAME_DNS_LABEL)


def _segment(name: str, what: str, rule: str) -> str:
    # Names come from argv, desired/ and the cluster's own answers (pods on a node, the
    # inventory): `../namespaces/kube-system` must never become another path.
    problem = apivalidation.name_problem(name, what, rule)
    if problem:
        raise InvalidName(problem)
    return quote(name, safe="")


def _object_path(resource: ApiResource, namespace: str, name: str) -> str:
    """The path of one object. Every kind's names are at least path segments (the rule
    per kind is checked offline, on desired/); namespaces are DNS-1123 labels."""
    segment = _segment(name, resource.kind, NAME_PATH_SEGMENT)
    return resource.path(namespace_segment(namespace) if namespace else "", segment)


PODS: Final = ApiResource("", "v1", "pods", "Pod", namespaced=True)
LEASES: Final = ApiResource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
EVENTS: Final = ApiResource("events.k8s.io", "v1", "events", "Event", namespaced=True)
APPLY_PATCH: Final = "application/apply-patch+yaml"


class Discovery:
    """Which resource serves an apiVersion/kind, one request per group-version, cached."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._lists: dict[str, dict[str, ApiResource] | None] = {}

    def resource_for(self, api_version: str, kind: str) -> ApiResource | None:
        if api_version not in self._lists:
            self._lists[api_version] = self._fetch(api_version)
        return (self._lists[api_version] or {}).get(kind)

    def namespaced_listable(self) -> list[ApiResource]:
        """Every namespaced kind the server lets one list (preferred versions): what a
        namespace can hold."""
        versions = ["v1"]
        for group in self.cluster.request("GET", "/apis").get("groups") or ():
            preferred = (group.get("preferredVersion") or {}).get("groupVersion")
            if preferred:
                versions.append(str(preferred))
        return [
            resource
            for api_version in versions
            for resource, verbs in self._resources(api_version) or ()
            if resource.namespaced and "list" in verbs
        ]

    def _fetch(self, api_version: str) -> dict[str, ApiResource] | None:
        resources = self._resources(api_version)
        if resources is None:
            return None
        return {resource.kind: resource for resource, _ in resources}

    def _resources(self, api_version: str) -> list[tuple[ApiResource, list[str]]] | None:
        """The resources one group-version serves, subresources left out, each with its
        verbs; None when the server does not serve that group-version."""
        group, _, version = api_version.rpartition("/")
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            document = self.cluster.request("GET", path)
        except NotFound:
            return None
        return [
            (
                ApiResource(
                    group, version, entry["name"], entry["kind"], bool(entry.get("namespaced"))
                ),
                list(entry.get("verbs") or ()),
            )
            for entry in document.get("resources") or ()
            if "/" not in entry.get("name", "")
        ]


def _skips_tls_verification(configuration: Configuration) -> bool:
    return str(configuration.host).startswith("https://") and not configuration.verify_ssl


def _silence_insecure_warnings(host: str) -> None:
    """Drop urllib3's InsecureRequestWarning (one per request) for this server's host only:
    the filter matches the warning's text, which names the host."""
    hostname = (urllib3.util.parse_url(host).host or "").strip("[]").rstrip(".")
    warnings.filterwarnings(
        "ignore",
        message=f"Unverified HTTPS request is being made to host '{re.escape(hostname)}'",
        category=urllib3.exceptions.InsecureRequestWarning,
    )


def _config_problem(error: ConfigException) -> str:
    # The loader's messages name files and contexts, never credentials.
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def _broken_config(error: Exception) -> str:
    """Why a kubeconfig could not be read, without quoting it: PyYAML's messages carry a
    snippet of the offending line, which may be the line holding the token."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    if mark is not None:
        problem = getattr(error, "problem", None) or "malformed"
        return f"malformed YAML at line {mark.line + 1}, column {mark.column + 1}: {problem}"
    if isinstance(error, binascii.Error):
        return f"a *-data field is not valid base64 ({error})"
    if isinstance(error, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(error, OSError):
        return f"cannot read it or a file it names ({error.strerror})"
    first = str(error).splitlines()[0] if str(error) else ""
    return f"not a usable kubeconfig ({type(error).__name__}: {first})"


def _load_kubeconfig(paths: list[str], context: str | None, configuration: Configuration) -> None:
    """Merge kubeconfig files as kubectl does: for every cluster, user and context name,
    and for current-context, the first file that sets it wins. (The client's own merge
    takes current-context from the last file.)"""
    merger = KubeConfigMerger(os.pathsep.join(paths))
    if merger.config is None:
        raise ConfigException("Invalid kube-config file. No configuration found.")
    current = next(
        (c for p in merger.paths if (c := (merger.config_files[p] or {}).get("current-context"))),
        None,
    )
    if current:
        merger.config.value["current-context"] = current
    wanted = context or current
    listed = merger.config.value.get("contexts") if isinstance(merger.config.value, dict) else None
    entries = [c.value if isinstance(c, ConfigNode) else c for c in listed or ()]
    names = [str(c.get("name")) for c in entries if isinstance(c, dict)]
    if wanted and wanted not in names:
        what = "context" if context else "current-context"
        raise ConfigError(
            f'{what} "{wanted}" not found in the kubeconfig; '
            f"contexts: {', '.join(names) or '(none)'}"
        )
    loader = KubeConfigLoader(
        config_dict=merger.config, config_base_path=None, active_context=context
    )
    loader.load_and_set(configuration)
