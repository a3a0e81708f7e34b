from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

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


# Workers per core under `-n auto`: much of the suite waits (on a server thread, a
# subprocess, a poll), so two workers per core keep both cores busy where one each left
# them idle half the time.
WORKERS_PER_CORE: Final = 2


@pytest.hookimpl(optionalhook=True)  # xdist's hook: unknown under -p no:xdist
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: two workers per core the process may run on."""
    return WORKERS_PER_CORE * len(os.sched_getaffinity(0))


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests marked `slow` dealt out among the workers, spread through each one's run.

    Work stealing hands each of the k workers a run of the collection (the first len/k
    tests to the first, and so on) and takes from the tail of a queue, never the test
    running. The slow tests (the few that take seconds: a build, processes, real waits)
    are dealt in turn, each worker's share spread over the first two thirds of its run:
    at its head they would all wait at once, leaving the cores idle; at its tail one
    worker would finish them alone. Without workers: the slow ones first, then the rest,
    each in collection order."""
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    quick = [item for item in items if item.get_closest_marker("slow") is None]
    worker_input = getattr(config, "workerinput", {})
    workers = int(worker_input.get("workercount", 1))
    # A worker's own options do not show the `--dist` pytest_cmdline_main chose for the
    # main process: work stealing unless the command line named another.
    stealing = not any(arg.startswith("--dist") for arg in worker_input.get("mainargv", ()))
    if workers <= 1 or not stealing:
        items[:] = slow + quick
        return
    ordered: list[pytest.Item] = []
    remaining = len(items)
    for worker in range(workers):
        size = remaining // (workers - worker)  # as worksteal's first distribution
        remaining -= size
        share = slow[worker::workers]
        run = quick[: size - len(share)]
        del quick[: size - len(share)]
        for place, item in reversed(list(enumerate(share))):
            run.insert(place * 2 * len(run) // (3 * len(share)), item)
        ordered += run
    items[:] = ordered + quick


def pytest_configure(config: pytest.Config) -> None:
    """No garbage collection while the tests are collected (see pytest_collection_finish)."""
    gc.disable()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Collection (importing and rewriting every test module) allocates a great deal and
    frees nearly all of it by reference counting: the collector's passes over the growing
    heap were a third of its time. What it built (the modules, the test items) lives
    until the process ends, so it is frozen out of the collector's reach before the
    collector runs again."""
    gc.freeze()
    gc.enable()


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


@pytest.fixture
def prompt_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rollouts and upgrades run by the CLI in this process look again every 0.05-0.1 s
    where they would wait up to a second or two between reads (an evicted pod's
    deletion, which the sandbox confirms after 0.2 s, every 0.05 s), and retry a refused
    eviction every 0.1 s instead of 5 s. What they wait for is the same."""
    from reconcile.gpu import change, gates, rollout, upgrade

    monkeypatch.setattr(rollout, "BUDGET_POLL_SECONDS", 0.1)
    monkeypatch.setattr(rollout, "WAIT_POLL_SECONDS", 0.1)
    monkeypatch.setattr(change, "POLL_SECONDS", 0.05)
    monkeypatch.setattr(gates, "JOB_POLL_SECONDS", 0.1)
    monkeypatch.setattr(upgrade, "DELETION_POLL_SECONDS", 0.05)
    monkeypatch.setattr(upgrade, "EVICTION_RETRY_SECONDS", 0.1)
