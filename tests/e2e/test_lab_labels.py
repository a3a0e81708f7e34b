"""The lab scenario end to end: real CLI, official client, HTTP to the cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import REPO, TestCluster, run_cli


def test_drifted_count_is_planned_applied_and_then_in_sync(lab: TestCluster, workdir: Path) -> None:
    assert lab.labels("lab-node-1")["nvidia.com/gpu.count"] == "9"

    plan = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert (plan.code, plan.lines) == (1, ["lab-node-1 nvidia.com/gpu.count 2"]), plan.stderr

    apply = run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert (apply.code, apply.lines) == (0, ["lab-node-1 nvidia.com/gpu.count 2"]), apply.stderr
    assert lab.labels("lab-node-1")["nvidia.com/gpu.count"] == "2"

    again = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert (again.code, again.stdout) == (0, "")


def test_second_apply_prints_nothing_and_writes_nothing(lab: TestCluster, workdir: Path) -> None:
    run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)
    versions = lab.resource_versions()

    second = run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert (second.code, second.stdout) == (0, "")
    assert lab.resource_versions() == versions


def test_undeclared_labels_are_never_touched(lab: TestCluster, workdir: Path) -> None:
    lab.label(
        "lab-node-1", **{"example.com/owner": "team-a", "nvidia.com/gpu.deploy.driver": "false"}
    )

    run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)

    labels = lab.labels("lab-node-1")
    assert labels["example.com/owner"] == "team-a"
    assert labels["nvidia.com/gpu.deploy.driver"] == "false"
    assert labels["kubernetes.io/hostname"] == "lab-node-1"


def test_must_be_absent_label_is_removed_and_printed_as_dash(
    lab: TestCluster, workdir: Path
) -> None:
    lab.label("lab-node-2", **{"nvidia.com/gpu.present": "true"})

    plan = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert plan.lines == [
        "lab-node-1 nvidia.com/gpu.count 2",
        "lab-node-2 nvidia.com/gpu.present -",
    ]

    run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert "nvidia.com/gpu.present" not in lab.labels("lab-node-2")


def test_empty_value_is_a_value_not_an_absence(lab: TestCluster, workdir: Path) -> None:
    node = workdir / "desired" / "nodes" / "lab-node-2.yaml"
    node.write_text(node.read_text() + '  example.com/empty: ""\n')

    plan = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert 'lab-node-2 example.com/empty ""' in plan.lines

    run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert lab.labels("lab-node-2")["example.com/empty"] == ""
    assert run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig).code == 0


def test_node_missing_from_cluster_is_drift_named_with_its_file(
    lab: TestCluster, workdir: Path
) -> None:
    nodes = workdir / "desired" / "nodes"
    (nodes / "lab-node-9.yaml").write_text(
        (nodes / "lab-node-2.yaml").read_text().replace("lab-node-2", "lab-node-9")
    )

    plan = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert plan.code == 1
    assert "lab-node-9" not in plan.stdout
    assert (
        "lab-node-9: declared in desired/nodes/lab-node-9.yaml:5:9 but not found in the cluster"
        in plan.stderr
    )
    apply = run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert apply.code == 2
    assert apply.lines == ["lab-node-1 nvidia.com/gpu.count 2"]


def test_plan_output_is_sorted_by_node_then_key(lab: TestCluster, workdir: Path) -> None:
    lab.label(
        "lab-node-0",
        **{"nvidia.com/gpu.memory": "1", "feature.node.kubernetes.io/kernel-version.major": "6"},
    )

    plan = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert plan.lines == [
        "lab-node-0 feature.node.kubernetes.io/kernel-version.major 5",
        "lab-node-0 nvidia.com/gpu.memory 40537",
        "lab-node-1 nvidia.com/gpu.count 2",
    ]


def test_plan_json_round_trips_and_records_resource_versions(
    lab: TestCluster, workdir: Path
) -> None:
    saved = workdir / "plan.json"
    plan = run_cli(
        "plan", "--out", str(saved), "-o", "json", cwd=workdir, kubeconfig=lab.kubeconfig
    )

    document = json.loads(plan.stdout)
    assert document == json.loads(saved.read_text())
    [node] = document["nodes"]
    assert node["name"] == "lab-node-1"
    assert node["resourceVersion"] == lab.node("lab-node-1")["metadata"]["resourceVersion"]
    assert node["changes"] == [
        {
            "key": "nvidia.com/gpu.count",
            "action": "update",
            "before": "9",
            "after": "2",
            "owner": "gpu-feature-discovery",
            "fact": "label",
            "source": "desired/nodes/lab-node-1.yaml:18:3",
            "rollout": False,
        }
    ]


def test_saved_plan_applies_exactly_what_it_says(lab: TestCluster, workdir: Path) -> None:
    saved = workdir / "plan.json"
    run_cli("plan", "--out", str(saved), cwd=workdir, kubeconfig=lab.kubeconfig)

    apply = run_cli("apply", str(saved), cwd=workdir, kubeconfig=lab.kubeconfig)

    assert (apply.code, apply.lines) == (0, ["lab-node-1 nvidia.com/gpu.count 2"])
    assert lab.labels("lab-node-1")["nvidia.com/gpu.count"] == "2"


def test_stale_saved_plan_is_refused_and_changes_nothing(lab: TestCluster, workdir: Path) -> None:
    saved = workdir / "plan.json"
    run_cli("plan", "--out", str(saved), cwd=workdir, kubeconfig=lab.kubeconfig)
    lab.label("lab-node-1", **{"nvidia.com/gpu.count": "8"})  # someone else writes meanwhile
    versions = lab.resource_versions()

    apply = run_cli("apply", str(saved), cwd=workdir, kubeconfig=lab.kubeconfig)

    assert apply.code == 2
    assert apply.stdout == ""
    assert "plan is stale" in apply.stderr
    assert "lab-node-1" in apply.stderr
    assert lab.resource_versions() == versions
    assert lab.labels("lab-node-1")["nvidia.com/gpu.count"] == "8"


def test_markdown_plan_is_a_table_for_pull_requests(lab: TestCluster, workdir: Path) -> None:
    plan = run_cli("plan", "-o", "markdown", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert plan.code == 1
    assert (
        "| lab-node-1 | `nvidia.com/gpu.count` | `9` | `2` | gpu-feature-discovery |" in plan.stdout
    )


def test_apply_json_reports_what_changed(lab: TestCluster, workdir: Path) -> None:
    apply = run_cli("apply", "-o", "json", cwd=workdir, kubeconfig=lab.kubeconfig)

    document = json.loads(apply.stdout)
    assert document["converged"] is True
    assert document["applied"] == [
        {
            "node": "lab-node-1",
            "key": "nvidia.com/gpu.count",
            "action": "update",
            "before": "9",
            "after": "2",
            "owner": "gpu-feature-discovery",
            "fact": "label",
            "source": "desired/nodes/lab-node-1.yaml:18:3",
            "rollout": False,
        }
    ]
    assert document["failed"] == []


def test_the_docs_library_example_plans_and_applies(
    lab: TestCluster, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = (REPO / "docs" / "architecture.md").read_text()
    example = page.split("A library user runs the same without argv:\n\n```python\n", 1)[1]
    example = example.split("```", 1)[0]
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("KUBECONFIG", str(lab.kubeconfig))
    namespace: dict[str, object] = {}
    exec(compile(example, "docs/architecture.md", "exec"), namespace)  # as a user runs it
    assert lab.labels("lab-node-1")["nvidia.com/gpu.count"] == "2"
    assert [(n, c.key) for n, c in namespace["result"].lines()] == [  # type: ignore[attr-defined]
        ("lab-node-1", "nvidia.com/gpu.count")
    ]


def test_nodes_that_may_be_absent_are_noted_not_drift(lab: TestCluster, workdir: Path) -> None:
    gone = workdir / "desired" / "nodes" / "lab-node-7.yaml"
    gone.write_text(
        "apiVersion: reconcile.dev/v1alpha1\nkind: NodeFeatures\nmetadata: {name: lab-node-7}\n"
        "labels: {example.com/x: y}\n"
    )
    assert run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig).lines == [
        "lab-node-1 nvidia.com/gpu.count 2"
    ]
    assert run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig).code == 2  # cannot create it

    flagged = run_cli("apply", "--allow-missing-nodes", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert flagged.code == 0, flagged.stderr
    assert (
        "note: lab-node-7: declared in desired/nodes/lab-node-7.yaml:3:18, absent from the cluster, and may be"
        in flagged.stderr
    )

    gone.write_text(gone.read_text() + "optional: true\n")
    plan = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert (plan.code, plan.stdout) == (0, "")
    assert "lab-node-7: declared in" in plan.stderr


def test_reapplying_an_applied_saved_plan_changes_nothing_and_succeeds(
    lab: TestCluster, workdir: Path
) -> None:
    saved = workdir / "plan.json"
    run_cli("plan", "--out", str(saved), cwd=workdir, kubeconfig=lab.kubeconfig)
    first = run_cli("apply", str(saved), cwd=workdir, kubeconfig=lab.kubeconfig)
    assert (first.code, first.lines) == (0, ["lab-node-1 nvidia.com/gpu.count 2"])
    before = lab.resource_versions()

    again = run_cli("apply", str(saved), cwd=workdir, kubeconfig=lab.kubeconfig)

    assert (again.code, again.stdout) == (0, ""), again.stderr
    assert "lab-node-1: already in place (another writer, or an earlier run)" in again.stderr
    assert lab.resource_versions() == before
