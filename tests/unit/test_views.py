"""Output that is safe for its consumer, whatever the values: `sh` sourcing the report,
markdown rendering a pull-request comment."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from reconcile.cli.output import Format
from reconcile.cli.views import report_clash, view_for
from reconcile.engine.diff import Action, NodeChange
from reconcile.engine.plan import Finding, NodePlan, Plan
from reconcile.gpu.drivers import env_name
from reconcile.gpu.operations import Report, ReportNode
from tests.support import markdown_html, markdown_table_rows

# Values a proxy or a server that does not validate could return as label values.
HOSTILE = [
    "$(touch PWNED)",
    "`touch PWNED`",
    "x; touch PWNED",
    "x && touch PWNED #",
    "it's",
    '"double"',
    "first\ntouch PWNED",
    "back\\slash\\",
    "${HOME}",
    "a|b",
    "<img src=x onerror=alert(1)>",
    "<!-- hides the rest",
    "&amp;",
    "``",
    "` x `",
    " spaced ",
    "ünïcode",
    "550-5.15.0-119-generic-ubuntu22.04",
    "",
]
SHELLS = [shell for shell in ("sh", "bash", "dash") if shutil.which(shell)]


def _report(tmp_path: Path) -> Path:
    out = io.StringIO()
    nodes = tuple(ReportNode(f"n{i}", value, value[::-1]) for i, value in enumerate(HOSTILE))
    view_for(Format.TEXT, out).report(Report(nodes, skew=0, matrix_rows=3))
    path = tmp_path / "report.env"
    path.write_text(out.getvalue())
    return path


@pytest.mark.parametrize("shell", SHELLS)
def test_sourcing_the_report_runs_nothing_and_reads_every_value_back(
    shell: str, tmp_path: Path
) -> None:
    _report(tmp_path)
    names = [f"N{i}_{suffix}" for i in range(len(HOSTILE)) for suffix in ("TAG", "UPGRADE_STATE")]
    script = ". ./report.env && printf '%s\\000' " + " ".join(
        f'"${name}"' for name in ["NODES", *names]
    )

    finished = subprocess.run(
        [shell, "-c", script], cwd=tmp_path, capture_output=True, check=True, timeout=30
    )

    values = finished.stdout.decode().split("\0")[:-1]
    assert values == [str(len(HOSTILE))] + [v for value in HOSTILE for v in (value, value[::-1])]
    assert finished.stderr == b""
    assert not (tmp_path / "PWNED").exists()


def test_plain_tokens_stay_unquoted_in_the_report(tmp_path: Path) -> None:
    lines = _report(tmp_path).read_text().splitlines()

    assert lines[:3] == ["NODES=19", "SKEW=0", "MATRIX_ROWS=3"]
    assert "N17_TAG=550-5.15.0-119-generic-ubuntu22.04" in lines
    assert "N18_TAG=" in lines  # empty stays empty
    assert "N0_TAG='$(touch PWNED)'" in lines


@pytest.mark.parametrize(
    ("node", "variable"),
    [
        ("lab-node-1", "LAB_NODE_1"),
        ("10-0-0-1.ec2.internal", "_10_0_0_1_EC2_INTERNAL"),
        ("$(touch PWNED)", "__TOUCH_PWNED_"),
    ],
)
def test_report_variable_names_are_always_shell_names(node: str, variable: str) -> None:
    assert env_name(node) == variable


def _gpu_report(*nodes: str) -> Report:
    return Report(tuple(ReportNode(n, "550-x", None) for n in nodes), 0, 1)


def test_a_report_variable_two_clusters_would_set_is_refused_naming_both() -> None:
    assert (
        report_clash({"lab": _gpu_report("lab-node-1"), "driver-lab": _gpu_report("lab-node-1")})
        is None
    )
    # `a--b` then `x`, or `a` then `b--x`: both A__B__X_TAG.
    clash = report_clash({"a--b": _gpu_report("x"), "a": _gpu_report("b--x")})
    assert clash is not None
    assert clash.startswith(
        "node x of cluster a--b and node b--x of cluster a both make the variable A__B__X_TAG"
    )
    assert report_clash({None: _gpu_report("a-b", "a.b")}) is not None
    assert report_clash({None: _gpu_report("a-b", "a.c")}) is None


def _node(name: str, *changes: NodeChange) -> NodePlan:
    return NodePlan(name=name, resourceVersion="1", source="s", changes=changes, inventory=())


def test_markdown_cells_show_hostile_values_verbatim_and_keep_the_table() -> None:
    values = [v for v in HOSTILE if v.strip() and "\n" not in v]
    changes = [
        NodeChange(key=f"example.com/k{i}", action=Action.UPDATE, before=v, after=v[::-1])
        for i, v in enumerate(values)
    ]
    plan = Plan(
        nodes=(_node("n|1<b>", *changes),),
        findings=(Finding(severity="error", kind="k", subject="a|`b`", message="<x>|`y`"),),
    )
    out = io.StringIO()

    view_for(Format.MARKDOWN, out, io.StringIO()).plan(plan)

    findings, *labels = markdown_table_rows(out.getvalue())
    assert findings == ["error", "a|`b`", "<x>|`y`"]
    assert labels == [
        ["n|1<b>", f"example.com/k{i}", value, value[::-1], ""] for i, value in enumerate(values)
    ]
    assert markdown_html(out.getvalue()) == []


def test_a_line_break_in_a_value_cannot_end_the_table_row() -> None:
    change = NodeChange(
        key="example.com/k", action=Action.UPDATE, before="a\n| x | y |\nb", after="c\r\n<b>"
    )
    plan = Plan(nodes=(_node("n1", change),))
    out = io.StringIO()

    view_for(Format.MARKDOWN, out, io.StringIO()).plan(plan)

    assert markdown_table_rows(out.getvalue()) == [
        ["n1", "example.com/k", "a\\n| x | y |\\nb", "c\\r\\n<b>", ""]
    ]
    assert markdown_html(out.getvalue()) == []


def test_a_fleets_json_holds_each_clusters_document_and_markdown_a_section_each() -> None:
    from reconcile.engine.fleet import Outcome
    from reconcile.gpu.drivers import AuditFinding

    outcomes: list[Outcome[list[AuditFinding]]] = [
        Outcome("lab", value=[AuditFinding("n1", "nvidia.com/gpu.count", "missing")]),
        Outcome("edge", error="unreachable"),
        Outcome("staging", value=[]),
    ]
    as_json, as_markdown = io.StringIO(), io.StringIO()

    view_for(Format.JSON, as_json).clusters(outcomes, lambda view, found: view.audit(found))
    view_for(Format.MARKDOWN, as_markdown).clusters(outcomes, lambda view, found: view.audit(found))

    assert json.loads(as_json.getvalue()) == {
        "apiVersion": "reconcile.dev/v1alpha1",
        "kind": "FleetResult",
        "clusters": {
            "lab": {
                "ok": False,
                "findings": [{"node": "n1", "key": "nvidia.com/gpu.count", "reason": "missing"}],
            },
            "staging": {"ok": True, "findings": []},
        },
        "errors": {"edge": "unreachable"},
    }
    assert as_markdown.getvalue() == (
        "##### `lab`\n\n#### reconcile GPU label audit\n\n"
        "- `n1 nvidia.com/gpu.count missing`\n\n"
        "##### `staging`\n\n#### reconcile GPU label audit\n\nOK\n\n"
    )
