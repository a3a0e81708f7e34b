"""plan and apply over the clusters of a fleet (desired/clusters.yaml).

Each cluster is planned (or applied) as `plan` and `apply` do it for one, concurrently
with a bound. With more than one cluster in a run every stdout line starts with the
cluster's name (`report`'s with it as a variable name, `LAB__`) and every stderr line
with `<cluster>: `; with one, the lines are those of a single cluster. `-o json` is a FleetPlan (one plan per cluster); `-o markdown` a
summary table, then one section per cluster.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar, cast

import click

from reconcile.cli.app import Globals, Target, fail, stderr, stdout
from reconcile.cli.output import EXIT_DRIFT, EXIT_ERROR, EXIT_OK, Format, Prefixed, for_cluster

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

if TYPE_CHECKING:
    from reconcile.desired.fleet import DesiredFleet
    from reconcile.engine.apply import ApplyResult
    from reconcile.engine.fleet import Outcome
    from reconcile.engine.operations import PlanRequest
    from reconcile.engine.plan import Plan
    from reconcile.kube.client import Cluster


def cluster_option(command: F) -> F:
    return click.option(
        "--cluster",
        "clusters",
        multiple=True,
        metavar="NAME",
        help="In a fleet (desired/clusters.yaml): only this cluster (repeatable).",
    )(command)


def name_first(cluster: str) -> str:
    """A fleet's text lines on stdout: `<cluster> <line>`."""
    return f"{cluster} "


def _prefixed(
    name: str | None, several: bool, out: TextIO, err: TextIO, first: Callable[[str], str]
) -> tuple[TextIO, TextIO]:
    if not several or name is None:
        return out, err
    return cast(TextIO, Prefixed(out, first(name))), cast(TextIO, Prefixed(err, f"{name}: "))


def show_each(
    outcomes: Sequence[Outcome[T]],
    render: Callable[[T, TextIO, TextIO], None],
    first: Callable[[str], str] = name_first,
) -> list[str]:
    """Render each cluster's value (each stdout line started with `first(cluster)` when
    there are several); the failed clusters' `<cluster>: <error>` lines, returned for the
    summary."""
    several = len(outcomes) > 1
    failed = []
    for outcome in outcomes:
        out, err = _prefixed(outcome.cluster, several, stdout(), stderr(), first)
        with for_cluster(outcome.cluster if several else None):
            if outcome.value is not None:
                render(outcome.value, out, err)
        if outcome.error is not None:
            failed.append(f"{outcome.cluster}: {outcome.error}")
    return failed


def fail_clusters(failed: Sequence[str], total: int) -> None:
    """Exit 2 with one `error:` line when any cluster failed (the others were shown)."""
    if failed:
        fail(f"{len(failed)} of {total} cluster(s) failed: " + "; ".join(failed))


# --- plan -----------------------------------------------------------------------------------


def plan_fleet(
    g: Globals,
    fleet: DesiredFleet,
    targets: list[Target],
    planning: PlanRequest,
    *,
    timeout: float,
    out_file: Path | None,
    key: bytes | None = None,
    show_owner: bool,
) -> int:
    """Plan every target concurrently; render; the exit code of the fleet. The saved
    plans are signed with `key` when there is one."""
    import dataclasses

    from reconcile.cli.app import gpu_plan
    from reconcile.cli.views import render_plan
    from reconcile.engine import fleet as fleets

    by_name = {t.name: t for t in targets}

    def plan_one(name: str) -> Plan:
        target = by_name[name]
        cluster = g.connect(timeout, target)
        return gpu_plan(cluster, dataclasses.replace(planning, desired=target.state), quiet=True)

    outcomes = fleets.each([str(t.name) for t in targets], plan_one)
    saved = fleets.FleetPlan(
        fleet=fleet.name,
        plans={o.cluster: o.value for o in outcomes if o.value is not None},
        errors={o.cluster: o.error for o in outcomes if o.error is not None},
    )
    if g.output is Format.JSON:
        from reconcile.cli.views import write_json

        write_json(saved.model_dump(mode="json"), stdout())
    elif g.output is Format.MARKDOWN:
        from reconcile.cli.views import fleet_markdown

        fleet_markdown(saved, stdout())
    failed = (
        [f"{name}: {error}" for name, error in saved.errors.items()]
        if g.output in (Format.JSON, Format.MARKDOWN)
        else show_each(
            outcomes,
            lambda plan, out, err: render_plan(plan, g.output, out, err, show_owner=show_owner),
        )
    )
    if out_file is not None:
        if failed:
            stderr().write(f"the fleet plan was not saved to {out_file}: a cluster failed\n")
        else:
            from reconcile.engine.saved import sign

            signed = (
                {n: sign(p, key) for n, p in saved.plans.items()}
                if key is not None
                else saved.plans
            )
            try:
                saved.model_copy(update={"plans": signed}).save(out_file)
            except OSError as e:
                fail(f"cannot write the plan to {out_file}: {e.strerror or e}")
    fail_clusters(failed, len(targets))
    return EXIT_DRIFT if any(p.needs_attention for p in saved.plans.values()) else EXIT_OK


# --- apply ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Applied:
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


def apply_fleet(
    g: Globals,
    fleet: DesiredFleet,
    targets: list[Target],
    apply_one: Callable[[Target], Applied],
) -> int:
    """Wave by wave: each wave's clusters concurrently, each checked converged (its plan
    taken again is empty, with no error finding) before the next wave starts."""
    from reconcile.cli.views import render_apply
    from reconcile.engine import fleet as fleets

    chosen = {t.name for t in targets}
    by_name = {t.name: t for t in targets}
    waves = [[c.name for c in wave if c.name in chosen] for wave in fleet.waves]
    waves = [wave for wave in waves if wave]
    run = fleets.in_waves(waves, lambda name: apply_one(by_name[name]), lambda a: a.converged)

    def render(applied: Applied, out: TextIO, err: TextIO) -> None:
        render_apply(applied.result, g.output, out, err)
        if applied.result.ok and not applied.converged:
            left = sum(1 for _ in applied.after.lines()) + len(applied.after.objects)
            errors = [f for f in applied.after.findings if f.is_error]
            err.write(
                f"not converged: the plan taken after apply still has {left} change(s) and "
                f"{len(errors)} error finding(s)\n"
            )

    failed = show_each(run.outcomes, render)
    failed += [
        f"{o.cluster}: not converged" for o in run.outcomes if o.value and not o.value.converged
    ]
    if run.stopped_after is not None:
        done = [o.cluster for o in run.outcomes if o.value is not None and o.value.converged]
        fail(
            f"wave {run.stopped_after} did not converge ({'; '.join(failed)}): "
            f"applied: {', '.join(done) or 'none'}; not applied: "
            f"{', '.join(run.not_started) or 'none'}"
        )
    return EXIT_OK if not failed else EXIT_ERROR


# --- the commands that read a cluster -------------------------------------------------------


def per_cluster(
    g: Globals,
    clusters: tuple[str, ...],
    work: Callable[[Target, Cluster], T],
    show: Callable[[T, TextIO, TextIO], int],
    *,
    needs_desired: bool = True,
    first: Callable[[str], str] = name_first,
    check: Callable[[Mapping[str | None, T]], None] | None = None,
) -> int:
    """A read-only command on one cluster, or on each cluster of a fleet: `work` reads,
    `show` renders and says the exit code. In a fleet: text lines started with
    `first(cluster)` when several clusters run, `-o json` one document `{"kind":
    "FleetResult", "clusters": {...}}`, `-o markdown` a section per cluster; the exit code
    is the worst cluster's, 2 (with one `error:` line naming them) when any cluster
    failed. `check` sees every value read before anything is shown (by cluster when the
    lines are prefixed, else under None) and may refuse them all with a ReconcileError."""
    import json

    from reconcile.cli.app import errors_to_exit_codes, load_targets
    from reconcile.desired import fleet as desired_fleet
    from reconcile.desired.models import DesiredState
    from reconcile.engine import fleet as fleets

    with errors_to_exit_codes():
        if not clusters and not desired_fleet.is_fleet(g.desired) and not needs_desired:
            targets = [Target(None, DesiredState())]
        else:
            _, targets = load_targets(g, clusters)
        if targets[0].name is None:
            value = work(targets[0], g.connect())
            if check is not None:
                check({None: value})
            return show(value, stdout(), stderr())
        by_name = {t.name: t for t in targets}
        outcomes = fleets.each(
            [str(t.name) for t in targets],
            lambda name: work(by_name[name], g.connect(None, by_name[name])),
        )
        if check is not None:
            several = len(outcomes) > 1
            check(
                {o.cluster if several else None: o.value for o in outcomes if o.value is not None}
            )
    codes = [EXIT_OK]
    if g.output in (Format.JSON, Format.MARKDOWN):
        documents = {}
        for outcome in outcomes:
            if outcome.value is None:
                continue
            out, err = io.StringIO(), io.StringIO()
            with for_cluster(outcome.cluster):
                codes.append(show(outcome.value, out, err))
            stderr().write(err.getvalue())
            documents[outcome.cluster] = out.getvalue()
        if g.output is Format.JSON:
            from reconcile.cli.views import write_json
            from reconcile.engine.plan import PLAN_API_VERSION

            write_json(
                {
                    "apiVersion": PLAN_API_VERSION,
                    "kind": "FleetResult",
                    "clusters": {name: json.loads(text) for name, text in documents.items()},
                    "errors": {o.cluster: o.error for o in outcomes if o.error is not None},
                },
                stdout(),
            )
        else:
            for name, text in documents.items():
                stdout().write(f"##### `{name}`\n\n{text}\n")
        failed = [f"{o.cluster}: {o.error}" for o in outcomes if o.error is not None]
    else:
        failed = show_each(
            outcomes, lambda value, out, err: codes.append(show(value, out, err)), first
        )
    fail_clusters(failed, len(targets))
    return max(codes)
