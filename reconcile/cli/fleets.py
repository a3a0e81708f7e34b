"""plan and apply over the clusters of a fleet (desired/clusters.yaml).

Each cluster is planned (or applied) as `plan` and `apply` do it for one, concurrently
with a bound. With more than one cluster in a run every stdout line starts with the
cluster's name (`report`'s with it as a variable name, `LAB__`) and every stderr line
with `<cluster>: `; with one, the lines are those of a single cluster. `-o json` is a FleetPlan (one plan per cluster); `-o markdown` a
summary table, then one section per cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from reconcile.app.session import Session, Target
from reconcile.cli.app import stderr
from reconcile.cli.output import EXIT_ERROR, EXIT_OK, name_first, plan_exit
from reconcile.diagnostics import ReconcileError

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

if TYPE_CHECKING:
    from reconcile.app.reconciling import Applied, ClusterApplied, FleetApplied, FleetPlanned
    from reconcile.cli.views import View
    from reconcile.engine.fleet import Outcome
    from reconcile.kube.client import Cluster


def cluster_option(command: F) -> F:
    return click.option(
        "--cluster",
        "clusters",
        multiple=True,
        metavar="NAME",
        help="In a fleet (desired/clusters.yaml): only this cluster (repeatable).",
    )(command)


def _failed(outcomes: Sequence[Outcome[Any]]) -> list[str]:
    """The failed clusters as `<cluster>: <error>`, in the order run."""
    return [f"{o.cluster}: {o.error}" for o in outcomes if o.error is not None]


def fail_clusters(failed: Sequence[str], total: int) -> None:
    """One error naming the clusters that failed, when any did (the others were shown)."""
    if failed:
        raise ReconcileError(f"{len(failed)} of {total} cluster(s) failed: " + "; ".join(failed))


# --- plan -----------------------------------------------------------------------------------


def show_plans(
    planned: FleetPlanned,
    view: View,
    out_file: Path | None,
    key: bytes | None,
    *,
    show_owner: bool,
) -> int:
    """Each cluster's plan shown, the fleet plan saved (signed with `key` when there is
    one) unless a cluster failed; the exit code of the fleet."""
    from reconcile.app.reconciling import save_plan

    view.fleet_plan(planned, show_owner=show_owner)
    failed = _failed(planned.outcomes)
    if out_file is not None:
        if failed:
            stderr().write(f"the fleet plan was not saved to {out_file}: a cluster failed\n")
        else:
            save_plan(planned.saved, out_file, key)
    fail_clusters(failed, len(planned.outcomes))
    return plan_exit(planned.has_errors, planned.needs_attention)


# --- apply ----------------------------------------------------------------------------------


def show_applied(applied: Applied | FleetApplied, view: View) -> int:
    """The apply shown on `view` and its exit code: for one cluster, what it wrote (and,
    when a signal stopped it, what was left); for a fleet, each cluster's as it comes, its
    lines prefixed when there are several (with a note where the plan taken after it is
    not empty), or one error naming the wave that stopped it."""
    from reconcile.app.reconciling import Applied
    from reconcile.cli.views import each_cluster

    if isinstance(applied, Applied):
        view.apply(applied.result)
        if applied.stopped_by is None:
            return EXIT_OK if applied.result.ok else EXIT_ERROR
        stderr().write(
            f"interrupted: what was applied is printed above; {len(applied.result.skipped)} "
            "node(s) and the objects after them were not started: run apply again to finish\n"
        )
        return 128 + applied.stopped_by
    run = applied.run

    def show(cluster_view: View, one: ClusterApplied) -> None:
        cluster_view.apply(one.result)
        if one.result.ok and not one.converged:
            left = sum(1 for _ in one.after.lines()) + len(one.after.objects)
            errors = [f for f in one.after.findings if f.is_error]
            cluster_view.err.write(
                f"not converged: the plan taken after apply still has {left} change(s) and "
                f"{len(errors)} error finding(s)\n"
            )

    each_cluster(view, run.outcomes, show)
    failed = _failed(run.outcomes)
    failed += [
        f"{o.cluster}: not converged" for o in run.outcomes if o.value and not o.value.converged
    ]
    if run.stopped_after is not None:
        done = [o.cluster for o in run.outcomes if o.value is not None and o.value.converged]
        raise ReconcileError(
            f"wave {run.stopped_after} did not converge ({'; '.join(failed)}): "
            f"applied: {', '.join(done) or 'none'}; not applied: "
            f"{', '.join(run.not_started) or 'none'}"
        )
    return EXIT_OK if not failed else EXIT_ERROR


# --- the commands that read a cluster -------------------------------------------------------


def per_cluster(
    session: Session,
    view: View,
    clusters: tuple[str, ...],
    work: Callable[[Target, Cluster], T],
    show: Callable[[View, T], int],
    *,
    needs_desired: bool = True,
    first: Callable[[str], str] = name_first,
    check: Callable[[Mapping[str | None, T]], None] | None = None,
) -> int:
    """A read-only command on one cluster, or on each cluster of a fleet: `work` reads,
    `show` shows on the view it is given and says the exit code. In a fleet the view
    composes the clusters' outputs (`View.clusters`): text lines started with
    `first(cluster)` when several clusters run, `-o json` one document `{"kind":
    "FleetResult", "clusters": {...}}`, `-o markdown` a section per cluster; the exit code
    is the worst cluster's, 2 (with one `error:` line naming them) when any cluster
    failed. `check` sees every value read before anything is shown (by cluster when the
    lines are prefixed, else under None) and may refuse them all with a ReconcileError."""
    from reconcile.app.targets import load_targets
    from reconcile.desired import fleet as desired_fleet
    from reconcile.desired.models import DesiredState
    from reconcile.engine import fleet as fleets

    if not clusters and not desired_fleet.is_fleet(session.desired) and not needs_desired:
        targets = [Target(None, DesiredState())]
    else:
        targets = load_targets(session, clusters).targets
    if targets[0].name is None:
        value = work(targets[0], session.connect())
        if check is not None:
            check({None: value})
        return show(view, value)
    by_name = {t.name: t for t in targets}
    outcomes = fleets.each(
        [str(t.name) for t in targets],
        lambda name: work(by_name[name], session.connect(None, by_name[name])),
    )
    if check is not None:
        several = len(outcomes) > 1
        check({o.cluster if several else None: o.value for o in outcomes if o.value is not None})
    codes = [EXIT_OK]
    view.clusters(
        outcomes, lambda cluster_view, value: codes.append(show(cluster_view, value)), first
    )
    fail_clusters(_failed(outcomes), len(targets))
    return max(codes)
