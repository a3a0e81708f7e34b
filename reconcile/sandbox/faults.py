"""Fault injection: an API server that fails the way busy, restarting real ones do.

At `rate`, a resource request is answered with a 500 or 503, throttled with a 429 and a
Retry-After, refused with a 409 (label writes), dropped before it is handled, or handled
and its answer dropped: the write happened, the client never hears of it. Seeded, so a
failing run can be replayed.
"""

from __future__ import annotations

import enum
import random
import threading
from collections import Counter
from typing import Final

from reconcile.sandbox.errors import ApiStatus, conflict
from reconcile.sandbox.server import FaultInjector, Route

WRITES: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class Fault(enum.Enum):
    INTERNAL_ERROR = "500"
    UNAVAILABLE = "503"
    THROTTLED = "429"
    CONFLICT = "409"
    DROP_REQUEST = "drop-request"
    DROP_RESPONSE = "drop-response"


class RandomFaults(FaultInjector):
    def __init__(self, rate: float, seed: int | None = None, *, retry_after: int = 1) -> None:
        if not 0 <= rate <= 1:
            raise ValueError("the fault rate is a probability: between 0 and 1")
        self.rate = rate
        self.retry_after = retry_after
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        # One decision per request, carried from before() to after_write() in its thread.
        self._pending = threading.local()
        self.injected: Counter[Fault] = Counter()

    def choose(self, method: str, route: Route) -> Fault | None:
        with self._lock:
            if self._random.random() >= self.rate:
                return None
            kinds = [Fault.INTERNAL_ERROR, Fault.UNAVAILABLE, Fault.THROTTLED, Fault.DROP_REQUEST]
            if method in WRITES:
                kinds.append(Fault.DROP_RESPONSE)
            if method == "PATCH" and route.resource.plural == "nodes" and route.name:
                kinds.append(Fault.CONFLICT)
            fault = self._random.choice(kinds)
            self.injected[fault] += 1
            return fault

    def before(self, method: str, route: Route | None) -> ApiStatus | str | None:
        if route is None:
            return None
        fault = self.choose(method, route)
        self._pending.value = fault
        if fault is Fault.INTERNAL_ERROR:
            return ApiStatus(
                500,
                "InternalError",
                "Internal error occurred: injected fault",
                {"causes": [{"message": "injected fault"}]},
            )
        if fault is Fault.UNAVAILABLE:
            return ApiStatus(
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
                {},
            )
        if fault is Fault.THROTTLED:
            return ApiStatus(
                429,
                "TooManyRequests",
                "the server has received too many requests and has asked us to try again later",
                {"retryAfterSeconds": self.retry_after},
                headers={"Retry-After": str(self.retry_after)},
            )
        if fault is Fault.CONFLICT:
            return conflict(route.resource, route.name or "")
        if fault is Fault.DROP_REQUEST:
            return "drop"
        return None

    def after_write(self, method: str, route: Route | None) -> str | None:
        fault = getattr(self._pending, "value", None)
        self._pending.value = None
        return "drop" if fault is Fault.DROP_RESPONSE else None
