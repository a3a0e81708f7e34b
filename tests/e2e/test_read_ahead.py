"""plan and apply read the nodes while they read desired/: once, and only reads.

At fleet scale the LIST of the nodes is most of a plan, and the API server answers it
while desired/ is parsed. What that may never change: a tree found invalid stops the
read and nothing else is asked or written; its problems are what the user is told, even
when the kubeconfig is broken too (a broken one alone is named: test_hostile.py); each
node is read once.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reconcile.sandbox import FaultInjector, Sandbox
from reconcile.sandbox.errors import ApiStatus
from reconcile.sandbox.main import merged_kubeconfig
from reconcile.sandbox.server import Route
from tests.support import REPO, asked_beyond_read_ahead, copy_desired, lab_objects, run_cli

PAGE = 500
INVENTORY_PATH = "/api/v1/namespaces/default/configmaps/reconcile-inventory"


class SlowNodePages(FaultInjector):
    """Each page of a LIST of the nodes answered after `delay`: a server far away."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.pages = 0
        self._lock = threading.Lock()

    def before(self, method: str, route: Route | None) -> ApiStatus | str | None:
        if method == "GET" and route and route.resource.plural == "nodes" and not route.name:
            with self._lock:
                self.pages += 1
            time.sleep(self.delay)
        return None


def _many_nodes(count: int) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"gpu-{i:04d}", "labels": {"nvidia.com/gpu.present": "true"}},
        }
        for i in range(count)
    ]


def _labels(sandbox: Sandbox) -> dict[str, dict[str, str]]:
    return {n["metadata"]["name"]: n["metadata"]["labels"] for n in sandbox.objects("nodes")}


def _work(tmp_path: Path) -> Path:
    """A directory holding a private copy of the lab's desired/."""
    copy_desired(tmp_path / "work")
    return tmp_path / "work"


def _break(work: Path) -> None:
    node = work / "desired" / "nodes" / "lab-node-1.yaml"
    node.write_text(
        node.read_text().replace('nvidia.com/gpu.count: "2"', "nvidia.com/gpu.count: 2")
    )


def test_an_invalid_tree_stops_the_read_of_the_nodes_and_asks_nothing_else(
    tmp_path: Path,
) -> None:
    work = _work(tmp_path)
    _break(work)
    slow = SlowNodePages(0.3)
    # Four pages of nodes; the tree is found invalid long before the first page is in.
    objects = lab_objects("lab") + _many_nodes(3 * PAGE + 10)
    with Sandbox(objects, faults=slow) as sandbox:
        kubeconfig = sandbox.write_kubeconfig(tmp_path / "kubeconfig")
        before = _labels(sandbox)

        for command in ("plan", "apply"):
            sandbox.clear_requests()
            result = run_cli(command, cwd=work, kubeconfig=kubeconfig)

            assert result.code == 2, result
            assert result.stdout == ""
            assert result.stderr.startswith("desired/nodes/lab-node-1.yaml:")
            assert result.stderr.endswith("error: 1 error(s): nothing was changed in the cluster\n")
            assert asked_beyond_read_ahead(sandbox.requests) == [], command
            pages = [r for r in sandbox.requests if r.resource == "nodes"]
            assert len(pages) <= 1, pages  # stopped after the page in flight
            assert all("continue=" not in r.query for r in pages), pages
        assert _labels(sandbox) == before


def test_a_plan_asks_for_the_cluster_and_each_page_of_nodes_once(tmp_path: Path) -> None:
    work = _work(tmp_path)
    with Sandbox(
        lab_objects("lab") + _many_nodes(PAGE + 10), faults=SlowNodePages(0.05)
    ) as sandbox:
        kubeconfig = sandbox.write_kubeconfig(tmp_path / "kubeconfig")
        sandbox.clear_requests()

        result = run_cli("plan", cwd=work, kubeconfig=kubeconfig)

        assert (result.code, result.stdout) == (2, "lab-node-1 nvidia.com/gpu.count 2\n")
        pages = [r for r in sandbox.requests if (r.verb, r.resource) == ("list", "nodes")]
        assert ["continue=" in r.query for r in pages] == [False, True]
        kube_system = [r for r in sandbox.requests if r.path == "/api/v1/namespaces/kube-system"]
        assert len(kube_system) == 1


class IdentityAfterNodes(FaultInjector):
    """The GET of kube-system held until a LIST of the nodes has come in (at most 5 s)."""

    def __init__(self) -> None:
        self.nodes_asked = threading.Event()
        self.waited_for_nodes: bool | None = None

    def before(self, method: str, route: Route | None) -> ApiStatus | str | None:
        if route is None or method != "GET":
            return None
        if route.resource.plural == "nodes" and not route.name:
            self.nodes_asked.set()
        elif route.resource.plural == "namespaces" and route.name == "kube-system":
            self.waited_for_nodes = self.nodes_asked.wait(5.0)
        return None


def test_the_nodes_are_asked_for_without_waiting_for_the_identity(tmp_path: Path) -> None:
    """The two reads go out at once: a plan waits for the slower, not for their sum."""
    work = _work(tmp_path)
    held = IdentityAfterNodes()
    with Sandbox(lab_objects("lab"), faults=held) as sandbox:
        kubeconfig = sandbox.write_kubeconfig(tmp_path / "kubeconfig")

        result = run_cli("plan", cwd=work, kubeconfig=kubeconfig)

        assert (result.code, result.stdout) == (1, "lab-node-1 nvidia.com/gpu.count 2\n")
        assert held.waited_for_nodes is True


@pytest.mark.slow
def test_the_objects_are_planned_while_the_nodes_are_still_coming_in(tmp_path: Path) -> None:
    work = _work(tmp_path)
    objects = lab_objects("lab") + _many_nodes(2 * PAGE + 10)
    with Sandbox(objects, faults=SlowNodePages(0.5)) as sandbox:
        kubeconfig = sandbox.write_kubeconfig(tmp_path / "kubeconfig")
        sandbox.clear_requests()

        result = run_cli("plan", cwd=work, kubeconfig=kubeconfig)

        assert (result.code, result.stdout) == (2, "lab-node-1 nvidia.com/gpu.count 2\n")
        order = [(r.verb, r.resource, r.path) for r in sandbox.requests]
        inventory = order.index(("get", "configmaps", INVENTORY_PATH))
        pages = [
            i
            for i, (verb, resource, _) in enumerate(order)
            if (verb, resource) == ("list", "nodes")
        ]
        assert len(pages) == 3
        assert inventory < pages[-1], order


def test_a_broken_kubeconfig_and_an_invalid_tree_name_the_tree(tmp_path: Path) -> None:
    work = _work(tmp_path)
    _break(work)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nclusters: [\n")

    for command in ("plan", "apply"):
        result = run_cli(command, "--kubeconfig", str(kubeconfig), cwd=work)

        assert result.code == 2
        assert result.stdout == ""
        lines = result.stderr.splitlines()
        assert lines[0].startswith("desired/nodes/lab-node-1.yaml:")
        assert [line for line in lines if line.startswith("error:")] == [
            "error: 1 error(s): nothing was changed in the cluster"
        ]


# --- a fleet: each cluster read ahead the same way ------------------------------------------

FLEET = REPO / "examples" / "fleet"
FLEET_CLUSTERS = ("lab", "driver-lab")


class Arrivals(SlowNodePages):
    """What each request asks for, in the order the requests arrive."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__(delay)
        self.order: list[tuple[str, str, str]] = []

    def before(self, method: str, route: Route | None) -> ApiStatus | str | None:
        if route is not None:
            with self._lock:
                self.order.append((method, route.resource.plural, route.name or ""))
        return super().before(method, route)


@contextlib.contextmanager
def _fleet(tmp_path: Path, nodes: int = 0, delay: float = 0.0) -> Iterator[list[Arrivals]]:
    """The example fleet on a sandbox per cluster (with `nodes` more nodes each, each
    page of nodes answered after `delay`), in tmp_path/work with tmp_path/kubeconfig."""
    shutil.copytree(FLEET, tmp_path / "work")
    heard = [Arrivals(delay) for _ in FLEET_CLUSTERS]
    with contextlib.ExitStack() as stack:
        started = [
            stack.enter_context(Sandbox(lab_objects(seed) + _many_nodes(nodes), faults=faults))
            for seed, faults in zip(FLEET_CLUSTERS, heard, strict=True)
        ]
        (tmp_path / "kubeconfig").write_text(
            json.dumps(merged_kubeconfig(started, list(FLEET_CLUSTERS)))
        )
        for sandbox in started:
            sandbox.clear_requests()
        yield heard


def test_a_fleet_plan_reads_each_clusters_nodes_while_it_reads_desired(tmp_path: Path) -> None:
    with _fleet(tmp_path) as heard:
        result = run_cli("plan", cwd=tmp_path / "work", kubeconfig=tmp_path / "kubeconfig")

        assert result.code == 1, result.stderr
        for arrivals in heard:
            # The nodes were asked for before the tree was read: before the inventory,
            # which the plan asks for first once it has the tree.
            order = arrivals.order
            inventory = ("GET", "configmaps", "reconcile-inventory")
            assert order.index(("GET", "nodes", "")) < order.index(inventory), order
            assert order.count(("GET", "nodes", "")) == 1  # each page once
            assert order.count(("GET", "namespaces", "kube-system")) == 1  # the identity once


def test_an_invalid_fleet_tree_stops_every_clusters_read(tmp_path: Path) -> None:
    with _fleet(tmp_path, nodes=3 * PAGE + 10, delay=0.3) as heard:
        work = tmp_path / "work"
        node = work / "desired" / "clusters" / "lab" / "nodes" / "lab-node-1.yaml"
        node.write_text(node.read_text().replace('gpu.count: "2"', "gpu.count: 2"))

        result = run_cli("plan", cwd=work, kubeconfig=tmp_path / "kubeconfig")

        assert result.code == 2
        assert result.stderr.startswith("desired/clusters/lab/nodes/lab-node-1.yaml:")
        for arrivals in heard:
            assert set(arrivals.order) <= {
                ("GET", "nodes", ""),
                ("GET", "namespaces", "kube-system"),
            }
            assert arrivals.pages <= 1  # stopped after the page in flight


@pytest.mark.parametrize(
    "args",
    [
        ("apply",),  # apply reaches each cluster with its wave
        ("plan", "--context", "lab"),  # refused: a fleet names its contexts
        ("plan", "--cluster", "nope"),  # refused: no such cluster
    ],
)
def test_a_fleet_command_that_reads_no_cluster_ahead_asks_nothing(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    with _fleet(tmp_path) as heard:
        work = tmp_path / "work"
        node = work / "desired" / "clusters" / "lab" / "nodes" / "lab-node-1.yaml"
        node.write_text(node.read_text().replace('gpu.count: "2"', "gpu.count: 2"))

        result = run_cli(*args, cwd=work, kubeconfig=tmp_path / "kubeconfig")

        assert result.code == 2
        assert [arrivals.order for arrivals in heard] == [[], []]
