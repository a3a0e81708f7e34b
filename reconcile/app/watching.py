"""watch: one cluster followed until SIGINT or SIGTERM, each drift reported as it appears
and corrected on request, the watch's metrics served all along.

`WatchSettings` is what argv asks for and the checks it must pass before anything is sent;
`watch` runs it. What is heard is told to the caller's observer (the command line prints
it) and counted in the metrics on the way.
"""

from __future__ import annotations

import signal
import socket
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Final

from reconcile import diagnostics as diag
from reconcile.app.metrics import DEFAULT_METRICS_ADDRESS, WatchMetrics, bind_address, serve
from reconcile.app.session import Session
from reconcile.app.targets import load_tree
from reconcile.diagnostics import ReconcileError

if TYPE_CHECKING:
    from reconcile.desired.models import DesiredState
    from reconcile.engine.diff import NodeChange
    from reconcile.engine.leader import LeaderElector
    from reconcile.engine.plan import ObjectPlan
    from reconcile.engine.watch import Watcher, WatchObserver, WatchRequest


# The shortest intervals watch takes: below them it would poll as fast as it can (a
# resync of 0 s re-planned without a pause: thousands of requests a second).
MINIMUM_INTERVALS: Final = {"--resync": 10.0, "--desired-interval": 1.0, "--watch-timeout": 10.0}


def _fleet_refused(desired: Path) -> str:
    return (
        f"{desired}/clusters.yaml declares a fleet: watch follows one cluster; run one "
        "watch per cluster, each in its own cluster (the overlay's tree)"
    )


@dataclass(frozen=True)
class WatchSettings:
    """What a watch is asked to do, as the command line's options say it (durations in
    seconds); `check` refuses what cannot run."""

    correct: bool = False
    prune: bool = False
    allow_empty_prune: bool = False
    allow_missing_image: bool = False
    allow_evictions: bool = False
    force_conflicts: bool = False
    parallel: int = 8
    resync: float = 600.0
    desired_interval: float = 5.0
    watch_timeout: float = 300.0
    metrics_address: str = DEFAULT_METRICS_ADDRESS
    leader_elect: bool = False
    lease: str = "reconcile-system/reconcile"

    def check(self, desired: Path) -> None:
        """Returns when these settings can run on `desired`; else raises ReconcileError
        for the first problem, in this order: a guard --correct must go with, an interval
        below its minimum, a fleet (watch follows one cluster), --lease, then
        --metrics-address. Nothing is sent and desired/ is not read."""
        if self.prune and not self.correct:
            raise ReconcileError("--prune removes labels: it needs --correct")
        if self.allow_evictions and not self.correct:
            raise ReconcileError(
                "--allow-evictions accepts what a correction evicts: it needs --correct"
            )
        given = {
            "--resync": self.resync,
            "--desired-interval": self.desired_interval,
            "--watch-timeout": self.watch_timeout,
        }
        for option, least in MINIMUM_INTERVALS.items():
            if given[option] < least:
                raise ReconcileError(f"{option} must be at least {least:g}s")
        if (desired / "clusters.yaml").is_file():
            raise ReconcileError(_fleet_refused(desired))
        self.lease_name()
        bind_address(self.metrics_address)

    def lease_name(self) -> tuple[str, str]:
        """The (namespace, name) of the Lease --leader-elect takes; ReconcileError when
        --lease is not NAMESPACE/NAME."""
        namespace, _, name = self.lease.partition("/")
        if not namespace or not name:
            raise ReconcileError(f"--lease {self.lease!r} is not NAMESPACE/NAME")
        return namespace, name

    @property
    def elects(self) -> bool:
        """Whether a leader is elected: only a watch that writes needs one."""
        return self.leader_elect and self.correct

    def request(self, instance: str) -> WatchRequest:
        """The watcher's request, for replica `instance`; each tree read fills it in."""
        from reconcile.desired.models import DesiredState
        from reconcile.engine.operations import PlanRequest
        from reconcile.engine.plan import PlanOptions
        from reconcile.engine.watch import WatchRequest

        return WatchRequest(
            planning=PlanRequest(
                DesiredState(),
                PlanOptions(
                    prune=self.prune,
                    allowEmptyPrune=self.allow_empty_prune,
                    forceConflicts=self.force_conflicts,
                    allowEvictions=self.allow_evictions,
                ),
            ),
            correct=self.correct,
            allow_refused=self.allow_missing_image,
            parallel=self.parallel,
            resync=self.resync,
            desired_interval=self.desired_interval,
            watch_timeout=max(1, round(self.watch_timeout)),
            instance=instance,
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
        return loaded.state, [*loaded.problems, diag.error(_fleet_refused(self.session.desired))]


class Metered:
    """The caller's observer, each report also counted in `metrics` (a correction by
    the facts and objects it wrote, a tree by whether it is valid, a sync by the drift
    it left); the metrics move before the observer hears it."""

    def __init__(self, observer: WatchObserver, metrics: WatchMetrics) -> None:
        self.observer = observer
        self.metrics = metrics

    def drift(self, node: str, changes: Sequence[NodeChange]) -> None:
        self.observer.drift(node, changes)

    def object_drift(self, objects: Sequence[ObjectPlan]) -> None:
        self.observer.object_drift(objects)

    def corrected(self, node: str, changes: Sequence[NodeChange]) -> None:
        self.metrics.corrections.inc(len(changes))
        self.observer.corrected(node, changes)

    def corrected_objects(self, objects: Sequence[ObjectPlan]) -> None:
        self.metrics.corrections.inc(len(objects))
        self.observer.corrected_objects(objects)

    def failed(self, subject: str, message: str) -> None:
        self.metrics.apply_errors.inc()
        self.observer.failed(subject, message)

    def flap(self, node: str, key: str, writer: str, backoff: float) -> None:
        self.metrics.flaps.labels(key=key).inc()
        self.observer.flap(node, key, writer, backoff)

    def tree(self, digest: str, problems: Sequence[diag.Diagnostic]) -> None:
        self.metrics.desired_valid.set(0 if diag.has_errors(problems) else 1)
        self.observer.tree(digest, problems)

    def blocked(self, findings: Sequence[str]) -> None:
        self.observer.blocked(findings)

    def synced(self, drift: Mapping[str, int]) -> None:
        for kind, count in drift.items():
            self.metrics.drift.labels(kind=kind).set(count)
        self.metrics.last_sync.set_to_current_time()
        self.observer.synced(drift)

    def restarted(self, reason: str) -> None:
        self.metrics.watch_restarts.inc()
        self.observer.restarted(reason)

    def ready(self) -> None:
        self.metrics.ready.set()
        self.observer.ready()


@contextmanager
def _stopped_by_signals(stop: threading.Event) -> Iterator[None]:
    """While inside, SIGINT and SIGTERM set `stop` (the watch ends as when stopped); the
    handlers before are restored on the way out."""

    def on_signal(number: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {n: signal.signal(n, on_signal) for n in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def watch(session: Session, settings: WatchSettings, observer: WatchObserver) -> None:
    """Follows the kubeconfig's cluster, telling `observer` each drift, correction and
    new tree, until SIGINT or SIGTERM; returns then, the writes in flight finished, the
    lease (if held) released and the endpoints closed. Raises ReconcileError when it
    cannot start: settings `check` refuses (nothing sent), an address that cannot be
    bound, no cluster, an invalid tree (InvalidInput, before any request), a Lease whose
    namespace does not exist (nothing but the Lease asked for)."""
    settings.check(session.desired)
    metrics = WatchMetrics()
    server = serve(settings.metrics_address, metrics)
    try:
        _follow(session, settings, Metered(observer, metrics), metrics)
    finally:
        server.shutdown()
        server.server_close()


def _follow(
    session: Session, settings: WatchSettings, observer: WatchObserver, metrics: WatchMetrics
) -> None:
    """The watcher on the cluster, and with --leader-elect the elector, until a signal."""
    from reconcile.engine.leader import LeaderElector
    from reconcile.engine.watch import Watcher
    from reconcile.gpu import checks as gpu

    identity = f"{socket.gethostname()}_{uuid.uuid4()}"
    cluster = session.connect()
    elector = LeaderElector(cluster, *settings.lease_name(), identity) if settings.elects else None
    watcher = Watcher(
        settings.request(identity),
        cluster,
        _Tree(session),
        policy_for=gpu.policy,
        checks=gpu.ALL_CHECKS,
        observer=observer,
        may_write=(lambda: elector.leading) if elector is not None else (lambda: True),
    )
    watcher.load()  # an invalid tree stops here, before any request
    stop = threading.Event()
    if elector is not None:
        _elect(elector, settings.lease, watcher, metrics, stop)
    else:
        metrics.leader.set(1 if settings.correct else 0)
    with _stopped_by_signals(stop):
        try:
            watcher.start(stop)
            watcher.run(stop)
        finally:
            stop.set()
            if elector is not None:
                elector.release()


def _elect(
    elector: LeaderElector,
    lease: str,
    watcher: Watcher,
    metrics: WatchMetrics,
    stop: threading.Event,
) -> None:
    """The elector's first round, before anything else is read or written (a Lease whose
    namespace does not exist is a ReconcileError), then its renewals in a thread until
    `stop`; each time this replica takes the lease, a full plan."""
    from reconcile.engine.leader import NoLeaseNamespace

    def leading(now: bool) -> None:
        metrics.leader.set(1 if now else 0)
        if now:
            watcher.replan_soon("this replica holds the lease")

    try:
        elector.try_acquire_or_renew()
    except NoLeaseNamespace as error:
        raise ReconcileError(
            f"--lease {lease}: {error}: create it, or name a Lease in a namespace that exists"
        ) from None
    elector.on_change = leading
    metrics.leader.set(1 if elector.leading else 0)
    threading.Thread(target=elector.run, args=(stop,), daemon=True).start()
