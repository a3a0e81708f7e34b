"""import: live nodes brought under git, as files in desired/."""

from __future__ import annotations

from typing import TYPE_CHECKING

from reconcile import diagnostics as diag
from reconcile.app.session import Session, Target, log
from reconcile.app.targets import one_target
from reconcile.diagnostics import InvalidInput, ReconcileError
from reconcile.engine.imports import (
    FileChange,
    ImportRequest,
    plan_import,
    plan_rule_import,
    refused_prefix,
    write_import,
)

if TYPE_CHECKING:
    from reconcile.desired.models import DesiredState


def import_nodes(
    session: Session,
    *,
    cluster: str | None,
    selector: str | None,
    prefixes: tuple[str, ...],
    group_by: str | None,
    dry_run: bool,
    nfd_rules: bool = False,
) -> list[FileChange]:
    """The file changes that bring the selected live nodes under git, written into
    desired/ (the fleet's cluster's overlay, in a fleet) unless `dry_run`. Labels kept:
    those starting with `prefixes`, else the discovered ones without the operator's.
    With `nfd_rules`, the cluster's NodeFeatureRule objects too, as new manifests under
    workloads/ (all planned before anything is written: a refusal writes nothing)."""
    from reconcile.desired.reader import load_desired
    from reconcile.gpu.provenance import DISCOVERED_PREFIXES, OPERATOR_PREFIXES

    for prefix in prefixes:
        if (problem := refused_prefix(prefix)) is not None:
            raise ReconcileError(problem)
    target: Target | None = None
    state: DesiredState | None
    if session.is_fleet or cluster:
        target = one_target(session, cluster, "import")
        state, root = target.state, session.desired / "clusters" / str(target.name)
    else:
        state, problems = load_desired(session.desired) if session.desired.exists() else (None, [])
        if diag.has_errors(problems):
            raise InvalidInput(problems)
        root = session.desired
    request = ImportRequest(
        root,
        state,
        keep=prefixes or DISCOVERED_PREFIXES,
        excluded=() if prefixes else OPERATOR_PREFIXES,
        selector=selector,
        group_by=group_by,
    )
    live = session.connect(None, target)
    changes = plan_import(request, live)
    if nfd_rules:
        changes += plan_rule_import(root, state, live)
    for change in changes:
        if change.note is not None:
            log.info("%s", change.note)
    if not dry_run:
        write_import(session.desired, changes)
    return changes
