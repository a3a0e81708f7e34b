"""Every test cluster has a mig-manager stand-in (tests/support.py): a change of a GPU
node's `nvidia.com/mig.config` goes pending, then success with the node's GPU resources
rewritten through the status subresource, or failed. On the sandbox and on a real API
server alike (RECONCILE_TEST_KUBECONFIG)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from reconcile.gpu.mig import MigTable, Projected
from reconcile.gpu.standin import FAIL_ANNOTATION, STATE
from tests.support import TestCluster, each_mig_states, mig_node, mig_states, run_cli

ClusterFactory = Callable[[list[dict[str, Any]]], TestCluster]
SLICED = {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.5gb": "56"}


def _gpu_resources(cluster: TestCluster, name: str) -> tuple[dict[str, str], dict[str, str]]:
    """(capacity, allocatable) of the node, GPU resources only."""
    status = cluster.node(name)["status"]

    def gpu(part: str) -> dict[str, str]:
        prefixes = ("nvidia.com/gpu", "nvidia.com/mig-")
        return {k: v for k, v in status[part].items() if k.startswith(prefixes)}

    return gpu("capacity"), gpu("allocatable")


def test_a_new_layout_is_pending_then_success_and_advertised(
    make_cluster: ClusterFactory,
) -> None:
    cluster = make_cluster(
        [mig_node("a100-0"), mig_node("a100-1", layout="all-1g.5gb", resources=SLICED)]
    )
    labels = {**cluster.labels("a100-0"), "nvidia.com/mig.config": "all-1g.5gb"}
    projected = MigTable.default().projected(
        labels, cluster.node("a100-0")["status"]["allocatable"]
    )
    assert isinstance(projected, Projected)

    cluster.label("a100-0", **{"nvidia.com/mig.config": "all-1g.5gb"})
    cluster.label("a100-1", **{"nvidia.com/mig.config": "all-disabled"})

    assert each_mig_states(cluster, "a100-0", "a100-1") == {
        "a100-0": ["pending", "success"],
        "a100-1": ["pending", "success"],
    }
    sliced = {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.5gb": "56"}
    assert {k: projected.allocatable[k] for k in sliced} == sliced
    assert _gpu_resources(cluster, "a100-0") == (sliced, sliced)
    assert _gpu_resources(cluster, "a100-1") == ({"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "8"})
    assert cluster.node("a100-0")["status"]["allocatable"] == projected.allocatable


def test_failures_leave_the_status_as_it_was(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(
        [mig_node("doomed", annotations={FAIL_ANNOTATION: "true"}), mig_node("unknown")]
    )
    before = {name: _gpu_resources(cluster, name) for name in ("doomed", "unknown")}

    cluster.label("doomed", **{"nvidia.com/mig.config": "all-1g.5gb"})
    cluster.label("unknown", **{"nvidia.com/mig.config": "no-such-layout"})

    assert each_mig_states(cluster, "doomed", "unknown") == {
        "doomed": ["pending", "failed"],
        "unknown": ["pending", "failed"],
    }
    assert {name: _gpu_resources(cluster, name) for name in before} == before


def test_a_seeded_node_is_left_as_it_is(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster([mig_node("seeded", layout="all-1g.5gb"), mig_node("other")])
    cluster.label("other", **{"nvidia.com/mig.config": "all-1g.5gb"})
    assert mig_states(cluster, "other") == ["pending", "success"]  # rounds went by

    assert STATE not in cluster.labels("seeded")
    assert _gpu_resources(cluster, "seeded") == ({"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "8"})


def test_apply_of_a_layout_is_carried_out(lab: TestCluster, workdir: Path) -> None:
    node = workdir / "desired" / "nodes" / "lab-node-0.yaml"
    node.write_text(
        node.read_text() + "  nvidia.com/mig.config: all-1g.5gb\n  nvidia.com/mig.strategy: mixed\n"
    )

    applied = run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert applied.code == 0, applied.stderr
    assert mig_states(lab, "lab-node-0") == ["pending", "success"]
    sliced = {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.5gb": "28"}  # 4 x 7
    assert _gpu_resources(lab, "lab-node-0") == (sliced, sliced)
    assert run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig).code == 0
