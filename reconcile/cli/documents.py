"""The JSON documents the views print that are not the engine's own values, as frozen
models: each `model_dump(mode="json")` is the document, fields in the order printed.

Imported by the JSON view when it renders one, never at a command's start: pydantic and
the engine's models are what `sanitize` does not pay for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from reconcile.cli.output import object_lines
from reconcile.diagnostics import Diagnostic, Severity
from reconcile.engine.diff import Action
from reconcile.engine.facts import Fact
from reconcile.engine.plan import PLAN_API_VERSION, MissingNode

if TYPE_CHECKING:
    from reconcile.engine.results import ApplyResult
    from reconcile.gpu.operations import Report


class _Document(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AppliedChange(_Document):
    """A node fact apply wrote: the node, then the change as the plan names it."""

    node: str
    key: str
    action: Action
    before: str | None
    after: str | None
    owner: str | None
    fact: Fact
    source: str | None
    rollout: bool = False


class FailedNode(_Document):
    node: str
    error: str | None


class AppliedObject(_Document):
    """A workload object apply went to: the lines it changed, or why it did not."""

    object: str
    lines: tuple[str, ...]
    error: str | None
    note: str | None


class NodeNote(_Document):
    node: str
    note: str


class ApplyDocument(_Document):
    """`apply -o json`: whether the cluster converged, what was written, what failed or
    was refused, and the nodes declared but missing (or absent and allowed to be)."""

    apiVersion: Literal["reconcile.dev/v1alpha1"] = PLAN_API_VERSION
    kind: Literal["ApplyResult"] = "ApplyResult"
    converged: bool
    applied: tuple[AppliedChange, ...]
    failed: tuple[FailedNode, ...]
    objects: tuple[AppliedObject, ...]
    notes: tuple[NodeNote, ...]
    rejected: tuple[str, ...]
    skipped: tuple[str, ...]
    retries: int
    missingNodes: tuple[MissingNode, ...]
    absentNodes: tuple[MissingNode, ...]
    conflicts: int

    @classmethod
    def of(cls, result: ApplyResult) -> ApplyDocument:
        """The document of `result`."""
        return cls(
            converged=result.ok,
            applied=tuple(
                AppliedChange(node=node, **change.model_dump()) for node, change in result.lines()
            ),
            failed=tuple(FailedNode(node=n.name, error=n.error) for n in result.failed),
            objects=tuple(
                AppliedObject(
                    object=o.id,
                    lines=object_lines(o.changed) if o.changed is not None else (),
                    error=o.error,
                    note=o.note,
                )
                for o in result.objects
            ),
            notes=tuple(NodeNote(node=n.name, note=n.note) for n in result.nodes if n.note),
            rejected=result.rejected,
            skipped=result.skipped,
            retries=result.retries,
            missingNodes=result.missingNodes,
            absentNodes=result.absentNodes,
            conflicts=sum(n.conflicts for n in result.nodes),
        )


class DiagnosticDocument(_Document):
    """A problem in desired/: what and why, and where (`file`, `line`, `column`, each
    None when it has no place)."""

    severity: Severity
    summary: str
    detail: str
    file: str | None
    line: int | None
    column: int | None

    @classmethod
    def of(cls, diagnostic: Diagnostic) -> DiagnosticDocument:
        source = diagnostic.source
        return cls(
            severity=diagnostic.severity,
            summary=diagnostic.summary,
            detail=diagnostic.detail,
            file=source.file if source else None,
            line=source.line if source else None,
            column=source.column if source else None,
        )


class ValidationDocument(_Document):
    """`validate -o json`: `valid` only without errors, the counts, every diagnostic."""

    apiVersion: Literal["reconcile.dev/v1alpha1"] = PLAN_API_VERSION
    kind: Literal["ValidationResult"] = "ValidationResult"
    valid: bool
    errors: int
    warnings: int
    diagnostics: tuple[DiagnosticDocument, ...]

    @classmethod
    def of(cls, diagnostics: Sequence[Diagnostic]) -> ValidationDocument:
        """The document of `diagnostics`."""
        errors = sum(1 for d in diagnostics if d.severity is Severity.ERROR)
        return cls(
            valid=errors == 0,
            errors=errors,
            warnings=len(diagnostics) - errors,
            diagnostics=tuple(DiagnosticDocument.of(d) for d in diagnostics),
        )


class GpuNodeDocument(_Document):
    name: str
    tag: str | None
    upgradeState: str | None


class ReportDocument(_Document):
    """`report -o json`: the counts, then each GPU node's tag and upgrade state, its name
    as it is (the text report's variable names cannot keep every name apart)."""

    nodes: int
    skew: int
    matrixRows: int
    gpuNodes: tuple[GpuNodeDocument, ...]

    @classmethod
    def of(cls, report: Report) -> ReportDocument:
        """The document of `report`."""
        return cls(
            nodes=len(report.nodes),
            skew=report.skew,
            matrixRows=report.matrix_rows,
            gpuNodes=tuple(
                GpuNodeDocument(name=n.name, tag=n.tag, upgradeState=n.upgrade_state)
                for n in report.nodes
            ),
        )
