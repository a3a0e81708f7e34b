"""Leader election on a coordination.k8s.io Lease, as client-go's leaderelection does it:
one holder writes, the others stand by until the holder stops renewing.

The holder renews every `retry_period`; a candidate takes the lease over once the record
it last saw has not changed for `lease_duration` by its own clock (remote timestamps are
never compared with the local clock, so clock skew cannot hand the lease to two
holders). A holder that cannot renew within `renew_deadline` stops writing at once.
Release on shutdown hands the lease on without waiting out its duration. A Lease that
cannot be created because its namespace does not exist is an error (`NoLeaseNamespace`),
not a standby that waits for ever.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

from reconcile.diagnostics import Conflict, NotFound, ReconcileError
from reconcile.engine.grants import Rule, Scope
from reconcile.kube.api import NodeApi

log = logging.getLogger(__name__)

# The Lease `watch --leader-elect` takes by default, in the service account's namespace.
LEASE_NAME: Final = "reconcile"
RBAC: Final = (
    Rule(
        "coordination.k8s.io",
        ("leases",),
        ("get", "update"),
        (LEASE_NAME,),
        why="`watch --leader-elect`: one replica writes, while it holds the Lease",
        where=Scope.OWN_NAMESPACE,
    ),
    Rule(
        "coordination.k8s.io",
        ("leases",),
        ("create",),
        why="the first replica creates the Lease (create cannot be limited by name)",
        where=Scope.OWN_NAMESPACE,
    ),
)


class NoLeaseNamespace(ReconcileError):
    """The Lease's namespace does not exist: no replica can ever hold it."""


def micro_time(when: datetime | None = None) -> str:
    """A metav1.MicroTime: RFC 3339 with microseconds, in UTC."""
    return (when or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        cluster: NodeApi,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[bool], None] = lambda leading: None,
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.clock = clock
        self.on_change = on_change
        self._leading = False
        self._renewed_at = 0.0  # our clock, when our last renewal landed
        self._observed: tuple[str, str] | None = None  # (resourceVersion, holder) last seen
        self._observed_at = 0.0
        self._lock = threading.Lock()

    @property
    def leading(self) -> bool:
        """True while this process holds the lease (and renewed it within the deadline)."""
        with self._lock:
            if self._leading and self.clock() - self._renewed_at > self.renew_deadline:
                self._set_leading(False)
            return self._leading

    def _set_leading(self, leading: bool) -> None:
        if leading != self._leading:
            self._leading = leading
            log.info(
                "%s the lease %s/%s as %s",
                "holding" if leading else "lost",
                self.namespace,
                self.name,
                self.identity,
            )
            self.on_change(leading)

    def try_acquire_or_renew(self) -> bool:
        """One round: take the lease if free or expired, renew it if ours. Raises
        NoLeaseNamespace when the lease is absent and its namespace too."""
        now = self.clock()
        try:
            lease = self.cluster.get_lease(self.namespace, self.name)
            if lease is None:
                self._create()
                return self._won(now)
            spec = lease.get("spec") or {}
            holder = str(spec.get("holderIdentity") or "")
            seen = (str((lease.get("metadata") or {}).get("resourceVersion") or ""), holder)
            if seen != self._observed:
                self._observed, self._observed_at = seen, now
            duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
            held_by_other = holder not in ("", self.identity)
            if held_by_other and now - self._observed_at < duration:
                return self._lost()
            self.cluster.replace_lease(
                self.namespace, self.name, self._record(lease, taking=holder != self.identity)
            )
            return self._won(now)
        except NoLeaseNamespace:
            self._lost()
            raise
        except (Conflict, NotFound):
            return self._lost()  # another candidate wrote first: try again next round
        except ReconcileError as error:
            log.warning("cannot renew the lease %s/%s: %s", self.namespace, self.name, error)
            return self.leading  # keeps leading until the renew deadline passes

    def _create(self) -> None:
        try:
            self.cluster.create_lease(self.namespace, self._record(None, taking=True))
        except NotFound as error:
            # A POST to a collection is refused with 404 for want of its namespace only.
            raise NoLeaseNamespace(f"the namespace {self.namespace} does not exist") from error

    def _won(self, now: float) -> bool:
        with self._lock:
            self._renewed_at = now
            self._set_leading(True)
        return True

    def _lost(self) -> bool:
        with self._lock:
            self._set_leading(False)
        return False

    def _record(self, lease: dict[str, Any] | None, *, taking: bool) -> dict[str, Any]:
        now = micro_time()
        spec = dict((lease or {}).get("spec") or {})
        transitions = int(spec.get("leaseTransitions") or 0)
        if lease is not None and taking:
            transitions += 1
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=round(self.lease_duration),
            renewTime=now,
            leaseTransitions=transitions,
        )
        if taking or "acquireTime" not in spec:
            spec["acquireTime"] = now
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if lease is not None:
            metadata["resourceVersion"] = (lease.get("metadata") or {}).get("resourceVersion")
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }

    def run(self, stop: threading.Event) -> None:
        """Acquire and renew until `stop` is set (run it in a thread)."""
        while not stop.is_set():
            try:
                self.try_acquire_or_renew()
            except NoLeaseNamespace as error:  # deleted since the first round
                log.warning("cannot take the lease: %s", error)
            stop.wait(self.retry_period)

    def release(self) -> None:
        """Give the lease up (if held), so a standby takes over at once."""
        with self._lock:
            was_leading = self._leading
            self._set_leading(False)
        if not was_leading:
            return
        try:
            lease = self.cluster.get_lease(self.namespace, self.name)
            spec = (lease or {}).get("spec") or {}
            if lease is None or spec.get("holderIdentity") != self.identity:
                return
            released = self._record(lease, taking=False)
            released["spec"].update(holderIdentity="", leaseDurationSeconds=1)
            self.cluster.replace_lease(self.namespace, self.name, released)
        except ReconcileError as error:
            log.warning("cannot release the lease %s/%s: %s", self.namespace, self.name, error)
