"""Faults during a rollout, on the real control plane of ../shared/k8s only (the sandbox
has no API server to restart, no node lifecycle to lose): the API server restarted
mid-drain, a node NotReady and a node deleted mid-batch, SIGTERM mid-node. Each test
watches the nodes for the whole run and asserts that reconcile never cordoned a node
beyond `--max-unavailable` (counting the nodes already unavailable, NotReady or cordoned)
and that no node is left cordoned without a journal that says why."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from reconcile.gpu import journal
from tests.conftest import ClusterFactory
from tests.e2e import test_fact_rollout
from tests.e2e.test_fact_rollout import STATE, _objects, _patch, _phase
from tests.support import REAL_KUBECONFIG, TestCluster, wait_for

pytestmark = [
    pytest.mark.usefixtures("prompt_polls"),
    pytest.mark.skipif(
        not REAL_KUBECONFIG, reason="faults of a real control plane (RECONCILE_TEST_KUBECONFIG)"
    ),
]

POOL = ("gpu-0", "gpu-1")
HOLD = "mig-manager.stand-in/hold"
FINALIZER = "reconcile.test/hold"
work = test_fact_rollout.work  # the MIG pool's desired/ (a fixture)


@dataclass
class NodeWatch:
    """Every version of the pool's nodes, from a watch (relisted after a broken stream),
    and the invariants over them."""

    cluster: TestCluster
    limit: int
    seen: dict[str, dict[str, Any]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    events: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                status, listed = self.cluster.raw("GET", "/api/v1/nodes")
                if status != 200:
                    raise OSError(status)
                for item in listed["items"]:
                    self._saw(item)
                version = listed["metadata"]["resourceVersion"]
                self._follow(version)
            except Exception:  # the API server restarting: list again
                time.sleep(0.1)

    def _follow(self, version: str) -> None:
        url = (
            self.cluster.api_client.configuration.host
            + f"/api/v1/nodes?watch=1&resourceVersion={version}&timeoutSeconds=5"
        )
        headers: dict[str, str] = {"Accept": "application/json"}
        self.cluster.api_client.update_params_for_auth(
            headers, None, ["BearerToken"], "/api/v1/nodes", "GET", None
        )
        response = self.cluster.api_client.rest_client.pool_manager.request(
            "GET", url, headers=headers, preload_content=False, timeout=10
        )
        try:
            buffer = b""
            for chunk in response.stream(1024):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    event = json.loads(line)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._saw(event["object"])
                    elif event["type"] == "DELETED":
                        self.seen.pop(event["object"]["metadata"]["name"], None)
                if self._stop.is_set():
                    return
        finally:
            response.release_conn()

    def _saw(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        before = self.seen.get(name)
        self.seen[name] = node
        self.events += 1
        if name not in POOL or not _cordoned(node) or (before is not None and _cordoned(before)):
            return
        if not _ready(node):
            return  # an unavailable node taken: the count does not grow
        others = [n for n in POOL if n != name and n in self.seen and _unavailable(self.seen[n])]
        if len(others) + 1 > self.limit:
            self.violations.append(
                f"{name} cordoned while {', '.join(others)} unavailable (limit {self.limit})"
            )

    @contextlib.contextmanager
    def watching(self) -> Iterator[NodeWatch]:
        thread = threading.Thread(target=self.run, daemon=True, name="node-watch")
        thread.start()
        wait_for(lambda: self.events > 0, what="the node watch")
        try:
            yield self
        finally:
            self._stop.set()
            thread.join(timeout=15)

    def left_cordoned_without_journal(self) -> list[str]:
        """The pool's nodes cordoned now with no journal on them (which says why)."""
        found = []
        for name in POOL:
            status, node = self.cluster.raw("GET", f"/api/v1/nodes/{name}")
            if status != 200:
                continue
            annotations = node["metadata"].get("annotations") or {}
            if _cordoned(node) and journal.JOURNAL not in annotations:
                found.append(name)
        return found


def _cordoned(node: dict[str, Any]) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def _ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _unavailable(node: dict[str, Any]) -> bool:
    return _cordoned(node) or not _ready(node)


@pytest.fixture
def pool(make_cluster: ClusterFactory) -> TestCluster:
    cluster = make_cluster(_objects())
    _patch(cluster, "/api/v1/nodes/spare-1", {"spec": {"unschedulable": None}})
    # The disruption controller counts the trainers healthy a moment after they are Ready:
    # until then the rollout rightly waits on the budget, not on the fault a test makes.
    budget = "/apis/policy/v1/namespaces/train/poddisruptionbudgets/trainer-pdb"
    wait_for(
        lambda: (
            ((cluster.raw("GET", budget)[1].get("status") or {}).get("disruptionsAllowed") or 0)
            >= 1
        ),
        what="the trainers' budget to allow one disruption",
    )
    return cluster


def _start(cluster: TestCluster, work: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reconcile",
            "rollout",
            "--max-unavailable",
            "1",
            "--timeout",
            "60s",
            "--state-timeout",
            "60s",
            *args,
        ],
        cwd=work,
        env={"KUBECONFIG": str(cluster.kubeconfig), "HOME": str(work), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _annotate(cluster: TestCluster, node: str, annotations: dict[str, str | None]) -> None:
    _patch(cluster, f"/api/v1/nodes/{node}", {"metadata": {"annotations": annotations}})


def _gpu0_trainer(cluster: TestCluster) -> str:
    return "/api/v1/namespaces/train/pods/trainer-5f7c9d8b6a-a0000"


def _restart_api_server() -> None:
    """The control plane's kube-apiserver stopped (SIGTERM, as a rolling restart does)
    and started again with the same command line; its pid file follows, so that
    `cluster down` stops the new one."""
    assert REAL_KUBECONFIG is not None
    state = Path(REAL_KUBECONFIG).parent
    pidfile = state / "apiserver.pid"
    pid = int(pidfile.read_text())
    command = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    with (state / "apiserver.log").open("ab") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    pidfile.write_text(f"{process.pid}\n")


def _up(cluster: TestCluster) -> bool:
    try:
        return cluster.raw("GET", "/readyz", accept="text/plain")[0] == 200
    except Exception:
        return False


def test_the_api_server_restarted_mid_drain(pool: TestCluster, work: Path) -> None:
    trainer = _gpu0_trainer(pool)
    _patch(pool, trainer, {"metadata": {"finalizers": [FINALIZER]}})
    watch = NodeWatch(pool, limit=1)
    with watch.watching():
        process = _start(pool, work)
        try:
            wait_for(
                lambda: bool(pool.raw("GET", trainer)[1]["metadata"].get("deletionTimestamp")),
                what="gpu-0's drain under way",
            )
            _restart_api_server()
            wait_for(lambda: _up(pool), what="the API server back", timeout=90)
            _patch(pool, trainer, {"metadata": {"finalizers": None}})
            _out, err = process.communicate(timeout=120)
        finally:
            process.kill()
        if process.returncode != 0:  # the run stopped where the API failed: a rerun finishes
            assert process.returncode == 2, err
            [error] = [line for line in err.splitlines() if line.startswith("error:")]
            assert "cannot connect to the API server" in error
            assert watch.left_cordoned_without_journal() == []
            rerun = _start(pool, work)
            _out, err = rerun.communicate(timeout=120)
            assert rerun.returncode == 0, err
    assert watch.violations == []
    assert watch.left_cordoned_without_journal() == []
    for name in POOL:
        node = pool.node(name)
        assert node["metadata"]["labels"][STATE] == "success"
        assert not _cordoned(node)


def _fault_at_the_wait(
    cluster: TestCluster, work: Path, fault: Callable[[subprocess.Popen[str]], None]
) -> tuple[NodeWatch, int, str]:
    """A rollout of the pool, watched, with `fault` done once gpu-0 waits for its layout
    (held there by the stand-in): the watch, the run's exit code and its stderr."""
    _annotate(cluster, "gpu-0", {HOLD: "true"})
    watch = NodeWatch(cluster, limit=1)
    with watch.watching():
        process = _start(cluster, work)
        try:
            try:
                wait_for(
                    lambda: _phase(cluster.node("gpu-0")) == "wait-required", what="gpu-0 waiting"
                )
            except AssertionError as e:
                process.kill()
                raise AssertionError(f"{e}; the rollout said: {process.communicate()[1]}") from None
            fault(process)
            _out, err = process.communicate(timeout=120)
        finally:
            process.kill()
    return watch, process.returncode, err


def test_a_node_deleted_mid_batch(pool: TestCluster, work: Path) -> None:
    def delete_gpu1(_: subprocess.Popen[str]) -> None:
        status, body = pool.raw("DELETE", "/api/v1/nodes/gpu-1")
        assert status == 200, body
        _annotate(pool, "gpu-0", {HOLD: None})

    watch, code, err = _fault_at_the_wait(pool, work, delete_gpu1)

    assert code == 2, err
    [error] = [line for line in err.splitlines() if line.startswith("error:")]
    assert 'gpu-1 failed: nodes "gpu-1" not found' in error
    assert "done: gpu-0" in error
    assert watch.violations == []
    assert watch.left_cordoned_without_journal() == []
    gpu0 = pool.node("gpu-0")
    assert gpu0["metadata"]["labels"][STATE] == "success"
    assert not _cordoned(gpu0)


def test_a_node_not_ready_mid_batch(pool: TestCluster, work: Path) -> None:
    def gpu1_not_ready(_: subprocess.Popen[str]) -> None:
        _annotate(pool, "gpu-1", {"reconcile.test/kubelet": "none"})
        _not_ready(pool, "gpu-1")
        _annotate(pool, "gpu-0", {HOLD: None})

    watch, code, err = _fault_at_the_wait(pool, work, gpu1_not_ready)

    assert watch.violations == []
    assert watch.left_cordoned_without_journal() == []
    gpu0 = pool.node("gpu-0")
    assert gpu0["metadata"]["labels"][STATE] == "success"
    assert not _cordoned(gpu0)
    # A node already unavailable does not add to the count: it is taken as it is (as
    # `kubectl drain` drains a NotReady node), its layout written like any other's.
    assert code == 0, err
    assert pool.node("gpu-1")["metadata"]["labels"][STATE] == "success"


def _not_ready(cluster: TestCluster, node: str) -> None:
    status, body = cluster.raw(
        "PATCH",
        f"/api/v1/nodes/{node}/status",
        {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "False",
                        "reason": "KubeletNotReady",
                        "message": "container runtime is down",
                    }
                ]
            }
        },
        "application/strategic-merge-patch+json",
    )
    assert status == 200, body


def test_sigterm_finishes_the_step_and_leaves_the_journal_consistent(
    pool: TestCluster, work: Path
) -> None:
    watch, code, err = _fault_at_the_wait(pool, work, lambda p: p.send_signal(signal.SIGTERM))

    assert code == 143, err
    assert "gpu-0 stopped at wait-required by a signal" in err
    node = pool.node("gpu-0")
    assert _cordoned(node)
    assert _phase(node) == "wait-required"
    assert journal.JOURNAL not in (pool.node("gpu-1")["metadata"].get("annotations") or {})
    assert watch.violations == []
    assert watch.left_cordoned_without_journal() == []

    _annotate(pool, "gpu-0", {HOLD: None})
    again = NodeWatch(pool, limit=1)
    with again.watching():
        rerun = _start(pool, work)
        _out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err
    assert again.violations == []
    assert again.left_cordoned_without_journal() == []
    for name in POOL:
        assert pool.node(name)["metadata"]["labels"][STATE] == "success"
