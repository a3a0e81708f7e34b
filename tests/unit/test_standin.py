"""The mig-manager stand-in (reconcile/gpu/standin.py) on the sandbox: a changed layout
goes pending, then success with the node's GPU resources per mig.py's projection, or
failed; what a node carries when first seen is left as it is."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from reconcile.gpu import standin
from reconcile.gpu.mig import MigTable, Projected
from reconcile.gpu.standin import FAIL_ANNOTATION, STATE, MigManagerStandIn
from reconcile.sandbox import Sandbox
from tests.support import (
    TestCluster,
    each_mig_states,
    mig_node,
    mig_states,
    wait_for,
    wait_seen,
)

ClusterFactory = Callable[[list[dict[str, Any]]], TestCluster]
WHOLE = {"nvidia.com/gpu": "8"}
SLICED = {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.5gb": "56"}


def _status(cluster: TestCluster, name: str) -> dict[str, Any]:
    return dict(cluster.node(name)["status"])


def _projected(node: dict[str, Any], **labels: str) -> dict[str, str]:
    projected = MigTable.default().projected(
        {**node["metadata"]["labels"], **labels}, node["status"]["allocatable"]
    )
    assert isinstance(projected, Projected), projected
    return dict(projected.allocatable)


@pytest.fixture
def cluster(make_cluster: ClusterFactory) -> TestCluster:
    cluster = make_cluster(
        [mig_node("mig-0"), mig_node("mig-1", layout="all-1g.5gb", resources=SLICED)]
    )
    assert cluster.mig_manager is not None
    return cluster


def test_a_changed_layout_goes_pending_then_success_with_the_projected_resources(
    cluster: TestCluster,
) -> None:
    before = cluster.node("mig-0")
    cluster.label("mig-0", **{"nvidia.com/mig.config": "all-1g.5gb"})

    assert mig_states(cluster, "mig-0") == ["pending", "success"]
    status = _status(cluster, "mig-0")
    expected = _projected(before, **{"nvidia.com/mig.config": "all-1g.5gb"})
    assert expected["nvidia.com/mig-1g.5gb"] == "56"  # 8 x 7 instances
    assert status["allocatable"] == expected
    assert status["capacity"] == expected


def test_resources_the_new_layout_lacks_are_removed(cluster: TestCluster) -> None:
    cluster.label("mig-1", **{"nvidia.com/mig.config": "all-disabled"})

    assert mig_states(cluster, "mig-1") == ["pending", "success"]
    status = _status(cluster, "mig-1")
    for part in ("capacity", "allocatable"):
        assert status[part] == {"cpu": "64", "memory": "512Gi", "pods": "110", **WHOLE}


def test_the_failure_annotation_ends_in_failed_and_leaves_the_status(
    make_cluster: ClusterFactory,
) -> None:
    cluster = make_cluster([mig_node("doomed", annotations={FAIL_ANNOTATION: "true"})])
    before = _status(cluster, "doomed")
    cluster.label("doomed", **{"nvidia.com/mig.config": "all-1g.5gb"})

    assert mig_states(cluster, "doomed") == ["pending", "failed"]
    after = _status(cluster, "doomed")
    assert (after["capacity"], after["allocatable"]) == (before["capacity"], before["allocatable"])
    assert cluster.mig_manager is not None
    assert cluster.mig_manager.failures == {"doomed": f"annotated {FAIL_ANNOTATION}=true"}


def test_a_layout_the_gpu_lacks_ends_in_failed(cluster: TestCluster) -> None:
    before = _status(cluster, "mig-0")
    cluster.label("mig-0", **{"nvidia.com/mig.config": "all-3g.40gb"})  # an 80 GB profile

    assert mig_states(cluster, "mig-0") == ["pending", "failed"]
    assert _status(cluster, "mig-0")["allocatable"] == before["allocatable"]
    assert cluster.mig_manager is not None
    assert "all-3g.40gb" in cluster.mig_manager.failures["mig-0"]


def test_an_unknown_layout_ends_in_failed(cluster: TestCluster) -> None:
    cluster.label("mig-0", **{"nvidia.com/mig.config": "no-such-layout"})

    assert mig_states(cluster, "mig-0") == ["pending", "failed"]
    assert cluster.mig_manager is not None
    assert cluster.mig_manager.failures["mig-0"].startswith("layout no-such-layout is not in ")


def test_a_seeded_node_is_left_as_it_is(make_cluster: ClusterFactory) -> None:
    # all-1g.5gb with whole GPUs advertised: not what the layout gives, and left so.
    cluster = make_cluster([mig_node("seeded", layout="all-1g.5gb")])
    before = cluster.node("seeded")
    assert cluster.mig_manager is not None
    rounds = cluster.mig_manager.interval * 3
    time.sleep(rounds)

    after = cluster.node("seeded")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert STATE not in after["metadata"]["labels"]
    assert cluster.mig_manager.applied["seeded"] == "all-1g.5gb"


def test_a_change_that_removes_the_state_label_is_carried_out(make_cluster: ClusterFactory) -> None:
    node = mig_node("done", layout="all-1g.5gb", resources=SLICED)
    node["metadata"]["labels"][STATE] = "success"
    cluster = make_cluster([node])
    cluster.label("done", **{"nvidia.com/mig.config": "all-disabled", STATE: None})

    assert mig_states(cluster, "done") == ["pending", "success"]
    assert _status(cluster, "done")["allocatable"]["nvidia.com/gpu"] == "8"


def test_a_node_that_is_not_mig_capable_or_has_no_layout_is_ignored(
    make_cluster: ClusterFactory,
) -> None:
    cluster = make_cluster(
        [mig_node("incapable", capable="false"), mig_node("unlabelled", layout=None)]
    )
    cluster.label("incapable", **{"nvidia.com/mig.config": "all-1g.5gb"})
    cluster.label("unlabelled", **{"nvidia.com/mig.strategy": "single"})
    assert cluster.mig_manager is not None
    wait_for(
        lambda: (
            cluster.mig_manager is not None
            and cluster.mig_manager.applied.get("incapable") == "all-1g.5gb"
        ),
        what="the stand-in to take the change in",
    )
    time.sleep(cluster.mig_manager.interval * 2)

    for name in ("incapable", "unlabelled"):
        assert STATE not in cluster.labels(name), name
    assert cluster.mig_manager.failures == {}


def test_a_layout_given_to_a_node_that_had_none_is_applied(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster([mig_node("fresh", layout=None)])
    cluster.label("fresh", **{"nvidia.com/mig.config": "all-1g.5gb"})

    assert mig_states(cluster, "fresh") == ["pending", "success"]
    assert _status(cluster, "fresh")["allocatable"]["nvidia.com/mig-1g.5gb"] == "56"


def test_a_node_added_later_is_seen_first_then_changed(cluster: TestCluster) -> None:
    cluster.create(mig_node("late", layout="all-1g.5gb"))
    assert cluster.mig_manager is not None
    wait_seen(cluster.mig_manager, "late")
    assert STATE not in cluster.labels("late")
    cluster.label("late", **{"nvidia.com/mig.config": "all-disabled"})

    assert mig_states(cluster, "late") == ["pending", "success"]


# --- one's own stand-in: its requests recorded, its delay and table chosen -------------


@pytest.fixture
def own(cluster: TestCluster) -> Iterator[Callable[..., MigManagerStandIn]]:
    """The cluster's stand-in replaced by one whose requests the sandbox records (under
    User-Agent `standin-under-test`)."""
    if cluster.sandbox is None:
        pytest.skip("counts the stand-in's requests in the sandbox's log")
    cluster.stop_mig_manager()
    made: list[MigManagerStandIn] = []

    def make(**options: Any) -> MigManagerStandIn:
        connection = standin.connect(cluster.kubeconfig)
        connection.api_client.user_agent = "standin-under-test/1"
        made.append(MigManagerStandIn(connection, **options).start())
        return made[-1]

    yield make
    for stand_in in made:
        stand_in.stop()
        stand_in.cluster.close()


def test_nodes_change_side_by_side_each_once(
    cluster: TestCluster, own: Callable[..., MigManagerStandIn]
) -> None:
    assert cluster.sandbox is not None
    own(delay=0.5)
    cluster.sandbox.clear_requests()
    cluster.label("mig-0", **{"nvidia.com/mig.config": "all-1g.5gb"})
    cluster.label("mig-1", **{"nvidia.com/mig.config": "all-disabled"})

    wait_for(
        lambda: all(cluster.labels(n).get(STATE) == "pending" for n in ("mig-0", "mig-1")),
        what="both nodes pending at once",
    )
    states = each_mig_states(cluster, "mig-0", "mig-1")
    assert states == {"mig-0": ["pending", "success"], "mig-1": ["pending", "success"]}
    time.sleep(0.5)  # more rounds: nothing more to do

    writes = sorted(
        r.path
        for r in cluster.sandbox.requests
        if r.agent == "standin-under-test" and r.method == "PATCH"
    )
    assert writes == [
        "/api/v1/nodes/mig-0",
        "/api/v1/nodes/mig-0",
        "/api/v1/nodes/mig-0/status",
        "/api/v1/nodes/mig-1",
        "/api/v1/nodes/mig-1",
        "/api/v1/nodes/mig-1/status",
    ]


def test_a_custom_table_gives_its_layouts(
    cluster: TestCluster, own: Callable[..., MigManagerStandIn]
) -> None:
    document = {
        "version": "v1",
        "mig-configs": {
            "two-halves": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.20gb": 2}}]
        },
    }
    own(table=MigTable.from_config(document, "custom"))
    cluster.label("mig-0", **{"nvidia.com/mig.config": "two-halves"})

    assert mig_states(cluster, "mig-0") == ["pending", "success"]
    assert _status(cluster, "mig-0")["allocatable"]["nvidia.com/mig-3g.20gb"] == "16"


def test_stop_ends_a_change_in_progress(
    cluster: TestCluster, own: Callable[..., MigManagerStandIn]
) -> None:
    stand_in = own(delay=30)
    cluster.label("mig-0", **{"nvidia.com/mig.config": "all-1g.5gb"})
    wait_for(lambda: cluster.labels("mig-0").get(STATE) == "pending", what="pending")

    started = time.monotonic()
    stand_in.stop()

    assert time.monotonic() - started < 5
    assert not [t for t in threading.enumerate() if t.name.startswith("mig-manager")]
    assert cluster.labels("mig-0")[STATE] == "pending"


def test_a_cluster_that_does_not_answer_never_stops_the_thread(tmp_path: Path) -> None:
    with Sandbox([mig_node("mig-0")]) as sandbox:
        kubeconfig = sandbox.write_kubeconfig(tmp_path / "kubeconfig")
    stand_in = MigManagerStandIn(standin.connect(kubeconfig), interval=0.05).start()
    try:
        assert stand_in.last_error is not None  # the first read, in start()
        first = stand_in.last_error
        wait_for(lambda: stand_in.last_error is not first, what="another failed round")
        assert stand_in.running
        assert stand_in.applied == {}
    finally:
        stand_in.stop()
        stand_in.cluster.close()
    assert not stand_in.running
