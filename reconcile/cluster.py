"""The only module that talks to the API server (and the only one importing `kubernetes`).

Reads are paginated LISTs; writes are PATCHes that carry a resourceVersion precondition.
Responses are read as raw JSON rather than the client's generated models: at fleet
scale (thousands of nodes) building pydantic models for every node costs more than the
request itself, and reconcile needs only a handful of fields.

API errors are translated here, once, into reconcile's own exceptions, keeping the
server's Status reason and message and never a header, token or kubeconfig contents.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from reconcile.diagnostics import (
    ApiError,
    ClusterUnreachable,
    ConfigError,
    Conflict,
    Invalid,
    NotFound,
    TooManyRequests,
)
from reconcile.models import LiveNode

PAGE_SIZE: Final = 500
MERGE_PATCH: Final = "application/merge-patch+json"
USER_AGENT: Final = "reconcile/0.1"

T = TypeVar("T")

_ERRORS: Final[dict[int, type[ApiError]]] = {
    404: NotFound,
    409: Conflict,
    422: Invalid,
    429: TooManyRequests,
}


def translate(error: ApiException) -> ApiError:
    """Our exception for an API failure: status, reason, message and causes only."""
    status = int(error.status or 0)
    body: dict[str, Any] = {}
    if error.body:
        try:
            parsed = json.loads(error.body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            body = parsed
    reason = str(body.get("reason") or error.reason or "")
    message = str(body.get("message") or "")
    details = body.get("details") or {}
    causes = tuple(c for c in details.get("causes") or () if isinstance(c, dict))
    retry_after = None
    headers = error.headers or {}
    raw_retry = headers.get("Retry-After") if hasattr(headers, "get") else None
    if raw_retry:
        try:
            retry_after = float(raw_retry)
        except ValueError:
            retry_after = None
    return _ERRORS.get(status, ApiError)(status, reason, message, causes, retry_after)


def _call(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except ApiException as e:
        if not e.status:
            raise ClusterUnreachable(f"API request failed: {e.reason}") from None
        raise translate(e) from None
    except urllib3.exceptions.HTTPError as e:
        raise ClusterUnreachable(_describe_transport_error(e)) from None


def _describe_transport_error(error: urllib3.exceptions.HTTPError) -> str:
    reason = getattr(error, "reason", None) or error
    if isinstance(reason, urllib3.exceptions.NewConnectionError):
        return "cannot connect to the API server (connection refused or host unreachable)"
    if isinstance(reason, urllib3.exceptions.TimeoutError):
        return "the API server did not answer in time"
    return f"the API server connection failed: {type(reason).__name__}"


def node_from_json(item: dict[str, Any]) -> LiveNode:
    metadata = item.get("metadata") or {}
    spec = item.get("spec") or {}
    return LiveNode(
        name=metadata["name"],
        resource_version=str(metadata.get("resourceVersion", "")),
        labels=dict(metadata.get("labels") or {}),
        annotations=dict(metadata.get("annotations") or {}),
        unschedulable=bool(spec.get("unschedulable", False)),
        taints=tuple(spec.get("taints") or ()),
    )


class Cluster:
    """A connection to one API server, built from a kubeconfig or in-cluster credentials."""

    def __init__(
        self, api_client: client.ApiClient, *, request_timeout: float | None = None
    ) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.request_timeout = request_timeout

    @classmethod
    def connect(
        cls,
        kubeconfig: str | None = None,
        context: str | None = None,
        *,
        request_timeout: float | None = 30.0,
    ) -> Cluster:
        """Credentials as kubectl finds them: --kubeconfig, $KUBECONFIG (several files
        joined by ':'), ~/.kube/config, and in a pod the service account."""
        configuration = client.Configuration()
        path = (
            kubeconfig or os.environ.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser())
        )
        has_file = any(Path(p).exists() for p in path.split(os.pathsep) if p)
        try:
            if has_file:
                config.load_kube_config(
                    config_file=path,
                    context=context,
                    client_configuration=configuration,
                    persist_config=False,
                )
            elif kubeconfig:
                raise ConfigError(f"kubeconfig not found: {kubeconfig}")
            elif os.environ.get("KUBERNETES_SERVICE_HOST"):
                config.load_incluster_config(client_configuration=configuration)
            else:
                raise ConfigError(
                    "no kubeconfig found: pass --kubeconfig, set KUBECONFIG, or create "
                    "~/.kube/config (or run `reconcile sandbox` for a local cluster)"
                )
        except ConfigException as e:
            raise ConfigError(f"cannot use kubeconfig: {_config_problem(e)}") from None
        configuration.retries = False  # retries are decided by reconcile, not urllib3
        api_client = client.ApiClient(configuration)
        api_client.user_agent = USER_AGENT
        return cls(api_client, request_timeout=request_timeout)

    @property
    def server(self) -> str:
        return str(self.api_client.configuration.host)

    def close(self) -> None:
        self.api_client.close()

    # --- raw requests -------------------------------------------------------------------

    def _json(self, response: Any) -> Any:
        return json.loads(response.data)

    def _paged(self, fetch: Callable[[str | None], Any]) -> Iterator[dict[str, Any]]:
        token: str | None = None
        while True:
            page = self._json(_call(functools.partial(fetch, token)))
            yield from page.get("items") or ()
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    # --- nodes --------------------------------------------------------------------------

    def list_nodes(
        self, *, label_selector: str | None = None, page_size: int = PAGE_SIZE
    ) -> list[LiveNode]:
        """Every node, one paginated LIST (ceil(N / page_size) requests)."""

        def fetch(token: str | None) -> Any:
            return self.core.list_node(
                limit=page_size,
                _continue=token,
                label_selector=label_selector,
                _preload_content=False,
                _request_timeout=self.request_timeout,
            )

        return [node_from_json(item) for item in self._paged(fetch)]

    def get_node(self, name: str) -> LiveNode:
        response = _call(
            lambda: self.core.read_node(
                name, _preload_content=False, _request_timeout=self.request_timeout
            )
        )
        return node_from_json(self._json(response))

    def patch_node(self, name: str, patch: dict[str, Any]) -> LiveNode:
        """A JSON merge patch (null deletes); a resourceVersion in it is a precondition."""
        response = _call(
            lambda: self.core.patch_node(
                name,
                patch,
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=self.request_timeout,
            )
        )
        return node_from_json(self._json(response))


def _config_problem(error: ConfigException) -> str:
    # The loader's messages name files and contexts, never credentials.
    return str(error).splitlines()[0] if str(error) else type(error).__name__
