"""A driver change across a pool of six GPU nodes: everything preflighted before the first
write, batches simulated against the budget, never more nodes unavailable than allowed,
the first failure stops the rollout and a rerun finishes it."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from reconcile.sandbox import RequestRecord
from reconcile.sandbox.errors import ApiStatus
from reconcile.sandbox.server import FaultInjector, Route
from tests.conftest import ClusterFactory
from tests.e2e.test_prune_guards import snapshot
from tests.support import TestCluster, run_cli, wait_for

# The CLI runs in this process: its waits look again at a test's pace (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("prompt_polls")

POOL = [f"pool-{i}" for i in range(6)]
TARGET = "550.90.07"
SELECTOR = "example.com/pool=a100"
MATRIX = """\
apiVersion: reconcile.dev/v1alpha1
kind: DriverSupportMatrix
metadata: {name: images}
rows:
- {branch: "550", kernel: 5.15.0-107-generic, osTag: ubuntu22.04}
"""
BUDGET = """\
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: trainer-pdb
  namespace: train
spec:
  minAvailable: 5
  selector:
    matchLabels: {app: trainer}
"""


def _node(name: str, **extra: str) -> dict[str, Any]:
    labels = {
        "kubernetes.io/hostname": name,
        "example.com/pool": "a100",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
        "nvidia.com/gpu.count": "8",
        "feature.node.kubernetes.io/kernel-version.full": "5.15.0-107-generic",
        "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
        "nvidia.com/cuda.driver.major": "535",
        "nvidia.com/cuda.driver.minor": "183",
        "nvidia.com/cuda.driver.rev": "06",
        **extra,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def _objects(*, budget: bool) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = [_node(name) for name in POOL]
    objects.append(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "cpu-0", "labels": {"example.com/pool": "cpu"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    objects.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "train"}})
    owner = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": "trainer-7d9c5b8f6d",
        "uid": "0b6e4f3a-2c1d-4e5f-8a7b-9c0d1e2f3a4b",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    for index, node in enumerate(POOL):
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"trainer-{index}",
                    "namespace": "train",
                    "labels": {"app": "trainer"},
                    "ownerReferences": [owner],
                },
                "spec": {"nodeName": node, "containers": [{"name": "t", "image": "trainer:1"}]},
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
    if budget:
        import yaml

        objects.append(yaml.safe_load(BUDGET))
    return objects


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "desired" / "drivers").mkdir(parents=True)
    (tmp_path / "desired" / "drivers" / "images.yaml").write_text(MATRIX)
    return tmp_path


def _pool(make_cluster: ClusterFactory, *, budget: bool) -> TestCluster:
    cluster = make_cluster(_objects(budget=budget))
    if cluster.sandbox is None:
        pytest.skip("the pool's pods are bound by hand: no scheduler or controllers to fight")
    return cluster


def upgrade(cluster: TestCluster, work: Path, *args: str) -> Any:
    return run_cli(
        "upgrade",
        "--driver",
        TARGET,
        *args,
        "--timeout",
        "20s",
        cwd=work,
        kubeconfig=cluster.kubeconfig,
    )


def test_every_missing_image_and_non_gpu_node_is_named_before_any_write(
    make_cluster: ClusterFactory, work: Path
) -> None:
    cluster = _pool(make_cluster, budget=True)
    for node in ("pool-4", "pool-5"):
        cluster.label(
            node, **{"feature.node.kubernetes.io/kernel-version.full": "6.8.0-99-generic"}
        )
    before = snapshot(cluster)
    refused = upgrade(cluster, work, *POOL, "cpu-0")
    assert refused.code == 2
    message = refused.stderr.strip().splitlines()[-1]
    assert 'not GPU nodes (nvidia.com/gpu.present is not "true"): cpu-0' in message
    assert "`550,6.8.0-99-generic,ubuntu22.04` (for pool-4, pool-5)" in message
    assert message.endswith("(nothing was changed)")
    assert snapshot(cluster) == before


def test_a_budget_that_allows_one_eviction_refuses_two_at_once_and_says_what_passes(
    make_cluster: ClusterFactory, work: Path
) -> None:
    cluster = _pool(make_cluster, budget=True)
    before = snapshot(cluster)
    refused = upgrade(cluster, work, "--selector", SELECTOR, "--max-parallel", "2")
    assert refused.code == 2
    message = refused.stderr.strip().splitlines()[-1]
    assert (
        "PodDisruptionBudget train/trainer-pdb blocks the drain of batch 1 (pool-0, pool-1): "
        "minAvailable 5, 6 healthy (disruptionsAllowed 1), and the drain must evict 2 of its "
        "pods: set minAvailable to 4 (kubectl patch pdb trainer-pdb -n train --type=merge -p "
        """'{"spec":{"minAvailable":4}}')"""
    ) in message
    assert "batch 3 (pool-4, pool-5)" in message  # every blocked batch, in one run
    assert snapshot(cluster) == before
    passes = upgrade(cluster, work, "--selector", SELECTOR, "--max-parallel", "1", "--dry-run")
    assert passes.code == 0, passes.stderr
    assert passes.lines == [f"batch {i + 1}: {node} (dry run)" for i, node in enumerate(POOL)]
    assert snapshot(cluster) == before


def test_a_budget_desired_declares_gets_advice_for_the_file(
    make_cluster: ClusterFactory, work: Path
) -> None:
    cluster = _pool(make_cluster, budget=True)
    workloads = work / "desired" / "workloads"
    workloads.mkdir()
    (workloads / "budget.yaml").write_text(BUDGET)
    refused = upgrade(cluster, work, "--selector", SELECTOR, "--max-parallel", "2")
    assert refused.code == 2
    assert (
        "set spec.minAvailable to 4 at desired/workloads/budget.yaml:7:17 (desired/ declares "
        "this budget: a `kubectl patch` would be reverted by the next apply)"
    ) in refused.stderr
    assert "kubectl patch pdb" not in refused.stderr


def test_dry_run_prints_the_batches_with_the_canary_first_and_skips_nodes_done(
    make_cluster: ClusterFactory, work: Path
) -> None:
    cluster = _pool(make_cluster, budget=False)
    cluster.label(
        "pool-5",
        **{
            "nvidia.com/cuda.driver.major": "550",
            "nvidia.com/cuda.driver.minor": "90",
            "nvidia.com/cuda.driver.rev": "07",
        },
    )
    before = snapshot(cluster)
    dry = upgrade(
        cluster,
        work,
        "--selector",
        SELECTOR,
        "--canary",
        "pool-3",
        "--max-parallel",
        "2",
        "--dry-run",
    )
    assert dry.code == 0, dry.stderr
    assert dry.lines == [
        f"pool-5 done (already on {TARGET}) (dry run)",
        "batch 1: pool-3 (canary) (dry run)",
        "batch 2: pool-0,pool-1 (dry run)",
        "batch 3: pool-2,pool-4 (dry run)",
    ]
    as_json = json.loads(
        upgrade(cluster, work, "--selector", SELECTOR, "--dry-run", "-o", "json").stdout
    )
    assert (as_json["kind"], as_json["dryRun"], as_json["alreadyDone"]) == (
        "Rollout",
        True,
        ["pool-5"],
    )
    assert snapshot(cluster) == before


class _Cordons:
    """Samples the pool from the API while a rollout runs: the most nodes cordoned at once."""

    def __init__(self, cluster: TestCluster) -> None:
        self.cluster = cluster
        self.most = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self.stop.is_set():
            _, body = self.cluster.raw("GET", "/api/v1/nodes")
            cordoned = sum(1 for n in body["items"] if (n.get("spec") or {}).get("unschedulable"))
            self.most = max(self.most, cordoned)
            time.sleep(0.01)

    def __enter__(self) -> _Cordons:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def test_the_pool_upgrades_in_batches_within_the_unavailable_limit(
    make_cluster: ClusterFactory, work: Path
) -> None:
    cluster = _pool(make_cluster, budget=False)
    with _Cordons(cluster) as cordons:
        done = upgrade(
            cluster, work, "--selector", SELECTOR, "--max-parallel", "3", "--max-unavailable", "2"
        )
    assert done.code == 0, done.stderr
    assert 1 <= cordons.most <= 2
    for node in POOL:
        labels = cluster.labels(node)
        assert labels["nvidia.com/gpu-driver-upgrade-state"] == "upgrade-done"
        assert labels["nvidia.com/cuda.driver.minor"] == "90"
        assert not cluster.node(node)["spec"].get("unschedulable")
    # one line per state change, as it happens
    assert "pool-0 upgrade-required" in done.lines and "pool-5 upgrade-done" in done.lines
    assert done.lines[:3] == [
        "batch 1: pool-0,pool-1",
        "batch 2: pool-2,pool-3",
        "batch 3: pool-4,pool-5",
    ]


class _RefuseEviction(FaultInjector):
    def __init__(self, pod: str) -> None:
        self.pod = pod

    def before(self, method: str, route: Route | None) -> ApiStatus | str | None:
        if route is not None and route.subresource == "eviction" and route.name == self.pod:
            return ApiStatus(403, "Forbidden", f'pods "{self.pod}" is forbidden: test')
        return None


@pytest.mark.slow
def test_the_first_failure_stops_the_rollout_and_a_rerun_finishes_it(
    make_cluster: ClusterFactory, work: Path
) -> None:
    cluster = _pool(make_cluster, budget=False)
    assert cluster.sandbox is not None
    cluster.sandbox.server.faults = _RefuseEviction("trainer-3")
    untouched = {n: cluster.node(n)["metadata"]["labels"] for n in ("pool-4", "pool-5")}
    stopped = upgrade(cluster, work, "--selector", SELECTOR)
    assert stopped.code == 2
    last = stopped.stderr.strip().splitlines()[-1]
    assert last.startswith("error: rollout stopped: pool-3 failed: evicting Pod/train/trainer-3")
    assert last.endswith(
        "done: pool-0, pool-1, pool-2; not started: pool-4, pool-5; rerun the same command to resume"
    )
    failed = cluster.node("pool-3")
    assert failed["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade-state"] == "upgrade-failed"
    assert failed["spec"]["unschedulable"] is True
    assert {n: cluster.node(n)["metadata"]["labels"] for n in ("pool-4", "pool-5")} == untouched
    cluster.sandbox.server.faults = None
    rerun = upgrade(cluster, work, "--selector", SELECTOR)
    assert rerun.code == 0, rerun.stderr
    assert rerun.lines[:3] == [f"pool-{i} done (already on {TARGET})" for i in range(3)]
    assert "pool-3 upgrade-done" in rerun.lines and "pool-5 upgrade-done" in rerun.lines


def test_one_node_already_on_the_target_is_not_drained(
    make_cluster: ClusterFactory, work: Path
) -> None:
    cluster = _pool(make_cluster, budget=True)
    cluster.label(
        "pool-5",
        **{
            "nvidia.com/cuda.driver.major": "550",
            "nvidia.com/cuda.driver.minor": "90",
            "nvidia.com/cuda.driver.rev": "07",
        },
    )
    before = snapshot(cluster)
    result = upgrade(cluster, work, "pool-5")
    assert (result.code, result.stdout) == (0, "")
    assert f"pool-5 is already on driver {TARGET}: nothing to do" in result.stderr
    assert snapshot(cluster) == before


OLD_DRIVER_GROUP = """\
apiVersion: reconcile.dev/v1alpha1
kind: NodeGroup
metadata: {name: a100}
selector:
  matchLabels: {example.com/pool: a100}
labels:
  nvidia.com/cuda.driver.major: "535"  # the pool's driver
  nvidia.com/cuda.driver.minor: "183"
  nvidia.com/cuda.driver.rev: "06"
"""
OLD_DRIVER_NODE = """\
apiVersion: reconcile.dev/v1alpha1
kind: NodeFeatures
metadata: {name: pool-5}
labels:
  nvidia.com/cuda.driver.minor: "183"
"""


def test_a_pool_upgrade_says_once_that_desired_still_declares_the_old_driver(
    make_cluster: ClusterFactory, work: Path
) -> None:
    cluster = _pool(make_cluster, budget=False)
    (work / "desired" / "groups").mkdir()
    (work / "desired" / "groups" / "a100.yaml").write_text(OLD_DRIVER_GROUP)
    (work / "desired" / "nodes").mkdir()
    (work / "desired" / "nodes" / "pool-5.yaml").write_text(OLD_DRIVER_NODE)
    stale = (
        "note: desired/ still declares the old driver: desired/groups/a100.yaml (NodeGroup "
        "a100) nvidia.com/cuda.driver.major=535, nvidia.com/cuda.driver.minor=183, "
        "nvidia.com/cuda.driver.rev=06 for 6 node(s); desired/nodes/pool-5.yaml "
        "nvidia.com/cuda.driver.minor=183 for 1 node(s). The next `reconcile apply` reverts "
        "this upgrade unless they change too: `reconcile upgrade` writes them unless given "
        "--no-write-desired (a dry run never writes)"
    )

    dry = upgrade(cluster, work, "--selector", SELECTOR, "--max-parallel", "3", "--dry-run")
    assert dry.code == 0, dry.stderr
    assert dry.stderr.splitlines().count(stale) == 1

    done = upgrade(
        cluster, work, "--selector", SELECTOR, "--max-parallel", "3", "--no-write-desired"
    )
    assert done.code == 0, done.stderr
    assert done.stderr.splitlines().count(stale) == 1
    assert sum("still declares" in line for line in done.stderr.splitlines()) == 1

    # As the note says: the rerun has nothing to upgrade and writes desired/ (the default).
    rerun = upgrade(cluster, work, "--selector", SELECTOR)
    assert rerun.code == 0, rerun.stderr
    assert "still declares" not in rerun.stderr
    group = (work / "desired" / "groups" / "a100.yaml").read_text()
    assert 'nvidia.com/cuda.driver.major: "550"  # the pool\'s driver\n' in group
    assert (
        'nvidia.com/cuda.driver.minor: "90"'
        in (work / "desired" / "nodes" / "pool-5.yaml").read_text()
    )
    plan = run_cli("plan", cwd=work, kubeconfig=cluster.kubeconfig)
    assert (plan.code, plan.stdout) == (0, ""), plan.stderr


def test_a_node_named_twice_is_upgraded_once(make_cluster: ClusterFactory, work: Path) -> None:
    cluster = _pool(make_cluster, budget=False)
    dry = upgrade(
        cluster,
        work,
        "pool-0",
        "pool-1",
        "pool-0",
        "--max-parallel",
        "2",
        "--max-unavailable",
        "2",
        "--dry-run",
    )
    assert dry.code == 0, dry.stderr
    assert dry.lines == ["batch 1: pool-0,pool-1 (dry run)"]
    assert "note: pool-0 named more than once: upgraded once" in dry.stderr

    done = upgrade(cluster, work, "pool-0", "pool-0", "--max-parallel", "2")
    assert done.code == 0, done.stderr
    assert done.lines[0] == "batch 1: pool-0"
    assert done.lines.count("pool-0 upgrade-required") == 1
    assert done.lines.count("pool-0 upgrade-done") == 1
    assert cluster.labels("pool-0")["nvidia.com/cuda.driver.minor"] == "90"


# --- a pool whose replacement pods start only once their node is uncordoned ---------------

RP = [f"rp-{i}" for i in range(4)]
TRAINER_LABELS = {"app": "trainer"}


def _rp_node(name: str) -> dict[str, Any]:
    node = _node(name, pool="rp")
    del node["metadata"]["labels"]["example.com/pool"]
    return node


def _trainer_pod(name: str, node: str, owner: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "train",
            "labels": TRAINER_LABELS,
            "ownerReferences": [owner],
        },
        "spec": {"nodeName": node, "containers": [{"name": "t", "image": "trainer:1"}]},
    }


_TRAINER_RS = {
    "apiVersion": "apps/v1",
    "kind": "ReplicaSet",
    "name": "trainer-5f8b9c7d4",
    "uid": "6a1c2e3f-4b5d-4c6e-8f70-8192a3b4c5d6",
    "controller": True,
    "blockOwnerDeletion": True,
}
_RP_BUDGET = {
    "apiVersion": "policy/v1",
    "kind": "PodDisruptionBudget",
    "metadata": {"name": "trainer-pdb", "namespace": "train"},
    "spec": {"maxUnavailable": 1, "selector": {"matchLabels": TRAINER_LABELS}},
}
# One trainer per node, by the scheduler's rules: a pod of a drained node has nowhere else
# to go, so its replacement stays Pending until that node is uncordoned.
_TRAINER_DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "trainer", "namespace": "train", "labels": TRAINER_LABELS},
    "spec": {
        "replicas": 4,
        "selector": {"matchLabels": TRAINER_LABELS},
        "template": {
            "metadata": {"labels": TRAINER_LABELS},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "affinity": {
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "labelSelector": {"matchLabels": TRAINER_LABELS},
                                "topologyKey": "kubernetes.io/hostname",
                            }
                        ]
                    }
                },
                "containers": [{"name": "t", "image": "trainer:1"}],
            },
        },
    },
}


def _trainers(cluster: TestCluster) -> list[dict[str, Any]]:
    status, body = cluster.raw("GET", "/api/v1/namespaces/train/pods?labelSelector=app%3Dtrainer")
    assert status == 200, body
    return [p for p in body["items"] if not p["metadata"].get("deletionTimestamp")]


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


class _ReplicaSetStandIn:
    """The sandbox has no controllers: this plays the ReplicaSet controller, the scheduler
    and the kubelet for the trainers, as they act on the real control plane. A missing
    trainer is replaced on the schedulable node that runs none (the anti-affinity), and
    becomes Ready (its containers start) once the budgets have been read since: whoever
    reads them meanwhile finds the budget spent, however fast or slow the machine. Or
    once the rollout is over (`finished`), or after 5 s at most, so that a rollout that
    never looks still finishes, and fails."""

    def __init__(self, cluster: TestCluster) -> None:
        self.cluster = cluster
        self.stop = threading.Event()
        self.finished = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.created = 0
        self.budget_reads = 0  # answered LISTs of budgets, counted by the sandbox's log

    def _count(self, record: RequestRecord) -> None:
        if record.resource == "poddisruptionbudgets" and record.verb == "list":
            self.budget_reads += 1

    def _loop(self) -> None:
        starting: dict[str, tuple[int, float]] = {}
        while not self.stop.is_set():
            trainers = _trainers(self.cluster)
            taken = {p["spec"]["nodeName"] for p in trainers}
            _, nodes = self.cluster.raw("GET", "/api/v1/nodes?labelSelector=pool%3Drp")
            free = sorted(
                n["metadata"]["name"]
                for n in nodes["items"]
                if not n["spec"].get("unschedulable") and n["metadata"]["name"] not in taken
            )
            if len(trainers) < len(RP) and free:
                self.created += 1
                name = f"trainer-5f8b9c7d4-r{self.created}"
                self.cluster.create(_trainer_pod(name, free[0], _TRAINER_RS))
                starting[name] = (self.budget_reads, time.monotonic() + 5.0)
            for name, (reads, latest) in list(starting.items()):
                looked = self.budget_reads > reads or self.finished.is_set()
                if looked or time.monotonic() >= latest:
                    del starting[name]
                    self._run(name)
            time.sleep(0.05)

    def _run(self, name: str) -> None:
        path = f"/api/v1/namespaces/train/pods/{name}/status"
        status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        code, body = self.cluster.raw(
            "PATCH", path, {"status": status}, "application/merge-patch+json"
        )
        assert code == 200, body

    def __enter__(self) -> _ReplicaSetStandIn:
        assert self.cluster.sandbox is not None
        self.cluster.sandbox.server.observers.append(self._count)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        assert self.cluster.sandbox is not None
        self.cluster.sandbox.server.observers.remove(self._count)


def _rp_pool(make_cluster: ClusterFactory) -> TestCluster:
    """Four GPU nodes, four trainers (one per node) and a budget of maxUnavailable 1: on a
    real control plane a Deployment's pods, placed by the scheduler; on the sandbox its
    ReplicaSet's pods bound by hand, the stand-in above replacing them."""
    objects: list[dict[str, Any]] = [_rp_node(name) for name in RP]
    objects.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "train"}})
    objects.append(_RP_BUDGET)
    cluster = make_cluster(objects)
    if cluster.is_sandbox:
        cluster.create(
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": _TRAINER_RS["name"],
                    "namespace": "train",
                    "uid": _TRAINER_RS["uid"],
                    "labels": TRAINER_LABELS,
                },
                "spec": {
                    "replicas": 4,
                    "selector": {"matchLabels": TRAINER_LABELS},
                    "template": _TRAINER_DEPLOYMENT["spec"]["template"],  # type: ignore[index]
                },
            }
        )
        for index, node in enumerate(RP):
            pod = _trainer_pod(f"trainer-5f8b9c7d4-{index}", node, _TRAINER_RS)
            pod["status"] = {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
            }
            cluster.create(pod)
    else:
        status, body = cluster.raw(
            "POST", "/apis/apps/v1/namespaces/train/deployments", _TRAINER_DEPLOYMENT
        )
        assert status == 201, body

    def settled() -> bool:
        trainers = _trainers(cluster)
        on = {(p.get("spec") or {}).get("nodeName") for p in trainers if _ready(p)}
        _, budget = cluster.raw(
            "GET", "/apis/policy/v1/namespaces/train/poddisruptionbudgets/trainer-pdb"
        )
        allowed = (budget.get("status") or {}).get("disruptionsAllowed")
        return len(trainers) == 4 and on == set(RP) and allowed == 1

    wait_for(settled, what="a Ready trainer on every node and the budget to allow 1")
    return cluster


@pytest.mark.slow
def test_a_pool_rollout_waits_for_each_replacement_pod_before_the_next_drain(
    make_cluster: ClusterFactory, work: Path
) -> None:
    cluster = _rp_pool(make_cluster)
    with contextlib.ExitStack() as stack:
        stand_in = stack.enter_context(_ReplicaSetStandIn(cluster)) if cluster.is_sandbox else None
        result = run_cli(
            "upgrade",
            "--selector",
            "pool=rp",
            "--driver",
            TARGET,
            "--max-parallel",
            "1",
            "--timeout",
            "60s",
            cwd=work,
            kubeconfig=cluster.kubeconfig,
        )
        if stand_in is not None:
            stand_in.finished.set()
        wait_for(
            lambda: {p["spec"].get("nodeName") for p in _trainers(cluster) if _ready(p)} == set(RP),
            what="a Ready trainer on every node again",
        )
    assert result.code == 0, result.stderr
    # Each batch line may end with the room its node down leaves (nodes with allocatable).
    assert [line.split(" (")[0] for line in result.lines[:4]] == [
        f"batch {i + 1}: rp-{i}" for i in range(4)
    ]
    assert [line for line in result.lines if line.endswith("upgrade-done")] == [
        f"{node} upgrade-done" for node in RP
    ]
    # each drain after the first met the budget spent on the previous node's replacement
    assert (
        "waiting: PodDisruptionBudget train/trainer-pdb allows no disruption yet "
        "(3 healthy, 4 desired)"
    ) in result.stderr
    for node in RP:
        found = cluster.node(node)
        assert found["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade-state"] == "upgrade-done"
        assert found["metadata"]["labels"]["nvidia.com/cuda.driver.major"] == "550"
        assert not found["spec"].get("unschedulable")


@pytest.mark.slow
def test_a_batch_whose_budget_does_not_recover_in_time_fails_without_being_cordoned(
    make_cluster: ClusterFactory, work: Path
) -> None:
    cluster = _rp_pool(make_cluster)
    if not cluster.is_sandbox:
        pytest.skip("the real ReplicaSet controller replaces the evicted trainer")
    untouched = {n: cluster.node(n)["metadata"]["labels"] for n in ("rp-2", "rp-3")}
    started = time.monotonic()
    result = run_cli(
        "upgrade",
        "--selector",
        "pool=rp",
        "--driver",
        TARGET,
        "--timeout",
        "3s",
        cwd=work,
        kubeconfig=cluster.kubeconfig,
    )
    assert result.code == 2
    assert time.monotonic() - started < 30
    assert "rp-0 upgrade-done" in result.lines
    assert result.lines[-1] == "rp-1 upgrade-failed"
    [error] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert error == (
        "error: rollout stopped: rp-1 failed: timed out after 3s waiting for the budgets to "
        "allow the drain of batch 2 (rp-1): PodDisruptionBudget train/trainer-pdb allows no "
        "disruption yet (3 healthy, 4 desired); rp-1 is labelled upgrade-failed, neither "
        "cordoned nor drained by this run: let the budget recover (or change it), then rerun; "
        "done: rp-0; not started: rp-2, rp-3; rerun the same command to resume"
    )
    failed = cluster.node("rp-1")
    assert failed["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade-state"] == "upgrade-failed"
    assert not failed["spec"].get("unschedulable")
    assert [p["metadata"]["name"] for p in _trainers(cluster) if p["spec"]["nodeName"] == "rp-1"]
    assert {n: cluster.node(n)["metadata"]["labels"] for n in ("rp-2", "rp-3")} == untouched


def test_dry_run_says_per_batch_the_gpus_left_and_the_pods_with_no_room(
    make_cluster: ClusterFactory, work: Path
) -> None:
    objects = _objects(budget=False)
    for obj in objects:
        if obj["kind"] == "Node":
            gpus = {"nvidia.com/gpu": "4"} if obj["metadata"]["name"] in POOL else {}
            obj["status"]["allocatable"] = {"cpu": "64", "pods": "110", **gpus}
        if obj["kind"] == "Pod":
            obj["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 3}}
    cluster = make_cluster(objects)
    if cluster.sandbox is None:
        pytest.skip("the pool's pods are bound by hand: no scheduler or controllers to fight")
    before = snapshot(cluster)
    dry = upgrade(cluster, work, "--selector", SELECTOR, "--max-parallel", "2", "--dry-run")
    assert dry.code == 0, dry.stderr
    # Two nodes down: the other four have 1 GPU free each, and each evicted trainer needs 3.
    assert dry.lines[0] == (
        "batch 1: pool-0,pool-1 (4 nvidia.com/gpu free on the other nodes; no room for "
        "train/trainer-0, train/trainer-1) (dry run)"
    )
    document = json.loads(
        upgrade(
            cluster, work, "--selector", SELECTOR, "--max-parallel", "2", "--dry-run", "-o", "json"
        ).stdout
    )
    assert document["batches"][0]["gpusFree"] == {"nvidia.com/gpu": 4}
    assert document["batches"][0]["noRoom"] == ["train/trainer-0", "train/trainer-1"]
    assert snapshot(cluster) == before
