"""The rules `watch` decides by, with a clock the test turns: when a fight with another
writer is declared and how long it is left alone; who holds the Lease and when it passes."""

from __future__ import annotations

from typing import Any

import pytest

from reconcile.diagnostics import ClusterUnreachable
from reconcile.engine.leader import LeaderElector, NoLeaseNamespace
from reconcile.engine.watch import _Flaps
from tests.fake import LEASES, FakeCluster


def flaps() -> _Flaps:
    return _Flaps(limit=3, window=600.0, first_backoff=60.0, max_backoff=3600.0)


def test_a_fourth_correction_within_ten_minutes_is_a_flap() -> None:
    rules = flaps()
    assert [rules.corrected("n", "k", t) for t in (0, 100, 200)] == [None, None, None]
    assert rules.corrected("n", "k", 300) == 60.0
    assert rules.holding("n", "k", 359.0) and not rules.holding("n", "k", 360.0)
    assert not rules.holding("n", "other", 300) and not rules.holding("m", "k", 300)


def test_corrections_spread_over_more_than_the_window_never_flap() -> None:
    rules = flaps()
    assert all(rules.corrected("n", "k", t * 250.0) is None for t in range(20))


def test_the_backoff_doubles_each_time_the_fight_resumes_up_to_an_hour() -> None:
    rules = flaps()
    now, backoffs = 0.0, []
    for _ in range(8):
        found = None
        while found is None:
            found = rules.corrected("n", "k", now)
            now += 1
        backoffs.append(found)
        now += found
    assert backoffs == [60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 3600.0, 3600.0]


def test_a_deleted_node_forgets_its_fights() -> None:
    rules = flaps()
    for t in range(4):
        rules.corrected("n", "k", t)
    rules.forget("n")
    assert not rules.holding("n", "k", 5)
    assert rules.corrected("n", "k", 6) is None


class Leases(FakeCluster):
    """A cluster whose lease writes fail while it is `down`."""

    def __init__(self, namespaces: tuple[str, ...] = ("reconcile-system",)) -> None:
        super().__init__(namespaces=namespaces)
        self.down = False

    def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.down:
            raise ClusterUnreachable("down")
        return super().create_lease(namespace, body)

    def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.down:
            raise ClusterUnreachable("down")
        return super().replace_lease(namespace, name, body)

    def spec(self) -> dict[str, Any]:
        """The spec of the Lease reconcile-system/reconcile."""
        lease = self.get_lease("reconcile-system", "reconcile")
        assert lease is not None
        return dict(lease["spec"])


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(leases: Leases, clock: Clock, identity: str) -> LeaderElector:
    return LeaderElector(leases, "reconcile-system", "reconcile", identity, clock=clock)


def test_one_holder_at_a_time_and_a_standby_takes_over_an_expired_lease() -> None:
    leases, clock = Leases(), Clock()
    a, b = elector(leases, clock, "a"), elector(leases, clock, "b")
    assert a.try_acquire_or_renew() and a.leading
    assert not b.try_acquire_or_renew() and not b.leading
    clock.now += 10
    assert a.try_acquire_or_renew()  # renewed
    assert not b.try_acquire_or_renew()  # b saw the record change: the lease is fresh
    clock.now += 14
    assert not b.try_acquire_or_renew()  # 14 s since b last saw it change
    clock.now += 2  # a stopped renewing 16 s ago
    assert b.try_acquire_or_renew() and b.leading
    spec = leases.spec()
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)
    assert not a.leading  # a has not renewed within its 10 s deadline


def test_a_holder_that_cannot_renew_stops_writing_after_the_renew_deadline() -> None:
    leases, clock = Leases(), Clock()
    a = elector(leases, clock, "a")
    assert a.try_acquire_or_renew()
    leases.down = True
    clock.now += 5
    assert a.try_acquire_or_renew()  # still within the deadline
    clock.now += 6
    assert not a.leading


def test_release_hands_the_lease_on_at_once() -> None:
    leases, clock = Leases(), Clock()
    a, b = elector(leases, clock, "a"), elector(leases, clock, "b")
    changes: list[bool] = []
    a.on_change = changes.append
    assert a.try_acquire_or_renew()
    a.release()
    assert changes == [True, False]
    spec = leases.spec()
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == ("", 1)
    assert b.try_acquire_or_renew()


def test_a_candidate_that_loses_the_race_to_create_the_lease_stands_by() -> None:
    leases, clock = Leases(), Clock()
    winner, loser = elector(leases, clock, "a"), elector(leases, clock, "b")
    real_get = leases.get_lease
    leases.get_lease = lambda namespace, name: None  # type: ignore[method-assign]
    assert winner.try_acquire_or_renew()
    assert not loser.try_acquire_or_renew()  # its create met AlreadyExists
    leases.get_lease = real_get  # type: ignore[method-assign]
    assert leases.spec()["holderIdentity"] == "a"
    assert winner.leading and not loser.leading


def test_a_lease_whose_namespace_does_not_exist_is_an_error_not_a_standby() -> None:
    leases, clock = Leases(namespaces=()), Clock()
    a = elector(leases, clock, "a")
    with pytest.raises(NoLeaseNamespace, match="the namespace reconcile-system does not exist"):
        a.try_acquire_or_renew()
    assert not a.leading and not leases.list_objects(LEASES)
