"""What `rollout` and `upgrade` resume from: only a journal reconcile wrote
(`reconcile.dev/rollout`, gpu/journal.py), bound to a Lease (gpu/lock.py), checked against
the node before each phase. Markers it did not write, journals of another rollout, and
journals the node contradicts stop the run with exit 2 and the cluster as it was;
`rollout status` shows them, `rollout abandon` clears them leaving cordons alone. Run on
the sandbox and, with RECONCILE_TEST_KUBECONFIG, on a real control plane."""

from __future__ import annotations

import datetime
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reconcile.gpu import journal
from reconcile.gpu.lock import LABEL, NAMESPACE, NODES, PREFIX
from tests.e2e import test_fact_rollout, test_upgrade
from tests.e2e.test_fact_rollout import STATE, _patch, _phase, _replace_on_the_sandbox, _rollout
from tests.e2e.test_prune_guards import snapshot
from tests.support import REPO, TestCluster, run_cli, wait_for

pytestmark = pytest.mark.usefixtures("prompt_polls")

LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
TARGET = {"nvidia.com/mig.config": "all-1g.5gb"}
HOLD = "mig-manager.stand-in/hold"
# The MIG pool of test_fact_rollout and its desired/ (fixtures).
pool = test_fact_rollout.pool
work = test_fact_rollout.work


def _annotate(cluster: TestCluster, node: str, annotations: dict[str, str | None]) -> None:
    _patch(cluster, f"/api/v1/nodes/{node}", {"metadata": {"annotations": annotations}})


def _cordon(cluster: TestCluster, node: str, cordoned: bool) -> None:
    _patch(cluster, f"/api/v1/nodes/{node}", {"spec": {"unschedulable": cordoned or None}})


def _forged(phase: str, rollout: str = "f0f0f0f0f0f0", **fields: Any) -> str:
    return journal.Journal(
        rollout=rollout,
        lease=f"{NAMESPACE}/{PREFIX}{rollout}",
        work="facts",
        target=dict(TARGET),
        phase=phase,
        **fields,
    ).dump()


def _stamp(seconds_ago: float) -> str:
    when = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds_ago)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _lease(cluster: TestCluster, rollout: str, nodes: str, *, renewed_ago: float) -> None:
    """Another run's Lease over `nodes`, renewed `renewed_ago` seconds ago (30 s long)."""
    body = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": PREFIX + rollout,
            "namespace": NAMESPACE,
            "labels": {LABEL: rollout},
            "annotations": {NODES: nodes},
        },
        "spec": {
            "holderIdentity": "alice@ci-runner-7 pid 4242",
            "leaseDurationSeconds": 30,
            "acquireTime": _stamp(renewed_ago + 60),
            "renewTime": _stamp(renewed_ago),
            "leaseTransitions": 0,
        },
    }
    status, answer = cluster.raw("POST", LEASES, body)
    assert status == 201, answer


def _error(stderr: str) -> str:
    [error] = [line for line in stderr.splitlines() if line.startswith("error:")]
    return error


def _our_leases(cluster: TestCluster) -> list[dict[str, Any]]:
    found = cluster.raw("GET", f"{LEASES}?labelSelector={LABEL}")[1]["items"]
    return list(found)


def test_a_bare_phase_marker_is_foreign_nothing_resumes_from_it_and_abandon_clears_it(
    pool: TestCluster, work: Path
) -> None:
    # The repro: a bare marker at write-required on an uncordoned node with a GPU pod.
    _annotate(pool, "gpu-0", {"reconcile.dev/rollout-phase": "write-required"})
    before = snapshot(pool)

    refused = _rollout(pool, work)

    assert refused.code == 2
    error = _error(refused.stderr)
    assert "gpu-0 carries reconcile.dev/rollout-phase" in error
    assert "`reconcile rollout abandon gpu-0` clears it (cordons stay as they are)" in error
    assert snapshot(pool) == before
    assert _our_leases(pool) == []

    status = run_cli("rollout", "status", cwd=work, kubeconfig=pool.kubeconfig)
    assert status.code == 1
    [line] = [line for line in status.lines if line.startswith("gpu-0 ")]
    assert line.startswith("gpu-0 foreign ")

    abandoned = run_cli("rollout", "abandon", "gpu-0", cwd=work, kubeconfig=pool.kubeconfig)
    assert abandoned.code == 0, abandoned.stderr
    assert abandoned.lines == [
        "gpu-0 reconcile.dev/rollout abandoned (left uncordoned, was at write-required)"
    ]
    node = pool.node("gpu-0")
    assert "reconcile.dev/rollout-phase" not in (node["metadata"].get("annotations") or {})
    assert node["metadata"]["labels"] == before_labels(before, "gpu-0")
    dry = _rollout(pool, work, "--dry-run")
    assert dry.code == 0, dry.stderr


def before_labels(snap: dict[str, str], node: str) -> dict[str, str]:
    labels, _annotations, _spec, _data = json.loads(snap[f"/api/v1/nodes /{node}"])
    return dict(labels)


def test_a_forged_journal_at_uncordon_on_an_admin_cordoned_node_is_refused(
    pool: TestCluster, work: Path
) -> None:
    _cordon(pool, "gpu-0", True)
    _annotate(pool, "gpu-0", {journal.JOURNAL: _forged("uncordon-required", cordoned=True)})
    before = snapshot(pool)

    refused = _rollout(pool, work)

    assert refused.code == 2
    error = _error(refused.stderr)
    assert f"names Lease {NAMESPACE}/{PREFIX}f0f0f0f0f0f0, which is gone" in error
    assert "the journal is stale or foreign" in error
    assert snapshot(pool) == before  # still cordoned, layout unchanged
    assert pool.node("gpu-0")["spec"]["unschedulable"] is True

    status = run_cli("rollout", "status", cwd=work, kubeconfig=pool.kubeconfig)
    [line] = [line for line in status.lines if line.startswith("gpu-0 ")]
    assert line.startswith("gpu-0 foreign ")
    assert "stale or foreign" in line

    abandoned = run_cli(
        "rollout",
        "abandon",
        "-l",
        "example.com/pool=a100-mig",
        cwd=work,
        kubeconfig=pool.kubeconfig,
    )
    assert abandoned.code == 0, abandoned.stderr
    assert abandoned.lines == [
        "gpu-0 reconcile.dev/rollout abandoned (left cordoned, was at uncordon-required)"
    ]
    assert pool.node("gpu-0")["spec"]["unschedulable"] is True  # the cordon stays


def test_a_journal_of_another_target_is_not_resumed(pool: TestCluster, work: Path) -> None:
    _cordon(pool, "gpu-0", True)
    other = journal.Journal(
        rollout="abcabcabcabc",
        lease=f"{NAMESPACE}/{PREFIX}abcabcabcabc",
        work="facts",
        target={"nvidia.com/mig.config": "all-3g.20gb"},
        phase="write-required",
        cordoned=True,
    )
    _lease(pool, "abcabcabcabc", "gpu-0", renewed_ago=120)  # its holder is gone
    _annotate(pool, "gpu-0", {journal.JOURNAL: other.dump()})
    before = snapshot(pool)

    refused = _rollout(pool, work)

    assert refused.code == 2
    error = _error(refused.stderr)
    assert "gpu-0 is at write-required of a rollout to nvidia.com/mig.config=all-3g.20gb" in error
    assert "not nvidia.com/mig.config=all-1g.5gb" in error
    assert snapshot(pool) == before


def test_a_live_rollout_holds_its_nodes_against_a_second_one_and_against_abandon(
    pool: TestCluster, work: Path
) -> None:
    _lease(pool, "a1a1a1a1a1a1", "gpu-0,gpu-1", renewed_ago=1)
    _cordon(pool, "gpu-0", True)
    _annotate(
        pool, "gpu-0", {journal.JOURNAL: _forged("drain-required", "a1a1a1a1a1a1", cordoned=True)}
    )
    before = snapshot(pool)

    refused = _rollout(pool, work)

    assert refused.code == 2
    error = _error(refused.stderr)
    assert "is in another rollout: rollout a1a1a1a1a1a1 held by alice@ci-runner-7 pid 4242" in error
    assert snapshot(pool) == before
    assert [lease["metadata"]["name"] for lease in _our_leases(pool)] == [PREFIX + "a1a1a1a1a1a1"]

    status = run_cli("rollout", "status", cwd=work, kubeconfig=pool.kubeconfig)
    [line] = [line for line in status.lines if line.startswith("gpu-0 ")]
    assert line == "gpu-0 drain-required - OK"  # the other rollout's, under way

    kept = run_cli("rollout", "abandon", "gpu-0", cwd=work, kubeconfig=pool.kubeconfig)
    assert kept.code == 2
    assert "gpu-0 is in a running rollout" in _error(kept.stderr)
    assert "nothing was abandoned" in kept.stderr
    assert snapshot(pool) == before


def test_a_journal_the_node_contradicts_stops_the_run(pool: TestCluster, work: Path) -> None:
    """A run that failed at its wait leaves gpu-0 cordoned and its journal; then a person
    uncordons gpu-0. The rerun does not write past the journal onto an uncordoned node."""
    _annotate(pool, "gpu-0", {"mig-manager.stand-in/fail": "true"})
    failed = _rollout(pool, work, "-l", "kubernetes.io/hostname=gpu-0")
    assert failed.code == 2, failed.stderr
    assert _phase(pool.node("gpu-0")) == "wait-required"
    _annotate(pool, "gpu-0", {"mig-manager.stand-in/fail": None})
    _cordon(pool, "gpu-0", False)
    # On a real cluster the scheduler may place the evicted trainer's replacement meanwhile:
    # what the rerun must leave alone is the nodes.
    before = _nodes(pool)

    refused = _rollout(pool, work, "-l", "kubernetes.io/hostname=gpu-0")

    assert refused.code == 2
    error = _error(refused.stderr)
    assert "gpu-0: its journal says wait-required, but it is not cordoned" in error
    assert "nothing more was done to gpu-0" in error
    assert _nodes(pool) == before


def _nodes(cluster: TestCluster) -> dict[str, str]:
    return {k: v for k, v in snapshot(cluster).items() if k.startswith("/api/v1/nodes ")}


def test_sigkill_then_a_rerun_waits_for_the_lease_and_takes_the_pool_over(
    pool: TestCluster, work: Path
) -> None:
    """A holder killed mid-rollout: while its Lease is alive a rerun is refused naming
    it; once it expires the rerun takes gpu-0 over at its journal and finishes."""
    _cordon(pool, "spare-1", False)
    _annotate(pool, "gpu-0", {HOLD: "true"})
    selector = ["-l", "kubernetes.io/hostname=gpu-0"]
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reconcile",
            "rollout",
            *selector,
            "--lease-duration",
            "3s",
            "--state-timeout",
            "60s",
        ],
        cwd=work,
        env={"KUBECONFIG": str(pool.kubeconfig), "HOME": str(work), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: _phase(pool.node("gpu-0")) == "wait-required", what="gpu-0 waiting")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    [held] = _our_leases(pool)
    assert held["spec"]["holderIdentity"]

    refused = _rollout(pool, work, *selector)
    if refused.code == 2:  # the dead holder's Lease had not expired yet
        assert "is in another rollout" in _error(refused.stderr)
    assert _phase(pool.node("gpu-0")) == "wait-required"

    _annotate(pool, "gpu-0", {HOLD: None})
    _replace_on_the_sandbox(pool)

    runs: list[Any] = []

    def resumed() -> bool:
        runs.append(_rollout(pool, work, *selector))
        return bool(runs[-1].code == 0)

    wait_for(resumed, what="the rerun once the Lease expired", timeout=30)
    done = runs[-1]
    assert all("is in another rollout" in _error(run.stderr) for run in runs[:-1])
    gpu0 = [line for line in done.lines if line.startswith("gpu-0 ")]
    assert gpu0 == ["gpu-0 validation-required", "gpu-0 uncordon-required", "gpu-0 rollout-done"]
    node = pool.node("gpu-0")
    assert node["metadata"]["labels"][STATE] == "success"
    assert not node["spec"].get("unschedulable")
    assert journal.JOURNAL not in (node["metadata"].get("annotations") or {})
    assert _our_leases(pool) == []  # the dead holder's Lease and the rerun's are gone


# --- upgrade: the GPU Operator's label is its state, never reconcile's phase -----------------

UPGRADE_STATE = test_upgrade.STATE
lab = test_upgrade.cluster  # the driver lab (a fixture)


@pytest.fixture
def drivers(tmp_path: Path) -> Path:
    target = tmp_path / "drv"
    shutil.copytree(REPO / "examples" / "driver-lab", target)
    return target


@pytest.mark.parametrize("state", ["pod-restart-required", "uncordon-required"])
def test_upgrade_does_not_resume_from_the_operators_upgrade_state(
    lab: TestCluster, drivers: Path, state: str
) -> None:
    _patch(lab, "/api/v1/nodes/lab-node-1", {"metadata": {"labels": {UPGRADE_STATE: state}}})
    if state == "uncordon-required":
        _cordon(lab, "lab-node-1", True)
    before = snapshot(lab)

    refused = run_cli(
        "upgrade", "lab-node-1", "--driver", "550.90.07", cwd=drivers, kubeconfig=lab.kubeconfig
    )

    assert refused.code == 2
    error = _error(refused.stderr)
    assert f"lab-node-1 is at {UPGRADE_STATE}={state} with no journal of reconcile's" in error
    assert "nothing was changed" in error
    assert snapshot(lab) == before


def test_upgrade_is_refused_on_a_node_another_rollout_holds(
    lab: TestCluster, drivers: Path
) -> None:
    _patch(
        lab,
        "/apis/policy/v1/namespaces/gpu-drv/poddisruptionbudgets/trainer-pdb",
        {"spec": {"minAvailable": 3}},
    )
    _lease(lab, "b2b2b2b2b2b2", "lab-node-1", renewed_ago=1)
    before = snapshot(lab)

    refused = run_cli(
        "upgrade", "lab-node-1", "--driver", "550.90.07", cwd=drivers, kubeconfig=lab.kubeconfig
    )

    assert refused.code == 2
    error = _error(refused.stderr)
    assert (
        "lab-node-1 is in another rollout: rollout b2b2b2b2b2b2 held by alice@ci-runner-7" in error
    )
    assert "nothing was changed" in error
    assert snapshot(lab) == before
