"""The upgrade's preflight rules and the in-place writer of desired/ files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reconcile.desired.models import DesiredNode
from reconcile.desired.reader import load_desired
from reconcile.desired.writer import write_labels
from reconcile.diagnostics import Source
from reconcile.gpu.journal import JOURNAL, Journal
from reconcile.gpu.upgrade import (
    PodToEvict,
    Upgrade,
    UpgradeRefused,
    budget_blockers,
    pods_to_evict,
)
from reconcile.kube.objects import LiveNode


def _pod(name: str, owner: str | None = "ReplicaSet", **status: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": name,
        "labels": {"app": "a"},
    }
    if owner:
        metadata["ownerReferences"] = [{"kind": owner, "name": "o", "controller": True}]
    return {
        "metadata": metadata,
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            **status,
        },
    }


def test_finished_and_mirror_pods_are_not_evicted() -> None:
    mirror = _pod("static", owner=None)
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "x"}
    found = pods_to_evict(
        [_pod("a"), _pod("done", phase="Succeeded"), mirror], ignore_daemonsets=False, force=False
    )
    assert [p.name for p in found] == ["a"]


def test_bare_and_daemonset_pods_are_refused_like_kubectl_drain() -> None:
    with pytest.raises(UpgradeRefused, match="Pod/ns/bare has no controller"):
        pods_to_evict([_pod("bare", owner=None)], ignore_daemonsets=True, force=False)
    assert [
        p.name
        for p in pods_to_evict([_pod("bare", owner=None)], ignore_daemonsets=True, force=True)
    ] == ["bare"]
    with pytest.raises(UpgradeRefused, match="managed by a DaemonSet"):
        pods_to_evict([_pod("ds", owner="DaemonSet")], ignore_daemonsets=False, force=False)
    assert pods_to_evict([_pod("ds", owner="DaemonSet")], ignore_daemonsets=True, force=False) == []


def _budget(spec: dict[str, Any], **status: int) -> dict[str, Any]:
    return {
        "metadata": {"name": "b", "namespace": "ns"},
        "spec": {"selector": {"matchLabels": {"app": "a"}}, **spec},
        "status": status,
    }


POD = PodToEvict("ns", "p", "u", {"app": "a"}, ready=True)


@pytest.mark.parametrize(
    ("spec", "suggestion"),
    [
        ({"minAvailable": 4}, "set minAvailable to 3"),
        ({"maxUnavailable": 0}, "set maxUnavailable to 1"),
        ({"minAvailable": "100%"}, "allow 1 more disruption(s) in its spec"),
    ],
)
def test_a_spent_budget_is_named_with_the_change_that_lets_it_pass(
    spec: dict[str, Any], suggestion: str
) -> None:
    budget = _budget(spec, currentHealthy=4, desiredHealthy=4, disruptionsAllowed=0)
    [problem] = budget_blockers([POD], {"ns": [budget]}, "n1")
    assert problem.startswith("PodDisruptionBudget ns/b blocks the drain of n1:")
    assert suggestion in problem


def test_a_budget_with_room_does_not_block() -> None:
    assert (
        budget_blockers(
            [POD],
            {
                "ns": [
                    _budget(
                        {"minAvailable": 3},
                        currentHealthy=4,
                        desiredHealthy=3,
                        disruptionsAllowed=1,
                    )
                ]
            },
            "n1",
        )
        == []
    )


def test_two_budgets_over_one_pod_are_refused() -> None:
    budgets = [
        _budget({"minAvailable": 1}, disruptionsAllowed=5),
        _budget({"maxUnavailable": 1}, disruptionsAllowed=5),
    ]
    [problem] = budget_blockers([POD], {"ns": budgets}, "n1")
    assert "selected by more than one PodDisruptionBudget" in problem


def test_an_unready_pod_does_not_need_a_healthy_budget() -> None:
    unready = PodToEvict("ns", "p", "u", {"app": "a"}, ready=False)
    budget = _budget({"minAvailable": 1}, currentHealthy=1, desiredHealthy=1, disruptionsAllowed=0)
    assert budget_blockers([unready], {"ns": [budget]}, "n1") == []


def test_resume_points_come_from_the_journal_never_from_the_operators_label() -> None:
    nowhere: Any = None  # start_index reads only the node it is given
    job = Upgrade(nowhere, "n", "550.90.07", frozenset(), emit=print, note=print)
    for state in (None, "upgrade-done", "upgrade-failed", "drain-required", "uncordon-required"):
        labels: dict[str, str] = {}
        if state is not None:
            labels["nvidia.com/gpu-driver-upgrade-state"] = state
        assert job.start_index(LiveNode("n", "1", labels)) == 0, state
    for phase, index in (
        ("upgrade-required", 0),
        ("cordon-required", 1),
        ("drain-required", 2),
        ("pod-restart-required", 3),
        ("uncordon-required", 5),
    ):
        recorded = Journal(
            rollout="r", lease="kube-system/l", work="driver", target="550.90.07", phase=phase
        )
        live = LiveNode("n", "1", {}, {JOURNAL: recorded.dump()})
        assert job.start_index(live) == index, phase


def test_write_labels_keeps_comments_order_and_quoting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "desired" / "nodes" / "n.yaml"
    path.parent.mkdir(parents=True)
    original = (
        "# yaml-language-server: $schema=../../schemas/nodefeatures.schema.json\n"
        "apiVersion: reconcile.dev/v1alpha1\nkind: NodeFeatures\nmetadata:\n  name: n\nlabels:\n"
        "  # the driver\n  nvidia.com/cuda.driver.major: '535'   # single quotes\n"
        "  nvidia.com/gpu.product: NVIDIA-A10\n"
    )
    path.write_text(original)
    node = DesiredNode("n", {}, Source("desired/nodes/n.yaml", 5, 9))

    changed = write_labels(
        Path("desired"),
        node,
        {
            "nvidia.com/cuda.driver.major": "550",
            "nvidia.com/cuda.driver.rev": "07",
            "nvidia.com/gpu.product": "NVIDIA-A10",
        },
    )

    assert changed == ["nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.rev"]
    assert (
        path.read_text()
        == original.replace("'535'", "'550'") + '  nvidia.com/cuda.driver.rev: "07"\n'
    )
    state, problems = load_desired(tmp_path / "desired")
    assert problems == []
    assert state.nodes["n"].labels["nvidia.com/cuda.driver.rev"] == "07"


def test_write_labels_in_an_env_file(tmp_path: Path) -> None:
    path = tmp_path / "n.env"
    path.write_text("# facts\nnvidia.com/cuda.driver.major=535\ncustom-gpu-training\n")
    node = DesiredNode("n", {}, Source(str(path), 1, 1))

    assert write_labels(
        tmp_path, node, {"nvidia.com/cuda.driver.major": "550", "nvidia.com/cuda.driver.rev": "07"}
    ) == [
        "nvidia.com/cuda.driver.major",
        "nvidia.com/cuda.driver.rev",
    ]
    assert (
        path.read_text()
        == "# facts\nnvidia.com/cuda.driver.major=550\ncustom-gpu-training\nnvidia.com/cuda.driver.rev=07\n"
    )
