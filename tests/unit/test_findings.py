"""The plan's vocabulary: which findings stop apply, the labels a node carries once
changes are laid over, and the policy of a plan made without domain knowledge."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from reconcile.diagnostics import Severity
from reconcile.engine.diff import Action, NodeChange
from reconcile.engine.facts import Fact
from reconcile.engine.findings import NO_POLICY, Finding, blocking, overlay
from tests.fake import FakeCluster


def _finding(severity: Severity, *, blocks: bool) -> Finding:
    return Finding(severity=severity, kind="k", subject="s", message="m", blocksApply=blocks)


def test_only_findings_that_block_apply_stop_it_whatever_their_severity() -> None:
    error, warning = _finding(Severity.ERROR, blocks=False), _finding(Severity.WARNING, blocks=True)
    assert blocking([error, warning]) == [warning]
    assert (error.is_error, warning.is_error) == (True, False)


def test_a_finding_is_a_frozen_value_with_no_unknown_fields() -> None:
    finding = _finding(Severity.ERROR, blocks=True)
    with pytest.raises(ValidationError):
        finding.kind = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        Finding.model_validate({**finding.model_dump(), "extra": 1})


def test_overlay_applies_label_changes_only() -> None:
    changes = [
        NodeChange(key="a.io/x", action=Action.UPDATE, before="0", after="1"),
        NodeChange(key="a.io/gone", action=Action.REMOVE, before="1", after=None),
        NodeChange(key="a.io/new", action=Action.ADD, before=None, after=""),
        NodeChange(
            key="a.io/note", action=Action.ADD, before=None, after="n", fact=Fact.ANNOTATION
        ),
    ]
    live = {"a.io/x": "0", "a.io/gone": "1", "a.io/kept": "k"}

    assert overlay(live, changes) == {"a.io/x": "1", "a.io/kept": "k", "a.io/new": ""}
    assert live == {"a.io/x": "0", "a.io/gone": "1", "a.io/kept": "k"}  # not changed


def test_without_domain_knowledge_no_label_has_an_owner_and_nothing_is_refused() -> None:
    cluster = FakeCluster()
    node = cluster.add_node("n1", {"nvidia.com/gpu.product": "A100"})
    change = NodeChange(
        key="nvidia.com/gpu.product", action=Action.UPDATE, before="A100", after="H100"
    )
    assert NO_POLICY.owner(node, "nvidia.com/gpu.product", frozenset()) is None
    assert NO_POLICY.refusal(node, [change]) is None
