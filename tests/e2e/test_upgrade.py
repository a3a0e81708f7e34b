"""Driver upgrades through the real CLI: the driver lab's steps 6-8, the timeout path,
resuming after an interruption, and every preflight refusal."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from reconcile.sandbox import RequestRecord
from tests.conftest import ClusterFactory
from tests.support import REPO, TestCluster, lab_objects, run_cli, wait_for

# The CLI runs in this process: its waits look again at a test's pace (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("prompt_polls")

STATE = "nvidia.com/gpu-driver-upgrade-state"
THE_STEPS = [
    f"lab-node-1 {STATE} upgrade-required",
    f"lab-node-1 {STATE} cordon-required",
    "lab-node-1 spec.unschedulable true",
    f"lab-node-1 {STATE} drain-required",
    "Pod/gpu-drv/trainer-7d9c5b8f6d-m4w7z evicted",
    f"lab-node-1 {STATE} pod-restart-required",
    "lab-node-1 nvidia.com/cuda.driver.major 550",
    "lab-node-1 nvidia.com/cuda.driver.minor 90",
    "lab-node-1 nvidia.com/cuda.driver.rev 07",
    f"lab-node-1 {STATE} validation-required",
    "lab-node-1 driver-image 550-5.15.0-107-generic-ubuntu22.04 OK",
    f"lab-node-1 {STATE} uncordon-required",
    "lab-node-1 spec.unschedulable false",
    f"lab-node-1 {STATE} upgrade-done",
]
ROW = "550,5.15.0-107-generic,ubuntu22.04\n"


@pytest.fixture
def cluster(make_cluster: ClusterFactory) -> TestCluster:
    return make_cluster(lab_objects("driver-lab"))


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The driver lab's desired/, before the 550 image for kernel 5.15.0-107 exists."""
    target = tmp_path / "drv"
    shutil.copytree(REPO / "examples" / "driver-lab", target)
    matrix = target / "desired" / "drivers" / "support-matrix.csv"
    matrix.write_text(matrix.read_text().replace(ROW, ""))
    return target


def _add_row(work: Path) -> None:
    matrix = work / "desired" / "drivers" / "support-matrix.csv"
    matrix.write_text(matrix.read_text() + ROW)


def _min_available(cluster: TestCluster, value: int) -> None:
    """Change the budget, then wait for the disruption controller to recompute its status
    (at once on the sandbox, a moment later on a real cluster)."""
    path = "/apis/policy/v1/namespaces/gpu-drv/poddisruptionbudgets/trainer-pdb"
    status, body = cluster.raw(
        "PATCH", path, {"spec": {"minAvailable": value}}, "application/merge-patch+json"
    )
    assert status == 200, body
    generation = body["metadata"]["generation"]

    def observed() -> bool:
        current = cluster.raw("GET", path)[1]
        return bool((current.get("status") or {}).get("observedGeneration", 0) >= generation)

    wait_for(observed, what="the budget's status after the change")


def _upgrade(cluster: TestCluster, work: Path, *extra: str) -> tuple[int, list[str], str]:
    result = run_cli(
        "upgrade",
        "lab-node-1",
        "--driver",
        "550.90.07",
        *extra,
        cwd=work,
        kubeconfig=cluster.kubeconfig,
    )
    return result.code, result.lines, result.stderr


def test_the_driver_labs_upgrade_plays_through(cluster: TestCluster, work: Path) -> None:
    before = cluster.resource_versions()

    code, lines, err = _upgrade(cluster, work)
    assert (code, lines) == (2, [])
    assert "driver image 550-5.15.0-107-generic-ubuntu22.04 is not in the support matrix" in err
    assert "add the row `550,5.15.0-107-generic,ubuntu22.04`" in err

    _add_row(work)
    code, lines, err = _upgrade(cluster, work)
    assert (code, lines) == (2, [])
    assert (
        "PodDisruptionBudget gpu-drv/trainer-pdb blocks the drain of lab-node-1: minAvailable 4, 4 healthy "
        "(disruptionsAllowed 0)"
    ) in err
    assert "set minAvailable to 3" in err
    assert cluster.resource_versions() == before  # both refusals wrote nothing

    _min_available(cluster, 3)
    code, lines, err = _upgrade(cluster, work)
    assert code == 0, err
    assert lines == THE_STEPS
    # Each step again on stderr as progress: when (UTC) and how long it took.
    progress = re.findall(
        rf"^note: \d\d:\d\d:\d\dZ (lab-node-1 {re.escape(STATE)} [a-z-]+): done "
        r"(\d+\.\d) s after the step before, (\d+\.\d) s into lab-node-1$",
        err,
        re.MULTILINE,
    )
    assert [line for line, _, _ in progress] == [s for s in THE_STEPS if STATE in s]
    into = [float(total) for _, _, total in progress]
    assert into == sorted(into) and into[0] == 0.0
    node = cluster.node("lab-node-1")
    assert not node["spec"].get("unschedulable")
    assert node["metadata"]["labels"][STATE] == "upgrade-done"
    assert "reconcile.dev/upgrade-target" not in node["metadata"].get("annotations", {})
    # desired/ follows the cluster (--write-desired is the default): git and the cluster agree
    assert "nvidia.com/cuda.driver.major=550, nvidia.com/cuda.driver.minor=90" in err
    assert "commit it" in err
    replanned = run_cli("plan", cwd=work, kubeconfig=cluster.kubeconfig)
    assert not [line for line in replanned.lines if "cuda.driver" in line]  # nothing to revert

    audit = run_cli("drivers", "audit", cwd=work, kubeconfig=cluster.kubeconfig)
    assert (audit.code, audit.stdout) == (0, "OK\n")
    report = run_cli("report", cwd=work, kubeconfig=cluster.kubeconfig)
    assert "LAB_NODE_1_UPGRADE_STATE=upgrade-done" in report.lines
    assert "LAB_NODE_1_TAG=550-5.15.0-107-generic-ubuntu22.04" in report.lines


def test_dry_run_stops_after_the_preflight(cluster: TestCluster, work: Path) -> None:
    _add_row(work)
    _min_available(cluster, 3)
    before = cluster.resource_versions()

    code, lines, _ = _upgrade(cluster, work, "--dry-run")

    assert code == 0
    # Every line marked, as a pool's dry run marks its lines; nothing said to be done.
    assert lines[:3] == [f"{step} (dry run)" for step in THE_STEPS[:3]]
    assert all(line.endswith(" (dry run)") for line in lines)
    assert "Pod/gpu-drv/trainer-7d9c5b8f6d-m4w7z evict (dry run)" in lines
    assert not [line for line in lines if "evicted" in line]
    assert cluster.resource_versions() == before


def test_a_node_named_twice_is_upgraded_once(cluster: TestCluster, work: Path) -> None:
    _add_row(work)
    _min_available(cluster, 3)

    code, lines, err = _upgrade(cluster, work, "lab-node-1")

    assert code == 0, err
    assert lines == THE_STEPS  # one upgrade: each state once, the pod evicted once
    assert "note: lab-node-1 named more than once: upgraded once" in err


def test_write_desired_updates_the_file_in_place(cluster: TestCluster, work: Path) -> None:
    _add_row(work)
    _min_available(cluster, 3)
    path = work / "desired" / "nodes" / "lab-node-1.yaml"
    path.write_text(
        path.read_text().replace(
            '  nvidia.com/gpu.present: "true"\n',
            '  # set by GFD\n  nvidia.com/gpu.present: "true"\n',
        )
    )
    original = path.read_text()

    code, _, err = _upgrade(cluster, work, "--write-desired")

    assert code == 0, err
    expected = (
        original.replace('driver.major: "535"', 'driver.major: "550"')
        .replace('driver.minor: "183"', 'driver.minor: "90"')
        .replace('driver.rev: "06"', 'driver.rev: "07"')
    )
    assert path.read_text() == expected  # comments, order and quoting kept, bytes for bytes
    assert run_cli("plan", cwd=work, kubeconfig=cluster.kubeconfig).code == 0


def _raise_budget_after_preflight(cluster: TestCluster) -> None:
    """Raise the budget to minAvailable 4 inside the sandbox once preflight has listed the
    budgets: the drain then meets a refusal that preflight did not see."""
    assert cluster.sandbox is not None
    raised: list[bool] = []

    def raise_budget(record: RequestRecord) -> None:
        if record.resource == "poddisruptionbudgets" and record.verb == "list" and not raised:
            raised.append(True)
            _min_available(cluster, 4)

    cluster.sandbox.server.observers.append(raise_budget)


@pytest.mark.slow
def test_a_budget_that_blocks_after_preflight_times_out_leaving_the_node_cordoned(
    cluster: TestCluster, work: Path
) -> None:
    if cluster.sandbox is None:
        pytest.skip("raises the budget from inside the sandbox, between preflight and drain")
    _add_row(work)
    _min_available(cluster, 3)
    _raise_budget_after_preflight(cluster)
    started = time.monotonic()

    code, lines, err = _upgrade(cluster, work, "--timeout", "1s")

    assert code == 2
    assert time.monotonic() - started < 30
    assert lines[-1] == f"lab-node-1 {STATE} upgrade-failed"
    # the refusal is said while it is retried, once
    waiting = "note: waiting: evicting Pod/gpu-drv/trainer-7d9c5b8f6d-m4w7z: Cannot evict pod"
    assert err.count(waiting) == 1
    assert (
        "timed out after 1s evicting Pod/gpu-drv/trainer-7d9c5b8f6d-m4w7z: Cannot evict pod as it would violate "
        "the pod's disruption budget. (The disruption budget trainer-pdb needs 4 healthy pods and has 4 currently); "
        "PodDisruptionBudget gpu-drv/trainer-pdb: set minAvailable to 3 (kubectl patch pdb "
        """trainer-pdb -n gpu-drv --type=merge -p '{"spec":{"minAvailable":3}}'), or add healthy """
        "replicas first"
    ) in err
    node = cluster.node("lab-node-1")
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["labels"][STATE] == "upgrade-failed"
    assert node["metadata"]["labels"]["nvidia.com/cuda.driver.major"] == "535"

    _min_available(cluster, 3)
    code, lines, err = _upgrade(cluster, work)  # the journal: the drain is retried
    assert code == 0, err
    assert lines == THE_STEPS[3:]
    assert not cluster.node("lab-node-1")["spec"].get(
        "unschedulable"
    )  # cordoned by the failed try only


@pytest.mark.slow
def test_a_budget_desired_declares_that_blocks_the_drain_gets_advice_for_the_file(
    cluster: TestCluster, work: Path
) -> None:
    if cluster.sandbox is None:
        pytest.skip("raises the budget from inside the sandbox, between preflight and drain")
    _add_row(work)
    (work / "desired" / "workloads").mkdir()
    shutil.copy(REPO / "desired" / "workloads" / "gpu-drv.yaml", work / "desired" / "workloads")
    _min_available(cluster, 3)
    _raise_budget_after_preflight(cluster)

    code, _, err = _upgrade(cluster, work, "--timeout", "1s")

    assert code == 2
    [error] = [line for line in err.splitlines() if line.startswith("error:")]
    assert (
        "; PodDisruptionBudget gpu-drv/trainer-pdb: set spec.minAvailable to 3 at "
        "desired/workloads/gpu-drv.yaml:81:17 (desired/ declares this budget: a `kubectl "
        "patch` would be reverted by the next apply), commit and apply it; or add healthy "
        "replicas first; lab-node-1 is left cordoned in upgrade-failed"
    ) in error
    assert "kubectl patch pdb" not in err


def test_an_interrupted_upgrade_resumes_from_its_journal(cluster: TestCluster, work: Path) -> None:
    if cluster.sandbox is None:
        pytest.skip("interrupts the run while the sandbox refuses its evictions")
    _add_row(work)
    _min_available(cluster, 3)
    evictions: list[RequestRecord] = []

    def block(record: RequestRecord) -> None:
        if record.resource == "poddisruptionbudgets" and record.verb == "list":
            _min_available(cluster, 4)
        if record.subresource == "eviction":
            evictions.append(record)

    cluster.sandbox.server.observers.append(block)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reconcile",
            "upgrade",
            "lab-node-1",
            "--driver",
            "550.90.07",
            "--timeout",
            "60s",
        ],
        cwd=work,
        env={"KUBECONFIG": str(cluster.kubeconfig), "HOME": str(work), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not evictions and time.monotonic() < deadline:
        time.sleep(0.05)
    assert evictions, "the upgrade never reached the drain"
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)

    assert process.returncode == 130
    assert out.splitlines()[-1] == f"lab-node-1 {STATE} drain-required"
    assert "interrupted: lab-node-1 is at drain-required; rerun the same command to resume" in err
    assert cluster.labels("lab-node-1")[STATE] == "drain-required"

    cluster.sandbox.server.observers.clear()
    _min_available(cluster, 3)
    code, lines, err = _upgrade(cluster, work)
    assert code == 0, err
    assert "note: resuming the upgrade of lab-node-1 at drain-required (its journal)" in err
    assert lines == THE_STEPS[4:]  # no second upgrade-required, cordon: straight to the evictions


def test_a_node_cordoned_before_stays_cordoned(cluster: TestCluster, work: Path) -> None:
    _add_row(work)
    _min_available(cluster, 3)
    status, _ = cluster.raw(
        "PATCH",
        "/api/v1/nodes/lab-node-1",
        {"spec": {"unschedulable": True}},
        "application/merge-patch+json",
    )
    assert status == 200

    code, lines, err = _upgrade(cluster, work)

    assert code == 0, err
    assert "lab-node-1 spec.unschedulable true" not in lines
    assert "lab-node-1 spec.unschedulable false" not in lines
    assert "lab-node-1 stays cordoned: it was cordoned before the upgrade began" in err
    assert cluster.node("lab-node-1")["spec"]["unschedulable"] is True


def test_preflight_refusals(cluster: TestCluster, work: Path) -> None:
    _add_row(work)
    _min_available(cluster, 3)
    versions = cluster.resource_versions()

    cluster.label("lab-node-1", **{"nvidia.com/gpu-driver-upgrade.skip": "true"})
    assert "is labelled nvidia.com/gpu-driver-upgrade.skip=true" in _upgrade(cluster, work)[2]
    cluster.label("lab-node-1", **{"nvidia.com/gpu-driver-upgrade.skip": None})

    status, _ = cluster.raw(
        "PATCH",
        "/api/v1/nodes/lab-node-1",
        {
            "metadata": {
                "labels": {STATE: "drain-required"},
                "annotations": {"reconcile.dev/upgrade-target": "560.35.03"},
            }
        },
        "application/merge-patch+json",
    )
    assert status == 200
    code, _, err = _upgrade(cluster, work)
    assert code == 2
    assert (
        "lab-node-1 carries reconcile.dev/upgrade-target, a marker no journal of reconcile's "
        "accounts for: nothing resumes from it; `reconcile rollout abandon lab-node-1`"
    ) in err
    cluster.raw(
        "PATCH",
        "/api/v1/nodes/lab-node-1",
        {"metadata": {"annotations": {"reconcile.dev/upgrade-target": None}}},
        "application/merge-patch+json",
    )
    # The operator's own label, midway, with no journal: the operator's upgrade.
    code, _, err = _upgrade(cluster, work)
    assert code == 2
    assert (
        f"lab-node-1 is at {STATE}=drain-required with no journal of reconcile's: the GPU "
        "Operator's upgrade controller is upgrading it"
    ) in err
    cluster.label("lab-node-1", **{STATE: None})

    bare = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "debug", "namespace": "gpu-drv"},
        "spec": {"nodeName": "lab-node-1", "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running"},
    }
    cluster.create(bare)
    code, _, err = _upgrade(cluster, work)
    assert code == 2
    assert (
        "Pod/gpu-drv/debug has no controller to recreate it (use --force to evict it anyway)" in err
    )

    assert (
        "not MAJOR.MINOR.REV"
        in run_cli(
            "upgrade", "lab-node-1", "--driver", "550", cwd=work, kubeconfig=cluster.kubeconfig
        ).stderr
    )
    assert (
        "not a duration"
        in run_cli(
            "upgrade",
            "lab-node-1",
            "--driver",
            "550.90.07",
            "--timeout",
            "soon",
            cwd=work,
            kubeconfig=cluster.kubeconfig,
        ).stderr
    )
    missing = run_cli(
        "upgrade", "lab-node-9", "--driver", "550.90.07", cwd=work, kubeconfig=cluster.kubeconfig
    )
    assert (missing.code, missing.stderr) == (
        2,
        'error: nodes "lab-node-9" not found (404 NotFound)\n',
    )
    assert {k: v for k, v in cluster.resource_versions().items() if k != "lab-node-1"} == {
        k: v for k, v in versions.items() if k != "lab-node-1"
    }


def test_daemonset_pods_need_ignore_daemonsets(cluster: TestCluster, work: Path) -> None:
    _add_row(work)
    _min_available(cluster, 3)
    # A DaemonSet that runs on lab-node-1 alone, and its pod there: the pod first, so that
    # a real DaemonSet controller adopts it rather than making one of its own.
    labels = {"app": "nvidia-driver"}
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "nvidia-driver", "namespace": "gpu-drv"},
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "OnDelete"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": "lab-node-1"},
                    "containers": [{"name": "c", "image": "driver"}],
                },
            },
        },
    }
    daemon = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "gpu-driver-x",
            "namespace": "gpu-drv",
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": "nvidia-driver",
                    "uid": "d1",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": "lab-node-1",
            "containers": [{"name": "c", "image": "driver"}],
            # What the DaemonSet controller gives its pods: they stay on a cordoned node.
            "tolerations": [
                {
                    "key": "node.kubernetes.io/unschedulable",
                    "operator": "Exists",
                    "effect": "NoSchedule",
                }
            ],
        },
        "status": {"phase": "Running"},
    }
    cluster.create(daemon)
    cluster.create(daemonset)
    wait_for(
        lambda: (
            cluster.raw("GET", "/api/v1/namespaces/gpu-drv/pods/gpu-driver-x")[1]
            .get("metadata", {})
            .get("ownerReferences")
        ),
        what="the DaemonSet to own its pod",
    )

    code, _, err = _upgrade(cluster, work)
    assert code == 2
    assert "Pod/gpu-drv/gpu-driver-x is managed by a DaemonSet (use --ignore-daemonsets)" in err

    code, lines, err = _upgrade(cluster, work, "--ignore-daemonsets")
    assert code == 0, err
    assert "Pod/gpu-drv/gpu-driver-x evicted" not in lines
    assert cluster.raw("GET", "/api/v1/namespaces/gpu-drv/pods/gpu-driver-x")[0] == 200


def test_an_upgraded_node_is_not_upgraded_twice(cluster: TestCluster, work: Path) -> None:
    _add_row(work)
    _min_available(cluster, 3)
    assert _upgrade(cluster, work)[0] == 0
    versions = cluster.resource_versions()

    code, lines, err = _upgrade(cluster, work)

    assert (code, lines) == (0, [])
    assert "lab-node-1 is already on driver 550.90.07" in err
    assert cluster.resource_versions() == versions


def _ready(cluster: TestCluster, pod: dict[str, Any], ready: bool) -> None:
    path = f"/api/v1/namespaces/gpu-drv/pods/{pod['metadata']['name']}/status"
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    status, body = cluster.raw(
        "PATCH", path, {"status": {"conditions": conditions}}, "application/merge-patch+json"
    )
    assert status == 200, body


def test_a_budget_short_only_while_a_pod_starts_is_waited_for_not_refused(
    cluster: TestCluster, work: Path
) -> None:
    """minAvailable 3 of 4 allows one eviction once every pod is healthy: while one is not
    (a replacement starting), the upgrade waits in its drain, as kubectl drain does,
    instead of refusing in its preflight. On a real cluster a kubelet may make the pod
    Ready again before the upgrade looks: the run must then simply succeed."""
    _add_row(work)
    _min_available(cluster, 3)
    pods = cluster.raw("GET", "/api/v1/namespaces/gpu-drv/pods")[1]["items"]
    [starting, *_] = [
        p
        for p in pods
        if p["metadata"]["name"].startswith("trainer-")
        and p["spec"].get("nodeName") not in (None, "lab-node-1")
    ]
    _ready(cluster, starting, False)
    finished = threading.Event()
    waited: list[bool] = []

    def pod_starts() -> None:  # the pod becomes Ready once the drain waits for it
        try:
            if cluster.sandbox is not None:
                wait_for(
                    lambda: (
                        finished.is_set()
                        or cluster.node("lab-node-1")["metadata"]["labels"].get(STATE)
                        == "drain-required"
                    ),
                    what="the drain to start and wait for the budget",
                )
                waited.append(not finished.is_set())
        finally:
            _ready(cluster, starting, True)

    starter = threading.Thread(target=pod_starts)
    starter.start()
    try:  # in the main thread, in process: the upgrade installs its signal handlers
        done = run_cli(
            *("upgrade", "lab-node-1", "--driver", "550.90.07", "--timeout", "60s"),
            cwd=work,
            kubeconfig=cluster.kubeconfig,
        )
    finally:
        finished.set()
        starter.join(timeout=90)

    if cluster.sandbox is not None:
        assert waited == [True], done
    code, lines, err = done.code, done.lines, done.stderr
    assert code == 0, err
    assert lines == THE_STEPS
    assert "blocks the drain" not in err
