"""watch: the plan kept current, drift reported as it appears, corrected on request."""

from __future__ import annotations

import json
import signal
import socket
import sys
import threading
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

import click

from reconcile import diagnostics as diag
from reconcile.app.session import Session
from reconcile.app.targets import load_tree
from reconcile.cli.app import common_options, duration, main, outputs, parallel_option, stdout
from reconcile.cli.output import EXIT_OK, Format, log, node_line, object_lines
from reconcile.diagnostics import ReconcileError
from reconcile.serving import PromptHTTPServer

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from reconcile.desired.models import DesiredState
    from reconcile.engine.diff import NodeChange
    from reconcile.engine.plan import ObjectPlan


# The shortest intervals watch takes: below them it would poll as fast as it can (a
# resync of 0 s re-planned without a pause: thousands of requests a second).
MINIMUM_INTERVALS = {"--resync": 10.0, "--desired-interval": 1.0, "--watch-timeout": 10.0}


def _fleet_refused(session: Session) -> str:
    return (
        f"{session.desired}/clusters.yaml declares a fleet: watch follows one cluster; run one "
        "watch per cluster, each in its own cluster (the overlay's tree)"
    )


class _Tree:
    """desired/ on disk, looked at without parsing until something changed."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def fingerprint(self) -> object:
        from reconcile.files import fingerprint

        return fingerprint(self.session.desired)

    def load(self) -> tuple[DesiredState, list[diag.Diagnostic]]:
        """The one tree of desired/ and its problems; a fleet is one (watch follows one
        cluster), so a tree that becomes a fleet is never taken for an empty one."""
        loaded = load_tree(self.session, coverage_check=False)
        if loaded.fleet is None:
            return loaded.state, loaded.problems
        return loaded.state, [*loaded.problems, diag.error(_fleet_refused(self.session))]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Metrics:
    """The Prometheus metrics of one watch (a registry of its own: no process globals)."""

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


class _Reporter:
    """Prints each line as it happens (RFC 3339 timestamp first) and keeps the metrics."""

    def __init__(self, fmt: Format, out: TextIO, metrics: _Metrics) -> None:
        self.fmt = fmt
        self.out = out
        self.metrics = metrics
        self.lock = threading.Lock()

    def _emit(self, lines: Sequence[str], records: Sequence[dict[str, Any]]) -> None:
        when = _now()
        with self.lock:
            if self.fmt is Format.JSON:
                for record in records:
                    self.out.write(json.dumps({"time": when, **record}, sort_keys=True) + "\n")
            else:
                for line in lines:
                    self.out.write(f"{when} {line}\n")
            self.out.flush()

    def _nodes(self, event: str, node: str, changes: Sequence[NodeChange]) -> None:
        self._emit(
            [node_line(node, c) for c in changes],
            [{"event": event, "node": node, **c.model_dump(mode="json")} for c in changes],
        )

    def _objects(self, event: str, objects: Sequence[ObjectPlan]) -> None:
        self._emit(
            [line for obj in objects for line in object_lines(obj)],
            [
                {
                    "event": event,
                    "object": obj.id,
                    "action": obj.action,
                    "changes": [c.model_dump(mode="json") for c in obj.changes],
                }
                for obj in objects
            ],
        )

    # --- WatchObserver ----------------------------------------------------------------------

    def drift(self, node: str, changes: Sequence[NodeChange]) -> None:
        self._nodes("drift", node, changes)

    def object_drift(self, objects: Sequence[ObjectPlan]) -> None:
        self._objects("drift", objects)

    def corrected(self, node: str, changes: Sequence[NodeChange]) -> None:
        self.metrics.corrections.inc(len(changes))
        self._nodes("corrected", node, changes)

    def corrected_objects(self, objects: Sequence[ObjectPlan]) -> None:
        self.metrics.corrections.inc(len(objects))
        self._objects("corrected", objects)

    def failed(self, subject: str, message: str) -> None:
        self.metrics.apply_errors.inc()
        log.warning("%s: %s", subject, message)

    def flap(self, node: str, key: str, writer: str, backoff: float) -> None:
        self.metrics.flaps.labels(key=key).inc()
        log.warning(
            "%s %s: %s keeps changing it back (corrected too often): left alone for %gs",
            node,
            key,
            writer,
            backoff,
        )

    def tree(self, digest: str, problems: Sequence[diag.Diagnostic]) -> None:
        from reconcile.cli.views import render_diagnostics

        valid = not diag.has_errors(problems)
        self.metrics.desired_valid.set(1 if valid else 0)
        render_diagnostics(list(problems), sys.stderr)
        if valid:
            log.info("desired/ %s is in force", digest[:19])
        else:
            log.warning("desired/ does not validate: the last valid tree stays in force")

    def blocked(self, findings: Sequence[str]) -> None:
        for finding in findings:
            log.warning("not correcting: %s", finding)
        if not findings:
            log.info("no finding stops corrections any more")

    def synced(self, drift: Mapping[str, int]) -> None:
        for kind, count in drift.items():
            self.metrics.drift.labels(kind=kind).set(count)
        self.metrics.last_sync.set_to_current_time()

    def restarted(self, reason: str) -> None:
        self.metrics.watch_restarts.inc()
        log.warning("watch restarted: %s", reason)

    def ready(self) -> None:
        self.metrics.ready.set()


class _Endpoints(BaseHTTPRequestHandler):
    """/metrics, /healthz, /readyz."""

    metrics: _Metrics

    def do_GET(self) -> None:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._answer(200, generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST)
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


def _serve(address: str, metrics: _Metrics) -> PromptHTTPServer:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ReconcileError(
            f"--metrics-address {address!r} is not HOST:PORT (e.g. 127.0.0.1:9090, :9090)"
        )
    handler = type("Endpoints", (_Endpoints,), {"metrics": metrics})
    try:
        server = PromptHTTPServer((host.strip("[]") or "0.0.0.0", int(port)), handler)
    except OSError as e:
        raise ReconcileError(f"cannot serve metrics on {address}: {e.strerror or e}") from None
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="reconcile-metrics", daemon=True).start()
    bound_host, bound_port = server.server_address[:2]
    log.info("metrics, /healthz and /readyz on http://%s:%s", bound_host, bound_port)
    return server


@main.command()
@common_options
@outputs(Format.TEXT, Format.JSON)
@click.option("--correct", is_flag=True, help="Fix drift as it appears (default: report it only).")
@click.option(
    "--prune",
    is_flag=True,
    help="With --correct: also remove labels reconcile set that desired/ no longer declares.",
)
@click.option(
    "--allow-empty-prune",
    is_flag=True,
    help="With --prune: allow removing every label reconcile manages (an empty desired/).",
)
@click.option(
    "--allow-missing-image",
    is_flag=True,
    help="Correct nodes onto driver images the support matrix does not list.",
)
@click.option(
    "--allow-evictions",
    is_flag=True,
    help="With --correct: correct toward a NoExecute taint even when it evicts running pods.",
)
@click.option(
    "--force-conflicts",
    is_flag=True,
    help="With --correct: take back fields another field manager took (server-side apply force).",
)
@parallel_option
@click.option(
    "--resync",
    default="10m",
    show_default=True,
    callback=duration,
    metavar="DURATION",
    help="Re-plan everything (workload objects included) this often (at least 10s).",
)
@click.option(
    "--desired-interval",
    default="5s",
    show_default=True,
    callback=duration,
    metavar="DURATION",
    help="How often to look for a new desired/ tree (file sizes and times; nothing is sent; "
    "at least 1s).",
)
@click.option(
    "--metrics-address",
    default="127.0.0.1:9090",
    show_default=True,
    metavar="HOST:PORT",
    help="Serve /metrics, /healthz and /readyz here (port 0: any free port).",
)
@click.option(
    "--leader-elect",
    is_flag=True,
    help="Write only while holding a coordination.k8s.io Lease; standbys report.",
)
@click.option(
    "--lease",
    default="reconcile-system/reconcile",
    show_default=True,
    metavar="NAMESPACE/NAME",
    help="The Lease --leader-elect takes.",
)
@click.option(
    "--watch-timeout",
    default="5m",
    callback=duration,
    show_default=True,
    metavar="DURATION",
    help="Renew the watch request this often (the API server ends it then; at least 10s).",
)
def watch(
    session: Session,
    output: Format,
    correct: bool,
    prune: bool,
    allow_empty_prune: bool,
    allow_missing_image: bool,
    allow_evictions: bool,
    force_conflicts: bool,
    parallel: int,
    resync: float,
    desired_interval: float,
    metrics_address: str,
    leader_elect: bool,
    lease: str,
    watch_timeout: float,
) -> int:
    """Follow the nodes and report each drift as it appears: `<time> <node> <key> <value>`.
    With --correct, fix it with apply's guarded write and print the lines changed (a full
    plan's corrections --parallel at a time). Runs until SIGTERM or Ctrl-C, then exits 0."""
    from reconcile.desired.models import DesiredState
    from reconcile.engine import operations
    from reconcile.engine.leader import LeaderElector, NoLeaseNamespace
    from reconcile.engine.plan import PlanOptions
    from reconcile.engine.watch import Watcher, WatchRequest
    from reconcile.gpu import checks as gpu

    if prune and not correct:
        raise ReconcileError("--prune removes labels: it needs --correct")
    if allow_evictions and not correct:
        raise ReconcileError(
            "--allow-evictions accepts what a correction evicts: it needs --correct"
        )
    given = {
        "--resync": resync,
        "--desired-interval": desired_interval,
        "--watch-timeout": watch_timeout,
    }
    for option, least in MINIMUM_INTERVALS.items():
        if given[option] < least:
            raise ReconcileError(f"{option} must be at least {least:g}s")
    if (session.desired / "clusters.yaml").is_file():
        raise ReconcileError(_fleet_refused(session))
    namespace, _, lease_name = lease.partition("/")
    if not namespace or not lease_name:
        raise ReconcileError(f"--lease {lease!r} is not NAMESPACE/NAME")
    identity = f"{socket.gethostname()}_{uuid.uuid4()}"
    metrics = _Metrics()
    server = _serve(metrics_address, metrics)
    cluster = session.connect()
    elector = (
        LeaderElector(cluster, namespace, lease_name, identity)
        if leader_elect and correct
        else None
    )
    request = WatchRequest(
        planning=operations.PlanRequest(
            DesiredState(),
            PlanOptions.of(
                prune=prune,
                allow_empty_prune=allow_empty_prune,
                force_conflicts=force_conflicts,
                allow_evictions=allow_evictions,
            ),
        ),
        correct=correct,
        allow_refused=allow_missing_image,
        parallel=parallel,
        resync=resync,
        desired_interval=desired_interval,
        watch_timeout=max(1, round(watch_timeout)),
        instance=identity,
    )
    watcher = Watcher(
        request,
        cluster,
        _Tree(session),
        policy_for=gpu.policy,
        checks=gpu.ALL_CHECKS,
        observer=_Reporter(output, stdout(), metrics),
        may_write=(lambda: elector.leading) if elector is not None else (lambda: True),
    )
    watcher.load()  # an invalid tree stops here, before any request
    stop = threading.Event()
    if elector is not None:

        def leading(now: bool) -> None:
            metrics.leader.set(1 if now else 0)
            if now:
                watcher.replan_soon("this replica holds the lease")

        try:  # the first request: nothing is read or written before it
            elector.try_acquire_or_renew()
        except NoLeaseNamespace as error:
            raise ReconcileError(
                f"--lease {lease}: {error}: create it, or name a Lease in a namespace that exists"
            ) from None
        elector.on_change = leading
        metrics.leader.set(1 if elector.leading else 0)
        threading.Thread(target=elector.run, args=(stop,), daemon=True).start()
    else:
        metrics.leader.set(1 if correct else 0)

    def on_signal(number: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {n: signal.signal(n, on_signal) for n in (signal.SIGINT, signal.SIGTERM)}
    try:
        watcher.start(stop)
        watcher.run(stop)
    finally:
        stop.set()
        if elector is not None:
            elector.release()
        server.shutdown()
        server.server_close()
        for number, handler in previous.items():
            signal.signal(number, handler)
    return EXIT_OK
