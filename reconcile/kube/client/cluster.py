"""A connection to one API server: generic resources, and nodes by the fast path.

Reads are paginated LISTs; writes are PATCHes that carry a resourceVersion precondition.
Responses are read as raw JSON rather than the client's generated models: at fleet
scale (thousands of nodes) building pydantic models for every node costs more than the
request itself, and reconcile needs only a handful of fields. Nodes are decoded by
wire.py into what a plan reads.
"""

from __future__ import annotations

import functools
import http
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final, TypeVar

from kubernetes.client.api_client import ApiClient
from kubernetes.client.exceptions import ApiException

from reconcile.diagnostics import (
    ApiError,
    ClusterUnreachable,
    Conflict,
    NotFound,
    ReconcileError,
    without_userinfo,
)
from reconcile.kube import sensitive, wire
from reconcile.kube.client.discovery import Discovery
from reconcile.kube.client.kubeconfig import connected, skips_tls_verification
from reconcile.kube.client.paths import (
    EVENTS,
    LEASES,
    PODS,
    collection_path,
    namespace_segment,
    node_segment,
    object_path,
)
from reconcile.kube.client.readahead import ReadAhead, ReadStopped
from reconcile.kube.client.transport import ConnectFailed, Request, RetryPolicy, call
from reconcile.kube.client.watching import WatchEvent, WatchExpired, events, lines
from reconcile.kube.objects import FIELD_MANAGER, ApiResource, LiveNode, NodeEvent

PAGE_SIZE: Final = 500
PAGES_AHEAD: Final = 4  # pages of a LIST fetched and not yet decoded, at most
MERGE_PATCH: Final = "application/merge-patch+json"
APPLY_PATCH: Final = "application/apply-patch+yaml"

T = TypeVar("T")

# -v: every request traced as kubectl -v=6 traces it (round_trippers.go), one line each:
# `GET https://host:6443/api/v1/nodes?limit=500 200 OK in 3 milliseconds`. The URL only:
# never a header (the bearer token is one) nor a body (a Secret's data is one).
trace = logging.getLogger("reconcile.requests")


def _traced(method: str, url: str, started: float, status: int | None, reason: str) -> None:
    if not trace.isEnabledFor(logging.DEBUG):
        return
    if status is None:
        answer = "(no answer)"
    else:
        try:
            phrase = reason or http.HTTPStatus(status).phrase
        except ValueError:
            phrase = reason
        answer = f"{status} {phrase}".rstrip()
    elapsed = round((time.monotonic() - started) * 1000)
    trace.debug(
        "%s %s %s in %d milliseconds",
        method,
        without_userinfo(url),
        answer,
        elapsed,
        extra={"plain": True},
    )


def _head(data: bytes) -> tuple[wire.PageHead, bytes]:
    return wire.page_head(data), data


class Cluster:
    """A connection to one API server, built from a kubeconfig or in-cluster credentials.

    Requests go through the official client's ApiClient (configuration, credentials and
    their refresh, TLS, connection pool) with paths built here: the generated typed API
    classes would add their import time to every start, for no gain.
    """

    def __init__(
        self,
        api_client: ApiClient,
        *,
        request_timeout: float | None = None,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
        whose: str = "",
    ) -> None:
        self.api_client = api_client
        self.whose = whose  # whose credentials: `user "alice" (context "lab")`
        self.request_timeout = request_timeout
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.retry = retry or RetryPolicy()
        self.retries = 0  # transient failures tried again, for reports
        self.requests = 0
        self._lock = threading.Lock()
        # Every Secret value sent or received, to strike out of the server's messages.
        self.redactor = sensitive.Redactor()
        self._ahead: ReadAhead | None = None
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
        api_client, whose = connected(kubeconfig, context, in_cluster=in_cluster)
        return cls(api_client, request_timeout=request_timeout, timeout=timeout, whose=whose)

    @property
    def tls_verified(self) -> bool:
        """False when the kubeconfig says insecure-skip-tls-verify for an https server:
        the caller says so once (urllib3's per-request warning is silenced for it)."""
        return not skips_tls_verification(self.api_client.configuration)

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
        self._ahead = ReadAhead(
            {
                "nodes": lambda stop: self.list_nodes_at(stop=stop)[0],
                "identity": lambda stop: self._read_identity(),
            }
        )

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
            started = time.monotonic()
            try:
                response = self.api_client.call_api(
                    method, url, header_params=headers, body=body, _request_timeout=timeout
                )
                response.read()
            except Exception:
                _traced(method, url, started, None, "")
                raise
            _traced(method, url, started, response.status, str(response.reason or ""))
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
                described = Request(self.server, method, path, timeout, limited, self.whose)
                return call(functools.partial(send, timeout), described, self.redactor)
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
        described = Request(
            self.server, "GET", f"{path}?watch=true", self.request_timeout, whose=self.whose
        )
        with self._lock:
            self.requests += 1
        # The read timeout outlasts the server's own end of the stream.
        read = timeout_seconds + (self.request_timeout or 30.0)
        connect = self.request_timeout or 30.0

        def opened() -> Any:
            started = time.monotonic()
            try:
                response = self.api_client.call_api(
                    method, url, header_params=headers, _request_timeout=(connect, read)
                )
            except Exception:
                _traced(method, url, started, None, "")
                raise
            _traced(method, url, started, response.status, str(response.reason or ""))
            if not 200 <= response.status <= 299:
                response.read()
                raise ApiException.from_response(http_resp=response, body=None, data=None)
            return response.response

        try:
            stream = call(opened, described, self.redactor)
        except ApiError as e:
            if e.status == 410:
                raise WatchExpired(str(e)) from None
            raise
        try:
            yield from events(lines(stream), described)
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
        query = {"labelSelector": label_selector}
        pages, version = self._decoded_pages(
            "/api/v1/nodes", query, wire.page_nodes, page_size=page_size, stop=stop
        )
        return [node for page in pages for node in page], version

    def _decoded_pages(
        self,
        path: str,
        query: dict[str, Any],
        decode: Callable[[bytes], list[T]],
        *,
        page_size: int = PAGE_SIZE,
        stop: threading.Event | None = None,
    ) -> tuple[list[list[T]], str]:
        """Every page of a LIST by `decode`, each on a thread of its own while the next
        page is asked for (only its list metadata read first: wire.page_head), and the
        list's resourceVersion. At most PAGES_AHEAD pages wait undecoded. `stop` set ends
        it before the next page (ReadStopped)."""

        def decoded(data: bytes) -> list[T]:
            try:
                return decode(data)
            except ValueError as e:
                raise self._not_an_answer("GET", path, e) from None

        pages: list[Future[list[T]]] = []
        token: str | None = None
        version = ""
        with ThreadPoolExecutor(1, thread_name_prefix="reconcile-decode") as decoder:
            while True:
                if stop is not None and stop.is_set():
                    raise ReadStopped(f"the read of {path} was stopped")
                paged = {**query, "limit": page_size, "continue": token}
                head, data = self.request("GET", path, query=paged, decode=_head)
                if len(pages) >= PAGES_AHEAD:
                    pages[-PAGES_AHEAD].result()
                pages.append(decoder.submit(decoded, data))
                version = head.resource_version or version
                token = head.continue_
                if not token:
                    break
        return [page.result() for page in pages], version

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

    def patch_node(self, name: str, patch: dict[str, Any], *, dry_run: bool = False) -> LiveNode:
        """A JSON merge patch (null deletes); a resourceVersion in it is a precondition.
        With `dry_run` (`dryRun=All`) the server checks it all and stores nothing."""
        return self.request(  # type: ignore[no-any-return]
            "PATCH",
            f"/api/v1/nodes/{node_segment(name)}",
            query={"dryRun": "All" if dry_run else None},
            body=patch,
            content_type=MERGE_PATCH,
            decode=wire.node,
        )

    # --- any object ---------------------------------------------------------------------

    def discovery(self) -> Discovery:
        return Discovery(self)

    def get_object(self, resource: ApiResource, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(self.request("GET", object_path(resource, namespace, name)))
        except NotFound:
            return None

    def list_objects(
        self, resource: ApiResource, namespace: str = "", *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        path = collection_path(resource, namespace)
        return list(self.list_all(path, labelSelector=label_selector))

    def list_specs(
        self, resource: ApiResource, namespace: str = "", *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """The objects of `resource` with only their spec and the metadata naming and
        selecting them (wire.page_specs: managedFields and status skipped unbuilt), each
        page decoded while the next is asked for. Never a Secret's kind: what it reads
        is not learnt for redaction."""
        if sensitive.is_sensitive(resource.api_version, resource.kind):
            raise ValueError(f"{resource.kind} is read whole, never by list_specs")
        path = collection_path(resource, namespace)
        query = {"labelSelector": label_selector}
        pages = self._decoded_pages(path, query, wire.page_specs)[0]
        return [obj for page in pages for obj in page]

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
        path = object_path(
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
            return dict(self.request("GET", object_path(PODS, namespace, name)))
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
        path = object_path(PODS, namespace, name) + "/eviction"
        self.request("POST", path, body=body)

    # --- leases and events (watch) ----------------------------------------------------------

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get_object(LEASES, namespace, name)

    def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self.request("POST", LEASES.path(namespace_segment(namespace)), body=body))

    def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT: the body's metadata.resourceVersion is a precondition (Conflict when stale)."""
        return dict(self.request("PUT", object_path(LEASES, namespace, name), body=body))

    def list_leases(
        self, namespace: str, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        return self.list_objects(LEASES, namespace, label_selector=label_selector)

    def delete_lease(self, namespace: str, name: str) -> bool:
        return self.delete_object(LEASES, namespace, name)

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        self.request("POST", EVENTS.path(namespace_segment(namespace)), body=body)

    def create_object(self, resource: ApiResource, body: dict[str, Any]) -> dict[str, Any]:
        """The object as created (POST, field manager `reconcile`): a `generateName`
        gets its name from the server."""
        namespace = str((body.get("metadata") or {}).get("namespace") or "")
        path = collection_path(resource, namespace)
        return dict(self.request("POST", path, query={"fieldManager": FIELD_MANAGER}, body=body))

    def delete_object(
        self, resource: ApiResource, namespace: str, name: str, *, dry_run: bool = False
    ) -> bool:
        """Delete; False when it was already gone (what deleting wanted, done by another).
        With `dry_run` (`dryRun=All`) the server checks it and deletes nothing."""
        try:
            self.request(
                "DELETE",
                object_path(resource, namespace, name),
                query={"dryRun": "All" if dry_run else None},
            )
        except NotFound:
            return False
        return True
