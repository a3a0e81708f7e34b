"""Many clusters at once: the same operation on each (concurrently, with a bound), and
apply in waves, each wave checked converged before the next one starts.

What is done to one cluster is the caller's (plan, apply and the re-plan that checks
it); this module decides the order, the concurrency and where a fleet run stops.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from reconcile.diagnostics import PlanRefused, ReconcileError
from reconcile.engine import saved
from reconcile.engine.plan import PLAN_API_VERSION, Plan

T = TypeVar("T")

# Clusters worked on at once: a fleet plans in about the time of its slowest cluster,
# and a laptop does not open hundreds of connections.
CONCURRENCY = 8


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """What one cluster gave: a value, or the error that stopped it."""

    cluster: str
    value: T | None = None
    error: str | None = None


def each(
    clusters: Sequence[str], work: Callable[[str], T], *, limit: int = CONCURRENCY
) -> list[Outcome[T]]:
    """`work` on every cluster, at most `limit` at once; in the order given. A cluster's
    ReconcileError is its outcome and never stops the others."""

    def one(cluster: str) -> Outcome[T]:
        try:
            return Outcome(cluster, value=work(cluster))
        except ReconcileError as error:
            return Outcome(cluster, error=str(error))

    with ThreadPoolExecutor(max_workers=max(1, min(limit, len(clusters)))) as pool:
        return list(pool.map(one, clusters))


@dataclass(frozen=True)
class WaveRun(Generic[T]):
    """Apply in waves: what each started cluster gave, and what was never started."""

    outcomes: tuple[Outcome[T], ...]
    not_started: tuple[str, ...]
    # The wave that failed (1-based position among the waves), when one did.
    stopped_after: int | None = None


def in_waves(
    waves: Sequence[Sequence[str]],
    work: Callable[[str], T],
    converged: Callable[[T], bool],
    *,
    limit: int = CONCURRENCY,
) -> WaveRun[T]:
    """Each wave's clusters concurrently, waves in order; a wave in which any cluster
    failed or did not converge stops the run before the next wave is touched."""
    outcomes: list[Outcome[T]] = []
    for index, wave in enumerate(waves):
        done = each(wave, work, limit=limit)
        outcomes += done
        if any(o.value is None or not converged(o.value) for o in done):
            rest = tuple(name for later in waves[index + 1 :] for name in later)
            return WaveRun(tuple(outcomes), rest, index + 1)
    return WaveRun(tuple(outcomes), ())


class FleetPlan(BaseModel):
    """A saved plan for several clusters: each cluster's plan, bound to that cluster's
    identity and tree as a single-cluster plan is, and refused as one is."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    apiVersion: Literal["reconcile.dev/v1alpha1"] = PLAN_API_VERSION
    kind: Literal["FleetPlan"] = "FleetPlan"
    fleet: str
    plans: dict[str, Plan]
    # Clusters that could not be planned: a fleet plan with any is never saved.
    errors: dict[str, str] = {}

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> FleetPlan:
        """A saved fleet plan: each cluster's plan checked as a single-cluster plan file is
        (its schema and its own digest)."""
        try:
            loaded = cls.model_validate_json(saved.read(path))
        except ValidationError as e:
            first = e.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"])
            raise PlanRefused(
                f"{path} is not a saved fleet plan: {where}: {first['msg']}"
            ) from None
        plans = {
            name: saved.parse(plan.model_dump(mode="json"), f"{path} (cluster {name})")
            for name, plan in loaded.plans.items()
        }
        return loaded.model_copy(update={"plans": plans})
