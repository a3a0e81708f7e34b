from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import (
    REAL_KUBECONFIG,
    TestCluster,
    copy_desired,
    lab_objects,
    start_cluster,
    stop_cluster,
)

ClusterFactory = Callable[[list[dict[str, Any]]], TestCluster]


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[ClusterFactory]:
    """Start a cluster holding the given objects; stopped (or cleaned) after the test."""
    started: list[TestCluster] = []

    def make(objects: list[dict[str, Any]]) -> TestCluster:
        if started and REAL_KUBECONFIG:
            pytest.skip("needs a second cluster: the real control plane is one")
        directory = tmp_path / f"cluster-{len(started)}"
        directory.mkdir()
        cluster = start_cluster(objects, directory)
        started.append(cluster)
        return cluster

    yield make
    for cluster in started:
        stop_cluster(cluster)


@pytest.fixture
def lab(make_cluster: ClusterFactory) -> TestCluster:
    """The lab cluster of the quickstart: three nodes, gpu.count drifted to 9 on lab-node-1."""
    return make_cluster(lab_objects("lab"))


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A directory holding a private copy of the repository's desired/ tree."""
    directory = tmp_path / "work"
    directory.mkdir()
    copy_desired(directory)
    return directory


@pytest.fixture
def sandbox_only(lab: TestCluster) -> TestCluster:
    if not lab.is_sandbox:
        pytest.skip("inspects the sandbox's request log")
    return lab
