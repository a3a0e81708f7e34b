"""A command's session: desired/, the kubeconfig, and the clusters connected to."""

from __future__ import annotations

import functools
import logging
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from reconcile.diagnostics import Diagnostic, ReconcileError

if TYPE_CHECKING:
    from reconcile.desired.models import DesiredState
    from reconcile.kube.client import Cluster

log = logging.getLogger("reconcile")


@dataclass(frozen=True)
class Target:
    """One cluster a command works on: its name in the fleet (None without a fleet), its
    desired state, and how to reach it (else the kubeconfig's current context)."""

    name: str | None
    state: DesiredState
    context: str | None = None
    in_cluster: bool = False


@dataclass
class Session:
    """Where desired/ is and how to reach its clusters; the clusters connected to so far
    (closed by `close`). `on_problems` hears the warnings found in desired/ once it is
    read and valid (the command line prints them before anything else happens)."""

    desired: Path
    kubeconfig: str | None = None
    context: str | None = None
    request_timeout: float = 30.0
    on_problems: Callable[[Sequence[Diagnostic]], None] = lambda problems: None
    connected: list[Cluster] = field(default_factory=list)
    # A fleet's clusters connected to before desired/ was read (reading_ahead): each
    # taken by the first `connect` of its target, or the error connecting to it met.
    ahead: dict[str, Cluster | ReconcileError] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Before anything reads the tree (a fleet's clusters.yaml is read ahead): a
        # desired/ that is a link to another tree is refused, as a link inside it is.
        from reconcile import files

        files.check_root(self.desired)

    def connect(self, timeout: float | None = None, target: Target | None = None) -> Cluster:
        """The cluster (a fleet's `target`); transient failures are retried until `timeout`
        (overall) runs out."""
        if target is None or target.name is None:
            in_cluster = target is not None and target.in_cluster
            return self.connect_to(timeout, self.context, in_cluster=in_cluster)
        found = self.ahead.pop(target.name, None)
        if isinstance(found, ReconcileError):
            raise found
        if found is not None:
            return found
        return self.connect_to(timeout, target.context, in_cluster=target.in_cluster)

    def connect_to(
        self, timeout: float | None, context: str | None, *, in_cluster: bool = False
    ) -> Cluster:
        """The cluster of kubeconfig `context` (or the one reconcile runs in)."""
        from reconcile.kube.client import Cluster

        cluster = Cluster.connect(
            self.kubeconfig,
            context,
            request_timeout=self.request_timeout,
            timeout=timeout,
            in_cluster=in_cluster,
        )
        if not cluster.tls_verified and all(c.server != cluster.server for c in self.connected):
            log.warning("TLS verification is off for %s", cluster.server)
        self.connected.append(cluster)
        return cluster

    def connect_later(self, timeout: float | None = None) -> Callable[[], Cluster]:
        """`connect`, when the caller gets that far."""
        return functools.partial(self.connect, timeout)

    def close(self) -> None:
        """Every connection closed; how many requests each cluster was sent, logged."""
        for cluster in self.connected:
            log.debug(
                "%d request(s) to %s, %d retried", cluster.requests, cluster.server, cluster.retries
            )
            cluster.close()

    @property
    def is_fleet(self) -> bool:
        return (self.desired / "clusters.yaml").is_file()


@contextmanager
def reading_ahead(
    session: Session, timeout: float | None, *, fleet_clusters: tuple[str, ...] | None = None
) -> Iterator[Callable[[], Cluster]]:
    """The kubeconfig's cluster, what every plan reads first (its identity, every node)
    already being read while the caller reads desired/: at fleet scale the LIST is most of
    a plan, and the API server answers it while desired/ is parsed. Only reads go out
    before desired/ is known to be valid; when the caller stops early (an invalid tree),
    the reads stop too. A kubeconfig problem is raised when the cluster is asked for, so
    desired/'s own problems come first.

    In a fleet, with `fleet_clusters` (the --cluster names, () for all), each cluster
    clusters.yaml names is read ahead the same way and taken by `session.connect` for its
    target; without it (apply: its waves read each cluster when they reach it), a fleet
    connects to each cluster later."""
    if session.is_fleet:
        started = (
            _fleet_ahead(session, timeout, fleet_clusters) if fleet_clusters is not None else []
        )
        try:
            yield session.connect_later(timeout)
        finally:
            for cluster in started:
                cluster.stop_reading_ahead(wait=False)
            for cluster in started:
                cluster.stop_reading_ahead()
        return
    try:
        cluster = session.connect(timeout)
    except ReconcileError as e:
        problem = e

        def refused() -> Cluster:
            raise problem

        yield refused
        return
    cluster.read_ahead()
    try:
        yield lambda: cluster
    finally:
        cluster.stop_reading_ahead()


def _fleet_ahead(session: Session, timeout: float | None, chosen: tuple[str, ...]) -> list[Cluster]:
    """Each chosen cluster of the fleet connected to and read ahead (session.ahead), when
    clusters.yaml reads on its own and the command line is one the fleet accepts; the
    clusters reading."""
    from reconcile.desired import fleet as fleets

    found = fleets.clusters(session.desired)
    if found is None or session.context or not set(chosen) <= {c.name for c in found}:
        return []  # refused or reported once desired/ is read: nothing is asked
    started = []
    for member in found:
        if chosen and member.name not in chosen:
            continue
        try:
            cluster = session.connect_to(timeout, member.context, in_cluster=member.inCluster)
        except ReconcileError as e:
            session.ahead[member.name] = e  # the cluster's own error, when its plan asks for it
            continue
        cluster.read_ahead()
        session.ahead[member.name] = cluster
        started.append(cluster)
    return started


@contextmanager
def stoppable() -> Iterator[list[int]]:
    """While applying, SIGINT and SIGTERM only ask to stop: requests in flight finish,
    nothing new starts, and what was applied is still reported. The list receives the
    signal's number. (The handler just appends: a lock taken in a handler can deadlock.)"""
    received: list[int] = []

    def on_signal(number: int, frame: FrameType | None) -> None:
        received.append(number)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def plan_key() -> bytes | None:
    """The key saved plans are signed and verified with (RECONCILE_PLAN_KEY), if set."""
    key = os.environ.get("RECONCILE_PLAN_KEY")
    if key is None:
        return None
    if not key.strip():
        raise ReconcileError("RECONCILE_PLAN_KEY is set but empty: set it to a secret, or unset it")
    return key.encode()
