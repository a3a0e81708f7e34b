"""The API server's budget for a node's annotations, checked per live node at plan time.

All annotations of one object together (keys and values, reconcile's inventories
included) may not exceed 256 KiB; a PATCH that goes over is refused (422). Which groups
select a node is known only from its live labels, so two groups that each stay within
the budget can together exceed it on a node they both select: `validate` catches the
overlaps it can know offline, this check every node a plan writes.
"""

from __future__ import annotations

from reconcile.diagnostics import Severity
from reconcile.engine.checks import Projection
from reconcile.engine.facts import Fact
from reconcile.engine.findings import Finding
from reconcile.kube.validation import TOTAL_ANNOTATION_SIZE_LIMIT, annotations_size


def annotation_budget_check(projection: Projection) -> list[Finding]:
    """An error finding (apply writes nothing) for each planned node whose annotations,
    once the plan is applied, would exceed the API server's limit."""
    live = {node.name: node for node in projection.live}
    findings = []
    for node_plan in projection.nodes:
        node = live.get(node_plan.name)
        if node is None:
            continue
        after = dict(node.annotations)
        written = node_plan.patch(with_precondition=False)["metadata"]
        assert isinstance(written, dict)  # NodePlan.patch: metadata is a mapping
        for key, value in written["annotations"].items():
            if value is None:
                after.pop(key, None)
            else:
                after[key] = value
        size = annotations_size(after)
        if size <= TOTAL_ANNOTATION_SIZE_LIMIT:
            continue
        sources = sorted(
            {
                change.source.rsplit(":", 2)[0]
                for change in node_plan.changes
                if change.fact is Fact.ANNOTATION and change.source
            }
        )
        declared = f" (declared in {', '.join(sources)})" if sources else ""
        findings.append(
            Finding(
                severity=Severity.ERROR,
                kind="annotations-too-long",
                subject=node_plan.name,
                message=(
                    f"its annotations would total {size} bytes after apply{declared}, over "
                    f"the API server's limit of {TOTAL_ANNOTATION_SIZE_LIMIT} (all of a node's "
                    "annotations, reconcile's inventories included): the update would be "
                    "refused; declare less for this node"
                ),
                blocksApply=True,
            )
        )
    return findings
