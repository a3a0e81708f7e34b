"""An embedded Kubernetes-compatible API server on 127.0.0.1, for the quickstart and tests.

    with Sandbox(seed_objects) as cluster:
        cluster.write_kubeconfig(path)   # for reconcile, kubectl, the official client
        ...
        cluster.requests                 # what was asked of it
        cluster.close_watches()          # break every watch stream (a client reconnects)
        cluster.compact()                # every older resourceVersion is now 410 Expired

It is faithful where reconcile depends on behaviour (label validation with the real 422
body, the three patch types and server-side apply, resourceVersion conflicts, paginated
lists with selectors, dry-run, the Eviction API with PodDisruptionBudget accounting,
cordon, watches with bookmarks and 410 Expired, Events and Leases) and refuses, with a
clear 4xx, what it does not model. See docs/sandbox.md.
"""

from __future__ import annotations

import copy
import json
import secrets
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from reconcile.files import write_private
from reconcile.sandbox import tls
from reconcile.sandbox.api import NAMESPACES, SandboxApi
from reconcile.sandbox.errors import ApiStatus
from reconcile.sandbox.resources import RESOURCES, Resource, resource_for
from reconcile.sandbox.server import FaultInjector, RequestRecord, SandboxHTTPServer
from reconcile.sandbox.store import DEFAULT_HISTORY, Store

__all__ = ["FaultInjector", "RequestRecord", "Sandbox", "SeedError"]

# Created first when seeding, so that what lives in them can follow.
# CRDs before all: the custom resources of a seed need them served.
_SEED_ORDER = {
    "CustomResourceDefinition": -1,
    "Namespace": 0,
    "Node": 1,
    "Deployment": 2,
    "ReplicaSet": 3,
    "StatefulSet": 3,
}
# Every cluster has these from its first moment.
SYSTEM_NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system")


class SeedError(ValueError):
    """A seed object the sandbox cannot hold; the message names it and says why."""


class Sandbox:
    def __init__(
        self,
        objects: Iterable[dict[str, Any]] = (),
        *,
        port: int = 0,
        token: str | None = None,
        require_token: bool = True,
        faults: FaultInjector | None = None,
        watch_history: int = DEFAULT_HISTORY,
        bookmark_interval: float = 60.0,
        unrecorded_agents: Iterable[str] = (),
    ) -> None:
        """`watch_history`: how many writes a watch can resume across (older
        resourceVersions are 410 Expired); `bookmark_interval`: seconds between the
        BOOKMARKs of a watch that allows them (upstream: about a minute);
        `unrecorded_agents`: clients (the product of their User-Agent) whose requests are
        served but kept out of `requests` and from the server's observers."""
        self._faults = faults
        self._unrecorded_agents = frozenset(unrecorded_agents)
        self.store = Store(history=watch_history)
        self.api = SandboxApi(self.store)
        self.api.bookmark_interval = bookmark_interval
        self.token = (token or secrets.token_urlsafe(24)) if require_token else None
        self._port = port
        self.certificates = tls.generate()
        self._server: SandboxHTTPServer | None = None
        self._thread: threading.Thread | None = None
        for name in SYSTEM_NAMESPACES:
            self.api.create(
                NAMESPACES,
                "",
                {"metadata": {"name": name}},
                manager="kube-apiserver",
                dry_run=False,
            )
        self.seed(objects)

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> Sandbox:
        self._server = SandboxHTTPServer(
            self._port, self.api, self.token, self.certificates.server_context()
        )
        self._server.faults = self._faults
        self._server.unrecorded_agents = self._unrecorded_agents
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="reconcile-sandbox",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            # Open watch streams end first (cleanly): nothing hangs on a stopped server.
            self._server.stop_watches()
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def server(self) -> SandboxHTTPServer:
        if self._server is None:
            raise RuntimeError("the sandbox is not running")
        return self._server

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def requests(self) -> list[RequestRecord]:
        return list(self.server.requests)

    def clear_requests(self) -> None:
        self.server.requests.clear()

    # --- watches -------------------------------------------------------------------------

    @property
    def bookmark_interval(self) -> float:
        return self.api.bookmark_interval

    @bookmark_interval.setter
    def bookmark_interval(self, seconds: float) -> None:
        """For watches started from now on."""
        self.api.bookmark_interval = seconds

    @property
    def open_watches(self) -> int:
        """How many watch streams are open right now."""
        return len(self.server.watches)

    def close_watches(self, *, abrupt: bool = False) -> int:
        """End every open watch stream, as an API server restarting or a load balancer
        timing out does; how many there were. Cleanly (the terminating chunk: the
        client's stream ends) or abruptly (the connection cut mid-stream: the client's
        read fails). Either way its client must watch again from its last resourceVersion."""
        return self.server.close_watches(abrupt=abrupt)

    def compact(self) -> None:
        """Forget the write history, as etcd compaction does: a watch from any
        resourceVersion older than the current one is answered 410 Expired (an ERROR
        event), and the client must LIST again."""
        self.store.compact()

    def set_faults(self, faults: FaultInjector | None) -> None:
        self._faults = faults
        if self._server is not None:
            self._server.faults = faults

    # --- kubeconfig ----------------------------------------------------------------------

    def kubeconfig(self, name: str = "reconcile-sandbox") -> dict[str, Any]:
        user: dict[str, Any] = {"token": self.token} if self.token else {}
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": name,
                    "cluster": {
                        "server": self.url,
                        "certificate-authority-data": self.certificates.ca_data,
                    },
                }
            ],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
            "current-context": name,
            "preferences": {},
        }

    def write_kubeconfig(self, path: Path, name: str = "reconcile-sandbox") -> Path:
        """A kubeconfig whose cluster, user and context are all called `name`: created
        0600 (it holds the token), never through a link or into someone else's file."""
        # JSON is YAML: kubectl and the client read it as a kubeconfig.
        write_private(path, json.dumps(self.kubeconfig(name), indent=2) + "\n")
        return path

    # --- state -----------------------------------------------------------------------------

    def seed(self, objects: Iterable[dict[str, Any]]) -> None:
        """Store objects as a cluster would hold them, status included (no admission of status)."""
        ordered = sorted(objects, key=lambda o: _SEED_ORDER.get(str(o.get("kind")), 9))
        for obj in ordered:
            self.put(obj)

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create one object, keeping its status; a missing namespace is created first."""
        resource = self._resource(obj)
        metadata = obj.get("metadata") or {}
        if resource is NAMESPACES and metadata.get("name") in SYSTEM_NAMESPACES:
            found = self.store.get(NAMESPACES.key, ("", str(metadata["name"])))
            if found is not None:
                return found  # exported from a real cluster: it is here already
        namespace = str(metadata.get("namespace") or ("default" if resource.namespaced else ""))
        with self.store.lock:
            if resource.namespaced and self.store.peek(NAMESPACES.key, ("", namespace)) is None:
                self.api.create(
                    NAMESPACES,
                    "",
                    {"metadata": {"name": namespace}},
                    manager="sandbox-seed",
                    dry_run=False,
                )
            body = copy.deepcopy(obj)
            try:
                created = self.api.create(
                    resource,
                    namespace,
                    body,
                    manager="sandbox-seed",
                    dry_run=False,
                    keep_status=True,
                    keep_managed_fields=True,
                )
            except ApiStatus as e:
                raise SeedError(
                    f"{obj.get('kind')} {metadata.get('name')!r}: {e.message}"
                ) from None
        return created

    def get(self, resource: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        """A stored object by plural (`nodes`, `deployments.apps`), for tests."""
        found = self._by_plural(resource)
        return self.store.get(found.key, (namespace, name))

    def objects(self, resource: str) -> list[dict[str, Any]]:
        found = self._by_plural(resource)
        with self.store.lock:
            return [copy.deepcopy(o) for o in self.store.values(found.key)]

    @staticmethod
    def _by_plural(plural: str) -> Resource:
        for resource in RESOURCES:
            if plural in (resource.plural, resource.qualified):
                return resource
        raise KeyError(plural)

    def _resource(self, obj: dict[str, Any]) -> Resource:
        """The built-in resource of `obj`, or the custom one an Established CRD serves."""
        api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
        resource = resource_for(api_version, kind) or resource_for(
            api_version, kind, self.api.served()
        )
        if resource is None:
            raise SeedError(
                f"{kind or 'an object without kind'} ({api_version or 'no apiVersion'}) is not served by the sandbox"
            )
        return resource
