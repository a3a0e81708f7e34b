"""validate, plan and apply: the reconciler's own commands."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from reconcile import diagnostics as diag
from reconcile.cli.app import (
    ALL_FORMATS,
    DRIFT_FORMATS,
    Globals,
    Target,
    common_options,
    desired_problems,
    duration,
    errors_to_exit_codes,
    fail,
    gpu_plan,
    load_or_fail,
    load_targets,
    main,
    outputs,
    parallel_option,
    plan_key,
    progress_bar,
    reading_ahead,
    stderr,
    stdout,
    stoppable,
)
from reconcile.cli.fleets import Applied, apply_fleet, cluster_option, plan_fleet
from reconcile.cli.output import (
    EXIT_DRIFT,
    EXIT_ERROR,
    EXIT_OK,
    log,
)

if TYPE_CHECKING:
    from reconcile.desired.models import DesiredState
    from reconcile.engine.operations import ApplyRequest, PlanRequest, SavedPlan
    from reconcile.kube.client import Cluster

F = TypeVar("F", bound=Callable[..., Any])


@main.command()
@common_options
@outputs(*ALL_FORMATS)
def validate(g: Globals) -> None:
    """Check every file under desired/ without a cluster; print every problem as file:line:col."""
    from reconcile.cli.views import render_validation

    _, problems = desired_problems(g, coverage_check=True)
    render_validation(problems, g.output, stdout(), stderr())
    sys.exit(EXIT_ERROR if diag.has_errors(problems) else EXIT_OK)


def _plan_request(
    state: DesiredState | None,
    *,
    prune: bool = False,
    allow_empty_prune: bool = False,
    prune_namespace_contents: bool = False,
    force_conflicts: bool = False,
    recreate: bool = False,
    allow_missing_nodes: bool = False,
    allow_evictions: bool = False,
) -> PlanRequest:
    """The plan request argv asks for (desired/ filled in later when `state` is None)."""
    from reconcile.desired.models import DesiredState
    from reconcile.engine.operations import PlanRequest

    return PlanRequest(
        state if state is not None else DesiredState(),
        prune=prune,
        allow_empty_prune=allow_empty_prune,
        prune_namespace_contents=prune_namespace_contents,
        force_conflicts=force_conflicts,
        recreate=recreate,
        allow_missing_nodes=allow_missing_nodes,
        allow_evictions=allow_evictions,
    )


def _prune_options(command: F) -> F:
    command = click.option(
        "--prune-namespace-contents",
        is_flag=True,
        help="With --prune: delete a Namespace even when it holds objects reconcile does not manage.",
    )(command)
    command = click.option(
        "--allow-empty-prune",
        is_flag=True,
        help="With --prune: allow deleting every object and label reconcile manages (an empty desired/).",
    )(command)
    return click.option(
        "--prune",
        is_flag=True,
        help="Also remove labels and objects reconcile applied earlier that are no longer declared.",
    )(command)


def _check_writable(path: Path) -> None:
    """Fail now, before the cluster is asked anything, when `path` cannot be written."""
    import os

    directory = path.parent
    if not directory.is_dir():
        fail(f"cannot write the plan to {path}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK) or (
        path.exists() and not os.access(path, os.W_OK)
    ):
        fail(f"cannot write the plan to {path}: permission denied")


def _object_options(command: F) -> F:
    command = click.option(
        "--timeout",
        default="5m",
        show_default=True,
        callback=duration,
        metavar="DURATION",
        help="Overall bound: transient failures (429, 5xx, dropped connections) are retried until then.",
    )(command)
    command = click.option(
        "--recreate",
        is_flag=True,
        help="Delete and create objects whose changed fields cannot be updated in place.",
    )(command)
    command = click.option(
        "--allow-evictions",
        is_flag=True,
        help="A NoExecute taint that evicts running pods is a warning, not a finding that stops apply.",
    )(command)
    command = click.option(
        "--allow-missing-nodes",
        is_flag=True,
        help="Declared nodes absent from the cluster are noted, not drift (nodes come and go).",
    )(command)
    return click.option(
        "--force-conflicts",
        is_flag=True,
        help="Take ownership of fields another field manager owns (server-side apply force).",
    )(command)


@main.command()
@common_options
@outputs(*DRIFT_FORMATS)
@click.option(
    "--out",
    "out_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Save the plan (JSON) for `apply PLAN`.",
)
@_prune_options
@click.option("--show-owner", is_flag=True, help="Add the writer of each label as a fourth column.")
@_object_options
@cluster_option
def plan(
    g: Globals,
    out_file: Path | None,
    prune: bool,
    allow_empty_prune: bool,
    prune_namespace_contents: bool,
    show_owner: bool,
    force_conflicts: bool,
    recreate: bool,
    allow_missing_nodes: bool,
    allow_evictions: bool,
    timeout: float,
    clusters: tuple[str, ...],
) -> None:
    """Compare desired/ with the live cluster and print each drift as `<node> <key> <value>`
    (and `<kind>/<namespace>/<name> <field> <value>` for workload objects). In a fleet,
    every cluster (or each --cluster), each line prefixed by the cluster's name."""
    if out_file is not None:
        _check_writable(out_file)
    key = plan_key() if out_file is not None else None
    with errors_to_exit_codes(), reading_ahead(g, timeout, fleet_clusters=clusters) as connected:
        fleet, targets = load_targets(g, clusters)
        request = _plan_request(
            targets[0].state,
            prune=prune,
            allow_empty_prune=allow_empty_prune,
            prune_namespace_contents=prune_namespace_contents,
            force_conflicts=force_conflicts,
            recreate=recreate,
            allow_missing_nodes=allow_missing_nodes,
            allow_evictions=allow_evictions,
        )
        if fleet is not None:
            sys.exit(
                plan_fleet(
                    g,
                    fleet,
                    targets,
                    request,
                    timeout=timeout,
                    out_file=out_file,
                    key=key,
                    show_owner=show_owner,
                )
            )
        the_plan = gpu_plan(connected(), request)
        if out_file is not None:
            from reconcile.engine import saved

            try:
                (saved.sign(the_plan, key) if key is not None else the_plan).save(out_file)
            except OSError as e:
                fail(f"cannot write the plan to {out_file}: {e.strerror or e}")
        from reconcile.cli.views import render_plan  # imported while the nodes were read

        render_plan(the_plan, g.output, stdout(), stderr(), show_owner=show_owner)
    sys.exit(EXIT_DRIFT if the_plan.needs_attention else EXIT_OK)


@main.command()
@common_options
@outputs(*DRIFT_FORMATS)
@click.argument(
    "plan_file", required=False, type=click.Path(path_type=Path, dir_okay=False, exists=True)
)
@_prune_options
@click.option(
    "--allow-missing-image",
    is_flag=True,
    help="Converge nodes onto driver images the support matrix does not list.",
)
@parallel_option
@_object_options
@cluster_option
def apply(
    g: Globals,
    plan_file: Path | None,
    prune: bool,
    allow_empty_prune: bool,
    prune_namespace_contents: bool,
    allow_missing_image: bool,
    parallel: int,
    force_conflicts: bool,
    recreate: bool,
    allow_missing_nodes: bool,
    allow_evictions: bool,
    timeout: float,
    clusters: tuple[str, ...],
) -> None:
    """Fix the drift: one PATCH per drifted node, then server-side apply of the workload
    objects in kind order. Prints exactly the lines it changed.

    With PLAN_FILE (from `plan --out`), plans again from the same desired/ with the
    options given here (the ones the plan was made with: --prune, --force-conflicts, ...)
    and applies the file only if it is what planning gives, refusing it as stale if any
    of its nodes or objects changed since. With RECONCILE_PLAN_KEY set, the plan must carry
    the signature `plan --out` made with that key. When the API server would reject any
    object (a conflict, an immutable field, an invalid manifest), nothing at all is
    applied.
    """
    # A saved plan is checked offline before anything is sent; a fresh one reads ahead
    # (and the modules below are imported while the nodes are read).
    ahead = (
        reading_ahead(g, timeout) if plan_file is None else nullcontext(g.connect_later(timeout))
    )
    with errors_to_exit_codes(), ahead as connected:
        from reconcile.cli.views import render_apply
        from reconcile.engine import operations
        from reconcile.engine.workloads import desired_configs
        from reconcile.gpu import checks as gpu

        # What planning is asked for; desired/ fills in once it is read.
        planning = _plan_request(
            None,
            prune=prune,
            allow_empty_prune=allow_empty_prune,
            prune_namespace_contents=prune_namespace_contents,
            force_conflicts=force_conflicts,
            recreate=recreate,
            allow_missing_nodes=allow_missing_nodes,
            allow_evictions=allow_evictions,
        )
        if (g.desired / "clusters.yaml").is_file():
            _apply_fleet(g, plan_file, planning, clusters, timeout, parallel, allow_missing_image)
        if plan_file is not None:
            from reconcile.engine import saved

            key = plan_key()
            # Offline first: the file, its signature, the tree; then the cluster.
            the_saved = saved.load(plan_file)
            state = load_or_fail(g) if g.desired.is_dir() else None
            opened = operations.open_saved(the_saved, state, key=key)
            state = opened.desired
            cluster = connected()
            request = _saved_request(opened, cluster, planning)
        else:
            state = load_or_fail(g)
            cluster = connected()
            request = operations.ApplyRequest(
                gpu_plan(cluster, dataclasses.replace(planning, desired=state)),
                desired=state,
                configs=desired_configs(state),
            )
        request = dataclasses.replace(request, parallel=parallel, allow_refused=allow_missing_image)
        with stoppable() as stopped:
            started = time.monotonic()
            result = operations.apply(
                request,
                cluster,
                policy=gpu.policy(state) if state is not None else gpu.GpuPolicy(),
                should_stop=lambda: bool(stopped),
                progress=progress_bar("nodes"),
            )
            log.debug(
                "%d node(s) and %d object(s) written in %.3f s",
                sum(1 for node in result.nodes if node.applied),
                sum(1 for obj in result.objects if obj.changed is not None),
                time.monotonic() - started,
            )
        render_apply(result, g.output, stdout(), stderr())
        if stopped:
            stderr().write(
                f"interrupted: what was applied is printed above; {len(result.skipped)} node(s) "
                "and the objects after them were not started: run apply again to finish\n"
            )
            sys.exit(128 + stopped[0])
    sys.exit(EXIT_OK if result.ok else EXIT_ERROR)


def _saved_request(opened: SavedPlan, cluster: Cluster, planning: PlanRequest) -> ApplyRequest:
    """A saved plan, checked against the cluster (re-planned with the options apply was
    given), ready to apply: the same for one cluster and for each cluster of a fleet."""
    from reconcile.engine import operations
    from reconcile.gpu import checks as gpu

    verified = operations.verify_saved(
        opened,
        cluster,
        planning,
        policy=gpu.policy(opened.desired),
        checks=gpu.ALL_CHECKS,
    )
    return operations.ApplyRequest(
        verified, desired=opened.desired, saved=True, configs=opened.configs
    )


def _apply_fleet(
    g: Globals,
    plan_file: Path | None,
    planning: PlanRequest,
    clusters: tuple[str, ...],
    timeout: float,
    parallel: int,
    allow_missing_image: bool,
) -> None:
    """apply over a fleet: wave by wave, each cluster planned (or its saved plan
    checked), applied and planned again; exits."""
    from reconcile.engine import fleet as fleets
    from reconcile.engine import operations
    from reconcile.engine.fleet import FleetPlan
    from reconcile.engine.workloads import desired_configs
    from reconcile.gpu import checks as gpu

    fleet, targets = load_targets(g, clusters)
    assert fleet is not None
    opened: dict[str, SavedPlan] = {}
    if plan_file is not None:
        saved = FleetPlan.load(plan_file)
        if saved.fleet != fleet.name:
            fail(f"{plan_file} is a plan for fleet {saved.fleet}, not {fleet.name}")
        missing = [t.name for t in targets if t.name not in saved.plans]
        if missing:
            fail(f"{plan_file} holds no plan for cluster(s) {', '.join(map(str, missing))}")
        key = plan_key()
        # Every cluster's plan checked offline before any cluster is touched.
        opened = {
            str(t.name): operations.open_saved(saved.plans[str(t.name)], t.state, key=key)
            for t in targets
        }

    # A saved fleet plan is verified against every cluster before any is written to: it
    # applies as reviewed everywhere, or nowhere.
    verified: dict[str, tuple[Cluster, ApplyRequest]] = {}
    if plan_file is not None:
        by_name = {str(t.name): t for t in targets}

        def verify(name: str) -> tuple[Cluster, ApplyRequest]:
            cluster = g.connect(timeout, by_name[name])
            return cluster, _saved_request(opened[name], cluster, planning)

        outcomes = fleets.each(list(by_name), verify)
        if refused := [f"{o.cluster}: {o.error}" for o in outcomes if o.error is not None]:
            fail(f"the fleet plan was refused ({'; '.join(refused)}): nothing was applied")
        verified = {o.cluster: o.value for o in outcomes if o.value is not None}

    with stoppable() as stopped:

        def apply_one(target: Target) -> Applied:
            policy = gpu.policy(target.state)
            if plan_file is not None:
                cluster, request = verified[str(target.name)]
            else:
                cluster = g.connect(timeout, target)
                request = operations.ApplyRequest(
                    gpu_plan(
                        cluster, dataclasses.replace(planning, desired=target.state), quiet=True
                    ),
                    desired=target.state,
                    configs=desired_configs(target.state),
                )
            request = dataclasses.replace(
                request, parallel=parallel, allow_refused=allow_missing_image
            )
            result = operations.apply(
                request, cluster, policy=policy, should_stop=lambda: bool(stopped)
            )
            after = gpu_plan(
                cluster,
                dataclasses.replace(planning, desired=target.state, prune=False),
                quiet=True,
            )
            return Applied(result, after)

        code = apply_fleet(g, fleet, targets, apply_one)
    sys.exit(code)
