"""Rendering plans, apply results and diagnostics as text, JSON or markdown.

Views only draw: they receive finished values and the streams to write to. Text output
on stdout is the drift-line contract (`<node> <key> <value>`, sorted, one per line,
nothing else); notes for people go to the error stream.
"""

from __future__ import annotations

import difflib
import io
import json
import re
import shlex
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TextIO

from reconcile.cli.output import (
    Format,
    finding_line,
    log,
    node_line,
    object_lines,
    placement_line,
    severity_prefix,
)
from reconcile.diagnostics import Diagnostic, Severity
from reconcile.kube import labels

# What the views show, for their signatures only: `validate` renders its problems without
# importing the engine (a view that needs one of its constants imports it where it does).
if TYPE_CHECKING:
    from reconcile.engine.diff import FieldChange, NodeChange
    from reconcile.engine.fleet import FleetPlan
    from reconcile.engine.imports import FileChange
    from reconcile.engine.placement import Placement
    from reconcile.engine.plan import MissingNode, Plan
    from reconcile.engine.rbac import RbacObject
    from reconcile.engine.results import ApplyResult
    from reconcile.gpu.drivers import Coverage
    from reconcile.gpu.operations import Report, Tag


def write_json(document: Any, out: TextIO) -> None:
    json.dump(document, out, indent=2, sort_keys=False)
    out.write("\n")


def render_findings(
    lines: Sequence[str],
    documents: Sequence[dict[str, Any]],
    fmt: Format,
    out: TextIO,
    *,
    title: str,
) -> None:
    """Audit-style results: one line per finding, or the single line OK."""
    if fmt is Format.JSON:
        write_json({"ok": not lines, "findings": list(documents)}, out)
    elif fmt is Format.MARKDOWN:
        out.write(f"#### reconcile {title}\n\n")
        out.write("".join(f"- {_code(line, cell=False)}\n" for line in lines) if lines else "OK\n")
    else:
        out.write("".join(f"{line}\n" for line in lines) if lines else "OK\n")


# --- report --------------------------------------------------------------------------------


def sh_value(value: str) -> str:
    """A value as `sh` reads it back unchanged: as it is when it is a plain token
    (`550-5.15.0-119-generic-ubuntu22.04`), single-quoted otherwise. Label values from a
    proxy or a server that does not validate can hold `$(...)`, backticks or newlines."""
    return shlex.quote(value) if value else ""


def render_report(report: Report, fmt: Format, out: TextIO) -> None:
    """`KEY=value` lines safe to `source`: the counts, then TAG and UPGRADE_STATE per node
    (variable name from the node's name, value quoted by `sh_value`); or JSON."""
    if fmt is Format.JSON:
        write_json(
            {
                "nodes": len(report.nodes),
                "skew": report.skew,
                "matrixRows": report.matrix_rows,
                "gpuNodes": [
                    {"name": n.name, "tag": n.tag, "upgradeState": n.upgrade_state}
                    for n in report.nodes
                ],
            },
            out,
        )
        return
    for variable, value, _ in report_variables(report):
        out.write(f"{variable}={sh_value(value)}\n")


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


def render_tags(tags: Sequence[Tag], fmt: Format, out: TextIO, *, with_node: bool) -> None:
    """The tags that could be built (`<tag>`, or `<node> <tag>` for --all); the others
    are the command's error."""
    built = [t for t in tags if t.tag is not None]
    if fmt is Format.JSON:
        write_json([{"node": t.node, "tag": t.tag} for t in built], out)
        return
    for tag in built:
        out.write(f"{tag.node} {tag.tag}\n" if with_node else f"{tag.tag}\n")


def render_image_audit(coverage: Sequence[Coverage], fmt: Format, out: TextIO) -> list[Coverage]:
    """`<node> MISSING <tag>`, `<node> UNKNOWN <why>`, or OK; the nodes shown."""
    shown = [c for c in coverage if not c.covered]
    render_findings(
        [
            f"{c.node} UNKNOWN {c.problem}" if c.tag is None else f"{c.node} MISSING {c.tag}"
            for c in shown
        ],
        [
            {"node": c.node, "tag": None, "problem": c.problem}
            if c.tag is None
            else {"node": c.node, "tag": c.tag}
            for c in shown
        ],
        fmt,
        out,
        title="driver image audit",
    )
    return shown


def render_placement(results: Sequence[Placement], fmt: Format, out: TextIO) -> None:
    if fmt is Format.JSON:
        write_json(
            [
                {
                    "workload": r.template.id,
                    "nodes": list(r.nodes),
                    "pending": r.pending,
                    "reason": r.reason,
                }
                for r in results
            ],
            out,
        )
        return
    out.writelines(placement_line(r) + "\n" for r in results)


# --- diagnostics ---------------------------------------------------------------------------


def diagnostic_json(diagnostic: Diagnostic) -> dict[str, Any]:
    source = diagnostic.source
    return {
        "severity": str(diagnostic.severity),
        "summary": diagnostic.summary,
        "detail": diagnostic.detail,
        "file": source.file if source else None,
        "line": source.line if source else None,
        "column": source.column if source else None,
    }


def render_diagnostics(diagnostics: Sequence[Diagnostic], err: TextIO) -> None:
    for diagnostic in diagnostics:
        if diagnostic.severity is Severity.ERROR:
            err.write(f"{diagnostic}\n")  # compiler style: `file:line:col: message`
            continue
        where = f"{diagnostic.source}: " if diagnostic.source else ""
        tag = severity_prefix(diagnostic.severity, err)
        log.warning("%s%s %s", where, tag, diagnostic.message, extra={"plain": True})


def render_validation(
    diagnostics: Sequence[Diagnostic], fmt: Format, out: TextIO, err: TextIO
) -> None:
    errors = sum(1 for d in diagnostics if d.severity is Severity.ERROR)
    warnings = len(diagnostics) - errors
    if fmt is Format.JSON:
        from reconcile.engine.plan import PLAN_API_VERSION

        write_json(
            {
                "apiVersion": PLAN_API_VERSION,
                "kind": "ValidationResult",
                "valid": errors == 0,
                "errors": errors,
                "warnings": warnings,
                "diagnostics": [diagnostic_json(d) for d in diagnostics],
            },
            out,
        )
        return
    if fmt is Format.MARKDOWN:
        out.write("#### reconcile validate\n\n")
        if not diagnostics:
            out.write("No problems found.\n")
            return
        out.write(f"{errors} error(s), {warnings} warning(s).\n\n")
        for d in diagnostics:
            where = f"{_code(str(d.source), cell=False)} " if d.source else ""
            out.write(f"- **{d.severity}** {where}{_md(d.message)}\n")
        return
    render_diagnostics(diagnostics, err)


# --- plan ----------------------------------------------------------------------------------


def _missing_note(missing: MissingNode) -> str:
    return f"{missing.name}: declared in {missing.source} but not found in the cluster"


def render_plan(
    plan: Plan, fmt: Format, out: TextIO, err: TextIO, *, show_owner: bool = False
) -> None:
    if fmt is Format.JSON:
        write_json(plan.model_dump(mode="json"), out)
        return
    if fmt is Format.MARKDOWN:
        _plan_markdown(plan, out)
        return
    wide = fmt is Format.WIDE
    for node, change in plan.lines():
        out.write(node_line(node, change, show_owner=show_owner, wide=wide) + "\n")
    for obj in plan.objects:
        out.writelines(line + "\n" for line in object_lines(obj, wide=wide))
    for missing in plan.missingNodes:
        err.write(_missing_note(missing) + "\n")
    _absent_notes(plan.absentNodes)
    for finding in plan.findings:
        if finding.severity is Severity.ERROR:
            err.write(finding_line(finding, err) + "\n")
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
            "%s is in reconcile's inventory of applied objects, but a Node is never pruned: "
            "left alone, and dropped from the inventory by the next apply (declare node "
            "facts in desired/nodes/ or desired/groups/)",
            never,
        )


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
        errors = sum(1 for f in plan.findings if f.is_error)
        lines.append(f"**Findings:** {errors} error(s), {len(plan.findings) - errors} warning(s)")
    return lines


def fleet_markdown(saved: FleetPlan, out: TextIO) -> None:
    """A summary table of the fleet, then each cluster's plan under its own heading."""
    out.write(f"#### reconcile plan: fleet {_code(saved.fleet, cell=False)}\n\n")
    out.write("| Cluster | Node changes | Object changes | Findings |\n| --- | --- | --- | --- |\n")
    for name, plan in saved.plans.items():
        errors = sum(1 for f in plan.findings if f.is_error)
        out.write(
            f"| {_code(name)} | {sum(1 for _ in plan.lines())} | {len(plan.objects)} | "
            f"{errors} error(s), {len(plan.findings) - errors} warning(s) |\n"
        )
    for name, error in saved.errors.items():
        out.write(f"| {_code(name)} | **error** | | {_md(error)} |\n")
    for name, plan in saved.plans.items():
        buffer = io.StringIO()
        _plan_markdown(plan, buffer)
        body = buffer.getvalue().removeprefix("#### reconcile plan\n")
        out.write(f"\n##### {_code(name, cell=False)}\n{body}")


def _plan_markdown(plan: Plan, out: TextIO) -> None:
    changes = list(plan.lines())
    out.write("#### reconcile plan\n\n")
    if not plan.needs_attention:
        out.write("No changes: the cluster matches `desired/`.\n")
        return
    out.write("".join(f"- {line}\n" for line in _plan_summary(plan, changes)) + "\n")
    if plan.findings:
        out.write("| | Subject | Finding |\n| --- | --- | --- |\n")
        for finding in plan.findings:
            mark = "**error**" if finding.is_error else "warning"
            out.write(f"| {mark} | {_code(finding.subject)} | {_md(finding.message)} |\n")
        out.write("\n")
    if changes:
        out.write("| Node | Label | Live | Desired | Owner |\n| --- | --- | --- | --- | --- |\n")
        for node, change in changes:
            out.write(
                f"| {_md(node)} | {_code(change.shown_key)} | {_md_value(change.before)} | "
                f"{_md_value(change.after)} | {_md(change.owner or '')} |\n"
            )
    if plan.objects:
        out.write("\n| Object | Field | Live | Desired |\n| --- | --- | --- | --- |\n")
        for obj in plan.objects:
            if obj.action.glyph is not None:  # the whole object, not its fields
                verb = f"*({obj.action})*"
                out.write(f"| {_code(obj.id)} | {verb} | | |\n")
                continue
            for field_change in obj.changes:
                before, after = _md_field(field_change)
                out.write(
                    f"| {_code(obj.id)} | {_code(field_change.shown_path)} | {before} | {after} |\n"
                )
    if plan.missingNodes:
        out.write("\n**Declared but not in the cluster:**\n\n")
        for missing in plan.missingNodes:
            out.write(f"- {_code(missing.name, cell=False)} ({_md(missing.source)})\n")
    if plan.prunable:
        out.write(f"\n{len(plan.prunable)} label(s) would be removed by `--prune`.\n")


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


# --- apply ---------------------------------------------------------------------------------


def _change_json(node: str, change: NodeChange) -> dict[str, Any]:
    return {"node": node, **change.model_dump(mode="json")}


def render_apply(result: ApplyResult, fmt: Format, out: TextIO, err: TextIO) -> None:
    from reconcile.engine.plan import PLAN_API_VERSION

    if fmt is Format.JSON:
        write_json(
            {
                "apiVersion": PLAN_API_VERSION,
                "kind": "ApplyResult",
                "converged": result.ok,
                "applied": [_change_json(node, change) for node, change in result.lines()],
                "failed": [{"node": n.name, "error": n.error} for n in result.failed],
                "objects": [
                    {
                        "object": o.id,
                        "lines": object_lines(o.changed) if o.changed is not None else [],
                        "error": o.error,
                        "note": o.note,
                    }
                    for o in result.objects
                ],
                "notes": [{"node": n.name, "note": n.note} for n in result.nodes if n.note],
                "rejected": list(result.rejected),
                "skipped": list(result.skipped),
                "retries": result.retries,
                "missingNodes": [m.model_dump(mode="json") for m in result.missingNodes],
                "absentNodes": [m.model_dump(mode="json") for m in result.absentNodes],
                "conflicts": sum(n.conflicts for n in result.nodes),
            },
            out,
        )
        return
    if fmt is Format.MARKDOWN:
        _apply_markdown(result, out)
        return
    wide = fmt is Format.WIDE
    for node, change in result.lines():
        out.write(node_line(node, change, wide=wide) + "\n")
    for obj in result.changed_objects():
        out.writelines(line + "\n" for line in object_lines(obj, wide=wide))
    render_apply_failures(result, err)


def _absent_notes(absent: Sequence[MissingNode]) -> None:
    for node in absent:
        log.info("%s: declared in %s, absent from the cluster, and may be", node.name, node.source)


def render_apply_failures(result: ApplyResult, err: TextIO) -> None:
    _absent_notes(result.absentNodes)
    for node in result.nodes:
        if node.note:
            log.info("%s: %s", node.name, node.note)
    for obj in result.objects:
        if obj.note:
            log.info("%s: %s", obj.id, obj.note)
    for rejected in result.rejected:
        err.write(f"rejected: {rejected}\n")
    if result.rejected:
        err.write(f"error: {len(result.rejected)} refusal(s) above: nothing was applied\n")
    for node in result.failed:
        err.write(f"{node.name}: not converged: {node.error}\n")
    for obj in result.failed_objects:
        err.write(f"{obj.id}: not applied: {obj.error}\n")
    for missing in result.missingNodes:
        err.write(_missing_note(missing) + "\n")


def _apply_markdown(result: ApplyResult, out: TextIO) -> None:
    applied = list(result.lines())
    out.write("#### reconcile apply\n\n")
    out.write(
        ("Converged" if result.ok else "**Not converged**")
        + f": {len(applied)} change(s) applied.\n"
    )
    if applied:
        out.write("\n| Node | Label | Now |\n| --- | --- | --- |\n")
        for node, change in applied:
            out.write(f"| {_md(node)} | {_code(change.shown_key)} | {_md_value(change.after)} |\n")
    objects = [line for obj in result.changed_objects() for line in object_lines(obj)]
    if objects:
        out.write("\n" + "".join(f"- {_code(line.strip(), cell=False)}\n" for line in objects))
    _md_list(out, "Rejected (nothing was applied)", (f"{_md(r)}" for r in result.rejected))
    _md_list(
        out,
        "Failed",
        (f"{_code(n.name, cell=False)}: {_md(n.error or '')}" for n in result.failed),
    )
    _md_list(
        out,
        "Objects not applied",
        (f"{_code(o.id, cell=False)}: {_md(o.error or '')}" for o in result.failed_objects),
    )
    _md_list(
        out,
        "Declared but not in the cluster",
        (_code(m.name, cell=False) for m in result.missingNodes),
    )


def _md_list(out: TextIO, title: str, items: Iterable[str]) -> None:
    rows = list(items)
    if rows:
        out.write(f"\n**{title}:**\n\n")
        for row in rows:
            out.write(f"- {row}\n")


# --- rbac ----------------------------------------------------------------------------------


# What the YAML output says first: where it comes from and when to regenerate it.
_RBAC_HEADER: Final = (
    "The least privilege reconcile needs (plan, apply --prune/--recreate, watch, upgrade,",
    "audit, report, import, placement) for the desired/ tree this was generated from, by",
    "`reconcile rbac`. Regenerate it when desired/ changes; keep the old grants until",
    "`apply --prune` has deleted what left desired/. Discovery (/api, /apis) needs no",
    "grant: the default system:discovery role allows it to every authenticated user.",
)


def render_rbac(objects: Sequence[RbacObject], fmt: Format, out: TextIO) -> None:
    """YAML for `kubectl apply -f` with a comment saying why each rule is there; JSON as
    a v1 List; markdown as the YAML in a fenced block."""
    from reconcile.desired.writer import dump_documents

    if fmt is Format.JSON:
        write_json(
            {"apiVersion": "v1", "kind": "List", "items": [o.document for o in objects]}, out
        )
        return
    comments: dict[tuple[str | int, ...], str] = {}
    for index, obj in enumerate(objects):
        lines = [*(_RBAC_HEADER if index == 0 else ()), *_wrapped(obj.comment)]
        if lines:
            comments[(index,)] = "\n".join(lines)
        for rule, why in enumerate(obj.rule_comments):
            if why:
                comments[(index, "rules", rule)] = "\n".join(_wrapped(why))
    if fmt is Format.MARKDOWN:
        out.write("#### reconcile rbac\n\n```yaml\n")
    out.write(dump_documents([o.document for o in objects], comments))
    if fmt is Format.MARKDOWN:
        out.write("```\n")


def _wrapped(comment: str) -> list[str]:
    return textwrap.wrap(comment, width=88) if comment else []


def render_import(
    changes: Sequence[FileChange], fmt: Format, out: TextIO, *, dry_run: bool
) -> None:
    """`--dry-run`: the unified diff of every file; else one line per file written."""
    if fmt is Format.JSON:
        write_json(
            [
                {
                    "path": str(c.path),
                    "labels": c.labels,
                    "new": not c.before,
                    "written": not dry_run,
                    "diff": "".join(_unified(c)),
                }
                for c in changes
            ],
            out,
        )
        return
    for change in changes:
        if dry_run:
            out.writelines(_unified(change))
        else:
            out.write(f"{change.path} {change.labels} label(s)\n")


def _unified(change: FileChange) -> Iterable[str]:
    return difflib.unified_diff(
        change.before.splitlines(keepends=True),
        change.after.splitlines(keepends=True),
        fromfile=str(change.path) if change.before else "/dev/null",
        tofile=str(change.path),
    )
