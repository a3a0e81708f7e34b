"""A pool rollout's waits for the disruption budgets, against a cluster faked at the
boundary (the rollout's own Protocol) and a clock that moves only when the rollout sleeps:
what is short only for now is waited for, what cannot pass at all is refused up front."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from reconcile.desired.models import DesiredState
from reconcile.desired.reader import load_desired
from reconcile.diagnostics import ApiError, TooManyRequests
from reconcile.gpu.journal import Step
from reconcile.gpu.rollout import (
    Batch,
    DriverWork,
    Rollout,
    RolloutDocument,
    RolloutOutcome,
    RolloutPlan,
    RolloutRequest,
    RolloutResult,
    StateEvent,
)
from reconcile.gpu.upgrade import (
    NodeOps,
    PodToEvict,
    UpgradeRefused,
    budget_blockers,
    budget_waits,
    poll_intervals,
)
from reconcile.kube.objects import LiveNode
from tests.fake import PODS, FakeCluster

STATE = "nvidia.com/gpu-driver-upgrade-state"
MATRIX = """\
apiVersion: reconcile.dev/v1alpha1
kind: DriverSupportMatrix
metadata: {name: images}
rows:
- {branch: "550", kernel: 5.15.0-107-generic, osTag: ubuntu22.04}
"""
NODES = ("n0", "n1", "n2")


def _budget(spec: dict[str, Any], **status: int) -> dict[str, Any]:
    return {
        "metadata": {"name": "pdb", "namespace": "ns"},
        "spec": {"selector": {"matchLabels": {"app": "a"}}, **spec},
        "status": {"observedGeneration": 1, **status},
    }


def _evictions(count: int) -> list[PodToEvict]:
    return [PodToEvict("ns", f"p{i}", f"u{i}", {"app": "a"}, ready=True) for i in range(count)]


# --- what a budget allows now, and at best ------------------------------------------------


def test_a_budget_spent_only_until_a_pod_starts_is_waited_for_not_refused() -> None:
    # maxUnavailable 1 of 4: the last eviction's replacement is not Ready yet
    spent = _budget(
        {"maxUnavailable": 1},
        currentHealthy=3,
        desiredHealthy=3,
        expectedPods=4,
        disruptionsAllowed=0,
    )
    assert budget_blockers(_evictions(1), {"ns": [spent]}, "batch 2 (n1)", at_best=True) == []
    assert budget_waits(_evictions(1), {"ns": [spent]}, "batch 2 (n1)") == [
        "PodDisruptionBudget ns/pdb allows no disruption yet (3 healthy, 4 desired)"
    ]
    # without at_best (one node's upgrade): refused on what the budget allows now
    [refused] = budget_blockers(_evictions(1), {"ns": [spent]}, "n1")
    assert "(disruptionsAllowed 0)" in refused


def test_a_budget_that_cannot_allow_the_batch_at_all_is_refused_with_what_passes() -> None:
    # minAvailable equal to the replicas: no eviction ever passes
    full = _budget(
        {"minAvailable": 4},
        currentHealthy=3,
        desiredHealthy=4,
        expectedPods=4,
        disruptionsAllowed=0,
    )
    [problem] = budget_blockers(_evictions(1), {"ns": [full]}, "batch 1 (n0)", at_best=True)
    assert problem.startswith("PodDisruptionBudget ns/pdb blocks the drain of batch 1 (n0):")
    assert "set minAvailable to 3" in problem
    # two at once where one at best passes: the advice counts from what it allows at best
    room = _budget(
        {"maxUnavailable": 1},
        currentHealthy=3,
        desiredHealthy=3,
        expectedPods=4,
        disruptionsAllowed=0,
    )
    [problem] = budget_blockers(_evictions(2), {"ns": [room]}, "batch 1 (n0, n1)", at_best=True)
    assert "(disruptionsAllowed 0, 1 with all 4 pods healthy)" in problem
    assert "set maxUnavailable to 2" in problem


def test_a_budget_with_too_little_room_now_says_what_the_batch_needs() -> None:
    budget = _budget(
        {"maxUnavailable": 2},
        currentHealthy=5,
        desiredHealthy=4,
        expectedPods=6,
        disruptionsAllowed=1,
    )
    assert budget_waits(_evictions(2), {"ns": [budget]}, "batch 1 (n0, n1)") == [
        "PodDisruptionBudget ns/pdb allows 1 disruption(s) yet, batch 1 (n0, n1) needs 2 "
        "(5 healthy, 6 desired)"
    ]
    assert budget_waits(_evictions(1), {"ns": [budget]}, "batch 1 (n0)") == []


# --- a rollout against a fake cluster -----------------------------------------------------


class _Clock:
    """Time that passes only when the rollout sleeps; `at` runs a change at a given time."""

    def __init__(self) -> None:
        self.now = 0.0
        self.pending: list[tuple[float, Callable[[], None]]] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.01)
        for when, change in list(self.pending):
            if when <= self.now:
                self.pending.remove((when, change))
                change()

    def at(self, when: float, change: Callable[[], None]) -> None:
        self.pending.append((when, change))


class _Cluster(FakeCluster):
    """One trainer per node, owned by a ReplicaSet of as many replicas, and a budget of
    maxUnavailable 1 whose status the disruption controller keeps up with the pods; an
    evicted pod is gone at once and its replacement is the test's to make. Every write is
    recorded in `timed` with the clock's time."""

    def __init__(self, clock: _Clock) -> None:
        super().__init__(namespaces=("ns",))
        self.clock = clock
        for index, name in enumerate(NODES):
            self.add_node(
                name,
                {
                    "nvidia.com/gpu.present": "true",
                    "feature.node.kubernetes.io/kernel-version.full": "5.15.0-107-generic",
                    "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
                    "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
                    "nvidia.com/cuda.driver.major": "535",
                    "nvidia.com/cuda.driver.minor": "183",
                    "nvidia.com/cuda.driver.rev": "06",
                    "pool": "p",
                },
            )
            self.add_trainer(f"t{index}", name, ready=True)
        self.budget = _budget({"maxUnavailable": 1})
        self.timed: list[tuple[float, str, dict[str, Any]]] = []

    def add_trainer(self, name: str, node: str, *, ready: bool) -> None:
        self.add_pod("ns", name, node, labels={"app": "a"}, owner="t")
        self.ready(name, ready)

    def ready(self, name: str, ready: bool = True) -> None:
        pod = self.objects[self._key(PODS, "ns", name)]
        pod["status"]["conditions"][0]["status"] = str(ready)

    # the disruption controller's arithmetic for maxUnavailable 1 of len(NODES) replicas
    def _status(self) -> dict[str, int]:
        healthy = sum(
            1
            for p in self.list_objects(PODS, "ns")
            if p["status"]["conditions"][0]["status"] == "True"
        )
        desired = len(NODES) - 1
        return {
            "observedGeneration": 1,
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": len(NODES),
            "disruptionsAllowed": max(0, healthy - desired),
        }

    def patch_node(self, name: str, patch: dict[str, Any], *, dry_run: bool = False) -> LiveNode:
        if not dry_run:
            self.timed.append((self.clock.now, name, patch))
        return super().patch_node(name, patch, dry_run=dry_run)

    def budgets(self, namespace: str) -> list[dict[str, Any]]:
        return [{**self.budget, "status": self._status()}]

    def evict(self, namespace: str, name: str) -> None:
        if self.get_pod(namespace, name) is not None and self._status()["disruptionsAllowed"] < 1:
            raise TooManyRequests(429, "TooManyRequests", "Cannot evict pod")
        super().evict(namespace, name)
        self.timed.append((self.clock.now, name, {"evicted": True}))


@pytest.fixture
def desired(tmp_path: Path) -> DesiredState:
    (tmp_path / "drivers").mkdir()
    (tmp_path / "drivers" / "images.yaml").write_text(MATRIX)
    state, problems = load_desired(tmp_path)
    assert not problems
    return state


def _rollout(
    cluster: _Cluster, clock: _Clock, desired: DesiredState, notes: list[str], **options: Any
) -> Rollout:
    timeout = options.pop("timeout", 300.0)
    request = RolloutRequest(selector="pool=p", max_unavailable="1", **options)
    steps: list[Step] = []
    ops = NodeOps(
        cluster, steps.append, notes.append, timeout=timeout, sleep=clock.sleep, clock=clock
    )
    return Rollout(request, DriverWork("550.90.07", desired, ops), ops)


def _replace_after_uncordon(cluster: _Cluster, clock: _Clock, starting: float) -> None:
    """As the ReplicaSet controller, scheduler and kubelet do under anti-affinity: a node's
    replacement trainer is placed when the node is uncordoned, Ready `starting` s later."""
    patch_node = cluster.patch_node

    def patched(name: str, patch: dict[str, Any], *, dry_run: bool = False) -> LiveNode:
        live = patch_node(name, patch, dry_run=dry_run)
        if not dry_run and (patch.get("spec") or {}).get("unschedulable", True) is None:
            pod = f"r-{name}"
            cluster.add_trainer(pod, name, ready=False)
            clock.at(clock.now + starting, lambda: cluster.ready(pod))
        return live

    cluster.patch_node = patched  # type: ignore[method-assign]


def test_each_batch_waits_for_the_replacement_of_the_last_and_says_why(
    desired: DesiredState,
) -> None:
    clock = _Clock()
    cluster = _Cluster(clock)
    _replace_after_uncordon(cluster, clock, starting=7.0)
    notes: list[str] = []
    job = _rollout(cluster, clock, desired, notes, timeout=60.0)
    result = job.run(job.preflight())
    assert (result.done, result.failed, result.not_started) == (NODES, (), ())
    waits = [n for n in notes if n.startswith("waiting:")]
    assert waits == [
        "waiting: PodDisruptionBudget ns/pdb allows no disruption yet (2 healthy, 3 desired); "
        f"batch {i} (n{i - 1}) starts when it allows the drain (up to 60s)"
        for i in (2, 3)
    ]
    # no node is cordoned before its budget allows the drain: the previous replacement
    # became Ready 7 s after the uncordon
    uncordons = [t for t, _, p in cluster.timed if p.get("spec") == {"unschedulable": None}]
    cordons = [t for t, _, p in cluster.timed if p.get("spec") == {"unschedulable": True}]
    assert [c - u for u, c in zip(uncordons, cordons[1:], strict=False)] == [
        pytest.approx(7.0, abs=1.01)
    ] * 2


def test_when_the_budget_does_not_recover_in_time_the_batch_fails_uncordoned(
    desired: DesiredState,
) -> None:
    clock = _Clock()
    cluster = _Cluster(clock)  # nothing replaces the evicted trainer: the budget stays spent
    notes: list[str] = []
    job = _rollout(cluster, clock, desired, notes, timeout=10.0)
    result = job.run(job.preflight())
    assert result.done == ("n0",)
    [(node, reason)] = result.failed
    assert node == "n1"
    assert reason == (
        "timed out after 10s waiting for the budgets to allow the drain of batch 2 (n1): "
        "PodDisruptionBudget ns/pdb allows no disruption yet (2 healthy, 3 desired); n1 is "
        "labelled upgrade-failed, neither cordoned nor drained by this run: let the budget "
        "recover (or change it), then rerun"
    )
    assert result.not_started == ("n2",)
    assert cluster.get_node("n1").labels[STATE] == "upgrade-failed"
    assert not cluster.get_node("n1").unschedulable
    assert [p for _, n, p in cluster.timed if n == "n1"] == [
        {"metadata": {"labels": {STATE: "upgrade-failed"}}}
    ]
    assert "n2" not in {n for _, n, _ in cluster.timed}
    assert 10.0 <= clock.now < 12.0  # the wait was bounded by --timeout


def test_a_budget_short_at_the_start_is_waited_for_and_one_that_never_allows_is_refused(
    desired: DesiredState,
) -> None:
    clock = _Clock()
    cluster = _Cluster(clock)
    cluster.ready("t2", False)  # starting
    clock.at(3.0, lambda: cluster.ready("t2"))
    _replace_after_uncordon(cluster, clock, starting=1.0)
    notes: list[str] = []
    job = _rollout(cluster, clock, desired, notes, timeout=60.0)
    plan = job.preflight()  # not refused: the budget allows one eviction once t2 is Ready
    assert cluster.timed == []
    result = job.run(plan)
    assert result.done == NODES
    assert notes[-3].startswith("waiting: PodDisruptionBudget ns/pdb allows no disruption yet")
    assert "batch 1 (n0)" in notes[-3]

    clock, notes = _Clock(), []
    cluster = _Cluster(clock)
    cluster.budget = _budget({"maxUnavailable": 0})  # no eviction, ever
    original = cluster._status
    cluster._status = lambda: {  # type: ignore[method-assign]
        **original(),
        "desiredHealthy": len(NODES),
        "disruptionsAllowed": 0,
    }
    with pytest.raises(UpgradeRefused) as refused:
        _rollout(cluster, clock, desired, notes, timeout=60.0).preflight()
    assert "PodDisruptionBudget ns/pdb blocks the drain of batch 1 (n0)" in str(refused.value)
    assert "set maxUnavailable to 1" in str(refused.value)
    assert cluster.timed == [] and clock.now == 0.0  # refused at once, nothing written


def test_a_stopped_rollout_stops_waiting_and_starts_no_other_node(desired: DesiredState) -> None:
    clock = _Clock()
    cluster = _Cluster(clock)
    notes: list[str] = []
    job = _rollout(cluster, clock, desired, notes, timeout=600.0)
    clock.at(30.0, job.stop)  # Ctrl-C while batch 2 waits for its budget
    result = job.run(job.preflight())
    assert (result.done, result.failed, result.not_started) == (("n0",), (), ("n1", "n2"))
    assert 30.0 <= clock.now < 32.0
    assert {n for _, n, _ in cluster.timed} == {"n0", "t0"}


def test_an_api_error_while_waiting_fails_the_batch_and_the_rollout_still_reports(
    desired: DesiredState,
) -> None:
    clock = _Clock()
    cluster = _Cluster(clock)
    budgets = cluster.budgets

    def failing(namespace: str) -> list[dict[str, Any]]:
        if clock.now >= 5.0:
            raise ApiError(503, "ServiceUnavailable", "the server is currently unavailable")
        return budgets(namespace)

    cluster.budgets = failing  # type: ignore[method-assign]
    job = _rollout(cluster, clock, desired, [], timeout=60.0)
    result = job.run(job.preflight())
    assert result.done == ("n0",)
    [(node, reason)] = result.failed
    assert node == "n1" and reason.endswith("; nothing was done to n1")
    assert "the server is currently unavailable" in reason
    assert result.not_started == ("n2",)
    assert "n1" not in {n for _, n, _ in cluster.timed}


# --- the Rollout document -------------------------------------------------------------------

PLAN = RolloutPlan(
    batches=(Batch(1, ("n2",), canary=True), Batch(2, ("n0", "n1"))),
    done=("n3",),
    limit=2,
)


def test_a_dry_runs_document_is_the_plan_with_its_keys_in_order() -> None:
    document = RolloutDocument.of(PLAN, dry_run=True, driver="550.90.07")
    assert json.dumps(document.model_dump(mode="json"), indent=2) == json.dumps(
        {
            "apiVersion": "reconcile.dev/v1alpha1",
            "kind": "Rollout",
            "driver": "550.90.07",
            "dryRun": True,
            "maxUnavailable": 2,
            "batches": [
                {"nodes": ["n2"], "canary": True, "gpusFree": {}, "noRoom": []},
                {"nodes": ["n0", "n1"], "canary": False, "gpusFree": {}, "noRoom": []},
            ],
            "alreadyDone": ["n3"],
        },
        indent=2,
    )


def test_the_outcome_adds_what_happened_after_the_plan_and_names_the_failure() -> None:
    planned = RolloutDocument.of(PLAN, dry_run=False, driver="550.90.07")
    event = StateEvent(time="2026-12-03T15:00:00Z", node="n2", state="upgrade-required")
    outcome = RolloutOutcome.after(
        planned,
        RolloutResult(
            done=("n2",), failed=(("n0", "drain: refused"),), not_started=("n1",), skipped=("n3",)
        ),
        [event],
    )
    dumped = outcome.model_dump(mode="json")
    assert list(dumped) == [
        "apiVersion",
        "kind",
        "driver",
        "dryRun",
        "maxUnavailable",
        "batches",
        "alreadyDone",
        "done",
        "failed",
        "notStarted",
        "events",
    ]
    assert dumped["failed"] == [{"node": "n0", "error": "drain: refused"}]
    assert dumped["events"] == [
        {"time": "2026-12-03T15:00:00Z", "node": "n2", "state": "upgrade-required"}
    ]
    assert not outcome.ok
    assert outcome.summary == "n0 failed: drain: refused; done: n2; not started: n1"


def test_an_outcome_with_nothing_failed_or_left_is_ok_and_says_none() -> None:
    planned = RolloutDocument.of(PLAN, dry_run=False, driver="550.90.07")
    outcome = RolloutOutcome.after(planned, RolloutResult((), (), (), ()), [])
    assert outcome.ok
    assert outcome.summary == "done: none; not started: none"
    with pytest.raises(ValidationError):
        outcome.done = ("n0",)  # type: ignore[misc]


def test_a_wait_reads_soon_then_no_more_often_than_its_longest_pause() -> None:
    pauses = poll_intervals(1.0)
    assert [next(pauses) for _ in range(7)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    shorter = poll_intervals(0.05)  # a longest pause below the first is kept to
    assert [next(shorter) for _ in range(3)] == [0.05, 0.05, 0.05]
