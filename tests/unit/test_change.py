"""Disruptive facts rolled out node by node (gpu/change.py) on the in-memory cluster: the
phases in order, the GPU pods drained and the others left, the facts written with the
operator's stale report removed, the state waited for, the allocatable verified, a
failure left where a rerun resumes, and what `rollout status` says."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reconcile.desired.models import DesiredState
from reconcile.desired.reader import load_desired
from reconcile.engine.operations import PlanRequest
from reconcile.gpu import change, gates, journal, operations
from reconcile.gpu import checks as gpu
from reconcile.gpu.journal import Binding, Journal, LeaseView, Step
from reconcile.gpu.mig import MigTable
from reconcile.gpu.rollout import Batch, Rollout, RolloutRequest
from reconcile.gpu.upgrade import NodeOps, UpgradeFailed, UpgradeRefused
from reconcile.kube.objects import LiveNode
from tests.fake import BUDGETS, PODS, FakeCluster
from tests.support import A100_MIG_LABELS

STATE = "nvidia.com/mig.config.state"
NODE = """\
apiVersion: reconcile.dev/v1alpha1
kind: NodeFeatures
metadata: {{name: {name}}}
labels:
  nvidia.com/mig.config: {layout}
"""


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.due: list[tuple[float, Callable[[], None]]] = []

    def __call__(self) -> float:
        return self.now

    def at(self, when: float, action: Callable[[], None]) -> None:
        self.due.append((when, action))

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.01)
        for entry in sorted(self.due, key=lambda e: e[0]):
            if entry[0] <= self.now:
                self.due.remove(entry)
                entry[1]()


class _MigManager:
    """mig-manager and the device plugin, as far as a test needs: a new layout is
    answered `after` seconds later with `result` and the allocatable the layout gives."""

    def __init__(self, cluster: FakeCluster, clock: _Clock, *, result: str = "success") -> None:
        self.cluster, self.clock, self.result = cluster, clock, result
        patch_node = cluster.patch_node

        def patched(name: str, patch: dict[str, Any], *, dry_run: bool = False) -> LiveNode:
            live = patch_node(name, patch, dry_run=dry_run)
            layout = ((patch.get("metadata") or {}).get("labels") or {}).get(
                "nvidia.com/mig.config"
            )
            if layout is not None and not dry_run:
                clock.at(clock.now + 3, lambda: self.answer(name))
            return live

        cluster.patch_node = patched  # type: ignore[method-assign]

    def answer(self, name: str) -> None:
        node = self.cluster.nodes[name]
        node["metadata"]["labels"][STATE] = self.result
        if self.result == "success":
            projected = MigTable.default().projected(
                node["metadata"]["labels"], node["status"]["allocatable"]
            )
            assert not isinstance(projected, str)
            node["status"]["allocatable"] = dict(projected.allocatable)  # type: ignore[union-attr]
        node["metadata"]["resourceVersion"] = self.cluster._next_version()


def _desired(tmp_path: Path, layouts: dict[str, str]) -> DesiredState:
    (tmp_path / "nodes").mkdir(exist_ok=True)
    for name, layout in layouts.items():
        (tmp_path / "nodes" / f"{name}.yaml").write_text(NODE.format(name=name, layout=layout))
    state, problems = load_desired(tmp_path)
    assert not problems
    return state


def _cluster(*names: str, cordoned: tuple[str, ...] = ()) -> FakeCluster:
    cluster = FakeCluster(namespaces=("default", "train"))
    for name in names:
        cluster.add_node(name, dict(A100_MIG_LABELS), unschedulable=name in cordoned)
        cluster.nodes[name]["status"]["allocatable"] = {"cpu": "32", "nvidia.com/gpu": "4"}
    return cluster


def _gpu_pod(cluster: FakeCluster, name: str, node: str, *, owner: str | None = "rs") -> None:
    pod = cluster.add_pod("train", name, node, labels={"app": "trainer"}, owner=owner)
    stored = cluster.objects[cluster._key(PODS, "train", name)]
    stored["spec"]["containers"] = [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    assert pod


class _Run:
    def __init__(self, tmp_path: Path, cluster: FakeCluster, layouts: dict[str, str]) -> None:
        self.clock = _Clock()
        self.cluster = cluster
        self.state = _desired(tmp_path, layouts)
        self.steps: list[Step] = []
        self.notes: list[str] = []

    def rollout(self, **options: Any) -> tuple[Rollout, Any]:
        settle = options.pop("settle_timeout", 60.0)
        ops = NodeOps(
            self.cluster,
            self.steps.append,
            self.notes.append,
            timeout=30.0,
            sleep=self.clock.sleep,
            clock=self.clock,
        )
        plan = gpu.plan(PlanRequest(self.state), self.cluster)
        planned = {n.name: n for n in plan.nodes if any(c.rollout for c in n.changes)}
        work = change.FactWork(
            planned,
            {name: operations.fresh_replan(self.state, plan) for name in planned},
            MigTable.default(),
            ops,
            problems=tuple(
                f"{f.subject}: {f.message}"
                for f in plan.findings
                if f.blocksApply and f.kind != gpu.ROLLOUT_REQUIRED
            ),
            settle_timeout=settle,
        )
        job = Rollout(RolloutRequest(**options), work, ops)
        return job, job.preflight()

    def phases(self, node: str) -> list[str]:
        return [s.value for s in self.steps if s.subject == node and s.field == change.PHASE]


def test_a_layout_rolls_out_drains_only_gpu_pods_and_leaves_the_node_as_it_was(
    tmp_path: Path,
) -> None:
    cluster = _cluster("n0")
    _gpu_pod(cluster, "trainer", "n0")
    cluster.add_pod("train", "logger", "n0", owner="rs")  # no GPU: left running
    run = _Run(tmp_path, cluster, {"n0": "all-1g.5gb"})
    _MigManager(cluster, run.clock)

    job, plan = run.rollout()
    result = job.run(plan)

    assert result.ok and result.done == ("n0",)
    assert run.phases("n0") == list(change.PHASES)
    assert ("Pod/train/trainer", "evicted") in [(s.subject, s.field) for s in run.steps]
    assert cluster.get_pod("train", "trainer") is None
    assert cluster.get_pod("train", "logger") is not None
    live = cluster.get_node("n0")
    assert live.labels["nvidia.com/mig.config"] == "all-1g.5gb"
    assert live.labels[STATE] == "success"
    assert change.gpu_allocatable(live) == {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.5gb": "28"}
    assert not live.unschedulable
    assert not [k for k in live.annotations if k.startswith("reconcile.dev/rollout")]
    assert Step("n0", "allocatable", "nvidia.com/gpu=0,nvidia.com/mig-1g.5gb=28 OK") in run.steps


def test_the_write_removes_the_stale_state_and_records_what_to_check(tmp_path: Path) -> None:
    cluster = _cluster("n0")
    run = _Run(tmp_path, cluster, {"n0": "all-1g.5gb"})
    job, plan = run.rollout(settle_timeout=2.0)  # no operator: the wait times out

    result = job.run(plan)

    [(node, error)] = result.failed
    assert node == "n0"
    assert error.startswith(
        "nvidia.com/mig.config.state=(not reported yet) after 2s (--state-timeout); "
        "n0 is left cordoned at wait-required"
    )
    live = cluster.get_node("n0")
    assert STATE not in live.labels  # the report of the old layout is gone
    assert live.unschedulable
    recorded = journal.read(live)
    assert recorded is not None and recorded.phase == "wait-required"
    assert recorded.cordoned and recorded.target == {"nvidia.com/mig.config": "all-1g.5gb"}
    assert change.Checks.load(recorded.checks) == change.Checks(
        (STATE,), {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.5gb": "28"}
    )
    assert run.phases("n0")[-1] == change.ROLLOUT_FAILED_STATE


def test_a_failed_layout_stays_cordoned_and_a_rerun_resumes_at_the_wait(tmp_path: Path) -> None:
    cluster = _cluster("n0")
    _gpu_pod(cluster, "trainer", "n0")
    run = _Run(tmp_path, cluster, {"n0": "all-1g.5gb"})
    manager = _MigManager(cluster, run.clock, result="failed")
    job, plan = run.rollout()

    [(_, error)] = job.run(plan).failed

    assert error.startswith("nvidia.com/mig.config.state=failed: the operator could not apply")
    live = cluster.get_node("n0")
    recorded = journal.read(live)
    assert live.unschedulable and recorded is not None and recorded.failed is not None
    writes_before = list(cluster.writes)

    manager.result = "success"
    manager.answer("n0")  # the operator retried and succeeded
    job, plan = run.rollout()
    assert plan.targets == ["n0"]  # no drift left: the journal brings it back
    result = job.run(plan)

    assert result.ok
    new = cluster.writes[len(writes_before) :]
    assert not [w for w in new if w[0] == "evict"]
    assert run.phases("n0")[-4:] == [
        "wait-required",
        "validation-required",
        "uncordon-required",
        "rollout-done",
    ]
    assert not cluster.get_node("n0").unschedulable


def test_a_node_cordoned_by_someone_else_is_skipped(tmp_path: Path) -> None:
    cluster = _cluster("n0", "n1", cordoned=("n1",))
    run = _Run(tmp_path, cluster, {"n0": "all-1g.5gb", "n1": "all-1g.5gb"})
    _MigManager(cluster, run.clock)

    job, plan = run.rollout()

    assert plan.targets == ["n0"]
    assert [n for n in run.notes if n.startswith("n1 skipped: cordoned by someone else")]
    assert job.run(plan).ok
    assert cluster.get_node("n1").labels["nvidia.com/mig.config"] == "all-disabled"


def test_a_blocking_finding_refuses_the_whole_rollout_before_any_write(tmp_path: Path) -> None:
    cluster = _cluster("n0", "n1")
    run = _Run(tmp_path, cluster, {"n0": "all-1g.5gb", "n1": "all-3g.40gb"})  # 80 GB only

    with pytest.raises(UpgradeRefused) as refused:
        run.rollout()

    assert "n1: nvidia.com/mig.config=all-3g.40gb" in str(refused.value)
    assert str(refused.value).endswith("(nothing was changed)")
    assert [w for w in cluster.writes if w[0] != "get"] == []


def test_a_budget_that_cannot_allow_the_drain_refuses_before_any_write(tmp_path: Path) -> None:
    cluster = _cluster("n0")
    _gpu_pod(cluster, "trainer", "n0")
    budget = cluster.add_budget("train", "pdb", {"app": "trainer"}, disruptions_allowed=0)
    key = cluster._key(BUDGETS, "train", "pdb")
    cluster.objects[key]["status"].update(expectedPods=1, desiredHealthy=1, currentHealthy=1)
    assert budget
    run = _Run(tmp_path, cluster, {"n0": "all-1g.5gb"})

    with pytest.raises(UpgradeRefused, match="PodDisruptionBudget train/pdb blocks the drain"):
        run.rollout()

    assert cluster.writes == []


def test_a_saved_plan_whose_node_moved_on_is_stale() -> None:
    cluster = _cluster("n0")
    live = cluster.get_node("n0")
    from reconcile.engine.diff import Action, NodeChange
    from reconcile.engine.plan import NodePlan

    planned = NodePlan(
        name="n0",
        resourceVersion=live.resource_version,
        source="nodes/n0.yaml",
        changes=(
            NodeChange(
                key="nvidia.com/mig.config",
                action=Action.UPDATE,
                before="all-disabled",
                after="all-1g.5gb",
                rollout=True,
            ),
        ),
        inventory=("nvidia.com/mig.config",),
    )
    replan = change.saved_replan(planned)
    assert replan(live) is not None
    cluster.patch_node("n0", {"metadata": {"labels": {"nvidia.com/mig.config": "all-1g.10gb"}}})
    with pytest.raises(UpgradeFailed, match="plan is stale"):
        replan(cluster.get_node("n0"))
    cluster.patch_node("n0", {"metadata": {"labels": {"nvidia.com/mig.config": "all-1g.5gb"}}})
    assert replan(cluster.get_node("n0")) is None  # written already: nothing to do


def test_the_bake_halts_when_a_node_of_the_batch_turns_unhealthy() -> None:
    cluster = _cluster("n0", "n1")
    clock = _Clock()
    ops = NodeOps(cluster, lambda step: None, lambda note: None, sleep=clock.sleep, clock=clock)
    gate = gates.bake(60.0, ops)

    assert gate(Batch(1, ("n0",))) is None
    assert clock.now >= 60.0
    clock.at(
        clock.now + 10, lambda: cluster.nodes["n1"]["metadata"]["labels"].update({STATE: "failed"})
    )
    assert gate(Batch(2, ("n1",))) == (
        "n1 reports nvidia.com/mig.config.state=failed during the 60s bake of batch 2"
    )


NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)


def _live(
    name: str, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None
) -> LiveNode:
    return FakeCluster().add_node(name, labels or {}, annotations=annotations)


def _journal(phase: str, **fields: Any) -> dict[str, str]:
    recorded = Journal(
        rollout="r1", lease="kube-system/l1", work="facts", target={}, phase=phase, **fields
    )
    return {journal.JOURNAL: recorded.dump()}


def test_status_says_what_blocks_each_node_and_the_next_step() -> None:
    waiting = _live(
        "waiting",
        {STATE: "pending"},
        _journal(
            "wait-required",
            since="2026-01-01T11:30:00Z",
            checks=change.Checks((STATE,), None).data(),
        ),
    )
    waiting = LiveNode(**{**waiting.__dict__, "unschedulable": True})
    failed = _live("failed", None, _journal("wait-required", failed="it broke"))
    failed = LiveNode(**{**failed.__dict__, "unschedulable": True})
    # A bare marker of an earlier version, and a journal of a rollout whose Lease is gone.
    foreign = _live("foreign", None, {"reconcile.dev/rollout-phase": "write-required"})
    stale = _live(
        "stale",
        None,
        {journal.JOURNAL: _journal("drain-required")[journal.JOURNAL].replace("l1", "l9")},
    )
    upgrade = _live("upgrade", {"nvidia.com/gpu-driver-upgrade-state": "upgrade-failed"})
    quiet = _live("quiet", {STATE: "success"})
    bare = _live("bare")
    pods = [
        {
            "metadata": {"name": "p", "namespace": "train"},
            "spec": {
                "nodeName": "bare",
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
            "status": {"phase": "Running"},
        }
    ]
    planned = {"bare": object()}

    lease = LeaseView(
        "l1", "kube-system", "r1", "", "", "", False, frozenset({"waiting", "failed", "stale"})
    )
    found = change.status(
        [waiting, failed, upgrade, quiet, bare, foreign, stale],
        planned,  # type: ignore[arg-type]
        pods,
        {},
        stuck_after=900,
        now=NOW,
        binding=Binding.offline({lease.ref: lease}),
    )

    by_node = {s.node: s for s in found}
    assert sorted(by_node) == ["bare", "failed", "foreign", "stale", "upgrade", "waiting"]
    assert by_node["foreign"].state == by_node["stale"].state == "foreign"
    assert (
        by_node["foreign"].blocked
        and "reconcile rollout abandon foreign" in by_node["foreign"].reason
    )
    assert "names no Lease of that rollout" in by_node["stale"].reason
    assert by_node["waiting"].blocked and by_node["waiting"].seconds == 1800
    assert by_node["waiting"].reason.startswith(
        "nvidia.com/mig.config.state=pending for 30m: mig-manager may be paused"
    )
    assert by_node["failed"].reason == "failed at wait-required: it broke"
    assert by_node["upgrade"].reason.startswith("the driver upgrade failed")
    assert by_node["bare"].state == "planned"
    assert "has no controller to recreate it" in by_node["bare"].reason


def test_a_stopped_rollout_leaves_the_node_at_its_wait_and_the_next_run_resumes_it(
    tmp_path: Path,
) -> None:
    cluster = _cluster("n0", "n1")
    run = _Run(tmp_path, cluster, {"n0": "all-1g.5gb", "n1": "all-1g.5gb"})
    job, plan = run.rollout()  # no operator yet: n0 waits for its state
    run.clock.at(5, job.stop)

    result = job.run(plan)

    [(node, error)] = result.failed
    assert (node, result.not_started) == ("n0", ("n1",))
    assert error.startswith("n0 stopped at wait-required by a signal: the next run resumes it")
    recorded = journal.read(cluster.get_node("n0"))
    assert recorded is not None and recorded.phase == "wait-required"
    assert cluster.get_node("n0").unschedulable

    manager = _MigManager(cluster, run.clock)
    manager.answer("n0")  # the operator finished meanwhile
    job, plan = run.rollout()
    assert plan.targets == ["n0", "n1"]
    assert job.run(plan).ok
    assert run.phases("n0") == list(change.PHASES)  # each phase once, across both runs
    assert journal.JOURNAL not in cluster.get_node("n0").annotations


def test_the_rollout_document_names_what_it_rolls_out_and_leaves_the_other_out() -> None:
    from reconcile.gpu.rollout import RolloutDocument, RolloutOutcome, RolloutPlan, RolloutResult

    plan = RolloutPlan((Batch(1, ("n0",)),), (), 1)
    facts = RolloutDocument.of(
        plan, dry_run=True, facts={"n0": {"nvidia.com/mig.config": "all-1g.5gb", "x": None}}
    ).model_dump(mode="json")
    driver = RolloutDocument.of(plan, dry_run=True, driver="550.90.07").model_dump(mode="json")

    assert list(facts)[:3] == ["apiVersion", "kind", "facts"]
    assert facts["facts"] == {"n0": {"nvidia.com/mig.config": "all-1g.5gb", "x": None}}
    assert "driver" not in facts
    assert "facts" not in driver and driver["driver"] == "550.90.07"
    halted = RolloutOutcome.after(
        RolloutDocument.of(plan, dry_run=False, facts={}),
        RolloutResult((), (), ("n1",), (), halted="gate job=gates/d.yaml: failed"),
        (),
    )
    assert halted.model_dump(mode="json")["halted"] == "gate job=gates/d.yaml: failed"
    assert not halted.ok
    assert halted.summary == ("halted: gate job=gates/d.yaml: failed; done: none; not started: n1")
    assert "halted" not in RolloutOutcome.after(
        RolloutDocument.of(plan, dry_run=False, facts={}), RolloutResult((), (), (), ()), ()
    ).model_dump(mode="json")


SITE_FACTS = """\
apiVersion: reconcile.dev/v1alpha1
kind: DisruptiveFacts
metadata: {name: fabric}
facts:
- key: example.com/fabric.config
  disrupts: the fabric manager restarts and the node's NVLink partitions are rebuilt
  state: {label: example.com/fabric.state, working: [pending], done: [ready], failed: [error]}
"""


def test_a_fact_desired_declares_disruptive_is_rolled_out_and_its_state_waited_for(
    tmp_path: Path,
) -> None:
    (tmp_path / "disruptive").mkdir()
    (tmp_path / "disruptive" / "fabric.yaml").write_text(SITE_FACTS)
    (tmp_path / "nodes").mkdir()
    (tmp_path / "nodes" / "n0.yaml").write_text(
        NODE.format(name="n0", layout="all-disabled") + "  example.com/fabric.config: v2\n"
    )
    cluster = _cluster("n0")
    _gpu_pod(cluster, "trainer", "n0")
    state, problems = load_desired(tmp_path)
    assert not problems
    catalogue = gpu.policy(state).catalogue
    plan = gpu.plan(PlanRequest(state), cluster)
    [node] = plan.nodes
    assert [(c.key, c.rollout) for c in node.changes] == [("example.com/fabric.config", True)]
    assert [f.kind for f in plan.findings if f.blocksApply] == [gpu.ROLLOUT_REQUIRED]

    clock, steps = _Clock(), list[Step]()
    ops = NodeOps(cluster, steps.append, lambda note: None, sleep=clock.sleep, clock=clock)
    work = change.FactWork(
        {"n0": node},
        {"n0": operations.fresh_replan(state, plan)},
        MigTable.default(),
        ops,
        catalogue=catalogue,
    )
    clock.at(
        5,
        lambda: cluster.nodes["n0"]["metadata"]["labels"].update(
            {"example.com/fabric.state": "ready"}
        ),
    )
    job = Rollout(RolloutRequest(), work, ops)
    result = job.run(job.preflight())

    assert result.ok
    assert Step("n0", "example.com/fabric.state", "ready") in steps
    assert cluster.get_pod("train", "trainer") is None
    assert (
        change.status(
            [cluster.get_node("n0")], {}, [], {}, stuck_after=1, now=NOW, catalogue=catalogue
        )
        == []
    )
    cluster.nodes["n0"]["metadata"]["labels"]["example.com/fabric.state"] = "error"
    [failed] = change.status(
        [cluster.get_node("n0")], {}, [], {}, stuck_after=1, now=NOW, catalogue=catalogue
    )
    assert (failed.state, failed.blocked) == ("example.com/fabric.state=error", True)
