"""plan and apply, for the one cluster of the kubeconfig or each cluster of a fleet.

The saved and the fresh plan are told apart once (`_request`): a saved plan is opened
offline (its file, signature and tree), then checked against its cluster by planning
again; a fresh one is planned. A fleet applies wave by wave, each cluster planned again
after its apply to check it converged; a saved fleet plan is checked on every cluster
before any is written to.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from reconcile.app.session import Session, Target, log, plan_key, reading_ahead, stoppable
from reconcile.app.targets import load_one, load_targets
from reconcile.diagnostics import ReconcileError
from reconcile.engine import fleet as fleets
from reconcile.engine import operations, saved
from reconcile.engine.fleet import FleetPlan, Outcome, WaveRun
from reconcile.engine.operations import ApplyRequest, PlanRequest, SavedPlan
from reconcile.engine.plan import Plan
from reconcile.engine.results import ApplyResult
from reconcile.gpu import checks as gpu

if TYPE_CHECKING:
    from reconcile.desired.fleet import DesiredFleet
    from reconcile.desired.models import DesiredState
    from reconcile.kube.client import Cluster


class Steps(Protocol):
    """Hears the name of each step of planning as it starts, and when planning is done
    (the command line shows the step on a terminal)."""

    def __call__(self, name: str) -> None: ...

    def done(self) -> None: ...


class _Quiet:
    """Clusters of a fleet are planned at once: no step is shown."""

    def __call__(self, name: str) -> None:
        pass

    def done(self) -> None:
        pass


QUIET: Steps = _Quiet()


def _plan(cluster: Cluster, planning: PlanRequest, state: DesiredState, steps: Steps) -> Plan:
    """The plan with the GPU domain's policy and checks, of `state` with `planning`'s options."""
    try:
        return gpu.plan(dataclasses.replace(planning, desired=state), cluster, phase=steps)
    finally:
        steps.done()


# --- plan -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FleetPlanned:
    """Each chosen cluster's plan, or the error that stopped it."""

    fleet: DesiredFleet
    outcomes: list[Outcome[Plan]]

    @property
    def saved(self) -> FleetPlan:
        return FleetPlan(
            fleet=self.fleet.name,
            plans={o.cluster: o.value for o in self.outcomes if o.value is not None},
            errors={o.cluster: o.error for o in self.outcomes if o.error is not None},
        )

    @property
    def needs_attention(self) -> bool:
        return any(o.value.needs_attention for o in self.outcomes if o.value is not None)

    @property
    def has_errors(self) -> bool:
        return any(o.value.has_errors for o in self.outcomes if o.value is not None)


def plan_all(
    session: Session,
    planning: PlanRequest,
    *,
    clusters: tuple[str, ...],
    timeout: float,
    steps: Steps,
) -> Plan | FleetPlanned:
    """The plan of the kubeconfig's cluster (each step told to `steps`), or of each chosen
    cluster of the fleet, planned concurrently. `planning` holds the options; each
    cluster's tree fills it in."""
    with reading_ahead(session, timeout, fleet_clusters=clusters) as connected:
        found = load_targets(session, clusters)
        if found.fleet is None:
            return _plan(connected(), planning, found.targets[0].state, steps)

        def plan_one(name: str) -> Plan:
            target = found.named(name)
            cluster = session.connect(timeout, target)
            return _plan(cluster, planning, target.state, QUIET)

        return FleetPlanned(found.fleet, fleets.each(found.names, plan_one))


def save_plan(plan: Plan | FleetPlan, path: Path, key: bytes | None) -> None:
    """The plan written to `path`, each cluster's plan signed under `key` when there is one."""
    if isinstance(plan, FleetPlan):
        if key is not None:
            plan = plan.model_copy(
                update={"plans": {n: saved.sign(p, key) for n, p in plan.plans.items()}}
            )
    elif key is not None:
        plan = saved.sign(plan, key)
    try:
        plan.save(path)
    except OSError as e:
        raise ReconcileError(f"cannot write the plan to {path}: {e.strerror or e}") from None


def check_writable(path: Path) -> None:
    """Refused now, before the cluster is asked anything, when `path` cannot be written."""
    import os

    directory = path.parent
    if not directory.is_dir():
        raise ReconcileError(
            f"cannot write the plan to {path}: directory {directory} does not exist"
        )
    if not os.access(directory, os.W_OK | os.X_OK) or (
        path.exists() and not os.access(path, os.W_OK)
    ):
        raise ReconcileError(f"cannot write the plan to {path}: permission denied")


# --- apply ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Writing:
    """How apply writes: nodes at once, and whether nodes the node policy refused
    (--allow-missing-image) are written anyway."""

    parallel: int = 8
    allow_refused: bool = False


@dataclass(frozen=True)
class Applied:
    """The kubeconfig's cluster applied: what was written, and the signal (SIGINT,
    SIGTERM) that stopped it early, if one did."""

    result: ApplyResult
    stopped_by: int | None = None


@dataclass(frozen=True)
class ClusterApplied:
    """One cluster's apply in a fleet: what was written, and the plan taken after it."""

    result: ApplyResult
    after: Plan

    @property
    def converged(self) -> bool:
        return (
            self.result.ok
            and not self.after.has_drift
            and not any(f.is_error for f in self.after.findings)
        )


@dataclass(frozen=True)
class FleetApplied:
    fleet: DesiredFleet
    run: WaveRun[ClusterApplied]


def apply_all(
    session: Session,
    planning: PlanRequest,
    writing: Writing,
    *,
    clusters: tuple[str, ...],
    plan_file: Path | None,
    timeout: float,
    steps: Steps,
    progress: Callable[[int, int], None] | None = None,
) -> Applied | FleetApplied:
    """The kubeconfig's cluster applied, or each chosen cluster of the fleet wave by wave;
    from `plan_file` (checked first) when given, else from a plan made now."""
    if session.is_fleet:
        return _apply_fleet(session, planning, writing, clusters, plan_file, timeout)
    # A saved plan is checked offline before anything is sent; a fresh one reads ahead.
    ahead = (
        reading_ahead(session, timeout)
        if plan_file is None
        else nullcontext(session.connect_later(timeout))
    )
    with ahead as connected:
        if plan_file is not None:
            key = plan_key()
            the_saved = saved.load(plan_file)
            state = load_one(session) if session.desired.is_dir() else None
            opened = operations.open_saved(the_saved, state, key=key)
        else:
            opened, state = None, load_one(session)
        cluster = connected()
        target = Target(None, opened.desired if opened is not None else state)  # type: ignore[arg-type]
        request = _request(cluster, target, planning, writing, opened, steps, timeout)
        with stoppable() as stopped:
            started = time.monotonic()
            result = operations.apply(
                request,
                cluster,
                policy=gpu.policy(target.state),
                should_stop=lambda: bool(stopped),
                progress=progress,
            )
            log.debug(
                "%d node(s) and %d object(s) written in %.3f s",
                sum(1 for node in result.nodes if node.applied),
                sum(1 for obj in result.objects if obj.changed is not None),
                time.monotonic() - started,
            )
        return Applied(result, stopped[0] if stopped else None)


def _request(
    cluster: Cluster,
    target: Target,
    planning: PlanRequest,
    writing: Writing,
    opened: SavedPlan | None,
    steps: Steps,
    timeout: float,
) -> ApplyRequest:
    """What apply writes to `cluster`: the saved plan as planning again confirms it (with
    the options apply was given), or the plan made now."""
    if opened is not None:
        verified = operations.verify_saved(
            opened,
            cluster,
            planning,
            policy=gpu.policy(opened.desired),
            checks=gpu.ALL_CHECKS,
        )
        request = ApplyRequest(verified, desired=opened.desired, saved=True, configs=opened.configs)
    else:
        from reconcile.engine.objects.plan import desired_configs

        request = ApplyRequest(
            _plan(cluster, planning, target.state, steps),
            desired=target.state,
            configs=desired_configs(target.state),
        )
    return dataclasses.replace(
        request,
        parallel=writing.parallel,
        allow_refused=writing.allow_refused,
        served_wait=timeout,
    )


def _apply_fleet(
    session: Session,
    planning: PlanRequest,
    writing: Writing,
    clusters: tuple[str, ...],
    plan_file: Path | None,
    timeout: float,
) -> FleetApplied:
    """Wave by wave: each wave's clusters concurrently, each planned (or its saved plan
    checked), applied and planned again; a wave that did not converge stops the run."""
    found = load_targets(session, clusters)
    fleet = found.fleet
    assert fleet is not None
    opened: dict[str, SavedPlan] = {}
    if plan_file is not None:
        opened = _open_fleet_plan(plan_file, fleet, found.targets)
    # A saved fleet plan is verified against every cluster before any is written to: it
    # applies as reviewed everywhere, or nowhere.
    verified: dict[str, tuple[Cluster, ApplyRequest]] = {}
    if opened:

        def verify(name: str) -> tuple[Cluster, ApplyRequest]:
            target = found.named(name)
            cluster = session.connect(timeout, target)
            return cluster, _request(
                cluster, target, planning, writing, opened[name], QUIET, timeout
            )

        outcomes = fleets.each(found.names, verify)
        if refused := [f"{o.cluster}: {o.error}" for o in outcomes if o.error is not None]:
            raise ReconcileError(
                f"the fleet plan was refused ({'; '.join(refused)}): nothing was applied"
            )
        verified = {o.cluster: o.value for o in outcomes if o.value is not None}

    with stoppable() as stopped:

        def apply_one(name: str) -> ClusterApplied:
            target = found.named(name)
            if name in verified:
                cluster, request = verified[name]
            else:
                cluster = session.connect(timeout, target)
                request = _request(cluster, target, planning, writing, None, QUIET, timeout)
            result = operations.apply(
                request, cluster, policy=gpu.policy(target.state), should_stop=lambda: bool(stopped)
            )
            after = _plan(cluster, planning.but(prune=False), target.state, QUIET)
            return ClusterApplied(result, after)

        chosen = set(found.names)
        waves = [[c.name for c in wave if c.name in chosen] for wave in fleet.waves]
        run = fleets.in_waves([w for w in waves if w], apply_one, lambda a: a.converged)
    return FleetApplied(fleet, run)


def _open_fleet_plan(
    plan_file: Path, fleet: DesiredFleet, targets: list[Target]
) -> dict[str, SavedPlan]:
    """Each chosen cluster's plan in a saved fleet plan, checked offline before any
    cluster is touched."""
    the_saved = FleetPlan.load(plan_file)
    if the_saved.fleet != fleet.name:
        raise ReconcileError(f"{plan_file} is a plan for fleet {the_saved.fleet}, not {fleet.name}")
    missing = [str(t.name) for t in targets if t.name not in the_saved.plans]
    if missing:
        raise ReconcileError(f"{plan_file} holds no plan for cluster(s) {', '.join(missing)}")
    key = plan_key()
    return {
        str(t.name): operations.open_saved(the_saved.plans[str(t.name)], t.state, key=key)
        for t in targets
    }
