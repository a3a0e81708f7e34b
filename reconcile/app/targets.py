"""desired/ read into the clusters a command works on: one tree, or a fleet of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from reconcile import diagnostics as diag
from reconcile.app.session import Session, Target
from reconcile.diagnostics import Diagnostic, InvalidInput, ReconcileError

if TYPE_CHECKING:
    from reconcile.desired.fleet import DesiredFleet
    from reconcile.desired.models import DesiredState


@dataclass(frozen=True)
class Loaded:
    """desired/ as read: one tree, or a fleet of them; and every problem found."""

    fleet: DesiredFleet | None
    state: DesiredState
    problems: list[Diagnostic]


@dataclass(frozen=True)
class Targets:
    """The clusters a command works on, in the fleet's order; `fleet` is None for the one
    cluster of the kubeconfig (then there is exactly one target, named None)."""

    fleet: DesiredFleet | None
    targets: list[Target]

    @property
    def names(self) -> list[str]:
        return [str(t.name) for t in self.targets]

    def named(self, name: str) -> Target:
        return next(t for t in self.targets if t.name == name)


def load_tree(session: Session, *, coverage_check: bool) -> Loaded:
    """desired/ loaded, and every problem with it: the files, then (when they load) the
    GPU label conventions and what can never schedule, for each cluster's tree of a
    fleet (each problem once). `coverage_check` adds the support-matrix check that
    `plan` makes against the cluster instead."""
    from reconcile.desired import fleet as fleets
    from reconcile.engine import placement
    from reconcile.engine.objects import plan as object_plan
    from reconcile.gpu import checks, drivers

    fleet, state, problems = fleets.load(session.desired)
    if not diag.has_errors(problems):
        found = [
            problem
            for tree in (fleet.trees.values() if fleet is not None else (state,))
            for problem in (
                *drivers.desired_diagnostics(tree, coverage_check=coverage_check),
                *checks.mig_diagnostics(tree),
                *placement.desired_diagnostics(tree),
                *object_plan.desired_diagnostics(tree),
            )
        ]
        problems = sorted(dict.fromkeys([*problems, *found]), key=diag.sort_key)
    return Loaded(fleet, state, problems)


def _checked(session: Session) -> Loaded:
    """desired/, refused (InvalidInput) when it has an error; its warnings told."""
    loaded = load_tree(session, coverage_check=False)
    if diag.has_errors(loaded.problems):
        raise InvalidInput(loaded.problems)
    session.on_problems(loaded.problems)
    return loaded


def load_one(session: Session) -> DesiredState:
    """The validated desired state of one cluster's tree; a fleet is refused."""
    loaded = _checked(session)
    if loaded.fleet is not None:
        raise ReconcileError(
            f"{session.desired}/clusters.yaml declares a fleet: this command works on one "
            "cluster's tree; use a command that takes --cluster"
        )
    return loaded.state


def load_targets(session: Session, clusters: tuple[str, ...]) -> Targets:
    """The clusters a fleet-aware command works on: every cluster of the fleet, or those
    named by --cluster; without a fleet, the one cluster of the kubeconfig."""
    loaded = _checked(session)
    fleet = loaded.fleet
    if fleet is None:
        if clusters:
            raise ReconcileError(
                f"--cluster needs a fleet: {session.desired}/clusters.yaml not found"
            )
        return Targets(None, [Target(None, loaded.state)])
    if session.context:
        raise ReconcileError(
            "--context does not apply to a fleet: each cluster names its context in clusters.yaml"
        )
    names = [c.name for c in fleet.clusters]
    unknown = [c for c in clusters if c not in names]
    if unknown:
        raise ReconcileError(
            f"--cluster {unknown[0]}: the fleet has no such cluster (it has: {', '.join(names)})"
        )
    chosen = [c for c in fleet.clusters if not clusters or c.name in clusters]
    return Targets(
        fleet, [Target(c.name, fleet.trees[c.name], c.context, c.inCluster) for c in chosen]
    )


def one_target(session: Session, cluster: str | None, command: str) -> Target:
    """The one cluster a command that works on a single cluster runs on: in a fleet the
    one --cluster names (required), else the kubeconfig's."""
    found = load_targets(session, (cluster,) if cluster else ())
    if found.fleet is not None and cluster is None:
        names = ", ".join(c.name for c in found.fleet.clusters)
        raise ReconcileError(
            f"{command} works on one cluster of the fleet: give --cluster NAME (one of: {names})"
        )
    return found.targets[0]
