"""Disruptive facts rolled out on one node, as the GPU Operator's maintainers ask of a
higher-level entity (NVIDIA/gpu-operator#262): cordon, drain the pods that use the
node's GPUs (through the Eviction API, within the budgets), write the node's facts, wait
for the operator's state label to report success, verify the node offers what the change
projects, uncordon.

Each phase is written to the node's journal (`reconcile.dev/rollout`, gpu/journal.py)
before its action, and its preconditions are checked against the node first: interrupted
anywhere, the same command resumes there from a journal it trusts, and every phase is
safe to repeat. What the wait and the verification need (the state labels, the
allocatable the layout gives) is written in the journal when the facts are, so a resumed
run checks what the interrupted one wrote. Where it cannot go on, the node is left
cordoned with the reason in the journal; a rerun retries the phase it failed in.

The node's facts are written as `apply` writes them (its whole plan, the inventories, one
merge PATCH guarded by its resourceVersion), with each catalogued state label removed in
the same PATCH: the report of the layout before is not the answer to this one.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, NoReturn

from pydantic import BaseModel, ConfigDict

from reconcile.diagnostics import Conflict, ReconcileError
from reconcile.engine.facts import BY_FACT, parse_shown_key
from reconcile.engine.findings import Finding, overlay
from reconcile.engine.placement import CAPACITY_STRANDED
from reconcile.engine.plan import NodePlan
from reconcile.engine.results import MAX_CONFLICT_RETRIES
from reconcile.gpu import disruptive, journal, mig
from reconcile.gpu.checks import ROLLOUT_REQUIRED
from reconcile.gpu.journal import Binding, Requires, Step, Untrusted
from reconcile.gpu.rollout import RolloutRequest, Sorted, node_selection
from reconcile.gpu.upgrade import (
    STATE,
    UPGRADE_DONE,
    UPGRADE_FAILED,
    Drain,
    NodeOps,
    PodToEvict,
    Upgrade,
    UpgradeFailed,
    budget_waits,
    pods_to_evict,
    poll_intervals,
)
from reconcile.kube.api import NodeApi
from reconcile.kube.objects import LiveNode

PHASE: Final = journal.JOURNAL
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

    def data(self) -> dict[str, Any]:
        allocatable = dict(self.allocatable) if self.allocatable is not None else None
        return {"states": list(self.states), "allocatable": allocatable}

    @classmethod
    def load(cls, data: Mapping[str, Any] | None) -> Checks:
        """The checks an earlier run wrote in the journal (none when it wrote none)."""
        try:
            data = data or {}
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
    # The rollout this run's journal entries belong to, and the Leases read before it.
    binding: Binding = field(default_factory=Binding.offline)

    def select(self, cluster: NodeApi, request: RolloutRequest) -> list[LiveNode]:
        """The nodes the request names (every node when it names none) that plan a
        disruptive change or carry a journal (or a marker)."""
        if request.nodes or request.selector is not None:
            return node_selection(cluster, request)
        return sorted(
            (n for n in cluster.list_nodes() if n.name in self.plans or journal.marked(n)),
            key=lambda n: n.name,
        )

    def target(self, live: LiveNode) -> dict[str, str | None] | None:
        """What this run writes to the node: its planned disruptive facts, or (written
        already) the facts its journal records, which desired/ must still declare."""
        planned = self.plans.get(live.name)
        if planned is not None:
            return target_of(planned)
        return None

    def sort(self, selection: list[LiveNode]) -> Sorted:
        """To do: the nodes that plan a disruptive change or are midway through one (from
        a journal this run trusts: any other marker refuses the rollout); a node cordoned
        by someone else is skipped (its owner may be working on it)."""
        skipped = {
            n.name: CORDONED_BY_OTHERS
            for n in selection
            if n.name in self.plans and n.unschedulable and not journal.marked(n)
        }
        todo = [
            n
            for n in selection
            if (n.name in self.plans or journal.marked(n)) and n.name not in skipped
        ]
        done = [n.name for n in selection if n not in todo and n.name not in skipped]
        problems = list(self.problems)
        for node in todo:
            planned = self.plans.get(node.name)
            if planned is not None and planned.refusal is not None:
                problems.append(f"{node.name}: {planned.refusal}")
            try:
                found = journal.trusted(node, self.binding, "facts", self.target(node))
            except Untrusted as e:
                problems.append(str(e))
                continue
            if found is None or planned is not None or not isinstance(found.target, dict):
                continue
            if not written(node, found.target):
                problems.append(
                    f"{node.name} is at {found.phase} of a rollout to "
                    f"{journal.shown_target(found.target)}, which desired/ no longer "
                    f"declares; {journal.ABANDON.format(node=node.name)}"
                )
        return Sorted(todo, done, selection, problems, skipped)

    def evictable(self, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The pods that use the node's GPUs: the operator's change takes their devices;
        the others keep running on the cordoned node."""
        return [p for p in pods if disruptive.uses_gpu(p.get("spec") or {})]

    def past_drain(self, live: LiveNode) -> bool:
        return FactJob.start_index(live) > PHASES.index(DRAIN_REQUIRED)

    def resuming(self, live: LiveNode) -> bool:
        return journal.JOURNAL in live.annotations

    def prepare(self, node: str) -> Callable[[], None]:
        live = self.ops.cluster.get_node(node)
        found = journal.trusted(live, self.binding, "facts", self.target(live))
        target = self.target(live)
        if target is None:
            target = (
                dict(found.target) if found is not None and isinstance(found.target, dict) else {}
            )
        start = FactJob.start_index(live)
        evictions: list[PodToEvict] = []
        if start <= PHASES.index(DRAIN_REQUIRED):
            evictions = pods_to_evict(
                self.evictable(self.ops.cluster.pods_on(node)),
                ignore_daemonsets=self.ops.ignore_daemonsets,
                force=self.ops.force,
            )
        job = FactJob(self, node, target, evictions)
        return lambda: job.run(start)

    def stop(self) -> None:
        self.stopping.set()

    def fail_unstarted(self, node: str, reason: str) -> str:
        return (
            f"{reason}; nothing was done to {node}: let the budget recover (or change it), "
            "then rerun"
        )


@dataclass
class FactJob:
    """One node's disruptive facts, phase by phase through the journal's machine (`run`):
    the phases and what each needs of the node, and their actions."""

    PHASES: ClassVar[tuple[journal.Phase, ...]] = journal.phases(
        (CORDON_REQUIRED, ()),
        (DRAIN_REQUIRED, (Requires.CORDONED,)),
        (WRITE_REQUIRED, (Requires.CORDONED, Requires.DRAINED)),
        (WAIT_REQUIRED, (Requires.CORDONED, Requires.WRITTEN)),
        (VALIDATION_REQUIRED, (Requires.CORDONED, Requires.WRITTEN)),
        (UNCORDON_REQUIRED, (Requires.WRITTEN,)),
        (ROLLOUT_DONE, ()),
    )
    STATE_FIELD: ClassVar[str] = PHASE

    work: FactWork
    node: str
    target: dict[str, str | None]
    evictions: Sequence[PodToEvict] = ()
    machine: journal.Machine = field(init=False)

    def __post_init__(self) -> None:
        ops = self.work.ops
        self.machine = journal.Machine(
            ops.cluster,
            self.node,
            self.work.binding,
            "facts",
            self.target,
            self,
            ops.emit,
            ops.note,
        )

    @staticmethod
    def start_index(live: LiveNode) -> int:
        """Where to begin: the phase the node's journal records, or the start."""
        found = journal.read(live)
        names = [p.name for p in FactJob.PHASES]
        return names.index(found.phase) if found is not None and found.phase in names else 0

    @property
    def phase(self) -> str | None:
        return self.machine.phase

    @property
    def _cluster(self) -> NodeApi:
        return self.work.ops.cluster

    def _emit(self, step: Step) -> None:
        self.work.ops.emit(step)

    def run(self, start: int) -> None:
        self.machine.run(start)

    # --- what the machine asks -------------------------------------------------------------

    def before(self, phase: str) -> None:
        self._check_stopping()

    def phase_labels(self, phase: str) -> dict[str, str | None]:
        return {}

    def written(self, live: LiveNode) -> bool:
        return written(live, self.target)

    def undrained(self, live: LiveNode) -> list[str]:
        pods = pods_to_evict(
            self.work.evictable(self._cluster.pods_on(self.node)),
            ignore_daemonsets=True,
            force=True,
        )
        return [p.id for p in pods]

    def act(self, phase: str, live: LiveNode) -> LiveNode:
        if phase == CORDON_REQUIRED:
            return self.machine.cordon(live)
        if phase == DRAIN_REQUIRED:
            Drain(
                self._cluster,
                self.work.ops.timeout,
                self._emit,
                self.work.ops.note,
                self._fail,
                self.work.ops.sleep,
                self.work.ops.clock,
                self.work.ops.declared,
            )(list(self.evictions))
            return live
        if phase == WRITE_REQUIRED:
            return self._write()
        if phase == WAIT_REQUIRED:
            return self._wait_for_states(self._recorded_checks())
        if phase == VALIDATION_REQUIRED:
            return self._verify(self._recorded_checks())
        if phase == UNCORDON_REQUIRED:
            return self.machine.uncordon(live)
        return live

    def _recorded_checks(self) -> Checks:
        recorded = self.machine.journal
        return Checks.load(recorded.checks if recorded is not None else None)

    # --- the phases ---------------------------------------------------------------------

    def _write(self) -> LiveNode:
        """The node's plan written in one PATCH with the checks the next phases make (in
        the journal), each catalogued state label removed; planned again on a conflict."""
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
            patch["metadata"]["annotations"].update(self.machine.recorded(checks=checks.data()))
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
                overlay(live.labels, planned.changes), live.allocatable, capacity=live.capacity
            )
            if isinstance(projected, mig.MigProblem) and not projected.unknown:
                self._fail(f"{self.node}: {projected}")
            # Unknown (no GPU count yet): the state label is waited for, nothing verified.
            if isinstance(projected, mig.Projected) and projected.layout is not None:
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
        """Record the failure in the node's journal (as far as the API lets us), then stop."""
        left = f"is left cordoned at {self.phase}"
        problem = self.machine.record_failure(reason)
        if problem is not None:
            left = (
                f"is left cordoned at {self.phase} (the failure could not be recorded: {problem})"
            )
        else:
            self._emit(Step(self.node, PHASE, ROLLOUT_FAILED_STATE))
        raise UpgradeFailed(f"{reason}; {self.node} {left}: fix the cause, then rerun")


def written(live: LiveNode, target: Mapping[str, str | None]) -> bool:
    """Every fact of `target` (shown key -> value, None: absent) on the node."""
    for shown, value in target.items():
        fact, key = parse_shown_key(shown)
        if BY_FACT[fact].get(live, key) != value:
            return False
    return True


def target_of(planned: NodePlan) -> dict[str, str | None]:
    """What a node's rollout writes: its disruptive facts (shown key -> value)."""
    return {c.shown_key: c.after for c in planned.changes if c.rollout}


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
    binding: Binding | None = None,
) -> list[NodeStatus]:
    """Every node with something to say, sorted: in a rollout (or failed in one, or
    carrying a journal no run may resume from: `foreign`), planning a disruptive change,
    with an operator state label not at a done value, or with its driver upgrade under way
    or failed. `pods` are the pods bound to those nodes, `budgets` the
    PodDisruptionBudgets by namespace, `binding` the rollouts' Leases."""
    catalogue = catalogue or disruptive.Catalogue.packaged()
    binding = binding or Binding.offline()
    on_node: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        on_node.setdefault(str((pod.get("spec") or {}).get("nodeName")), []).append(pod)
    found = []
    for live in sorted(nodes, key=lambda n: n.name):
        try:
            recorded = _recorded(live, binding)
        except Untrusted as e:
            found.append(NodeStatus(node=live.name, state=FOREIGN, blocked=True, reason=str(e)))
            continue
        entry = _node_status(
            live, recorded, live.name in planned, on_node.get(live.name, []), budgets, catalogue
        )
        if entry is None:
            continue
        since = recorded.since if recorded is not None and recorded.since else None
        seconds = _age(since, now)
        if entry.state == WAIT_REQUIRED and seconds is not None and seconds >= stuck_after:
            assert recorded is not None
            states = Checks.load(recorded.checks).states
            waiting = ", ".join(
                f"{t.label}={live.labels.get(t.label, '(not reported)')}"
                for t in catalogue.states()
                if live.labels.get(t.label) not in t.done and t.label in states
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


FOREIGN: Final = "foreign"


def _recorded(live: LiveNode, binding: Binding) -> journal.Journal | None:
    """The node's journal when a run could resume from it (Untrusted: foreign, stale, or
    contradicted by the node where it says the cordon is behind it)."""
    recorded = journal.read(live)
    if recorded is None:
        return None
    lease = binding.leases.get(recorded.lease)
    if lease is None or lease.rollout != recorded.rollout or live.name not in lease.nodes:
        raise Untrusted(
            f"its journal (rollout {recorded.rollout}, at {recorded.phase}) names no Lease of "
            f"that rollout listing {live.name}: stale or foreign; "
            + journal.ABANDON.format(node=live.name)
        )
    phases = {p.name: p for p in (*FactJob.PHASES, *Upgrade.PHASES)}
    phase = phases.get(recorded.phase)
    if phase is not None and Requires.CORDONED in phase.requires and not live.unschedulable:
        raise Untrusted(
            f"its journal says {recorded.phase}, but it is not cordoned: stale; "
            + journal.ABANDON.format(node=live.name)
        )
    return recorded


def _node_status(
    live: LiveNode,
    recorded: journal.Journal | None,
    planned: bool,
    pods: Sequence[Mapping[str, Any]],
    budgets: Mapping[str, Sequence[Mapping[str, Any]]],
    catalogue: disruptive.Catalogue,
) -> NodeStatus | None:
    name = live.name
    phase = recorded.phase if recorded is not None else None
    if recorded is not None and recorded.failed is not None:
        return NodeStatus(
            node=name,
            state=ROLLOUT_FAILED_STATE if recorded.work == "facts" else UPGRADE_FAILED,
            blocked=True,
            reason=f"failed at {phase}: {recorded.failed}",
        )
    if recorded is not None and recorded.work == "driver":
        return NodeStatus(node=name, state=str(phase))
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
