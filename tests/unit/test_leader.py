"""Leader election over a Lease in FakeCluster: the record written, renewals, release, and
a candidate that loses a race for the same resourceVersion."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reconcile.engine.leader import LeaderElector
from tests.fake import FakeCluster

NAMESPACE, NAME = "reconcile-system", "reconcile"


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _elector(
    cluster: FakeCluster, clock: _Clock, identity: str, changes: list[bool] | None = None
) -> LeaderElector:
    return LeaderElector(
        cluster,
        NAMESPACE,
        NAME,
        identity,
        clock=clock,
        on_change=(changes if changes is not None else []).append,
    )


def _spec(cluster: FakeCluster) -> dict[str, Any]:
    lease = cluster.get_lease(NAMESPACE, NAME)
    assert lease is not None
    return dict(lease["spec"])


def test_the_first_candidate_creates_the_lease_and_renewing_keeps_its_acquire_time() -> None:
    cluster, clock = FakeCluster(namespaces=(NAMESPACE,)), _Clock()
    a = _elector(cluster, clock, "a")

    assert a.try_acquire_or_renew()
    first = _spec(cluster)
    clock.now += 5
    assert a.try_acquire_or_renew()
    renewed = _spec(cluster)

    assert (first["holderIdentity"], first["leaseDurationSeconds"], first["leaseTransitions"]) == (
        "a",
        15,
        0,
    )
    assert renewed["acquireTime"] == first["acquireTime"]
    assert renewed["leaseTransitions"] == 0
    assert cluster.writes == [
        ("create", f"leases/{NAMESPACE}/{NAME}"),
        ("replace", f"leases/{NAMESPACE}/{NAME}"),
    ]


def test_a_released_lease_is_taken_by_a_standby_at_once() -> None:
    cluster, clock = FakeCluster(namespaces=(NAMESPACE,)), _Clock()
    changes: list[bool] = []
    a, b = _elector(cluster, clock, "a", changes), _elector(cluster, clock, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()

    a.release()

    assert (_spec(cluster)["holderIdentity"], a.leading, changes) == ("", False, [True, False])
    assert b.try_acquire_or_renew() and b.leading  # no wait for the lease to expire
    assert _spec(cluster)["leaseTransitions"] == 1


def test_releasing_a_lease_not_held_writes_nothing() -> None:
    cluster, clock = FakeCluster(namespaces=(NAMESPACE,)), _Clock()
    a, b = _elector(cluster, clock, "a"), _elector(cluster, clock, "b")
    assert a.try_acquire_or_renew()
    written = list(cluster.writes)

    b.release()

    assert cluster.writes == written and _spec(cluster)["holderIdentity"] == "a"


def test_a_process_that_never_led_leaves_a_lease_held_under_its_identity() -> None:
    cluster, clock = FakeCluster(namespaces=(NAMESPACE,)), _Clock()
    assert _elector(cluster, clock, "a").try_acquire_or_renew()
    written = list(cluster.writes)

    _elector(cluster, clock, "a").release()  # a second process with the same identity

    assert cluster.writes == written and _spec(cluster)["holderIdentity"] == "a"


class _Race(FakeCluster):
    """A cluster where, right after the next read of the lease, another candidate writes."""

    def __init__(self) -> None:
        super().__init__(namespaces=(NAMESPACE,))
        self.after_read: Callable[[], object] | None = None

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        lease = super().get_lease(namespace, name)
        write, self.after_read = self.after_read, None
        if write is not None:
            write()
        return lease


def test_a_candidate_that_loses_the_race_for_an_expired_lease_does_not_lead() -> None:
    cluster, clock = _Race(), _Clock()
    a, b = _elector(cluster, clock, "a"), _elector(cluster, clock, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    clock.now += 16  # a has not renewed for longer than the lease lasts
    cluster.after_read = a.try_acquire_or_renew  # a renews between b's read and b's write

    assert not b.try_acquire_or_renew()

    assert (a.leading, b.leading, _spec(cluster)["holderIdentity"]) == (True, False, "a")
