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


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """`-n` without `--dist` distributes by work stealing, not xdist's default `load`.

    `load` hands each worker big batches up front and never takes them back: on two
    workers one sat idle for half the run while the other still held a queue of slow
    end-to-end tests. With `worksteal` an idle worker takes half of the other's queue.
    An explicit `--dist` is left as it is."""
    option = config.option
    if getattr(option, "numprocesses", None) and option.dist == "no" and not option.distload:
        option.dist = "worksteal"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked `slow` run first, in their order, then the rest in theirs.

    Under `-n` each worker starts on a queue of its own, and an idle worker steals half of
    another's; a test already running cannot be stolen. Started first, the few tests that
    take seconds (a build, processes, real waits) overlap the many quick ones instead of
    leaving one worker to finish them alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


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
