"""A watch's metrics and the HTTP endpoints that serve them: /metrics (the Prometheus
exposition format), /healthz and /readyz.

`prometheus_client` is imported here alone, and only once a watch makes its metrics: no
other command pays for it.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any, Final

from reconcile.app.session import log
from reconcile.diagnostics import ReconcileError
from reconcile.serving import PromptHTTPServer

# Where a watch serves by default. Not 9090 (Prometheus itself) nor anything else of
# Prometheus's default port allocations wiki, whose 9091-9999 are all taken by its
# components and exporters (OpenTelemetry's Prometheus exporter is 9464); not a
# Kubernetes component's (10248-10260) nor the OpenTelemetry Collector's (8888, 8889).
DEFAULT_METRICS_ADDRESS: Final = "127.0.0.1:8397"

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry


class WatchMetrics:
    """The Prometheus metrics of one watch (a registry of its own: no process globals),
    and whether it is ready (its first full plan made)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry: CollectorRegistry = CollectorRegistry()
        r = self.registry
        self.drift = Gauge(
            "reconcile_drift", "Facts that differ from desired/ now.", ["kind"], registry=r
        )
        self.corrections = Counter(
            "reconcile_corrections", "Facts and objects corrected.", registry=r
        )
        self.apply_errors = Counter(
            "reconcile_apply_errors", "Corrections or plans that failed.", registry=r
        )
        self.desired_valid = Gauge(
            "reconcile_desired_valid", "1 when the newest desired/ tree is valid.", registry=r
        )
        self.last_sync = Gauge(
            "reconcile_last_sync_timestamp_seconds",
            "When the plan was last brought up to date.",
            registry=r,
        )
        self.watch_restarts = Counter(
            "reconcile_watch_restarts",
            "Watches that broke or expired (nodes listed again).",
            registry=r,
        )
        self.flaps = Counter(
            "reconcile_flaps", "Facts another writer kept undoing.", ["key"], registry=r
        )
        self.leader = Gauge(
            "reconcile_leader", "1 while this replica may write (holds the lease).", registry=r
        )
        self.ready = threading.Event()

    def exposition(self) -> tuple[bytes, str]:
        """The metrics in the text format Prometheus scrapes, and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def bind_address(address: str) -> tuple[str, int]:
    """The (host, port) a HOST:PORT address names, brackets stripped from the host (`[]`:
    every interface). Raises ReconcileError when it is not HOST:PORT."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ReconcileError(
            f"--metrics-address {address!r} is not HOST:PORT (e.g. 127.0.0.1:8397, :8397)"
        )
    return host.strip("[]") or "0.0.0.0", int(port)


class _Endpoints(BaseHTTPRequestHandler):
    """/metrics, /healthz, /readyz."""

    metrics: WatchMetrics

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._answer(200, *self.metrics.exposition())
        elif path == "/healthz":
            self._answer(200, b"ok\n")
        elif path == "/readyz":
            ready = self.metrics.ready.is_set()
            self._answer(200 if ready else 503, b"ok\n" if ready else b"not ready\n")
        else:
            self._answer(404, b"not found\n")

    def _answer(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve(address: str, metrics: WatchMetrics) -> PromptHTTPServer:
    """`metrics`' endpoints served on HOST:PORT `address` in a thread of their own (port 0:
    any free port, the one bound noted); the server, for its caller to shut down. Raises
    ReconcileError when the address is not HOST:PORT or cannot be bound."""
    bound = bind_address(address)
    handler = type("Endpoints", (_Endpoints,), {"metrics": metrics})
    try:
        server = PromptHTTPServer(bound, handler)
    except OSError as e:
        raise ReconcileError(f"cannot serve metrics on {address}: {e.strerror or e}") from None
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="reconcile-metrics", daemon=True).start()
    bound_host, bound_port = server.server_address[:2]
    log.info("metrics, /healthz and /readyz on http://%s:%s", bound_host, bound_port)
    return server
