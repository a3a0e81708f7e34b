"""Disruptive facts rolled out on one node, as the GPU Operator's maintainers ask of a
higher-level entity (NVIDIA/gpu-operator#262): cordon, drain the pods that use the
node's GPUs (through the Eviction API, within the budgets), write the node's facts, wait
for the operator's state label to report success, verify the node offers what the change
projects, uncordon.

Each phase is written to the node's `reconcile.dev/rollout-phase` annotation before its
action: interrupted anywhere, the same command reads it and resumes there, and every
phase is safe to repeat. What the wait and the verification need (the state labels, the
allocatable the layout gives) is written beside it when the facts are, so a resumed run
checks what the interrupted one wrote. Where it cannot go on, the node is left cordoned
with the reason in `reconcile.dev/rollout-failed`; a rerun retries the phase it failed in.

The node's facts are written as `apply` writes them (its whole plan, the inventories, one
merge PATCH guarded by its resourceVersion), with each catalogued state label removed in
the same PATCH: the report of the layout before is not the answer to this one.
"""

from __future__ import annotations

import datetime
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

from pydantic import BaseModel, ConfigDict

from reconcile.desired.reserved import (
    ROLLOUT_CHECKS,
    ROLLOUT_FAILED,
    ROLLOUT_PHASE,
    ROLLOUT_SINCE,
    ROLLOUT_WAS_CORDONED,
)
from reconcile.diagnostics import Conflict, ReconcileError
from reconcile.engine.facts import BY_FACT
from reconcile.engine.findings import Finding, overlay
from reconcile.engine.placement import CAPACITY_STRANDED
from reconcile.engine.plan import NodePlan
from reconcile.engine.results import MAX_CONFLICT_RETRIES
from reconcile.gpu import disruptive, mig
from reconcile.gpu.checks import ROLLOUT_REQUIRED
from reconcile.gpu.rollout import RolloutRequest, Sorted, node_selection
from reconcile.gpu.upgrade import (
    STATE,
    UPGRADE_DONE,
    UPGRADE_FAILED,
    Drain,
    NodeOps,
    PodToEvict,
    Step,
    UpgradeFailed,
    budget_waits,
    pods_to_evict,
    poll_intervals,
)
from reconcile.kube.api import NodeApi
from reconcile.kube.objects import LiveNode

PHASE: Final = ROLLOUT_PHASE
CORDON_REQUIRED: Final = "cordon-required"
DRAIN_REQUIRED: Final = "drain-required"
WRITE_REQUIRED: Final = "write-required"
WAIT_REQUIRED: Final = "wait-required"
VALIDATION_REQUIRED: Final = "validation-required"
UNCORDON_REQUIRED: Final = "uncordon-required"
ROLLOUT_DONE: Final = "rollout-done"
ROLLOUT_FAILED_STATE: Final = "rollout-failed"
PHASES: Final = (
    CORDON_REQUIRED,
    DRAIN_REQUIRED,
    WRITE_REQUIRED,
    WAIT_REQUIRED,
    VALIDATION_REQUIRED,
    UNCORDON_REQUIRED,
    ROLLOUT_DONE,
)
POLL_SECONDS: Final = 1.0
CORDONED_BY_OTHERS: Final = (
    "cordoned by someone else before the rollout: left alone (uncordon it, or finish "
    "what was done there, and rerun to include it)"
)
# The node's plan as it is now: the desired/ facts planned against `live` (a fresh plan),
# or a saved plan's node checked against it. None: nothing left to write.
Replan = Callable[[LiveNode], NodePlan | None]


class RolloutInterrupted(UpgradeFailed):
    """A node stopped midway by a signal, at a phase a rerun resumes from."""


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def is_gpu_resource(name: str) -> bool:
    return name.startswith(disruptive.GPU_RESOURCES)


def gpu_allocatable(live: LiveNode) -> dict[str, str]:
    """The node's allocatable GPU resources (`nvidia.com/...`), sorted by name."""
    return {k: v for k, v in sorted(live.allocatable.items()) if is_gpu_resource(k)}


@dataclass(frozen=True)
class Checks:
    """What a written node is checked against: the state labels to wait for (each
    catalogued fact the write changed) and the GPU resources it should then offer (None:
    the change projects none)."""

    states: tuple[str, ...] = ()
    allocatable: Mapping[str, str] | None = None

    def dump(self) -> str:
        return json.dumps(
            {"states": list(self.states), "allocatable": self.allocatable},
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def load(cls, text: str | None) -> Checks:
        """The checks an earlier run wrote (none when it wrote nothing readable)."""
        try:
            data = json.loads(text or "{}")
            states = tuple(str(s) for s in data.get("states") or ())
            allocatable = data.get("allocatable")
            return cls(
                states, {str(k): str(v) for k, v in allocatable.items()} if allocatable else None
            )
        except (ValueError, AttributeError):
            return cls()


# What a rollout resolves on the nodes it rolls out: the change is refused under running
# GPU pods (it drains them first), and those pods lose what they run on (they are moved).
RESOLVED_KINDS: Final = (ROLLOUT_REQUIRED, CAPACITY_STRANDED)


def resolved_by_rollout(finding: Finding, planned: Mapping[str, NodePlan]) -> bool:
    """A blocking finding on a node the rollout drains before it writes."""
    return finding.kind in RESOLVED_KINDS and finding.subject in planned


def saved_replan(planned: NodePlan) -> Replan:
    """A saved plan's node against the node now: the plan when every change still finds
    the value it was planned against, None when the node carries them all already (an
    interrupted run wrote them), else UpgradeFailed: the plan is stale."""

    def replan(live: LiveNode) -> NodePlan | None:
        values = [BY_FACT[c.fact].get(live, c.key) for c in planned.changes]
        if all(v == c.after for v, c in zip(values, planned.changes, strict=True)):
            return None
        stale = [
            c.shown_key
            for v, c in zip(values, planned.changes, strict=True)
            if v not in (c.before, c.after)
        ]
        if stale:
            raise UpgradeFailed(
                f"plan is stale: {live.name} changed after the plan was made ({', '.join(stale)}); "
                "make a new plan"
            )
        return planned.model_copy(update={"resourceVersion": live.resource_version})

    return replan


@dataclass(frozen=True)
class FactWork:
    """Disruptive facts on each node that plans them (rollout.Work): the node plans, how
    each is planned again at its write (`replans`), the MIG layouts the verification
    projects with, what refuses the whole rollout (`problems`: the plan's blocking
    findings), and how long a node may take to report its state and offer what it should."""

    plans: Mapping[str, NodePlan]
    replans: Mapping[str, Replan]
    table: mig.MigTable
    ops: NodeOps
    problems: tuple[str, ...] = ()
    settle_timeout: float = 1800.0
    catalogue: disruptive.Catalogue = field(default_factory=disruptive.Catalogue.packaged)
    # Set when the rollout stops (a signal): nodes in flight stop at their next wait.
    stopping: threading.Event = field(default_factory=threading.Event)
    state_field: str = PHASE
    done_state: str = ROLLOUT_DONE
    nodes_selector: str | None = None

    def select(self, cluster: NodeApi, request: RolloutRequest) -> list[LiveNode]:
        """The nodes the request names (every node when it names none) that plan a
        disruptive change or are in the middle of one."""
        if request.nodes or request.selector is not None:
            return node_selection(cluster, request)
        return sorted(
            (n for n in cluster.list_nodes() if n.name in self.plans or PHASE in n.annotations),
            key=lambda n: n.name,
        )

    def sort(self, selection: list[LiveNode]) -> Sorted:
        """To do: the nodes that plan a disruptive change or are midway through one; a
        node cordoned by someone else is skipped (its owner may be working on it)."""
        skipped = {
            n.name: CORDONED_BY_OTHERS
            for n in selection
            if n.name in self.plans and n.unschedulable and PHASE not in n.annotations
        }
        todo = [
            n
            for n in selection
            if (n.name in self.plans or PHASE in n.annotations) and n.name not in skipped
        ]
        done = [n.name for n in selection if n not in todo and n.name not in skipped]
        problems = list(self.problems)
        for node in todo:
            planned = self.plans.get(node.name)
            if planned is not None and planned.refusal is not None:
                problems.append(f"{node.name}: {planned.refusal}")
        return Sorted(todo, done, selection, problems, skipped)

    def evictable(self, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The pods that use the node's GPUs: the operator's change takes their devices;
        the others keep running on the cordoned node."""
        return [p for p in pods if disruptive.uses_gpu(p.get("spec") or {})]

    def past_drain(self, live: LiveNode) -> bool:
        return FactJob.start_index(live) > PHASES.index(DRAIN_REQUIRED)

    def resuming(self, live: LiveNode) -> bool:
        return PHASE in live.annotations

    def prepare(self, node: str) -> Callable[[], None]:
        live = self.ops.cluster.get_node(node)
        start = FactJob.start_index(live)
        evictions: list[PodToEvict] = []
        if start <= PHASES.index(DRAIN_REQUIRED):
            evictions = pods_to_evict(
                self.evictable(self.ops.cluster.pods_on(node)),
                ignore_daemonsets=self.ops.ignore_daemonsets,
                force=self.ops.force,
            )
        job = FactJob(self, node)
        return lambda: job.run(start, evictions)

    def stop(self) -> None:
        self.stopping.set()

    def fail_unstarted(self, node: str, reason: str) -> str:
        return (
            f"{reason}; nothing was done to {node}: let the budget recover (or change it), "
            "then rerun"
        )


@dataclass
class FactJob:
    """One node's disruptive facts, phase by phase (`run`); `phase` is where it is."""

    work: FactWork
    node: str
    phase: str | None = field(default=None, init=False)

    @staticmethod
    def start_index(live: LiveNode) -> int:
        """Where to begin: the phase an interrupted (or failed) run recorded, or the start."""
        phase = live.annotations.get(PHASE)
        return PHASES.index(phase) if phase in PHASES and phase != ROLLOUT_DONE else 0

    @property
    def _cluster(self) -> NodeApi:
        return self.work.ops.cluster

    def _emit(self, step: Step) -> None:
        self.work.ops.emit(step)

    def run(self, start: int, evictions: Sequence[PodToEvict]) -> None:
        live = self._cluster.get_node(self.node)
        # After a failure the node is cordoned by that attempt: what it was before is
        # what that attempt recorded.
        was = live.annotations.get(ROLLOUT_WAS_CORDONED) or str(live.unschedulable).lower()
        for phase in PHASES[start:]:
            self._check_stopping()
            first = {ROLLOUT_WAS_CORDONED: was} if phase == CORDON_REQUIRED else {}
            live = self._set_phase(live, phase, **first)
            if phase == CORDON_REQUIRED:
                live = self._cordon(live, True)
            elif phase == DRAIN_REQUIRED:
                Drain(
                    self._cluster,
                    self.work.ops.timeout,
                    self._emit,
                    self.work.ops.note,
                    self._fail,
                    self.work.ops.sleep,
                    self.work.ops.clock,
                )(list(evictions))
            elif phase == WRITE_REQUIRED:
                live = self._write()
            elif phase == WAIT_REQUIRED:
                live = self._wait_for_states(Checks.load(live.annotations.get(ROLLOUT_CHECKS)))
            elif phase == VALIDATION_REQUIRED:
                live = self._verify(Checks.load(live.annotations.get(ROLLOUT_CHECKS)))
            elif phase == UNCORDON_REQUIRED:
                was_cordoned = live.annotations.get(ROLLOUT_WAS_CORDONED) == "true"
                if was_cordoned:
                    self.work.ops.note(
                        f"{self.node} stays cordoned: it was cordoned before the rollout began"
                    )
                live = self._cordon(live, was_cordoned)
            elif phase == ROLLOUT_DONE:
                self._cluster.patch_node(
                    self.node,
                    {
                        "metadata": {
                            "annotations": {
                                PHASE: None,
                                ROLLOUT_WAS_CORDONED: None,
                                ROLLOUT_CHECKS: None,
                                ROLLOUT_SINCE: None,
                            }
                        }
                    },
                )

    # --- the phases ---------------------------------------------------------------------

    def _set_phase(self, live: LiveNode, phase: str, **annotations: str | None) -> LiveNode:
        """The phase recorded before its action (a failure's reason cleared: retried)."""
        self.phase = phase
        wanted: dict[str, str | None] = {PHASE: phase, **annotations}
        if ROLLOUT_FAILED in live.annotations:
            wanted[ROLLOUT_FAILED] = None
        if all(live.annotations.get(k) == v for k, v in wanted.items()):
            return live
        wanted[ROLLOUT_SINCE] = _now()
        if phase != ROLLOUT_DONE:  # done: the annotations go, and the line says so
            live = self._cluster.patch_node(self.node, {"metadata": {"annotations": wanted}})
        self._emit(Step(self.node, PHASE, phase))
        return live

    def _cordon(self, live: LiveNode, cordoned: bool) -> LiveNode:
        if live.unschedulable == cordoned:
            return live
        live = self._cluster.patch_node(
            self.node, {"spec": {"unschedulable": True if cordoned else None}}
        )
        self._emit(Step(self.node, "spec.unschedulable", "true" if cordoned else "false"))
        return live

    def _write(self) -> LiveNode:
        """The node's plan written in one PATCH with the checks the next phases make,
        each catalogued state label removed; planned again on a conflict."""
        replan = self.work.replans.get(self.node)
        for _ in range(MAX_CONFLICT_RETRIES + 1):
            live = self._cluster.get_node(self.node)
            planned = replan(live) if replan is not None else None
            if planned is None or not planned.changes:
                return live  # written by the interrupted run already
            checks = self._checks(live, planned)
            patch: dict[str, Any] = planned.patch(with_precondition=False)
            patch["metadata"]["resourceVersion"] = live.resource_version
            patch["metadata"]["labels"].update(dict.fromkeys(checks.states))
            patch["metadata"]["annotations"][ROLLOUT_CHECKS] = checks.dump()
            try:
                live = self._cluster.patch_node(self.node, patch)
            except Conflict:
                continue
            for change in planned.changes:
                self._emit(Step(self.node, change.shown_key, change.shown_value))
            return live
        return self._fail(f"writing {self.node}'s facts kept conflicting with other writers")

    def _checks(self, live: LiveNode, planned: NodePlan) -> Checks:
        facts = [self.work.catalogue.fact_for(c.key) for c in planned.changes if c.rollout]
        states = tuple(sorted({f.state.label for f in facts if f is not None and f.state}))
        expected: dict[str, str] | None = None
        if any(c.key in (mig.MIG_CONFIG, mig.MIG_STRATEGY) for c in planned.changes):
            projected = self.work.table.projected(
                overlay(live.labels, planned.changes), live.allocatable
            )
            if isinstance(projected, mig.MigProblem):
                self._fail(f"{self.node}: {projected}")
            if projected.layout is not None:
                expected = {
                    k: v for k, v in sorted(projected.allocatable.items()) if is_gpu_resource(k)
                }
        return Checks(states, expected)

    def _wait_for_states(self, checks: Checks) -> LiveNode:
        """Each state label at a done value; a failed value, or --state-timeout, fails."""
        ops = self.work.ops
        deadline = ops.clock() + self.work.settle_timeout
        said: dict[str, str | None] = {}
        pauses = poll_intervals(POLL_SECONDS)
        while True:
            live = self._cluster.get_node(self.node)
            waiting = []
            for label in checks.states:
                value = live.labels.get(label)
                state = next((t for t in self.work.catalogue.states() if t.label == label), None)
                if label not in said or said[label] != value:
                    said[label] = value
                    if value is not None:
                        self._emit(Step(self.node, label, value))
                if state is None or value in state.done:
                    continue
                if value in state.failed:
                    self._fail(
                        f"{label}={value}: the operator could not apply the change on "
                        f"{self.node} (see its log on the node)"
                    )
                waiting.append(f"{label}={value or '(not reported yet)'}")
            if not waiting:
                return live
            self._check_stopping()
            if ops.clock() >= deadline:
                self._fail(
                    f"{', '.join(waiting)} after {self.work.settle_timeout:g}s (--state-timeout)"
                )
            ops.sleep(next(pauses))

    def _verify(self, checks: Checks) -> LiveNode:
        """The node offers the GPU resources the change projects (the device plugin
        re-registers after the operator's report, so it is waited for too)."""
        ops = self.work.ops
        deadline = ops.clock() + self.work.settle_timeout
        pauses = poll_intervals(POLL_SECONDS)
        while True:
            live = self._cluster.get_node(self.node)
            if checks.allocatable is None or gpu_allocatable(live) == dict(checks.allocatable):
                if checks.allocatable is not None:
                    shown = ",".join(f"{k}={v}" for k, v in checks.allocatable.items()) or "none"
                    self._emit(Step(self.node, "allocatable", f"{shown} OK"))
                return live
            self._check_stopping()
            if ops.clock() >= deadline:
                found = ",".join(f"{k}={v}" for k, v in gpu_allocatable(live).items()) or "none"
                wanted = ",".join(f"{k}={v}" for k, v in checks.allocatable.items()) or "none"
                self._fail(
                    f"validation: {self.node} offers {found}, the layout gives {wanted} "
                    f"(after {self.work.settle_timeout:g}s, --state-timeout)"
                )
            ops.sleep(next(pauses))

    def _check_stopping(self) -> None:
        """Raise RolloutInterrupted when the rollout is stopping: the node stays at its
        phase (cordoned when past the cordon), where the next run resumes it."""
        if self.work.stopping.is_set() and self.phase is not None:
            raise RolloutInterrupted(
                f"{self.node} stopped at {self.phase} by a signal: the next run resumes it there"
            )

    def _fail(self, reason: str) -> NoReturn:
        """Record the failure on the node (as far as the API lets us), then stop."""
        left = f"is left cordoned at {self.phase}"
        try:
            self._cluster.patch_node(
                self.node, {"metadata": {"annotations": {ROLLOUT_FAILED: reason[:1024]}}}
            )
        except ReconcileError as e:
            left = f"is left cordoned at {self.phase} (the failure could not be recorded: {e})"
        else:
            self._emit(Step(self.node, PHASE, ROLLOUT_FAILED_STATE))
        raise UpgradeFailed(f"{reason}; {self.node} {left}: fix the cause, then rerun")


# --- status ---------------------------------------------------------------------------------


class NodeStatus(BaseModel):
    """Where one node of a rollout is: its state (the rollout's phase, `planned`, the
    operator's state label, the driver upgrade's state), since when (UTC, when known) and
    for how many seconds, and what blocks it with the next step (empty when nothing)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    state: str
    since: str | None = None
    seconds: int | None = None
    blocked: bool = False
    reason: str = ""


def status(
    nodes: Sequence[LiveNode],
    planned: Mapping[str, NodePlan],
    pods: Sequence[Mapping[str, Any]],
    budgets: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    stuck_after: float,
    now: datetime.datetime,
    catalogue: disruptive.Catalogue | None = None,
) -> list[NodeStatus]:
    """Every node with something to say, sorted: in a rollout (or failed in one), planning
    a disruptive change, with an operator state label not at a done value, or with its
    driver upgrade under way or failed. `pods` are the pods bound to those nodes,
    `budgets` the PodDisruptionBudgets by namespace."""
    catalogue = catalogue or disruptive.Catalogue.packaged()
    on_node: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        on_node.setdefault(str((pod.get("spec") or {}).get("nodeName")), []).append(pod)
    found = []
    for live in sorted(nodes, key=lambda n: n.name):
        entry = _node_status(
            live, live.name in planned, on_node.get(live.name, []), budgets, catalogue
        )
        if entry is None:
            continue
        since = live.annotations.get(ROLLOUT_SINCE)
        seconds = _age(since, now)
        if entry.state == WAIT_REQUIRED and seconds is not None and seconds >= stuck_after:
            waiting = ", ".join(
                f"{t.label}={live.labels.get(t.label, '(not reported)')}"
                for t in catalogue.states()
                if live.labels.get(t.label) not in t.done
                and t.label in Checks.load(live.annotations.get(ROLLOUT_CHECKS)).states
            )
            entry = entry.model_copy(
                update={
                    "blocked": True,
                    "reason": f"{waiting or 'the operator'} for {shown_age(seconds)}: mig-manager "
                    "may be paused for the change (paused-for-mig-change) or stuck; read its "
                    f"log on {live.name} (kubectl logs -n gpu-operator -l app=nvidia-mig-manager "
                    f"--field-selector spec.nodeName={live.name}), then rerun",
                }
            )
        found.append(entry.model_copy(update={"since": since, "seconds": seconds}))
    return found


def _node_status(
    live: LiveNode,
    planned: bool,
    pods: Sequence[Mapping[str, Any]],
    budgets: Mapping[str, Sequence[Mapping[str, Any]]],
    catalogue: disruptive.Catalogue,
) -> NodeStatus | None:
    phase = live.annotations.get(PHASE)
    name = live.name
    if ROLLOUT_FAILED in live.annotations:
        return NodeStatus(
            node=name,
            state=ROLLOUT_FAILED_STATE,
            blocked=True,
            reason=f"failed at {phase}: {live.annotations[ROLLOUT_FAILED]}",
        )
    if phase is not None or planned:
        if phase is None and live.unschedulable:
            return NodeStatus(node=name, state="planned", blocked=True, reason=CORDONED_BY_OTHERS)
        if phase is None or phase in (CORDON_REQUIRED, DRAIN_REQUIRED):
            blocker = _drain_blocker(pods, budgets)
            if blocker is not None:
                return NodeStatus(node=name, state=phase or "planned", blocked=True, reason=blocker)
        return NodeStatus(node=name, state=phase or "planned")
    for state in catalogue.states():
        value = live.labels.get(state.label)
        if value is None or value in state.done:
            continue
        if value in state.failed:
            return NodeStatus(
                node=name,
                state=f"{state.label}={value}",
                blocked=True,
                reason="the operator could not apply the change and no rollout is under way: "
                "read its log on the node, fix the cause, then set the layout again",
            )
        return NodeStatus(node=name, state=f"{state.label}={value}")
    upgrade = live.labels.get(STATE)
    if upgrade == UPGRADE_FAILED:
        return NodeStatus(
            node=name,
            state=upgrade,
            blocked=True,
            reason="the driver upgrade failed: fix the cause, then rerun `reconcile upgrade` "
            "(it resumes), or label the node upgrade-required to start over",
        )
    if upgrade not in (None, "", UPGRADE_DONE):
        return NodeStatus(node=name, state=str(upgrade))
    return None


def _drain_blocker(
    pods: Sequence[Mapping[str, Any]], budgets: Mapping[str, Sequence[Mapping[str, Any]]]
) -> str | None:
    """What stops the drain of a node's GPU pods now, in words with the next step."""
    users = [dict(p) for p in pods if disruptive.uses_gpu(p.get("spec") or {})]
    try:
        evictions = pods_to_evict(users, ignore_daemonsets=True, force=False)
    except UpgradeFailed as e:
        return (
            f"{e}: a pod using a GPU that no controller recreates; move it, or rerun with --force"
        )
    except ReconcileError as e:
        return f"{e}: move it, or rerun with --force"
    waits = budget_waits(
        evictions, {ns: [dict(b) for b in bs] for ns, bs in budgets.items()}, "its drain"
    )
    if waits:
        return "; ".join(waits) + ": the drain waits for it (add replicas, or change the budget)"
    return None


def _age(since: str | None, now: datetime.datetime) -> int | None:
    if since is None:
        return None
    try:
        then = datetime.datetime.strptime(since, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        return None
    return max(0, int((now - then).total_seconds()))


def shown_age(seconds: int | None) -> str:
    """`42s`, `12m`, `3h05m`; `-` when unknown."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
