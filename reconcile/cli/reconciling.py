"""validate, plan and apply: the reconciler's own commands."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import click

from reconcile import diagnostics as diag
from reconcile.app.session import Session
from reconcile.cli.app import (
    ALL_FORMATS,
    DRIFT_FORMATS,
    Phases,
    common_options,
    duration,
    main,
    outputs,
    parallel_option,
    progress_bar,
)
from reconcile.cli.fleets import cluster_option
from reconcile.cli.output import EXIT_ERROR, EXIT_OK, Format, log, plan_exit

if TYPE_CHECKING:
    from reconcile.engine.operations import PlanRequest

F = TypeVar("F", bound=Callable[..., Any])


@main.command()
@common_options
@outputs(*ALL_FORMATS)
def validate(session: Session, output: Format) -> int:
    """Check every file under desired/ without a cluster; print every problem as file:line:col."""
    from reconcile.app.targets import load_tree
    from reconcile.cli.views import view_for

    loaded = load_tree(session, coverage_check=True)
    problems = loaded.problems
    view_for(output).validation(problems)
    if diag.has_errors(problems):
        return EXIT_ERROR
    # A clean run says so in one line (stderr; -q silences it), as terraform validate does.
    trees = list(loaded.fleet.trees.values()) if loaded.fleet is not None else [loaded.state]
    warnings = sum(1 for p in problems if p.severity is diag.Severity.WARNING)
    log.info(
        "%s is valid: %s%d node(s), %d group(s), %d object(s), %d support-matrix row(s)%s",
        session.desired,
        f"{len(trees)} cluster(s), " if loaded.fleet is not None else "",
        sum(len(t.nodes) for t in trees),
        sum(len(t.groups) for t in trees),
        sum(len(t.manifests) for t in trees),
        sum(len(t.matrix) for t in trees),
        f"; {warnings} warning(s) above" if warnings else "",
    )
    return EXIT_OK


def _planning(**options: bool | str | None) -> PlanRequest:
    """The plan request argv asks for; each cluster's desired/ fills it in."""
    from reconcile.desired.models import DesiredState
    from reconcile.engine.operations import PlanRequest
    from reconcile.engine.plan import PlanOptions

    return PlanRequest(DesiredState(), PlanOptions.of(**options))


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


def _check_selector(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """-l SELECTOR parsed before anything is read (a ReconcileError, exit 2, when it does not)."""
    if value is not None:
        from reconcile.kube.selector import SelectorError
        from reconcile.kube.selector import parse as parse_selector

        try:
            parse_selector(value)
        except SelectorError as e:
            raise diag.ReconcileError(f"--selector {value!r}: {e}") from None
    return value


def _object_options(command: F) -> F:
    command = click.option(
        "-l",
        "--selector",
        metavar="SELECTOR",
        callback=_check_selector,
        help="Only the nodes whose live labels it selects (kubectl's -l): their facts are "
        "planned and applied, the other nodes left as they are. Objects are not affected.",
    )(command)
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
        help="Take ownership of fields a controller owns (server-side apply force); fields people changed with kubectl are taken back without it.",
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
    session: Session,
    output: Format,
    out_file: Path | None,
    show_owner: bool,
    timeout: float,
    clusters: tuple[str, ...],
    **options: bool | str | None,
) -> int:
    """Compare desired/ with the live cluster and print each drift as `<node> <key> <value>`
    (and `<kind>/<namespace>/<name> <field> <value>` (`<kind>/<name>` cluster-scoped) for workload objects). In a fleet,
    every cluster (or each --cluster), each line prefixed by the cluster's name."""
    from reconcile.app import reconciling
    from reconcile.app.session import plan_key

    if out_file is not None:
        reconciling.check_writable(out_file)
    key = plan_key() if out_file is not None else None
    planned = reconciling.plan_all(
        session, _planning(**options), clusters=clusters, timeout=timeout, steps=Phases()
    )
    from reconcile.cli import fleets, views  # imported while the nodes were read

    view = views.view_for(output)
    if isinstance(planned, reconciling.FleetPlanned):
        return fleets.show_plans(planned, view, out_file, key, show_owner=show_owner)
    if out_file is not None:
        reconciling.save_plan(planned, out_file, key)
    view.plan(planned, show_owner=show_owner)
    return plan_exit(planned.has_errors, planned.needs_attention)


DRY_RUN: Final = (
    "apply has no --dry-run: `reconcile plan` is its dry run (the same options; every change "
    "apply would make, each object checked by the API server's dry run, nothing changed). To "
    "apply exactly what was reviewed: `reconcile plan --out plan.json`, then `reconcile apply "
    "plan.json`"
)


def _no_dry_run(value: str | None) -> None:
    """kubectl's `--dry-run[=client|server]` on apply: refused, naming the dry run there is
    (`--dry-run=none`, kubectl's real apply, is apply itself)."""
    if value is not None and value != "none":
        raise diag.ReconcileError(DRY_RUN)


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
@click.option(
    "--dry-run",
    is_flag=False,
    flag_value="client",
    default=None,
    hidden=True,
    expose_value=False,
    callback=lambda _ctx, _param, value: _no_dry_run(value),
    help="kubectl's flag: `reconcile plan` is apply's dry run.",
)
def apply(
    session: Session,
    output: Format,
    plan_file: Path | None,
    allow_missing_image: bool,
    parallel: int,
    timeout: float,
    clusters: tuple[str, ...],
    **options: bool | str | None,
) -> int:
    """Fix the drift: one PATCH per drifted node, then server-side apply of the workload
    objects in kind order. Prints exactly the lines it changed.

    With PLAN_FILE (from `plan --out`), plans again from the same desired/ with the
    options given here (the ones the plan was made with: --prune, --force-conflicts, ...)
    and applies the file only if it is what planning gives, refusing it as stale if any
    of its nodes or objects changed since. With RECONCILE_PLAN_KEY set, the plan must carry
    the signature `plan --out` made with that key. Every node patch and object is dry-run
    by the API server first; when it would reject any (a conflict, an immutable field, an
    invalid manifest, an admission policy), nothing at all is applied, except the CRDs and
    Namespaces the cluster lacks, which are created first (as the plan shows) so that the
    objects that need them can be dry-run too.
    """
    from reconcile.app import reconciling
    from reconcile.cli import fleets, views

    applied = reconciling.apply_all(
        session,
        _planning(**options),
        reconciling.Writing(parallel, allow_refused=allow_missing_image),
        clusters=clusters,
        plan_file=plan_file,
        timeout=timeout,
        steps=Phases(),
        progress=progress_bar("nodes"),
    )
    return fleets.show_applied(applied, views.view_for(output))
