"""The views: one per output format, chosen once per command by `view_for`.

A command asks its view to show each result (`view.plan(plan)`, `view.apply(result)`)
and never looks at the format again. `TextView` writes the lines of the output contract
(output.py; `wide` adds the live value and the owner); `JsonView` builds one document per
result and writes it with one writer; `MarkdownView` builds one section per result, for a
pull-request comment. In a fleet a view composes the clusters' outputs (`clusters`,
`fleet_plan`): text lines prefixed as they come, one JSON document holding each cluster's,
one markdown section per cluster. Views only draw: they receive finished values and the
streams to write to; notes for people go to the error stream.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import shlex
import sys
import textwrap
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TextIO, TypeVar, cast

from reconcile.cli.output import (
    WIDE_HEADER,
    Format,
    Prefixed,
    audit_line,
    finding_line,
    for_cluster,
    log,
    name_first,
    node_line,
    object_lines,
    placement_line,
    predicted_line,
    prune_line,
    severity_prefix,
    watch_marker,
)
from reconcile.diagnostics import Diagnostic, Severity
from reconcile.kube import labels

# What the views show, for their signatures only: `validate` renders its problems without
# importing the engine (a view that needs one of its constants imports it where it does).
if TYPE_CHECKING:
    from typing import Self

    from reconcile.app.reconciling import FleetPlanned
    from reconcile.engine.capacity import Placement
    from reconcile.engine.diff import FieldChange, NodeChange
    from reconcile.engine.findings import Finding
    from reconcile.engine.fleet import Outcome
    from reconcile.engine.imports import FileChange
    from reconcile.engine.plan import MissingNode, ObjectPlan, Plan
    from reconcile.engine.rbac import RbacObject
    from reconcile.engine.results import ApplyResult
    from reconcile.gpu.change import NodeStatus
    from reconcile.gpu.drivers import AuditFinding, Coverage
    from reconcile.gpu.operations import Report, Tag
    from reconcile.gpu.rollout import BatchEntry, RolloutDocument

T = TypeVar("T")


def view_for(output: Format, out: TextIO | None = None, err: TextIO | None = None) -> View:
    """The view of `output`, writing results to `out` and notes and errors to `err`
    (stdout and stderr unless given)."""
    streams = (out or sys.stdout, err or sys.stderr)
    if output is Format.JSON:
        return JsonView(*streams)
    if output is Format.YAML:
        return YamlView(*streams)
    if output is Format.MARKDOWN:
        return MarkdownView(*streams)
    return TextView(*streams, wide=output is Format.WIDE)


def write_json(document: Any, out: TextIO) -> None:
    """The one way a JSON document is written: indented by two, keys in their order."""
    json.dump(document, out, indent=2, sort_keys=False)
    out.write("\n")


def write_yaml(document: Any, out: TextIO) -> None:
    """The JSON document as YAML (keys in their order, reading back as the same data
    under YAML 1.1 and 1.2), as `kubectl -o yaml` writes one."""
    from reconcile.desired.writer import dump_documents

    out.write(dump_documents([document]))


def write_document(document: Any, out: TextIO, output: Format) -> None:
    """`document` as -o json or -o yaml asks."""
    (write_yaml if output is Format.YAML else write_json)(document, out)


def prefixed(view: View, cluster: str, first: Callable[[str], str] = name_first) -> View:
    """`view` writing each stdout line started by `first(cluster)` and each stderr line
    by `<cluster>: `."""
    return view.to(
        cast(TextIO, Prefixed(view.out, first(cluster))),
        cast(TextIO, Prefixed(view.err, f"{cluster}: ")),
    )


def rejected_summary(result: ApplyResult) -> str:
    """The `error:` line of an apply the server's dry run refused: nothing was written,
    or (a refusal once the staged CRDs and Namespaces were written) each refused object
    with the server's message, and exactly what was written."""
    count = len(result.rejected)
    staged = [o.id for o in result.changed_objects()]
    if not staged:
        return f"{count} refusal(s) above: nothing was applied"
    return (
        f"{count} refusal(s) above ({'; '.join(result.rejected)}): written: "
        f"{', '.join(staged)} (created first, as planned, so that what needs it could be "
        "dry-run); nothing else was applied"
    )


def each_cluster(
    view: View,
    outcomes: Sequence[Outcome[T]],
    show: Callable[[View, T], object],
    first: Callable[[str], str] = name_first,
) -> None:
    """Each cluster's value shown by `show` as it comes, on `view`; with several clusters,
    on `view` writing each stdout line started by `first(cluster)` and each stderr line
    (and note) by `<cluster>: `."""
    several = len(outcomes) > 1
    for outcome in outcomes:
        shown = prefixed(view, outcome.cluster, first) if several else view
        with for_cluster(outcome.cluster if several else None):
            if outcome.value is not None:
                show(shown, outcome.value)


@dataclass(frozen=True)
class View:
    """What a command shows, one method per result, in one format. A result a format has
    no rendering of raises NotImplementedError: `outputs()` refuses that format before
    the command runs."""

    out: TextIO
    err: TextIO

    def to(self, out: TextIO, err: TextIO) -> Self:
        """This view, writing to `out` and `err` instead."""
        return dataclasses.replace(self, out=out, err=err)

    def _unrendered(self, what: str) -> NotImplementedError:
        return NotImplementedError(f"{type(self).__name__} has no rendering of {what}")

    # --- fleets -----------------------------------------------------------------------------

    def clusters(
        self,
        outcomes: Sequence[Outcome[T]],
        show: Callable[[View, T], object],
        first: Callable[[str], str] = name_first,
    ) -> None:
        """Each cluster's value shown by `show` on a view of this format; the failed
        clusters are the caller's to report."""
        raise self._unrendered("a fleet")

    def fleet_plan(self, planned: FleetPlanned, *, show_owner: bool = False) -> None:
        """Every cluster's plan."""
        raise self._unrendered("a fleet plan")

    # --- the results ------------------------------------------------------------------------

    def plan(self, plan: Plan, *, show_owner: bool = False) -> None:
        raise self._unrendered("a plan")

    def apply(self, result: ApplyResult) -> None:
        raise self._unrendered("an apply result")

    def validation(self, diagnostics: Sequence[Diagnostic]) -> None:
        raise self._unrendered("a validation")

    def audit(self, findings: Sequence[AuditFinding]) -> None:
        """The label audit: one line per finding, or the single line OK."""
        raise self._unrendered("a label audit")

    def image_audit(self, missing: Sequence[Coverage]) -> None:
        """The GPU nodes whose driver image is missing (`<node> MISSING <tag>`) or whose
        tag cannot be built (`<node> UNKNOWN <why>`), or OK."""
        raise self._unrendered("an image audit")

    def tags(self, tags: Sequence[Tag], *, with_node: bool) -> None:
        """The tags that could be built (`<tag>`, or `<node> <tag>` `with_node`); the
        others are the command's error."""
        raise self._unrendered("driver tags")

    def report(self, report: Report) -> None:
        raise self._unrendered("a report")

    def report_refusal(self, reports: Mapping[str | None, Report]) -> str | None:
        """Why `reports` cannot be shown in this format, or None."""
        return None

    def placement(self, results: Sequence[Placement]) -> None:
        raise self._unrendered("placement")

    def rbac(self, objects: Sequence[RbacObject]) -> None:
        raise self._unrendered("RBAC objects")

    def imports(self, changes: Sequence[FileChange], *, dry_run: bool) -> None:
        """`dry_run`: the unified diff of every file; else one line per file written."""
        raise self._unrendered("an import")

    def sanitized(self, results: Sequence[tuple[str, str]]) -> None:
        """The (input, label value) pairs; a value "" could not be made."""
        raise self._unrendered("sanitized values")

    def rollout_planned(self, rollout: RolloutDocument, marker: str) -> None:
        """A pool's rollout before it starts: the nodes already done, then each batch
        (each line ending with `marker`)."""
        raise self._unrendered("a rollout")

    def rollout_moved(self, node: str, state: str, *, clear: Callable[[], None]) -> None:
        """A node of a pool moved to `state`; `clear` clears the terminal's progress line
        before anything is written."""
        raise self._unrendered("a rollout")

    def rollout(self, document: RolloutDocument) -> None:
        """A pool's rollout when it ends."""
        raise self._unrendered("a rollout")

    def rollout_status(self, nodes: Sequence[NodeStatus]) -> None:
        """Where each node of a rollout is, and what blocks it."""
        raise self._unrendered("a rollout's status")

    def watched_nodes(
        self, when: str, event: str, node: str, changes: Sequence[NodeChange]
    ) -> None:
        """A watch's `event` (drift, corrected) on a node's facts at `when`, flushed."""
        raise self._unrendered("a watch")

    def watched_objects(self, when: str, event: str, objects: Sequence[ObjectPlan]) -> None:
        """A watch's `event` (drift, corrected) on workload objects at `when`, flushed."""
        raise self._unrendered("a watch")


# --- text ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TextView(View):
    """The line contract of output.py on stdout, notes and errors on stderr; `wide` adds
    the live value (and a node fact's owner) to plan and apply lines."""

    wide: bool = False

    def clusters(
        self,
        outcomes: Sequence[Outcome[T]],
        show: Callable[[View, T], object],
        first: Callable[[str], str] = name_first,
    ) -> None:
        each_cluster(self, outcomes, show, first)

    def fleet_plan(self, planned: FleetPlanned, *, show_owner: bool = False) -> None:
        each_cluster(self, planned.outcomes, lambda view, p: view.plan(p, show_owner=show_owner))

    def plan(self, plan: Plan, *, show_owner: bool = False) -> None:
        err = self.err
        lines = [
            *(node_line(n, c, show_owner=show_owner, wide=self.wide) for n, c in plan.lines()),
            *(line for obj in plan.objects for line in object_lines(obj, wide=self.wide)),
            # Out of sync too, though plain apply leaves them: each says --prune removes it.
            *(prune_line(p.node, p.key) for p in plan.prunable),
            *(prune_line(o) for o in plan.prunableObjects),
            # Not reconcile's writes: what nfd-master will make of the tree's rules.
            *(predicted_line(p.node, p.key, p.value) for p in plan.predicted or ()),
        ]
        self._lines(lines)
        for missing in plan.missingNodes:
            err.write(_missing_note(missing) + "\n")
        _absent_notes(plan.absentNodes)
        for obj in plan.objects:
            if obj.takenFrom:
                log.info(
                    "%s: apply takes back what %s changed by hand (`-o wide` shows each field's)",
                    obj.id,
                    ", ".join(obj.takenFrom),
                )
        for finding in plan.findings:
            if finding.severity is Severity.ERROR:
                err.write(finding_line(finding, err) + "\n")
            elif finding.is_note:
                log.info("%s: %s", finding.subject, finding.message)
            else:
                log.warning("%s: %s", finding.subject, finding.message)
        if plan.prunable:
            log.info(
                "%d label(s) set by reconcile are no longer declared; `--prune` removes them",
                len(plan.prunable),
            )
        if plan.prunableObjects:
            log.info(
                "%d object(s) applied by reconcile are no longer in desired/ (%s); `--prune` "
                "deletes them",
                len(plan.prunableObjects),
                ", ".join(plan.prunableObjects),
            )
        for never in plan.neverPruned:
            log.info(
                "%s is in reconcile's inventory of applied objects, but a Node is never "
                "pruned: left alone, and dropped from the inventory by the next apply "
                "(declare node facts in desired/nodes/ or desired/groups/)",
                never,
            )

    def _lines(self, lines: Sequence[str]) -> None:
        """Drift lines on stdout; with `wide`, under kubectl's header row (none for none)."""
        if self.wide and lines:
            self.out.write(WIDE_HEADER + "\n")
        self.out.writelines(line + "\n" for line in lines)

    def apply(self, result: ApplyResult) -> None:
        self._lines(
            [
                *(node_line(n, c, wide=self.wide) for n, c in result.lines()),
                *(
                    line
                    for obj in result.changed_objects()
                    for line in object_lines(obj, wide=self.wide)
                ),
            ]
        )
        _absent_notes(result.absentNodes)
        for node_result in result.nodes:
            if node_result.note:
                log.info("%s: %s", node_result.name, node_result.note)
        for obj_result in result.objects:
            if obj_result.note:
                log.info("%s: %s", obj_result.id, obj_result.note)
        err = self.err
        for rejected in result.rejected:
            err.write(f"rejected: {rejected}\n")
        if result.rejected:
            err.write(f"error: {rejected_summary(result)}\n")
        for failed in result.failed:
            err.write(f"{failed.name}: not converged: {failed.error}\n")
        for failed_object in result.failed_objects:
            err.write(f"{failed_object.id}: not applied: {failed_object.error}\n")
        for missing in result.missingNodes:
            err.write(_missing_note(missing) + "\n")

    def validation(self, diagnostics: Sequence[Diagnostic]) -> None:
        render_diagnostics(diagnostics, self.err)

    def audit(self, findings: Sequence[AuditFinding]) -> None:
        self._findings([audit_line(f) for f in findings])

    def image_audit(self, missing: Sequence[Coverage]) -> None:
        self._findings([_coverage_line(c) for c in missing])

    def _findings(self, lines: Sequence[str]) -> None:
        self.out.write("".join(f"{line}\n" for line in lines) if lines else "OK\n")

    def tags(self, tags: Sequence[Tag], *, with_node: bool) -> None:
        for tag in tags:
            if tag.tag is not None:
                self.out.write(f"{tag.node} {tag.tag}\n" if with_node else f"{tag.tag}\n")

    def report(self, report: Report) -> None:
        """`KEY=value` lines safe to `source`: the counts, then TAG and UPGRADE_STATE per
        node (variable name from the node's name, value quoted by `sh_value`)."""
        for variable, value, _ in report_variables(report):
            self.out.write(f"{variable}={sh_value(value)}\n")

    def report_refusal(self, reports: Mapping[str | None, Report]) -> str | None:
        return report_clash(reports)

    def placement(self, results: Sequence[Placement]) -> None:
        self.out.writelines(placement_line(r) + "\n" for r in results)

    def rbac(self, objects: Sequence[RbacObject]) -> None:
        """YAML for `kubectl apply -f`, with a comment saying why each rule is there."""
        self.out.write(rbac_yaml(objects))

    def imports(self, changes: Sequence[FileChange], *, dry_run: bool) -> None:
        for change in changes:
            if dry_run:
                self.out.writelines(_unified(change))
            else:
                what = change.holds or f"{change.labels} label(s)"
                self.out.write(f"{change.path} {what}\n")

    def sanitized(self, results: Sequence[tuple[str, str]]) -> None:
        self.out.writelines(value + "\n" for _, value in results if value)

    def rollout_planned(self, rollout: RolloutDocument, marker: str) -> None:
        if rollout.driver is not None:
            lines = [f"{node} done (already on {rollout.driver})" for node in rollout.alreadyDone]
        else:
            from reconcile.engine.facts import shown_value

            lines = [f"{node} done (nothing to roll out)" for node in rollout.alreadyDone]
            lines += [
                f"{node} {key} {shown_value(value)} (rollout)"
                for node, facts in (rollout.facts or {}).items()
                for key, value in facts.items()
            ]
        lines += [
            f"batch {number}: {','.join(b.nodes)}{' (canary)' if b.canary else ''}{_room(b)}"
            for number, b in enumerate(rollout.batches, 1)
        ]
        self.out.write("".join(line + marker + "\n" for line in lines))
        self.out.flush()

    def rollout_moved(self, node: str, state: str, *, clear: Callable[[], None]) -> None:
        clear()
        self.out.write(f"{node} {state}\n")
        self.out.flush()

    def rollout(self, document: RolloutDocument) -> None:
        """Nothing: each node's state was shown as it moved."""

    def rollout_status(self, nodes: Sequence[NodeStatus]) -> None:
        """`<node> <state> <for> <what blocks it>` (`-` for an unknown time, `OK` when
        nothing blocks), or the single line `OK` when no node has anything to say."""
        from reconcile.gpu.change import shown_age

        if not nodes:
            self.out.write("OK\n")
        for n in nodes:
            age = shown_age(n.seconds)
            self.out.write(f"{n.node} {n.state} {age} {n.reason if n.blocked else 'OK'}\n")

    def watched_nodes(
        self, when: str, event: str, node: str, changes: Sequence[NodeChange]
    ) -> None:
        self._watched(when, event, [node_line(node, c) for c in changes])

    def watched_objects(self, when: str, event: str, objects: Sequence[ObjectPlan]) -> None:
        self._watched(when, event, [line for obj in objects for line in object_lines(obj)])

    def _watched(self, when: str, event: str, lines: Sequence[str]) -> None:
        """`<time> <line>` for a drift, `<time> <line> (corrected)` for what was written."""
        marker = watch_marker(event)
        self.out.writelines(f"{when} {line}{marker}\n" for line in lines)
        self.out.flush()


def _room(batch: BatchEntry) -> str:
    """` (12 nvidia.com/gpu free on the other nodes; no room for ns/pod, ...)`, or nothing
    when the cluster has no GPU resource and every evicted pod finds room."""
    parts = []
    if batch.gpusFree:
        free = ", ".join(f"{n} {name}" for name, n in batch.gpusFree.items())
        parts.append(f"{free} free on the other nodes")
    if batch.noRoom:
        parts.append(f"no room for {', '.join(batch.noRoom)}")
    return f" ({'; '.join(parts)})" if parts else ""


def _coverage_line(coverage: Coverage) -> str:
    if coverage.tag is None:
        return f"{coverage.node} UNKNOWN {coverage.problem}"
    return f"{coverage.node} MISSING {coverage.tag}"


def _missing_note(missing: MissingNode) -> str:
    return f"{missing.name}: declared in {missing.source} but not found in the cluster"


def _absent_notes(absent: Sequence[MissingNode]) -> None:
    for node in absent:
        log.info("%s: declared in %s, absent from the cluster, and may be", node.name, node.source)


def render_diagnostics(diagnostics: Sequence[Diagnostic], err: TextIO) -> None:
    """Errors compiler style (`file:line:col: message`) on `err`; warnings logged."""
    for diagnostic in diagnostics:
        if diagnostic.severity is Severity.ERROR:
            err.write(f"{diagnostic}\n")
            continue
        where = f"{diagnostic.source}: " if diagnostic.source else ""
        tag = severity_prefix(diagnostic.severity, err)
        log.warning("%s%s %s", where, tag, diagnostic.message, extra={"plain": True})


def sh_value(value: str) -> str:
    """A value as `sh` reads it back unchanged: as it is when it is a plain token
    (`550-5.15.0-119-generic-ubuntu22.04`), single-quoted otherwise. Label values from a
    proxy or a server that does not validate can hold `$(...)`, backticks or newlines."""
    return shlex.quote(value) if value else ""


def report_variables(report: Report) -> list[tuple[str, str, str | None]]:
    """The text report as (variable, value, node): NODES, SKEW and MATRIX_ROWS (node None),
    then `<NODE>_TAG` and `<NODE>_UPGRADE_STATE` per GPU node."""
    from reconcile.gpu.drivers import env_name

    found: list[tuple[str, str, str | None]] = [
        ("NODES", str(len(report.nodes)), None),
        ("SKEW", str(report.skew), None),
        ("MATRIX_ROWS", str(report.matrix_rows), None),
    ]
    for node in report.nodes:
        prefix = env_name(node.name)
        found.append((f"{prefix}_TAG", node.tag or "", node.name))
        found.append((f"{prefix}_UPGRADE_STATE", node.upgrade_state or "", node.name))
    return found


def report_prefix(cluster: str) -> str:
    """In a fleet, a cluster's report variables start with its name as a variable name and
    two underscores (`lab` -> `LAB__NODES`): a line sourced never runs the name."""
    from reconcile.gpu.drivers import env_name

    return f"{env_name(cluster)}__"


def report_clash(reports: Mapping[str | None, Report]) -> str | None:
    """Two nodes (or clusters) whose lines would set one variable (`a-b` and `a.b` both
    make `A_B_TAG`), named both, in the reports of `reports` (by cluster when each
    cluster's variables are prefixed, else under None): sourcing the output would keep
    the second value only."""
    owners: dict[str, str] = {}
    for cluster, report in reports.items():
        prefix = report_prefix(cluster) if cluster is not None else ""
        where = f" of cluster {cluster}" if cluster is not None else ""
        for variable, _, node in report_variables(report):
            owner = (f"node {node}" if node is not None else "the counts") + where
            first = owners.setdefault(prefix + variable, owner)
            if first != owner:
                return (
                    f"{first} and {owner} both make the variable {prefix + variable}: the "
                    "report cannot name them apart (-o json names every node as it is); "
                    "nothing was printed"
                )
    return None


def _unified(change: FileChange) -> Iterable[str]:
    return difflib.unified_diff(
        change.before.splitlines(keepends=True),
        change.after.splitlines(keepends=True),
        fromfile=str(change.path) if change.before else "/dev/null",
        tofile=str(change.path),
    )


# What the YAML output says first: where it comes from and when to regenerate it.
_RBAC_HEADER: Final = (
    "The least privilege reconcile needs (plan, apply --prune/--recreate, watch, upgrade,",
    "audit, report, import, placement) for the desired/ tree this was generated from, by",
    "`reconcile rbac`. Regenerate it when desired/ changes; keep the old grants until",
    "`apply --prune` has deleted what left desired/. Discovery (/api, /apis) needs no",
    "grant: the default system:discovery role allows it to every authenticated user.",
)


def rbac_yaml(objects: Sequence[RbacObject]) -> str:
    """The objects as YAML for `kubectl apply -f`, with a comment saying why each rule
    is there."""
    from reconcile.desired.writer import dump_documents

    comments: dict[tuple[str | int, ...], str] = {}
    for index, obj in enumerate(objects):
        lines = [*(_RBAC_HEADER if index == 0 else ()), *_wrapped(obj.comment)]
        if lines:
            comments[(index,)] = "\n".join(lines)
        for rule, why in enumerate(obj.rule_comments):
            if why:
                comments[(index, "rules", rule)] = "\n".join(_wrapped(why))
    return dump_documents([o.document for o in objects], comments)


def _wrapped(comment: str) -> list[str]:
    return textwrap.wrap(comment, width=88) if comment else []


# --- composed: json and markdown -----------------------------------------------------------


@dataclass(frozen=True)
class _Composed(View):
    """A view whose results are values (a JSON document, a markdown section), written by
    one writer, or kept (`kept` not None) for a fleet to compose."""

    kept: list[Any] | None = None

    def _write(self, value: Any) -> None:
        if self.kept is None:
            self._emit(value)
        else:
            self.kept.append(value)

    def _emit(self, value: Any) -> None:
        raise NotImplementedError

    def _each(
        self, outcomes: Sequence[Outcome[T]], show: Callable[[View, T], object]
    ) -> dict[str, Any]:
        """Each cluster's value (the clusters that have one) shown by `show`, its notes
        started by `<cluster>: `: what it kept, by cluster."""
        kept: dict[str, Any] = {}
        for outcome in outcomes:
            if outcome.value is None:
                continue
            section = dataclasses.replace(self, kept=[])
            with for_cluster(outcome.cluster):
                show(section, outcome.value)
            (kept[outcome.cluster],) = cast(list[Any], section.kept)
        return kept


@dataclass(frozen=True)
class JsonView(_Composed):
    """One JSON document per result on stdout."""

    def _emit(self, value: Any) -> None:
        write_json(value, self.out)

    def clusters(
        self,
        outcomes: Sequence[Outcome[T]],
        show: Callable[[View, T], object],
        first: Callable[[str], str] = name_first,
    ) -> None:
        """A FleetResult: each cluster's document under `clusters`, the failed clusters'
        errors under `errors`."""
        from reconcile.engine.plan import PLAN_API_VERSION

        documents = self._each(outcomes, show)
        self._write(
            {
                "apiVersion": PLAN_API_VERSION,
                "kind": "FleetResult",
                "clusters": documents,
                "errors": {o.cluster: o.error for o in outcomes if o.error is not None},
            }
        )

    def fleet_plan(self, planned: FleetPlanned, *, show_owner: bool = False) -> None:
        """The FleetPlan (what `plan --out` saves)."""
        self._write(planned.saved.model_dump(mode="json"))

    def plan(self, plan: Plan, *, show_owner: bool = False) -> None:
        """The plan document (what `plan --out` saves)."""
        self._write(plan.model_dump(mode="json"))

    def apply(self, result: ApplyResult) -> None:
        from reconcile.cli.documents import ApplyDocument

        self._write(ApplyDocument.of(result).model_dump(mode="json"))

    def validation(self, diagnostics: Sequence[Diagnostic]) -> None:
        from reconcile.cli.documents import ValidationDocument

        self._write(ValidationDocument.of(diagnostics).model_dump(mode="json"))

    def audit(self, findings: Sequence[AuditFinding]) -> None:
        self._findings([{"node": f.node, "key": f.key, "reason": f.reason} for f in findings])

    def image_audit(self, missing: Sequence[Coverage]) -> None:
        self._findings(
            [
                {"node": c.node, "tag": None, "problem": c.problem}
                if c.tag is None
                else {"node": c.node, "tag": c.tag}
                for c in missing
            ]
        )

    def _findings(self, findings: list[dict[str, Any]]) -> None:
        self._write({"ok": not findings, "findings": findings})

    def tags(self, tags: Sequence[Tag], *, with_node: bool) -> None:
        self._write([{"node": t.node, "tag": t.tag} for t in tags if t.tag is not None])

    def report(self, report: Report) -> None:
        from reconcile.cli.documents import ReportDocument

        self._write(ReportDocument.of(report).model_dump(mode="json"))

    def placement(self, results: Sequence[Placement]) -> None:
        self._write(
            [
                {
                    "workload": r.template.id,
                    "nodes": list(r.nodes),
                    "wanted": r.wanted,
                    "placed": r.placed,
                    "pending": r.pending,
                    "reason": r.reason,
                    "someSchedules": r.some_schedules,
                    "evaluated": r.evaluated,
                    "landed": dict(Counter(r.landed)),
                }
                for r in results
            ]
        )

    def rbac(self, objects: Sequence[RbacObject]) -> None:
        """A v1 List."""
        self._write({"apiVersion": "v1", "kind": "List", "items": [o.document for o in objects]})

    def imports(self, changes: Sequence[FileChange], *, dry_run: bool) -> None:
        self._write(
            [
                {
                    "path": str(c.path),
                    "labels": c.labels,
                    "holds": c.holds,
                    "new": not c.before,
                    "written": not dry_run,
                    "diff": "".join(_unified(c)),
                }
                for c in changes
            ]
        )

    def sanitized(self, results: Sequence[tuple[str, str]]) -> None:
        self._write([{"input": v, "value": s or None} for v, s in results])

    def rollout_planned(self, rollout: RolloutDocument, marker: str) -> None:
        """Nothing: the document at the end holds the batches."""

    def rollout_moved(self, node: str, state: str, *, clear: Callable[[], None]) -> None:
        """Nothing: the document at the end holds each node's state."""

    def rollout(self, document: RolloutDocument) -> None:
        self._write(document.model_dump(mode="json"))

    def rollout_status(self, nodes: Sequence[NodeStatus]) -> None:
        self._write([n.model_dump(mode="json") for n in nodes])

    def watched_nodes(
        self, when: str, event: str, node: str, changes: Sequence[NodeChange]
    ) -> None:
        """One JSON line per change (JSON Lines, keys sorted)."""
        self._watched(
            when,
            [{"event": event, "node": node, **c.model_dump(mode="json")} for c in changes],
        )

    def watched_objects(self, when: str, event: str, objects: Sequence[ObjectPlan]) -> None:
        """One JSON line per object (JSON Lines, keys sorted)."""
        self._watched(
            when,
            [
                {
                    "event": event,
                    "object": obj.id,
                    "action": obj.action,
                    "changes": [c.model_dump(mode="json") for c in obj.changes],
                }
                for obj in objects
            ],
        )

    def _watched(self, when: str, records: Sequence[dict[str, Any]]) -> None:
        self.out.writelines(
            json.dumps({"time": when, **record}, sort_keys=True) + "\n" for record in records
        )
        self.out.flush()


@dataclass(frozen=True)
class YamlView(JsonView):
    """The JSON view's documents as YAML; several (a watch's records) as one stream,
    `---` before each."""

    def _emit(self, value: Any) -> None:
        write_yaml(value, self.out)

    def _watched(self, when: str, records: Sequence[dict[str, Any]]) -> None:
        from reconcile.desired.writer import dump_documents

        if records:
            documents = [{"time": when, **record} for record in records]
            self.out.write("---\n" + dump_documents(documents))
        self.out.flush()


# --- markdown ------------------------------------------------------------------------------


@dataclass(frozen=True)
class MarkdownView(_Composed):
    """One markdown section per result, for a pull-request comment: a `####` heading, then
    lists and tables whose every value is escaped (`_md`) or a code span (`_code`)."""

    def _emit(self, value: Any) -> None:
        self.out.write(value)

    def clusters(
        self,
        outcomes: Sequence[Outcome[T]],
        show: Callable[[View, T], object],
        first: Callable[[str], str] = name_first,
    ) -> None:
        """Each cluster's section under a `#####` heading naming it."""
        for name, section in self._each(outcomes, show).items():
            self._write(f"##### `{name}`\n\n{section}\n")

    def fleet_plan(self, planned: FleetPlanned, *, show_owner: bool = False) -> None:
        """A summary table of the fleet, then each cluster's plan under its own heading."""
        saved = planned.saved
        parts = [
            f"#### reconcile plan: fleet {_code(saved.fleet, cell=False)}\n\n",
            "| Cluster | Node changes | Object changes | Findings |\n| --- | --- | --- | --- |\n",
        ]
        for name, plan in saved.plans.items():
            parts.append(
                f"| {_code(name)} | {sum(1 for _ in plan.lines())} | {len(plan.objects)} | "
                f"{_finding_counts(plan)} |\n"
            )
        parts += [
            f"| {_code(name)} | **error** | | {_md(error)} |\n"
            for name, error in saved.errors.items()
        ]
        parts += [
            f"\n##### {_code(name, cell=False)}\n{_plan_body(plan)}"
            for name, plan in saved.plans.items()
        ]
        self._write("".join(parts))

    def plan(self, plan: Plan, *, show_owner: bool = False) -> None:
        self._write(f"#### reconcile plan\n{_plan_body(plan)}")

    def apply(self, result: ApplyResult) -> None:
        applied = list(result.lines())
        parts = [
            "#### reconcile apply\n\n",
            ("Converged" if result.ok else "**Not converged**")
            + f": {len(applied)} change(s) applied.\n",
        ]
        if applied:
            parts.append("\n| Node | Label | Now |\n| --- | --- | --- |\n")
            parts += [
                f"| {_md(node)} | {_code(change.shown_key)} | {_md_value(change.after)} |\n"
                for node, change in applied
            ]
        objects = [line for obj in result.changed_objects() for line in object_lines(obj)]
        if objects:
            parts.append(
                "\n" + "".join(f"- {_code(line.strip(), cell=False)}\n" for line in objects)
            )
        staged = ", ".join(o.id for o in result.changed_objects())
        parts += _md_list(
            f"Rejected (written first: {staged}; nothing else was applied)"
            if staged
            else "Rejected (nothing was applied)",
            (_md(r) for r in result.rejected),
        )
        parts += _md_list(
            "Failed",
            (f"{_code(n.name, cell=False)}: {_md(n.error or '')}" for n in result.failed),
        )
        parts += _md_list(
            "Objects not applied",
            (f"{_code(o.id, cell=False)}: {_md(o.error or '')}" for o in result.failed_objects),
        )
        parts += _md_list(
            "Declared but not in the cluster",
            (_code(m.name, cell=False) for m in result.missingNodes),
        )
        self._write("".join(parts))

    def validation(self, diagnostics: Sequence[Diagnostic]) -> None:
        if not diagnostics:
            self._write("#### reconcile validate\n\nNo problems found.\n")
            return
        errors = sum(1 for d in diagnostics if d.severity is Severity.ERROR)
        parts = [
            "#### reconcile validate\n\n",
            f"{errors} error(s), {len(diagnostics) - errors} warning(s).\n\n",
        ]
        for d in diagnostics:
            where = f"{_code(str(d.source), cell=False)} " if d.source else ""
            parts.append(f"- **{d.severity}** {where}{_md(d.message)}\n")
        self._write("".join(parts))

    def audit(self, findings: Sequence[AuditFinding]) -> None:
        self._findings("GPU label audit", [audit_line(f) for f in findings])

    def image_audit(self, missing: Sequence[Coverage]) -> None:
        self._findings("driver image audit", [_coverage_line(c) for c in missing])

    def _findings(self, title: str, lines: Sequence[str]) -> None:
        items = "".join(f"- {_code(line, cell=False)}\n" for line in lines)
        self._write(f"#### reconcile {title}\n\n" + (items or "OK\n"))

    def rbac(self, objects: Sequence[RbacObject]) -> None:
        """The YAML in a fenced block."""
        self._write(f"#### reconcile rbac\n\n```yaml\n{rbac_yaml(objects)}```\n")


def _plan_body(plan: Plan) -> str:
    """A plan's section after its heading line: its summary, findings, changes, and the
    nodes declared but not in the cluster."""
    changes = list(plan.lines())
    if not plan.needs_attention:
        return "\nNo changes: the cluster matches `desired/`.\n"
    parts = ["\n", "".join(f"- {line}\n" for line in _plan_summary(plan, changes)) + "\n"]
    from reconcile.engine.placement import CAPACITY_KINDS

    capacity = [f for f in plan.findings if f.kind in CAPACITY_KINDS]
    others = [f for f in plan.findings if f.kind not in CAPACITY_KINDS]
    if others:
        parts.append(_findings_table(others))
    if capacity:
        parts.append("**Capacity:** where workloads land after apply, and the room they find\n\n")
        parts.append(_findings_table(capacity))
    if changes:
        parts.append("| Node | Label | Live | Desired | Owner |\n| --- | --- | --- | --- | --- |\n")
        parts += [
            f"| {_md(node)} | {_code(change.shown_key)} | {_md_value(change.before)} | "
            f"{_md_value(change.after)} | {_md(change.owner or '')} |\n"
            for node, change in changes
        ]
    rollouts = [(node, change) for node, change in changes if change.rollout]
    if rollouts:
        parts.append(
            "\n**Rollouts:** these facts make an operator act on the node's GPUs; written "
            "only where no pod uses a GPU\n\n"
        )
        parts += [
            f"- {_code(f'{node} {change.shown_key} {change.shown_value}', cell=False)}\n"
            for node, change in rollouts
        ]
    if plan.objects:
        parts.append("\n| Object | Field | Live | Desired |\n| --- | --- | --- | --- |\n")
        for obj in plan.objects:
            if obj.action.glyph is not None:  # the whole object, not its fields
                parts.append(f"| {_code(obj.id)} | *({obj.action})* | | |\n")
                continue
            for field_change in obj.changes:
                before, after = _md_field(field_change)
                parts.append(
                    f"| {_code(obj.id)} | {_code(field_change.shown_path)} | {before} | {after} |\n"
                )
    if plan.missingNodes:
        parts.append("\n**Declared but not in the cluster:**\n\n")
        parts += [
            f"- {_code(missing.name, cell=False)} ({_md(missing.source)})\n"
            for missing in plan.missingNodes
        ]
    if plan.predicted:
        parts.append(
            "\n**Predicted by NFD rules:** the labels nfd-master will write once the "
            "NodeFeatureRules are applied (not reconcile's writes)\n\n"
            "| Node | Label | Now | After | Rules |\n| --- | --- | --- | --- | --- |\n"
        )
        parts += [
            f"| {_md(p.node)} | {_code(p.key)} | {_md_value(p.before)} | "
            f"{_md_value(p.value)} | {_md(', '.join(p.rules))} |\n"
            for p in plan.predicted
        ]
    if plan.prunable:
        parts.append(f"\n{len(plan.prunable)} label(s) would be removed by `--prune`.\n")
    return "".join(parts)


def _findings_table(findings: Sequence[Finding]) -> str:
    rows = ["| | Subject | Finding |\n| --- | --- | --- |\n"]
    for finding in findings:
        mark = "**error**" if finding.is_error else str(finding.severity)
        rows.append(f"| {mark} | {_code(finding.subject)} | {_md(finding.message)} |\n")
    return "".join(rows) + "\n"


def _plan_summary(plan: Plan, changes: Sequence[tuple[str, NodeChange]]) -> list[str]:
    """One line for the nodes and one for the objects, each only when it has something."""
    lines = []
    node_parts = []
    if changes:
        touched = len({node for node, _ in changes})
        node_parts.append(f"{len(changes)} label change(s) on {touched} node(s)")
    if plan.missingNodes:
        node_parts.append(f"{len(plan.missingNodes)} declared but not in the cluster")
    if node_parts:
        lines.append(f"**Nodes:** {', '.join(node_parts)}")
    if plan.objects:
        actions: dict[str, int] = {}
        for obj in plan.objects:
            actions[obj.action] = actions.get(obj.action, 0) + 1
        counted = ", ".join(f"{n} {action}" for action, n in sorted(actions.items()))
        lines.append(f"**Objects:** {len(plan.objects)} to change ({counted})")
    if plan.findings:
        lines.append(f"**Findings:** {_finding_counts(plan)}")
    return lines


def _finding_counts(plan: Plan) -> str:
    """`1 error(s), 2 warning(s)`, and the notes when there are any."""
    errors = sum(1 for f in plan.findings if f.is_error)
    notes = sum(1 for f in plan.findings if f.is_note)
    counted = f"{errors} error(s), {len(plan.findings) - errors - notes} warning(s)"
    return f"{counted}, {notes} note(s)" if notes else counted


def _md_list(title: str, items: Iterable[str]) -> list[str]:
    rows = list(items)
    if not rows:
        return []
    return [f"\n**{title}:**\n\n", *(f"- {row}\n" for row in rows)]


def _md_field(change: FieldChange) -> tuple[str, str]:
    """The Live and Desired cells of one field; a sensitive value is never shown."""
    from reconcile.engine.diff import Action

    added, removed = change.action is Action.ADD, change.action is Action.REMOVE
    if change.sensitive:
        return (
            "*(absent)*" if added else "*(sensitive value)*",
            "*(absent)*"
            if removed
            else "*(sensitive value)*"
            if added
            else "*(sensitive value changed)*",
        )
    return _md_json(change.before, added), _md_json(change.after, removed)


def _md_json(value: Any, absent: bool) -> str:
    if absent:
        return "*(absent)*"
    return _code(json.dumps(value, separators=(",", ":"), sort_keys=True))


def _md_value(value: str | None) -> str:
    if value is None:
        return "*(absent)*"
    return _code(value) if value else '`""`'


def _md(text: str) -> str:
    """Text as markdown reads it back as text, in a table cell or a list item: HTML as
    entities (a value could open a tag or a comment that hides the rest of a pull-request
    comment), backslashes, pipes and backticks escaped, line breaks as spaces."""
    escaped = (
        text.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("\\", "\\\\")
        .replace("|", "\\|")
        .replace("`", "\\`")
    )
    return " ".join(escaped.splitlines())


_CONTROL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")


def _code(text: str, *, cell: bool = True) -> str:
    """`text` as a code span, shown verbatim: markdown and HTML are not interpreted in a
    code span, so only its end needs care. The fence is one backtick longer than any run
    of backticks in the text; control characters (a line break would end the table row)
    are shown escaped; in a table `cell` a pipe is escaped, which GFM requires even
    inside a code span."""
    shown = _CONTROL.sub(lambda m: labels.go_quote(m.group())[1:-1], text)
    if cell:
        shown = shown.replace("|", "\\|")
    longest = max((len(run) for run in re.findall("`+", shown)), default=0)
    fence = "`" * (longest + 1)
    if (
        shown.startswith("`")
        or shown.endswith("`")
        or (shown.startswith(" ") and shown.endswith(" ") and shown.strip())
    ):
        shown = f" {shown} "  # CommonMark strips one space from each end
    return f"{fence}{shown}{fence}"
