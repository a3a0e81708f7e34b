"""The placement corpus (tests/data/placement) replayed on a real control plane: for every
scenario, what kube-scheduler decides now is what the corpus records (how many pods the
controller made, how many were bound and where, the Pending pods' message), so the corpus
the placement engine is written against stays the real scheduler's, run after run.

Only against a real cluster (RECONCILE_TEST_KUBECONFIG): the sandbox has no scheduler. One
stand-in kubelet for the whole module; each scenario makes its nodes and objects and
removes them again (tests/data/placement/capture.py, which recorded the corpus)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.data.placement.capture import load, replay, scenario_paths
from tests.support import REAL_KUBECONFIG, TestCluster, start_cluster, stop_cluster

SCENARIOS = scenario_paths()
# What the corpus was captured from: kube-scheduler v1.36 (the control plane of
# ../shared/k8s, built from source, reports v0.0.0-master+<commit>). Another version words
# its messages otherwise (DRA's "no new claims to deallocate" is recent, so is
# "untolerated taint(s)"): there the corpus is not the reference.
CAPTURED_FROM = re.compile(r"v1\.36\.|v0\.0\.0-")


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    """The real cluster, emptied, with the harness's stand-in kubelet running."""
    if not REAL_KUBECONFIG:
        pytest.skip(
            "replays the placement corpus on a real kube-scheduler: "
            "set RECONCILE_TEST_KUBECONFIG to a test cluster's kubeconfig"
        )
    cluster = start_cluster([], tmp_path_factory.mktemp("placement-corpus"))
    try:
        code, version = cluster.raw("GET", "/version")
        assert code == 200, version
        if not CAPTURED_FROM.match(version["gitVersion"]):
            pytest.skip(
                f"the corpus is kube-scheduler v1.36's decisions and words; "
                f"this cluster runs {version['gitVersion']}"
            )
        yield cluster
    finally:
        stop_cluster(cluster)


def test_the_corpus_is_there() -> None:
    names = [load(path)["name"] for path in SCENARIOS]
    assert len(names) >= 30
    assert names == [path.stem for path in SCENARIOS]  # a file is named after its scenario
    for path in SCENARIOS:
        assert load(path).get("expected"), f"{path.name}: not captured yet (capture.py)"


@pytest.mark.parametrize("path", SCENARIOS, ids=[path.stem for path in SCENARIOS])
def test_the_real_scheduler_decides_as_recorded(scheduler: TestCluster, path: Path) -> None:
    scenario = load(path)
    expected = scenario["expected"]
    outcome = replay(scheduler, scenario)
    if expected["nodes"] is None:  # the scheduler's choice among nodes that all fit
        outcome["nodes"] = None
    assert outcome == expected
