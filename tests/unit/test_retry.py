"""Which failures are tried again, how long reconcile waits, and when it gives up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reconcile.diagnostics import ApiError, ClusterUnreachable, Invalid, NotFound, TooManyRequests
from reconcile.kube.client import Cluster, ConnectFailed, RetryPolicy
from reconcile.sandbox import FaultInjector, Sandbox
from reconcile.sandbox.errors import ApiStatus
from reconcile.sandbox.server import Route

POLICY = RetryPolicy(attempts=4, connect_attempts=2, base=0.1, cap=1.0)


@pytest.mark.parametrize("status", [500, 502, 503, 504, 429])
def test_transient_statuses_are_retried(status: int) -> None:
    wait = POLICY.delay(ApiError(status, "x", "y"), 0, None)
    assert wait is not None and 0 <= wait <= 0.1


@pytest.mark.parametrize(
    "error",
    [
        Invalid(422, "Invalid", "bad"),
        NotFound(404, "NotFound", "gone"),
        ApiError(400, "BadRequest", "no"),
        ApiError(403, "Forbidden", "no"),
    ],
)
def test_permanent_failures_are_final(error: ApiError) -> None:
    assert POLICY.delay(error, 0, None) is None


def test_retry_after_is_honoured_and_bounded_by_the_deadline() -> None:
    throttled = TooManyRequests(429, "TooManyRequests", "slow down", retry_after=3.0)
    assert POLICY.delay(throttled, 0, None) == 3.0
    assert POLICY.delay(throttled, 0, 2.0) is None  # would overrun --timeout


def test_a_refused_eviction_is_left_to_the_caller() -> None:
    budget = TooManyRequests(
        429, "TooManyRequests", "Cannot evict", ({"reason": "DisruptionBudget", "message": "m"},)
    )
    assert POLICY.delay(budget, 0, None) is None


def test_attempts_are_bounded_and_connection_refused_gives_up_sooner() -> None:
    assert POLICY.delay(ClusterUnreachable("reset"), 2, None) is not None
    assert POLICY.delay(ClusterUnreachable("reset"), 3, None) is None
    assert POLICY.delay(ConnectFailed("refused"), 0, None) is not None
    assert POLICY.delay(ConnectFailed("refused"), 1, None) is None


def test_backoff_grows_exponentially_up_to_the_cap() -> None:
    policy = RetryPolicy(attempts=20, base=0.1, cap=1.0)
    highest = [
        max(policy.delay(ApiError(503, "x", "y"), attempt, None) or 0 for _ in range(200))
        for attempt in range(6)
    ]
    assert highest[0] <= 0.1 < highest[2] <= 0.4 < highest[4] <= 1.0
    assert highest[5] <= 1.0


class ThrottleFirst(FaultInjector):
    def __init__(self, retry_after: int) -> None:
        self.retry_after = retry_after
        self.done = False

    def before(self, method: str, route: Route | None) -> Any:
        if route is not None and not self.done:
            self.done = True
            return ApiStatus(
                429,
                "TooManyRequests",
                "try later",
                {},
                headers={"Retry-After": str(self.retry_after)},
            )
        return None


def test_the_client_waits_what_the_server_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    waited: list[float] = []
    monkeypatch.setattr("reconcile.kube.client.cluster.time.sleep", waited.append)
    with Sandbox(
        [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}], faults=ThrottleFirst(3)
    ) as sandbox:
        cluster = Cluster.connect(str(sandbox.write_kubeconfig(tmp_path / "kc")))
        assert [n.name for n in cluster.list_nodes()] == ["n1"]
        assert waited == [3.0]
        assert cluster.retries == 1
        assert [r.status for r in sandbox.requests] == [429, 200]
        cluster.close()
