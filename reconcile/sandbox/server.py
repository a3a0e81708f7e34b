"""The HTTP face of the sandbox: routing, query parameters, status codes, v1 Status errors.

Plain HTTP/1.1 with keep-alive on 127.0.0.1 only. Requests must carry the bearer token
written into the sandbox's kubeconfig. Everything the sandbox does not implement is
answered with a clear 404, 405 or 415 naming what is missing, never a silent 200.
"""

from __future__ import annotations

import gzip
import hmac
import json
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any, Final
from urllib.parse import parse_qs, unquote, urlsplit

from reconcile.sandbox import patch, protobuf, resources, tables, watch
from reconcile.sandbox.api import SandboxApi
from reconcile.sandbox.errors import (
    ApiStatus,
    bad_request,
    method_not_allowed,
    not_acceptable,
    not_implemented_path,
    unauthorized,
    unsupported_body,
    unsupported_media_type,
)
from reconcile.sandbox.resources import Resource
from reconcile.sandbox.store import Page
from reconcile.sandbox.watch import Watch
from reconcile.serving import PromptHTTPServer

MAX_BODY: Final = 3 * 1024 * 1024  # the API server's request size limit
GZIP_THRESHOLD: Final = 128 * 1024  # kube-apiserver's: smaller answers go as they are


@dataclass(frozen=True)
class RequestRecord:
    """One request as the sandbox saw it (never its headers: they carry the token)."""

    method: str
    path: str
    query: str
    status: int
    verb: str = ""
    resource: str = ""
    group: str = ""
    subresource: str = ""
    namespace: str = ""
    content_type: str = ""
    # The client's product name from its User-Agent (`reconcile`, `kubectl`, ...).
    agent: str = ""
    # A server-side apply that created its object: authorized as create too, as upstream.
    created: bool = False

    @property
    def dry_run(self) -> bool:
        """Asked with `dryRun=All`: checked by the server, nothing stored."""
        return "All" in parse_qs(self.query).get("dryRun", ())


@dataclass(frozen=True)
class Route:
    resource: Resource
    namespace: str | None
    name: str | None
    subresource: str


class FaultInjector:
    """Decides, per request, whether to answer with a fault instead (see faults.py).

    `before` is asked of every request, dry runs (`dryRun=All`) included, as admission
    sees them; with `writes_only`, only of requests that store. `after_write` is asked
    only after something was stored: a dry run stores nothing."""

    writes_only: bool = False

    def before(
        self, method: str, route: Route | None
    ) -> ApiStatus | str | None:  # pragma: no cover
        return None

    def after_write(self, method: str, route: Route | None) -> str | None:  # pragma: no cover
        return None


def _parse_route(
    path: str, served: tuple[Resource, ...] = resources.RESOURCES
) -> Route | str | None:
    """The resource a path names; a discovery document's name; or None when unknown."""
    by_path = resources.by_path(served)
    parts = [unquote(p) for p in path.strip("/").split("/")]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if not rest:
        return "discovery"
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces" and (group, version, rest[2]) in by_path:
        namespace, rest = rest[1], rest[2:]
    resource = by_path.get((group, version, rest[0]))
    if resource is None or len(rest) > 3:
        return None
    if namespace is not None and not resource.namespaced:
        return None
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else ""
    if subresource and subresource not in resource.subresources:
        return None
    return Route(resource, namespace, name, subresource)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: SandboxHTTPServer
    timeout = 60  # an idle keep-alive connection is closed after this many seconds

    def setup(self) -> None:
        # The TLS handshake runs here, in the connection's own thread, not in accept().
        self.request.settimeout(10)
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if isinstance(self.request, ssl.SSLSocket):
            self.request.do_handshake()
        self.request.settimeout(self.timeout)
        super().setup()

    # Quiet: the sandbox keeps its own request log.
    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        split = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        record: dict[str, Any] = {"method": method, "path": split.path, "query": split.query}
        record["content_type"] = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        record["agent"] = (self.headers.get("User-Agent") or "").split("/", 1)[0]
        # The request is logged before the answer goes out: a client that has its answer
        # finds the request in the log.
        answer: tuple[int, Any, dict[str, str] | None] | None = None
        try:
            body = self._body()
            if not self._authorized():
                raise unauthorized()
            route = _parse_route(split.path, self.server.api.served())
            if isinstance(route, Route):
                record.update(
                    resource=route.resource.plural,
                    group=route.resource.group,
                    subresource=route.subresource,
                    namespace=route.namespace or "",
                    verb=_verb(method, route, query),
                )
            faults = self.server.faults
            dry_run = query.get("dryRun") == "All"
            fault = (
                faults.before(method, route if isinstance(route, Route) else None)
                if faults and not (faults.writes_only and (dry_run or method == "GET"))
                else None
            )
            if isinstance(fault, ApiStatus):
                raise fault
            if fault == "drop":
                record["status"] = 0
                self.close_connection = True
                return
            status, payload = self._dispatch(method, split.path, route, query, body, record)
            record["created"] = method in ("PATCH", "PUT") and status == 201
            if self.server.faults and status < 300 and not dry_run:
                after = self.server.faults.after_write(
                    method, route if isinstance(route, Route) else None
                )
                if after == "drop":
                    record["status"] = 0
                    self.close_connection = True
                    return
            answer = (status, payload, None)
        except ApiStatus as e:
            answer = (e.code, e.status(), e.headers)
        except Exception as e:  # pragma: no cover - the server must answer, whatever happens
            problem = f"Internal error occurred: {type(e).__name__}: {e}"
            answer = (500, ApiStatus(500, "InternalError", problem).status(), None)
        finally:
            record.setdefault("status", answer[0] if answer else 500)
            self.server.record(RequestRecord(**record))
        if isinstance(answer[1], Watch):
            self._stream(answer[1])
            return
        self._send(*answer)

    # --- watch streams -------------------------------------------------------------------

    def _stream(self, stream: Watch) -> None:
        """A watch: a chunked 200 carrying one JSON event per chunk, ended by the watch's
        timeout (the terminating chunk, the connection kept), or cut when a test breaks it
        abruptly or the client is gone."""
        head = [
            f"{self.protocol_version} 200 OK",
            "Cache-Control: no-cache, private",
            "Content-Type: application/json",
            f"Date: {self.date_time_string()}",
            "Transfer-Encoding: chunked",
        ]
        server = self.server
        server.add_watch(stream)
        try:
            self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
            stream.run(self._chunk, self._client_alive)
            if stream.abrupt:
                self.close_connection = True
                self.request.shutdown(socket.SHUT_RDWR)
                return
            self.wfile.write(b"0\r\n\r\n")
            if server.stopping:
                self.close_connection = True
        except OSError:  # the client went away (or the socket timed out writing to it)
            self.close_connection = True
        finally:
            server.remove_watch(stream)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _client_alive(self) -> bool:
        """Whether the client still holds the connection: during a watch it sends nothing,
        so a readable socket means it closed its end."""
        try:
            readable, _, _ = select.select([self.request], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    def _authorized(self) -> bool:
        token = self.server.token
        if not token:
            return True
        # As k8s.io/apiserver's bearertoken authenticator: trimmed, the scheme in any case,
        # the token the second space-separated field.
        parts = (self.headers.get("Authorization") or "").strip().split(" ", 2)
        if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
            return False
        return hmac.compare_digest(parts[1].encode(), token.encode())

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise ApiStatus(
                413, "RequestEntityTooLarge", "Request entity too large: limit is 3145728"
            )
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = (
            payload
            if isinstance(payload, bytes)
            else json.dumps(payload, separators=(",", ":")).encode()
        )
        phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
        encoding = []
        # As kube-apiserver: an answer over 128 KiB is gzip-compressed (level 1) for a
        # client whose Accept-Encoding names gzip (client-go's and reconcile's do).
        if len(data) > GZIP_THRESHOLD and "gzip" in (self.headers.get("Accept-Encoding") or ""):
            data = gzip.compress(data, compresslevel=1)
            encoding = ["Content-Encoding: gzip", "Vary: Accept-Encoding"]
        head = [
            f"{self.protocol_version} {status} {phrase}",
            f"Date: {self.date_time_string()}",
            "Content-Type: application/json",
            *encoding,
            f"Content-Length: {len(data)}",
            "Cache-Control: no-cache, private",
            *(f"{key}: {value}" for key, value in (headers or {}).items()),
        ]
        # Status line, headers and body in one write: as separate small TLS records they
        # would meet Nagle's algorithm and the client's delayed ACK, 40 ms per request.
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)

    # --- dispatch ------------------------------------------------------------------------

    def _dispatch(
        self,
        method: str,
        path: str,
        route: Route | str | None,
        query: dict[str, str],
        body: bytes,
        record: dict[str, Any],
    ) -> tuple[int, Any]:
        if route is None:
            return self._non_resource(method, path)
        if route == "discovery":
            return self._discovery(method, path)
        if not isinstance(route, Route):
            return self._non_resource(method, path)
        if not _accepts_json(self.headers.get("Accept") or ""):
            raise not_acceptable()
        dry_run = _dry_run(query)
        api = self.server.api
        resource, name = route.resource, route.name
        namespace = route.namespace or ""
        if route.subresource == "scale" and name is not None:
            return self._scale(method, route, name, query, body, record)
        if method == "GET":
            as_table = tables.wants_table(self.headers.get("Accept") or "")
            if watch.is_watch(query):
                if name is not None:
                    # Watching one object is watching the collection for its name.
                    selector = query.get("fieldSelector")
                    query = {
                        **query,
                        "fieldSelector": f"metadata.name={name}"
                        + (f",{selector}" if selector else ""),
                    }
                return 200, api.watch(
                    resource, route.namespace, watch.options(query), as_table=as_table
                )
            if name is None:
                page = self._page(route, query)
                if as_table:
                    return 200, tables.table(
                        resource.kind, page.items, page.resource_version, page.continue_token
                    )
                return 200, self._list_body(route, page)
            encoded = api.get(resource, namespace, name)
            if as_table:
                version = json.loads(encoded)["metadata"].get("resourceVersion", "")
                return 200, tables.table(resource.kind, [encoded], version, None)
            return 200, encoded.encode()
        if method == "POST":
            if name is None:
                if route.namespace is None and resource.namespaced:
                    raise method_not_allowed(
                        f"create {resource.plural} in a namespace (POST .../namespaces/NS/{resource.plural})"
                    )
                obj = api.create(
                    resource,
                    namespace,
                    self._object(body, resource.group_version, resource.kind),
                    manager=self._manager(query),
                    dry_run=dry_run,
                )
                return 201, obj
            if route.subresource == "eviction":
                return 201, api.evict(
                    namespace,
                    name,
                    self._object(body, "policy/v1", "Eviction") if body else None,
                    dry_run=dry_run,
                )
            raise method_not_allowed(
                f"POST is not supported on {resource.plural}/{route.subresource or 'NAME'}"
            )
        if name is None:
            raise method_not_allowed(
                f"{method} is not supported on the {resource.plural} collection"
            )
        if method == "PUT":
            if route.subresource not in ("", "status"):
                raise method_not_allowed(
                    f"PUT is not supported on {resource.plural}/{route.subresource}"
                )
            return api.update(
                resource,
                namespace,
                name,
                self._object(body, resource.group_version, resource.kind),
                manager=self._manager(query),
                dry_run=dry_run,
                subresource=route.subresource,
            )
        if method == "PATCH":
            if route.subresource not in ("", "status"):
                raise method_not_allowed(
                    f"PATCH is not supported on {resource.plural}/{route.subresource}"
                )
            content_type = record["content_type"]
            manager = query.get("fieldManager") or None
            if content_type != "application/apply-patch+yaml" and manager is None:
                manager = self._manager(query)
            code, obj = api.patch(
                resource,
                namespace,
                name,
                content_type,
                body,
                manager=manager,
                dry_run=dry_run,
                force=query.get("force") in ("true", "1"),
                subresource=route.subresource,
            )
            return code, obj
        if method == "DELETE":
            if route.subresource:
                raise method_not_allowed(
                    f"DELETE is not supported on {resource.plural}/{route.subresource}"
                )
            deleted = api.delete(
                resource, namespace, name, dry_run=dry_run, grace=_grace(query, body)
            )
            if resource.delete_status:
                return 200, _deleted_status(resource, deleted)
            return 200, deleted
        raise method_not_allowed(f"{method} is not supported")

    def _scale(
        self,
        method: str,
        route: Route,
        name: str,
        query: dict[str, str],
        body: bytes,
        record: dict[str, Any],
    ) -> tuple[int, Any]:
        """The scale subresource: an autoscaling/v1 Scale of the object (`kubectl scale`
        patches it), written back to the object's spec.replicas."""
        api, resource, namespace = self.server.api, route.resource, route.namespace or ""
        current = api.get_scale(resource, namespace, name)
        if method == "GET":
            return 200, current
        if method == "PUT":
            wanted = self._object(body, "autoscaling/v1", "Scale")
        elif method == "PATCH":
            content_type = record["content_type"]
            try:
                document = json.loads(body or b"null")
            except ValueError:
                raise bad_request("the patch is not JSON") from None
            if content_type == "application/json-patch+json":
                wanted = patch.json_patch(current, document)
            elif content_type in (
                "application/merge-patch+json",
                "application/strategic-merge-patch+json",
            ):
                wanted = patch.merge_patch(current, document)
            else:
                raise unsupported_media_type(content_type)
        else:
            raise method_not_allowed(f"{method} is not supported on {resource.plural}/scale")
        return 200, api.set_scale(
            resource,
            namespace,
            name,
            wanted if isinstance(wanted, dict) else {},
            manager=self._manager(query),
            dry_run=_dry_run(query),
        )

    def _page(self, route: Route, query: dict[str, str]) -> Page:
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            raise bad_request(f"invalid limit {query.get('limit')!r}") from None
        return self.server.api.list(
            route.resource,
            route.namespace,
            label_selector=query.get("labelSelector", ""),
            field_selector=query.get("fieldSelector", ""),
            limit=max(0, limit),
            token=query.get("continue") or None,
        )

    @staticmethod
    def _list_body(route: Route, page: Page) -> bytes:
        metadata: dict[str, Any] = {"resourceVersion": page.resource_version}
        if page.continue_token:
            metadata["continue"] = page.continue_token
        if page.remaining is not None:
            metadata["remainingItemCount"] = page.remaining
        head = json.dumps(
            {
                "kind": route.resource.list_kind,
                "apiVersion": route.resource.group_version,
                "metadata": metadata,
            },
            separators=(",", ":"),
        )
        return (head[:-1] + ',"items":[' + ",".join(page.items) + "]}").encode()

    def _object(self, body: bytes, api_version: str, kind: str) -> Any:
        """A POST or PUT body as the object JSON would carry: JSON as it is, protobuf decoded."""
        content_type = (
            (self.headers.get("Content-Type") or "application/json").split(";")[0].strip().lower()
        )
        if content_type == protobuf.MEDIA_TYPE:
            return _from_protobuf(body, api_version, kind)
        if content_type not in ("application/json", "*/*", ""):
            raise unsupported_body()
        try:
            return json.loads(body or b"null")
        except ValueError as e:
            raise bad_request(f"the body of the request was in an unknown format: {e}") from None

    def _manager(self, query: dict[str, str]) -> str:
        """fieldManager, else the User-Agent's product name, as the API server derives it."""
        if query.get("fieldManager"):
            return query["fieldManager"]
        agent = self.headers.get("User-Agent") or "unknown"
        return agent.split("/", 1)[0][:128]

    def _discovery(self, method: str, path: str) -> tuple[int, Any]:
        if method != "GET":
            raise method_not_allowed(f"{method} is not supported on {path}")
        parts = path.strip("/").split("/")
        if parts[0] == "api":
            document = resources.resource_list("", "v1")
        else:
            document = resources.resource_list(parts[1], parts[2], self.server.api.served())
        if document is None:
            raise not_implemented_path(path)
        return 200, document

    def _non_resource(self, method: str, path: str) -> tuple[int, Any]:
        if method != "GET":
            raise not_implemented_path(path)
        clean = "/" + path.strip("/")
        if clean == "/version":
            return 200, resources.VERSION
        if clean == "/api":
            return 200, resources.api_versions()
        if clean == "/apis":
            return 200, resources.api_group_list(self.server.api.served())
        if clean in ("/healthz", "/readyz", "/livez"):
            return 200, b"ok"
        if clean == "/openapi/v3":
            return 200, resources.openapi_v3_root()
        if clean.startswith("/openapi/v3/"):
            document = resources.openapi_v3_group_version(clean.removeprefix("/openapi/v3/"))
            if document is not None:
                return 200, document
        parts = clean.strip("/").split("/")
        if len(parts) == 2 and parts[0] == "apis":
            group = resources.api_group(parts[1], self.server.api.served())
            if group is not None:
                return 200, group
        raise not_implemented_path(path)


def _from_protobuf(body: bytes, api_version: str, kind: str) -> dict[str, Any]:
    """A protobuf body decoded as the API server decodes it into `kind`, its failures worded
    as handlers.transformDecodeError words them; what the sandbox cannot decode is a 415."""
    try:
        unknown = protobuf.envelope(body)
        sent = (unknown.api_version or api_version, unknown.kind or kind)
        if sent != (api_version, kind):
            version = sent[0].rpartition("/")[2]
            group = api_version.rpartition("/")[0]
            internal = group.split(".")[0] if group else "core"
            raise bad_request(
                f'{sent[1]} in version "{version}" cannot be handled as a {kind}: '
                f"converting ({version}.{sent[1]}) to ({internal}.{kind}): unknown conversion"
            )
        return protobuf.decode_object(api_version, kind, unknown.raw)
    except protobuf.ProtobufError as e:
        raise bad_request(
            f"the object provided is unrecognized (must be of type {kind}): {e} ({protobuf.summarize(body)})"
        ) from None
    except protobuf.Unsupported as e:
        raise unsupported_body(
            f"the reconcile sandbox does not decode {e} in {protobuf.MEDIA_TYPE}; send it as application/json"
        ) from None


def _accepts_json(accept: str) -> bool:
    """Whether an Accept header allows the JSON that the sandbox answers in (kubectl sends
    `application/vnd.kubernetes.protobuf,application/json`; no header allows anything)."""
    if not accept.strip():
        return True
    for part in accept.split(","):
        media, *parameters = (p.strip().lower() for p in part.split(";"))
        quality = next((p[2:].strip() for p in parameters if p.startswith("q=")), "1")
        refused = quality.rstrip("0").rstrip(".") in ("", "0")  # q=0, q=0.0, ...
        if media in ("application/json", "application/*", "*/*") and not refused:
            return True
    return False


def _deleted_status(resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
    """What upstream answers a DELETE that removed the object at once: a Success Status."""
    metadata = obj.get("metadata") or {}
    details: dict[str, Any] = {"name": metadata.get("name", "")}
    if resource.group:
        details["group"] = resource.group
    details["kind"] = resource.plural
    details["uid"] = metadata.get("uid", "")
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }


def _dry_run(query: dict[str, str]) -> bool:
    value = query.get("dryRun")
    if value is None or value == "":
        return False
    if value != "All":
        raise bad_request(
            f'Invalid dryRun parameter: unsupported value "{value}", supported values: "All"'
        )
    return True


def _verb(method: str, route: Route, query: dict[str, str]) -> str:
    if method == "GET":
        if watch.is_watch(query):
            return "watch"
        return "list" if route.name is None else "get"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        method, method.lower()
    )


class SandboxHTTPServer(PromptHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, port: int, api: SandboxApi, token: str | None, tls: ssl.SSLContext | None
    ) -> None:
        self.api = api
        self.token = token
        self.faults: FaultInjector | None = None
        self.requests: list[RequestRecord] = []
        self._log_lock = threading.Lock()
        self.observers: list[Callable[[RequestRecord], None]] = []
        # Clients (by User-Agent product) served as any other but left out of `requests`
        # and unseen by observers, as an audit policy leaves out the cluster's own
        # components: a test asks what the client under test sent.
        self.unrecorded_agents: frozenset[str] = frozenset()
        self._watches: set[Watch] = set()
        self._watch_lock = threading.Lock()
        self.stopping = False
        super().__init__(("127.0.0.1", port), Handler)
        if tls is not None:
            self.socket = tls.wrap_socket(
                self.socket, server_side=True, do_handshake_on_connect=False
            )

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up or fails the handshake is not the server's problem to report.
        return

    def add_watch(self, stream: Watch) -> None:
        with self._watch_lock:
            self._watches.add(stream)
            if self.stopping:
                stream.close()

    def remove_watch(self, stream: Watch) -> None:
        with self._watch_lock:
            self._watches.discard(stream)

    @property
    def watches(self) -> list[Watch]:
        with self._watch_lock:
            return list(self._watches)

    def close_watches(self, *, abrupt: bool = False) -> int:
        """End every open watch stream; how many there were."""
        streams = self.watches
        for stream in streams:
            stream.close(abrupt=abrupt)
        return len(streams)

    def stop_watches(self) -> None:
        """The server is stopping: end every stream, and every one that starts from now."""
        with self._watch_lock:
            self.stopping = True
        self.close_watches()

    def record(self, entry: RequestRecord) -> None:
        if entry.agent in self.unrecorded_agents:
            return
        with self._log_lock:
            self.requests.append(entry)
        for observer in self.observers:
            observer(entry)


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def _grace(query: dict[str, str], body: bytes) -> int | None:
    """DeleteOptions.gracePeriodSeconds, from the query or the body (None: the default)."""
    if "gracePeriodSeconds" in query:
        try:
            return int(query["gracePeriodSeconds"])
        except ValueError:
            raise bad_request(
                f"invalid gracePeriodSeconds: {query['gracePeriodSeconds']!r}"
            ) from None
    if body:
        try:
            options = json.loads(body)
        except ValueError:
            return None
        if isinstance(options, dict) and isinstance(options.get("gracePeriodSeconds"), int):
            return int(options["gracePeriodSeconds"])
    return None
