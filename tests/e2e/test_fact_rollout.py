"""A NodeGroup's new MIG layout rolled out through the real CLI, against mig-manager's
stand-in (reconcile/gpu/standin.py): apply refuses it under running GPU pods, `rollout`
takes the pool node by node (cordon, drain the GPU pods through the Eviction API, write,
wait for `nvidia.com/mig.config.state`, verify the allocatable, uncordon), waits for a
budget until the replacement of the last node's pod is Ready, halts at a failed node and
at a failed gate, and resumes after SIGINT.

On a real control plane the ReplicaSet controller makes the replacements and the
scheduler places them; on the sandbox, which runs neither, the test makes the one
replacement the budget waits for itself."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reconcile.gpu import change, gates, journal
from tests.conftest import ClusterFactory
from tests.e2e.test_prune_guards import snapshot
from tests.support import A100_MIG_LABELS, TestCluster, run_cli, wait_for

# The CLI runs in this process: its waits look again at a test's pace (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("prompt_polls")

GROUP = "example.com/pool=a100-mig"
STATE = "nvidia.com/mig.config.state"
MERGE = "application/merge-patch+json"
OWNER_UID = "3b1c2d4e-5f60-4a7b-8c9d-0e1f2a3b4c5d"
RUNNING = {
    "phase": "Running",
    "conditions": [
        {"type": "PodScheduled", "status": "True"},
        {"type": "Initialized", "status": "True"},
        {"type": "ContainersReady", "status": "True"},
        {"type": "Ready", "status": "True"},
    ],
}
ANTI_AFFINITY = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "labelSelector": {"matchLabels": {"app": "trainer"}},
                "topologyKey": "kubernetes.io/hostname",
            }
        ]
    }
}
TRAINER = {
    "name": "trainer",
    "image": "nvcr.io/nvidia/pytorch:24.07-py3",
    "resources": {"limits": {"nvidia.com/gpu": "1"}},
}
LAYOUT = """\
apiVersion: reconcile.dev/v1alpha1
kind: NodeGroup
metadata:
  name: a100-mig
selector:
  matchLabels: {example.com/pool: a100-mig}
labels:
  nvidia.com/mig.config: all-1g.5gb
"""
BUDGET = """\
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: trainer-pdb
  namespace: train
spec:
  minAvailable: 2
  selector:
    matchLabels: {app: trainer}
"""
GATE = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: diag
  namespace: train
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: diag
        image: nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04
        command: [dcgmi, diag, -r, "1"]
"""
AFTER = {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.5gb": "28"}


def _phase(node: dict[str, Any]) -> str | None:
    """The phase the node's rollout journal records (None: no journal)."""
    text = (node["metadata"].get("annotations") or {}).get(journal.JOURNAL)
    return None if text is None else journal.Journal.load(text).phase


def _node(name: str, pool: str, *, cordoned: bool = False) -> dict[str, Any]:
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "4"}
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "example.com/pool": pool,
                **A100_MIG_LABELS,
            },
        },
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    return node


def _pod(name: str, node: str, *, gpu: bool = True, owner: str = "trainer") -> dict[str, Any]:
    uid = OWNER_UID if owner == "trainer" else OWNER_UID.replace("3b1c", "9f8e")
    labels = {"app": owner, "pod-template-hash": "5f7c9d8b6a"}
    container = TRAINER if gpu else {"name": "logger", "image": "fluent/fluent-bit:3.1"}
    spec: dict[str, Any] = {"nodeName": node, "containers": [container]}
    if owner == "trainer":
        spec["affinity"] = ANTI_AFFINITY
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "train",
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{owner}-5f7c9d8b6a",
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
        "status": RUNNING,
    }


def _replica_set(owner: str, replicas: int, *, gpu: bool) -> dict[str, Any]:
    labels = {"app": owner, "pod-template-hash": "5f7c9d8b6a"}
    template_spec: dict[str, Any] = {
        "containers": [TRAINER if gpu else {"name": "logger", "image": "fluent/fluent-bit:3.1"}]
    }
    if owner == "trainer":
        template_spec["affinity"] = ANTI_AFFINITY
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{owner}-5f7c9d8b6a",
            "namespace": "train",
            "uid": OWNER_UID if owner == "trainer" else OWNER_UID.replace("3b1c", "9f8e"),
            "labels": labels,
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": template_spec},
        },
    }


def _objects() -> list[dict[str, Any]]:
    """Two nodes of the MIG pool, two spares (spare-1 cordoned: where the first
    replacement goes once it is let in), a trainer on each but spare-1, a logger that
    uses no GPU on gpu-0, and a budget that allows one trainer down at a time."""
    import yaml

    return [
        _node("gpu-0", "a100-mig"),
        _node("gpu-1", "a100-mig"),
        _node("spare-0", "a100-spare"),
        _node("spare-1", "a100-spare", cordoned=True),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "train"}},
        _replica_set("trainer", 3, gpu=True),
        _replica_set("logger", 1, gpu=False),
        _pod("trainer-5f7c9d8b6a-a0000", "gpu-0"),
        _pod("trainer-5f7c9d8b6a-b1111", "gpu-1"),
        _pod("trainer-5f7c9d8b6a-c2222", "spare-0"),
        _pod("logger-5f7c9d8b6a-d3333", "gpu-0", gpu=False, owner="logger"),
        yaml.safe_load(BUDGET),
    ]


@pytest.fixture
def pool(make_cluster: ClusterFactory) -> TestCluster:
    return make_cluster(_objects())


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "desired" / "groups").mkdir(parents=True)
    (tmp_path / "desired" / "groups" / "a100-mig.yaml").write_text(LAYOUT)
    return tmp_path


def _rollout(cluster: TestCluster, work: Path, *args: str) -> Any:
    return run_cli(
        "rollout",
        *args,
        "--timeout",
        "60s",
        "--state-timeout",
        "60s",
        cwd=work,
        kubeconfig=cluster.kubeconfig,
    )


def _patch(cluster: TestCluster, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, answer = cluster.raw("PATCH", path, body, MERGE)
    assert status == 200, answer
    return dict(answer)


def _trainers(cluster: TestCluster) -> dict[str, dict[str, Any]]:
    found = cluster.raw("GET", "/api/v1/namespaces/train/pods?labelSelector=app%3Dtrainer")[1]
    return {p["metadata"]["name"]: p for p in found["items"]}


def _phases(name: str) -> list[str]:
    return [f"{name} {phase}" for phase in change.PHASES]


def _let_the_replacement_in(cluster: TestCluster, seen: list[str]) -> None:
    """Once gpu-0 is done and gpu-1 has not started (its batch waits for the budget),
    record that, then let the replacement of gpu-0's trainer run: on a real cluster by
    uncordoning spare-1, where the scheduler places the ReplicaSet's new pod; on the
    sandbox, which has no controllers, by making that pod there."""

    def batch_two_waits() -> bool:
        gpu0 = cluster.node("gpu-0")["metadata"]
        gpu1 = cluster.node("gpu-1")["metadata"]
        return (
            gpu0["labels"].get("nvidia.com/mig.config") == "all-1g.5gb"
            and change.PHASE not in (gpu0.get("annotations") or {})
            and change.PHASE not in (gpu1.get("annotations") or {})
        )

    wait_for(batch_two_waits, what="gpu-0 done, gpu-1 waiting", timeout=90)
    time.sleep(1.0)  # the budget still allows nothing: gpu-1 stays untouched meanwhile
    if change.PHASE not in (cluster.node("gpu-1")["metadata"].get("annotations") or {}):
        seen.append("gpu-1 waited")
    _patch(cluster, "/api/v1/nodes/spare-1", {"spec": {"unschedulable": None}})
    _replace_on_the_sandbox(cluster)


def _replace_on_the_sandbox(cluster: TestCluster) -> None:
    """The ReplicaSet controller's and kubelet's part for gpu-0's evicted trainer, where
    neither runs: its replacement on spare-1, Running and Ready. (On a real cluster they
    make it, and the scheduler places it on spare-1, the one node it may go to.)"""
    if not cluster.is_sandbox:
        return
    replacement = _pod("trainer-5f7c9d8b6a-e4444", "spare-1")
    status, body = cluster.raw("POST", "/api/v1/namespaces/train/pods", replacement)
    assert status == 201, body
    name = replacement["metadata"]["name"]
    _patch(cluster, f"/api/v1/namespaces/train/pods/{name}/status", {"status": RUNNING})


@pytest.mark.slow
def test_a_pools_new_layout_is_refused_by_apply_and_rolled_out_node_by_node(
    pool: TestCluster, work: Path
) -> None:
    plan = run_cli("plan", cwd=work, kubeconfig=pool.kubeconfig)
    assert "gpu-0 nvidia.com/mig.config all-1g.5gb (rollout)" in plan.lines
    assert "gpu-1 nvidia.com/mig.config all-1g.5gb (rollout)" in plan.lines
    before = snapshot(pool)
    applied = run_cli("apply", cwd=work, kubeconfig=pool.kubeconfig)
    assert applied.code == 2
    assert "Roll it out: `reconcile rollout` cordons the node" in applied.stderr
    assert snapshot(pool) == before

    dry = _rollout(pool, work, "--dry-run")
    assert dry.code == 0, dry.stderr
    assert dry.lines[:2] == [
        "gpu-0 nvidia.com/mig.config all-1g.5gb (rollout) (dry run)",
        "gpu-1 nvidia.com/mig.config all-1g.5gb (rollout) (dry run)",
    ]
    # gpu-1 and spare-0 have 3 GPUs free each with the batch down (spare-1 is cordoned).
    assert dry.lines[2] == "batch 1: gpu-0 (6 nvidia.com/gpu free on the other nodes) (dry run)"
    assert dry.lines[3].startswith("batch 2: gpu-1 (")
    assert snapshot(pool) == before

    seen: list[str] = []
    helper = threading.Thread(target=_let_the_replacement_in, args=(pool, seen))
    helper.start()
    try:
        done = _rollout(pool, work)
    finally:
        helper.join(timeout=120)

    assert done.code == 0, done.stderr
    assert seen == ["gpu-1 waited"]
    assert "waiting: PodDisruptionBudget train/trainer-pdb allows no disruption yet" in done.stderr
    assert done.lines[4:] == _phases("gpu-0") + _phases("gpu-1")
    for name in ("gpu-0", "gpu-1"):
        node = pool.node(name)
        labels, annotations = node["metadata"]["labels"], node["metadata"].get("annotations") or {}
        assert labels["nvidia.com/mig.config"] == "all-1g.5gb"
        assert labels[STATE] == "success"
        gpus = {k: v for k, v in node["status"]["allocatable"].items() if k.startswith("nvidia")}
        assert gpus == AFTER
        assert not node["spec"].get("unschedulable")
        assert not [k for k in annotations if k.startswith("reconcile.dev/rollout")]
    trainers = _trainers(pool)
    assert "trainer-5f7c9d8b6a-a0000" not in trainers  # evicted
    assert "trainer-5f7c9d8b6a-b1111" not in trainers
    status, logger_pod = pool.raw("GET", "/api/v1/namespaces/train/pods/logger-5f7c9d8b6a-d3333")
    assert status == 200 and not logger_pod["metadata"].get("deletionTimestamp")  # no GPU: kept

    after = run_cli("rollout", "status", cwd=work, kubeconfig=pool.kubeconfig)
    assert (after.code, after.lines) == (0, ["OK"])
    replanned = run_cli("plan", cwd=work, kubeconfig=pool.kubeconfig)
    assert not [line for line in replanned.lines if "(rollout)" in line]


def test_a_node_that_fails_its_layout_halts_the_rollout_and_status_says_so(
    pool: TestCluster, work: Path
) -> None:
    _patch(
        pool,
        "/api/v1/nodes/gpu-0",
        {"metadata": {"annotations": {"mig-manager.stand-in/fail": "true"}}},
    )
    gpu1 = pool.node("gpu-1")

    failed = _rollout(pool, work, "--max-unavailable", "2")

    assert failed.code == 2
    [error] = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
    assert error.startswith(
        "error: rollout stopped: gpu-0 failed: nvidia.com/mig.config.state=failed: the "
        "operator could not apply the change on gpu-0"
    )
    assert "not started: gpu-1" in error
    assert failed.lines[-1] == "gpu-0 rollout-failed"
    node = pool.node("gpu-0")
    assert node["spec"]["unschedulable"] is True
    assert _phase(node) == "wait-required"
    later = pool.node("gpu-1")
    assert later["metadata"]["labels"] == gpu1["metadata"]["labels"]
    assert not later["spec"].get("unschedulable")

    status = run_cli("rollout", "status", cwd=work, kubeconfig=pool.kubeconfig)
    assert status.code == 1
    [line] = [line for line in status.lines if line.startswith("gpu-0 ")]
    assert line.startswith("gpu-0 rollout-failed ")
    assert "failed at wait-required: nvidia.com/mig.config.state=failed" in line
    planned = [line for line in status.lines if line.startswith("gpu-1 ")]
    assert planned and planned[0].startswith("gpu-1 planned - ")


def _fail_the_gate_job(cluster: TestCluster) -> None:
    """The gate's Job on gpu-0 fails: on a real cluster its pod fails (as the kubelet
    reports a container that exits 1) and the Job controller marks the Job Failed; on
    the sandbox, which runs no Job controller, the Job is marked Failed as it would."""
    jobs_path = "/apis/batch/v1/namespaces/train/jobs"

    def created() -> list[dict[str, Any]]:
        found = cluster.raw("GET", jobs_path)[1]["items"]
        return [j for j in found if gates.GATE_LABEL in (j["metadata"].get("labels") or {})]

    wait_for(lambda: bool(created()), what="the gate's Job", timeout=90)
    [job] = created()
    name = job["metadata"]["name"]
    if cluster.is_sandbox:
        failed = {
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                }
            ]
        }
        _patch(cluster, f"{jobs_path}/{name}/status", {"status": failed})
        return

    def pods() -> list[dict[str, Any]]:
        query = f"?labelSelector=batch.kubernetes.io%2Fjob-name%3D{name}"
        return list(cluster.raw("GET", f"/api/v1/namespaces/train/pods{query}")[1]["items"])

    wait_for(lambda: bool(pods()), what="the gate Job's pod", timeout=90)
    [pod] = pods()
    terminated = {
        "terminated": {
            "exitCode": 1,
            "reason": "Error",
            "startedAt": "2026-01-01T00:00:00Z",
            "finishedAt": "2026-01-01T00:00:01Z",
        }
    }
    status = {
        "phase": "Failed",
        "containerStatuses": [
            {
                "name": "diag",
                "image": "dcgm",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": terminated,
            }
        ],
    }
    path = f"/api/v1/namespaces/train/pods/{pod['metadata']['name']}/status"
    _patch(cluster, path, {"status": status})


def test_a_gate_that_fails_halts_before_the_next_batch(pool: TestCluster, work: Path) -> None:
    (work / "desired" / "gates").mkdir()
    (work / "desired" / "gates" / "diag.yaml").write_text(GATE)
    _patch(pool, "/api/v1/nodes/spare-1", {"spec": {"unschedulable": None}})  # room to move
    gpu1 = pool.node("gpu-1")
    helper = threading.Thread(target=_fail_the_gate_job, args=(pool,))
    helper.start()
    try:
        halted = _rollout(pool, work, "--gate", "job=gates/diag.yaml", "--gate-timeout", "90s")
    finally:
        helper.join(timeout=120)

    assert halted.code == 2
    [error] = [line for line in halted.stderr.splitlines() if line.startswith("error:")]
    assert "halted: gate job=" in error and "diag.yaml: Job train/diag-" in error
    assert "on gpu-0 failed" in error
    assert "not started: gpu-1" in error
    assert halted.lines[4:] == _phases("gpu-0")  # gpu-0 finished; the gate stopped gpu-1
    assert pool.node("gpu-1")["metadata"]["labels"] == gpu1["metadata"]["labels"]
    job = [
        j
        for j in pool.raw("GET", "/apis/batch/v1/namespaces/train/jobs")[1]["items"]
        if gates.GATE_LABEL in (j["metadata"].get("labels") or {})
    ]
    assert [j["spec"]["template"]["spec"]["nodeName"] for j in job] == ["gpu-0"]


@pytest.mark.slow
def test_sigint_leaves_the_node_at_its_wait_and_the_same_command_resumes(
    pool: TestCluster, work: Path
) -> None:
    _patch(pool, "/api/v1/nodes/spare-1", {"spec": {"unschedulable": None}})
    _patch(
        pool,
        "/api/v1/nodes/gpu-0",
        {"metadata": {"annotations": {"mig-manager.stand-in/hold": "true"}}},
    )
    command = [sys.executable, "-m", "reconcile", "rollout", "--timeout", "60s"]
    process = subprocess.Popen(
        [*command, "--state-timeout", "60s"],
        cwd=work,
        env={"KUBECONFIG": str(pool.kubeconfig), "HOME": str(work), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def waiting() -> bool:
        return _phase(pool.node("gpu-0")) == "wait-required"

    wait_for(waiting, what="gpu-0 waiting for its state", timeout=60)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)

    assert process.returncode == 130, err
    assert out.splitlines()[-1] == "gpu-0 wait-required"
    assert "gpu-0 stopped at wait-required by a signal" in err
    assert "rerun the same command to resume" in err
    node = pool.node("gpu-0")
    assert node["spec"]["unschedulable"] is True
    assert _phase(node) == "wait-required"
    assert change.PHASE not in (pool.node("gpu-1")["metadata"].get("annotations") or {})

    _replace_on_the_sandbox(pool)
    _patch(
        pool,
        "/api/v1/nodes/gpu-0",
        {"metadata": {"annotations": {"mig-manager.stand-in/hold": None}}},
    )
    resumed = _rollout(pool, work)
    assert resumed.code == 0, resumed.stderr
    # gpu-0 picks up at its wait: no second cordon, drain or write.
    assert resumed.lines[0] == "gpu-1 nvidia.com/mig.config all-1g.5gb (rollout)"
    assert [line.split(" (")[0] for line in resumed.lines[1:3]] == [
        "batch 1: gpu-0",
        "batch 2: gpu-1",
    ]
    gpu0 = [line for line in resumed.lines if line.startswith("gpu-0 ")]
    assert gpu0 == ["gpu-0 validation-required", "gpu-0 uncordon-required", "gpu-0 rollout-done"]
    assert pool.node("gpu-0")["metadata"]["labels"][STATE] == "success"
    assert not pool.node("gpu-0")["spec"].get("unschedulable")


EXAMPLE = Path(__file__).parents[2] / "examples" / "mig-pool"


def test_a_fleets_rollout_stops_at_the_wave_that_fails_and_leaves_the_next_alone(
    tmp_path: Path,
) -> None:
    """The example fleet: staging (wave 1) fails its layout, so prod (wave 2) is not
    started. Two sandboxes with a kubeconfig context each, as `reconcile sandbox --seed
    staging.yaml --seed prod.yaml` serves them, and a mig-manager stand-in for each."""
    from reconcile.gpu import standin
    from reconcile.sandbox import Sandbox
    from reconcile.sandbox.main import load_seed, merged_kubeconfig

    work = tmp_path / "work"
    shutil.copytree(EXAMPLE, work)
    names = ["staging", "prod"]
    sandboxes = [
        Sandbox(load_seed(str(EXAMPLE / f"{name}.yaml")), unrecorded_agents={standin.AGENT})
        for name in names
    ]
    config = tmp_path / "kubeconfig"
    stops: list[Callable[[], None]] = []
    try:
        for sandbox in sandboxes:
            sandbox.start()
        config.write_text(json.dumps(merged_kubeconfig(sandboxes, names)))
        staging = TestCluster(_single(sandboxes[0], tmp_path / "staging"), sandboxes[0])
        prod = TestCluster(_single(sandboxes[1], tmp_path / "prod"), sandboxes[1])
        stops.append(standin.serve(config, names))
        _patch(
            staging,
            "/api/v1/nodes/stg-a100-0",
            {"metadata": {"annotations": {"mig-manager.stand-in/fail": "true"}}},
        )
        before = snapshot(prod)

        failed = run_cli("rollout", "--state-timeout", "30s", cwd=work, kubeconfig=config)

        assert failed.code == 2
        [error] = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
        assert error.startswith(
            "error: rollout stopped at cluster staging: stg-a100-0 failed: "
            "nvidia.com/mig.config.state=failed"
        )
        assert error.endswith("; clusters not started: prod")
        assert failed.lines[-1] == "staging stg-a100-0 rollout-failed"
        assert not [line for line in failed.lines if line.startswith("prod ")]
        assert snapshot(prod) == before
        status = run_cli("rollout", "status", cwd=work, kubeconfig=config)
        assert status.code == 1
        assert status.lines[0].startswith("staging stg-a100-0 rollout-failed ")
    finally:
        for stop in stops:
            stop()
        for sandbox in sandboxes:
            sandbox.stop()


def _single(sandbox: Any, path: Path) -> Path:
    sandbox.write_kubeconfig(path)
    return path


def _gated_rollout(
    pool: TestCluster, work: Path, query: str, answer: dict[str, Any]
) -> tuple[Any, list[str]]:
    """A rollout of the pool gated by `query` on a Prometheus that gives `answer`: what
    the CLI did, and the queries Prometheus was asked."""
    from http.server import ThreadingHTTPServer

    from tests.unit.test_gates import _Prometheus

    _patch(pool, "/api/v1/nodes/spare-1", {"spec": {"unschedulable": None}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Prometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Prometheus.asked.clear()
    _Prometheus.answers[:] = [answer]
    try:
        halted = _rollout(
            pool,
            work,
            "--gate",
            f"prom={query}",
            "--prometheus-url",
            f"http://127.0.0.1:{server.server_address[1]}",
        )
    finally:
        server.shutdown()
        server.server_close()
    return halted, list(_Prometheus.asked)


def test_a_prometheus_gate_that_finds_xid_errors_halts_before_the_next_batch(
    pool: TestCluster, work: Path
) -> None:
    from tests.unit.test_gates import _vector

    query = 'increase(DCGM_FI_DEV_XID_ERRORS{Hostname=~"$NODES"}[10m]) > 0'
    halted, asked = _gated_rollout(pool, work, query, _vector("2"))

    assert halted.code == 2
    assert asked == ['increase(DCGM_FI_DEV_XID_ERRORS{Hostname=~"gpu-0"}[10m]) > 0']
    [error] = [line for line in halted.stderr.splitlines() if line.startswith("error:")]
    assert f"halted: gate prom={query}: 1 series not zero after batch 1" in error
    assert "not started: gpu-1" in error
    assert change.PHASE not in (pool.node("gpu-1")["metadata"].get("annotations") or {})


def test_a_range_query_whose_series_has_a_value_not_zero_halts_the_rollout(
    pool: TestCluster, work: Path
) -> None:
    query = 'DCGM_FI_DEV_XID_ERRORS{Hostname=~"$NODES"}[10m]'
    series = {
        "metric": {"__name__": "DCGM_FI_DEV_XID_ERRORS", "Hostname": "gpu-0"},
        "values": [[1700000000, "0"], [1700000060, "79"], [1700000120, "0"]],
    }
    matrix = {"status": "success", "data": {"resultType": "matrix", "result": [series]}}
    gpu_1 = snapshot(pool)["/api/v1/nodes /gpu-1"]

    halted, asked = _gated_rollout(pool, work, query, matrix)

    assert halted.code == 2
    assert asked == ['DCGM_FI_DEV_XID_ERRORS{Hostname=~"gpu-0"}[10m]']
    [error] = [line for line in halted.stderr.splitlines() if line.startswith("error:")]
    assert (
        f"halted: gate prom={query}: 1 series not zero after batch 1: "
        'DCGM_FI_DEV_XID_ERRORS{Hostname="gpu-0"} = 79'
    ) in error
    assert "not started: gpu-1" in error
    assert snapshot(pool)["/api/v1/nodes /gpu-1"] == gpu_1


def test_a_prometheus_url_other_than_http_is_refused_before_anything_is_read(
    pool: TestCluster, work: Path
) -> None:
    before = snapshot(pool)
    if pool.sandbox is not None:
        pool.sandbox.clear_requests()

    refused = _rollout(
        pool, work, "--gate", "prom=up == 0", "--prometheus-url", "file:///etc/passwd"
    )
    if pool.sandbox is not None:
        assert pool.sandbox.requests == []

    assert refused.code == 2
    assert refused.stderr.splitlines() == [
        "error: --prometheus-url file:///etc/passwd: not an address of Prometheus "
        "(give http://HOST[:PORT][/PATH] or https://...; no other scheme is read)"
    ]
    assert refused.stdout == ""
    assert snapshot(pool) == before
