"""A change across a pool of nodes, whatever it does to each node (the `Work`: a driver
change, `DriverWork` here; disruptive facts, change.FactWork): every node preflighted
before the first write, batches simulated against the disruption budgets, then the
batches in order, never more nodes unavailable than allowed, gates asked between them.

Preflight reports every problem in one run: what the work refuses (for a driver: the
missing support-matrix rows, all of them, and the nodes that are not GPU nodes), and each
batch a budget would block, with the smallest change that lets it through (in desired/
when desired/ declares the budget). A budget blocks the preflight only if it could not
allow a batch's evictions even with every pod it expects healthy. What is short only for
now (the replacement of a pod the previous batch evicted is still starting) is waited for
before the batch starts, up to --timeout, as `kubectl drain` retries an eviction the
budget refuses and the GPU Operator's upgrade controller waits; the wait is said as a
`waiting: ...` note.

Execution stops at the first node that fails (unless `keep_going`), or where a gate
halts it: nodes not started are untouched, the failed one is left where the work leaves
it (a driver: `upgrade-failed`, cordoned if its drain had begun), and a rerun resumes.

The Rollout document (`RolloutDocument` as preflighted, `RolloutOutcome` after the run)
is the rollout as `upgrade -o json` and `rollout -o json` print it: frozen, its JSON dump
the document."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from reconcile.desired.models import DesiredState
from reconcile.diagnostics import NotFound, ReconcileError
from reconcile.engine import placement
from reconcile.engine.placement import DrainRoom
from reconcile.gpu import disruptive, drivers, journal
from reconcile.gpu.journal import Binding, Step, Untrusted
from reconcile.gpu.upgrade import (
    DRAIN_REQUIRED,
    STATE,
    UPGRADE_DONE,
    UPGRADE_FAILED,
    NodeOps,
    PodToEvict,
    Upgrade,
    UpgradeFailed,
    UpgradeRefused,
    at_target,
    budget_blockers,
    budget_waits,
    operator_midway,
    pods_to_evict,
    poll_intervals,
)
from reconcile.kube.api import NodeApi
from reconcile.kube.objects import LiveNode
from reconcile.kube.selector import SelectorError
from reconcile.kube.selector import parse as parse_selector

WAIT_POLL_SECONDS = 2.0
BUDGET_POLL_SECONDS = 1.0


@dataclass(frozen=True)
class RolloutRequest:
    """How a pool moves, whatever it does to each node: the nodes (NODEs or a selector),
    the pacing, the pods to wait for (the drain's own options are the NodeOps')."""

    nodes: tuple[str, ...] = ()
    selector: str | None = None
    max_parallel: int = 1
    # An absolute number or a percentage of the selection's GPU nodes ("25%", rounded up).
    max_unavailable: str = "25%"
    canary: str | None = None
    # Pods (a label selector) that must finish on a node before it is drained.
    wait_for_completion: str | None = None
    wait_timeout: float = 3600.0
    # A node's failure does not stop the others (it stays unavailable: the limit counts it).
    keep_going: bool = False


@dataclass(frozen=True)
class Batch:
    number: int
    nodes: tuple[str, ...]
    canary: bool = False
    # What its nodes down leave the cluster (the GPUs free elsewhere, the evicted pods
    # with no room there), as preflight finds it.
    room: DrainRoom | None = None


@dataclass(frozen=True)
class RolloutPlan:
    """What a rollout will do: the batches, the nodes already done, and the limit."""

    batches: tuple[Batch, ...]
    done: tuple[str, ...]
    limit: int

    @property
    def targets(self) -> list[str]:
        return [name for batch in self.batches for name in batch.nodes]


@dataclass(frozen=True)
class RolloutResult:
    done: tuple[str, ...]
    failed: tuple[tuple[str, str], ...]
    not_started: tuple[str, ...]
    skipped: tuple[str, ...]  # at the target before the run
    # Why a gate halted the rollout after a batch (the nodes after it not started).
    halted: str | None = None

    @property
    def ok(self) -> bool:
        return not self.failed and not self.not_started


# Asked after a batch whether the next may start: None, or why the rollout halts.
Gate = Callable[[Batch], "str | None"]


# --- the Rollout document -------------------------------------------------------------------


class _Document(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class BatchEntry(_Document):
    nodes: tuple[str, ...]
    canary: bool
    # With the batch down: each GPU resource free on the other schedulable nodes, and
    # the evicted pods that would find no room there.
    gpusFree: dict[str, int] = {}
    noRoom: tuple[str, ...] = ()


class FailedNode(_Document):
    node: str
    error: str


class StateEvent(_Document):
    """A node's upgrade state as it changed; `time` in UTC to the second (`...T12:00:00Z`)."""

    time: str
    node: str
    state: str


class RolloutDocument(_Document):
    """A pool's rollout as preflighted (a dry run's whole answer): the driver, the
    unavailability limit, the batches in order, the nodes already on the driver.
    `model_dump(mode="json")` is the document `upgrade -o json` prints, keys in this order."""

    apiVersion: Literal["reconcile.dev/v1alpha1"] = "reconcile.dev/v1alpha1"
    kind: Literal["Rollout"] = "Rollout"
    # What is rolled out: a driver version, or each node's disruptive facts (key ->
    # value, null to remove); the one not rolled out is left out of the document.
    driver: str | None = Field(default=None, exclude_if=lambda v: v is None)
    facts: dict[str, dict[str, str | None]] | None = Field(
        default=None, exclude_if=lambda v: v is None
    )
    dryRun: bool
    maxUnavailable: int
    batches: tuple[BatchEntry, ...]
    alreadyDone: tuple[str, ...]

    @classmethod
    def of(
        cls,
        plan: RolloutPlan,
        *,
        dry_run: bool,
        driver: str | None = None,
        facts: Mapping[str, Mapping[str, str | None]] | None = None,
    ) -> RolloutDocument:
        return cls(
            driver=driver,
            facts={n: dict(f) for n, f in facts.items()} if facts is not None else None,
            dryRun=dry_run,
            maxUnavailable=plan.limit,
            batches=tuple(
                BatchEntry(
                    nodes=b.nodes,
                    canary=b.canary,
                    gpusFree=dict(b.room.free) if b.room else {},
                    noRoom=b.room.no_room if b.room else (),
                )
                for b in plan.batches
            ),
            alreadyDone=plan.done,
        )


class RolloutOutcome(RolloutDocument):
    """The Rollout document after the run: the nodes upgraded, the one that failed (the
    run stops at the first), those not started, and each state change as it happened."""

    done: tuple[str, ...]
    failed: tuple[FailedNode, ...]
    notStarted: tuple[str, ...]
    events: tuple[StateEvent, ...]
    # Why a gate halted the rollout between batches (absent when none did).
    halted: str | None = Field(default=None, exclude_if=lambda v: v is None)

    @classmethod
    def after(
        cls, planned: RolloutDocument, result: RolloutResult, events: Sequence[StateEvent]
    ) -> RolloutOutcome:
        return cls(
            **dict(planned),
            done=result.done,
            failed=tuple(FailedNode(node=n, error=e) for n, e in result.failed),
            notStarted=result.not_started,
            events=tuple(events),
            halted=result.halted,
        )

    @property
    def ok(self) -> bool:
        return not self.failed and not self.notStarted

    @property
    def summary(self) -> str:
        """`<node> failed: <why>; done: ...; not started: ...` (`none` for an empty list)."""
        parts = [f"{f.node} failed: {f.error}" for f in self.failed]
        if self.halted is not None:
            parts.append(f"halted: {self.halted}")
        parts.append(f"done: {', '.join(self.done) or 'none'}")
        parts.append(f"not started: {', '.join(self.notStarted) or 'none'}")
        return "; ".join(parts)


def limit_of(max_unavailable: str, pool: int) -> int:
    """`N` or `P%` of `pool` (rounded up, as the operator's upgrade policy does); at least 1."""
    text = max_unavailable.strip()
    try:
        if text.endswith("%"):
            percent = int(text[:-1])
            if not 0 <= percent <= 100:
                raise ValueError
            return max(1, math.ceil(pool * percent / 100))
        value = int(text)
        if value < 1:
            raise ValueError
        return value
    except ValueError:
        raise UpgradeRefused(
            f"--max-unavailable {max_unavailable!r}: give a number of nodes (at least 1) or a "
            "percentage (e.g. 25%)"
        ) from None


def _unavailable(node: LiveNode) -> bool:
    return node.unschedulable or not node.ready


@dataclass(frozen=True)
class Sorted:
    """A selection sorted by the work: the nodes to do, those done already, the pool the
    unavailability limit counts (`N%` of it), what refuses the rollout, and the nodes
    left out with why."""

    todo: list[LiveNode]
    done: list[str]
    pool: list[LiveNode]
    problems: list[str]
    skipped: dict[str, str] = field(default_factory=dict)


class Work(Protocol):
    """What a rollout does to each node: a driver change (`DriverWork`), disruptive
    facts (change.FactWork). The rollout paces the nodes; the work knows its nodes."""

    @property
    def state_field(self) -> str:
        """The field of the Step that reports a node's state (a label, an annotation)."""
        ...

    @property
    def done_state(self) -> str:
        """That state's value once a node is done."""
        ...

    @property
    def nodes_selector(self) -> str | None:
        """A label selector of every node the work may take (None: any)."""
        ...

    @property
    def binding(self) -> Binding:
        """The rollout its nodes' journals belong to, and the Leases read before it."""
        ...

    def select(self, cluster: NodeApi, request: RolloutRequest) -> list[LiveNode]:
        """The nodes the request names, sorted (UpgradeRefused when it names none)."""
        ...

    def sort(self, selection: list[LiveNode]) -> Sorted: ...

    def evictable(self, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The node's pods that its drain moves."""
        ...

    def past_drain(self, live: LiveNode) -> bool:
        """A resumed node whose drain is behind it."""
        ...

    def resuming(self, live: LiveNode) -> bool:
        """A node an earlier run left midway (it may be cordoned by that run)."""
        ...

    def prepare(self, node: str) -> Callable[[], None]:
        """The node's own preflight (UpgradeRefused: nothing was written), then its run."""
        ...

    def fail_unstarted(self, node: str, reason: str) -> str:
        """A node whose batch could not start, marked as the work marks a failure; the
        failure as the rollout reports it."""
        ...

    def stop(self) -> None:
        """The rollout is stopping: nodes in flight may stop where they can resume."""
        ...


def node_selection(cluster: NodeApi, request: RolloutRequest) -> list[LiveNode]:
    """The NODEs of the request (each once) or the nodes its selector selects, sorted:
    UpgradeRefused for a node that does not exist or a selector that selects none."""
    if request.selector is not None:
        try:
            parse_selector(request.selector)
        except SelectorError as e:
            raise UpgradeRefused(f"--selector {request.selector!r}: {e}") from None
        found = cluster.list_nodes(label_selector=request.selector)
        if not found:
            raise UpgradeRefused(f"--selector {request.selector} selects no node")
        return sorted(found, key=lambda n: n.name)
    nodes, missing = [], []
    for name in dict.fromkeys(request.nodes):  # a node named twice is done once
        try:
            nodes.append(cluster.get_node(name))
        except NotFound:
            missing.append(name)
    if missing:
        raise UpgradeRefused(f"no such node: {', '.join(missing)} (nothing was changed)")
    return nodes


@dataclass(frozen=True)
class DriverWork:
    """A driver change on each node, as the GPU Operator's upgrade controller makes it
    (upgrade.py): GPU nodes only, each image in the support matrix, every pod drained."""

    version: str
    desired: DesiredState
    ops: NodeOps
    state_field: str = STATE
    done_state: str = UPGRADE_DONE
    nodes_selector: str | None = drivers.GPU_NODES
    binding: Binding = field(default_factory=Binding.offline)

    def _job(self, node: str) -> Upgrade:
        ops = self.ops
        return Upgrade(
            ops.cluster,
            node,
            self.version,
            self.desired.matrix_tags,
            ops.emit,
            ops.note,
            timeout=ops.timeout,
            ignore_daemonsets=ops.ignore_daemonsets,
            force=ops.force,
            sleep=ops.sleep,
            clock=ops.clock,
            declared=ops.declared,
            binding=self.binding,
        )

    def select(self, cluster: NodeApi, request: RolloutRequest) -> list[LiveNode]:
        if not self.desired.matrix:
            raise UpgradeRefused(
                "no support matrix in desired/drivers/: the target image cannot be checked"
            )
        return node_selection(cluster, request)

    def sort(self, selection: list[LiveNode]) -> Sorted:
        problems: list[str] = []
        not_gpu = [n.name for n in selection if not drivers.is_gpu_node(n.labels)]
        if not_gpu:
            problems.append(
                f'not GPU nodes ({drivers.GPU_PRESENT} is not "true"): {", ".join(not_gpu)}'
            )
        gpu = [n for n in selection if n.name not in not_gpu]
        done = [n.name for n in gpu if at_target(n, self.version)]
        todo = [n for n in gpu if n.name not in done]
        for node in todo:
            try:
                journal.trusted(node, self.binding, "driver", self.version)
            except Untrusted as e:
                problems.append(str(e))
                continue
            midway = operator_midway(node)
            if midway is not None:
                problems.append(midway.removesuffix(" (nothing was changed)"))
        missing: dict[str, list[str]] = {}
        major = drivers.split_driver_version(self.version)[0]
        for node in todo:
            labels = {**node.labels, drivers.DRIVER_MAJOR: major}
            try:
                tag = drivers.node_tag(node.name, labels)
            except drivers.TagError as e:
                problems.append(str(e))
                continue
            if tag not in self.desired.matrix_tags:
                row = f"{major},{labels[drivers.KERNEL]},{labels[drivers.OS_ID]}{labels[drivers.OS_VERSION]}"
                missing.setdefault(row, []).append(node.name)
        if missing:
            rows = "; ".join(
                f"`{row}` (for {', '.join(nodes)})" for row, nodes in sorted(missing.items())
            )
            problems.append(
                f"{len(missing)} driver image(s) are not in the support matrix: build and push "
                f"them, then add the row(s) to desired/drivers/: {rows}"
            )
        return Sorted(todo, done, gpu, problems)

    def evictable(self, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return pods  # a driver change takes every pod off the node, as kubectl drain

    def past_drain(self, live: LiveNode) -> bool:
        job = self._job(live.name)
        return job.start_index(live) > job.machine.names.index(DRAIN_REQUIRED)

    def resuming(self, live: LiveNode) -> bool:
        return journal.JOURNAL in live.annotations

    def prepare(self, node: str) -> Callable[[], None]:
        job = self._job(node)
        # The batch's budgets were waited for; an eviction still refused is retried
        # until --timeout by the drain.
        start, tag, evictions = job.preflight(self.ops.cluster.get_node(node), check_budgets=False)
        return lambda: job.run(start, tag, evictions)

    def stop(self) -> None:
        """Nothing: a node's upgrade in flight finishes (its states are brief)."""

    def fail_unstarted(self, node: str, reason: str) -> str:
        """Labelled upgrade-failed, as the operator marks a node it could not drain."""
        left = f"is labelled {UPGRADE_FAILED}"
        try:
            self.ops.cluster.patch_node(node, {"metadata": {"labels": {STATE: UPGRADE_FAILED}}})
        except ReconcileError as e:
            left = f"could not be labelled {UPGRADE_FAILED} ({e})"
        else:
            self.ops.emit(Step(node, STATE, UPGRADE_FAILED))
        return (
            f"{reason}; {node} {left}, neither cordoned nor drained by this run: let the "
            "budget recover (or change it), then rerun"
        )


class Rollout:
    def __init__(self, request: RolloutRequest, work: Work, ops: NodeOps) -> None:
        self.request = request
        self.work = work
        self.ops = ops
        self.cluster = ops.cluster
        self.note = ops.note
        self.sleep = ops.sleep
        self.clock = ops.clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._active: set[str] = set()  # started, not finished

    # --- preflight --------------------------------------------------------------------------

    def preflight(self) -> RolloutPlan:
        """Every problem of the whole rollout in one UpgradeRefused, or the plan."""
        request = self.request
        selection = self.work.select(self.cluster, request)
        names = [n.name for n in selection]
        if request.canary is not None and request.canary not in names:
            raise UpgradeRefused(f"--canary {request.canary} is not among the selected nodes")
        found = self.work.sort(selection)
        for node, why in found.skipped.items():
            self.note(f"{node} skipped: {why}")
        problems = list(found.problems)
        problems += journal.conflicts(self.work.binding, [n.name for n in found.todo])
        todo, done = found.todo, found.done
        limit = limit_of(request.max_unavailable, len(found.pool))
        # A node an earlier run left midway is unavailable by that run: it resumes first.
        already = [n.name for n in todo if _unavailable(n) and not self.work.resuming(n)] + [
            n.name for n in found.pool if n.name in done and _unavailable(n)
        ]
        if len(already) >= limit:
            problems.append(
                f"{len(already)} of the selected nodes are unavailable already "
                f"({', '.join(already)}), and --max-unavailable allows {limit}"
            )
        batches = self._batches([n.name for n in todo], min(request.max_parallel, limit))
        # One read of the nodes and of the pods on them for the whole rollout: what each
        # batch's drain evicts, and what its nodes down leave the others.
        live = self.cluster.list_nodes()
        pods = self.cluster.pods_on_nodes([n.name for n in live])
        on_node: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            on_node.setdefault(str((pod.get("spec") or {}).get("nodeName")), []).append(pod)
        evictions = {b.number: self._batch_evictions(b, on_node, problems) for b in batches}
        problems += self._budget_problems(batches, evictions)
        if problems:
            raise UpgradeRefused("; ".join(problems) + " (nothing was changed)")
        rooms = [
            replace(
                batch,
                room=placement.drain_room(
                    live,
                    batch.nodes,
                    pods,
                    (p.id for p in evictions[batch.number]),
                    disruptive.GPU_RESOURCES,
                ),
            )
            for batch in batches
        ]
        return RolloutPlan(tuple(rooms), tuple(done), limit)

    def _batches(self, names: list[str], width: int) -> list[Batch]:
        canary = self.request.canary
        batches: list[Batch] = []
        if canary is not None and canary in names:
            batches.append(Batch(1, (canary,), canary=True))
            names = [n for n in names if n != canary]
        width = max(1, width)
        for start in range(0, len(names), width):
            batches.append(Batch(len(batches) + 1, tuple(names[start : start + width])))
        return batches

    def _drained(self, pods: list[dict[str, Any]]) -> list[PodToEvict]:
        return pods_to_evict(
            self.work.evictable(pods),
            ignore_daemonsets=self.ops.ignore_daemonsets,
            force=self.ops.force,
        )

    def _batch_evictions(
        self, batch: Batch, on_node: Mapping[str, list[dict[str, Any]]], problems: list[str]
    ) -> list[PodToEvict]:
        """The pods a drain of the batch's nodes evicts; a node that cannot be drained
        adds its problem."""
        evictions: list[PodToEvict] = []
        for node in batch.nodes:
            try:
                evictions += self._drained(on_node.get(node, []))
            except UpgradeRefused as e:
                problems.append(f"{node}: {e}")
        return evictions

    def _budget_problems(
        self, batches: Sequence[Batch], evictions_of: Mapping[int, Sequence[PodToEvict]]
    ) -> list[str]:
        """Each batch's evictions, all at once, against what the budgets allow at best:
        a budget short only until pods now starting are Ready is waited for, not refused."""
        problems: list[str] = []
        budgets: dict[str, list[dict[str, Any]]] = {}
        for batch in batches:
            evictions = list(evictions_of[batch.number])
            for namespace in sorted({p.namespace for p in evictions} - budgets.keys()):
                budgets[namespace] = self.cluster.budgets(namespace)
            subject = f"batch {batch.number} ({', '.join(batch.nodes)})"
            problems += budget_blockers(
                evictions, budgets, subject, self.ops.declared, at_best=True
            )
        return problems

    # --- execution --------------------------------------------------------------------------

    def run(
        self, plan: RolloutPlan, gate: Gate | None = None, *, gate_last: bool = False
    ) -> RolloutResult:
        """The batches in order until done, the first failure, or `stop()`. `gate`, when
        given, is asked after each batch but the last (and the last too, `gate_last`: a
        fleet's next wave waits for it) whether the next may start: None lets it, a
        reason halts the rollout there (the nodes after it not started)."""
        done: list[str] = []
        failed: list[tuple[str, str]] = []
        started: set[str] = set()
        halted: str | None = None
        selection = set(plan.targets) | set(plan.done)
        keep_going = self.request.keep_going
        for index, batch in enumerate(plan.batches):
            if (failed and not keep_going) or halted or self._stop.is_set():
                break
            try:
                blocked = self._wait_for_budgets(batch)
            except ReconcileError as e:  # the API failed while waiting: nothing was done
                started.add(batch.nodes[0])
                failed.append((batch.nodes[0], f"{e}; nothing was done to {batch.nodes[0]}"))
                break
            if blocked is not None:
                for node in batch.nodes:
                    started.add(node)
                    failed.append((node, self.work.fail_unstarted(node, blocked)))
                break

            def one(node: str) -> None:
                if (failed and not keep_going) or self._stop.is_set():
                    return
                try:
                    self._wait_for_room(node, selection, plan.limit)
                    with self._lock:
                        started.add(node)
                    self._run_node(node)
                except ReconcileError as e:
                    with self._lock:
                        failed.append((node, str(e)))
                    return
                finally:
                    with self._lock:
                        self._active.discard(node)
                with self._lock:
                    done.append(node)

            with ThreadPoolExecutor(max_workers=len(batch.nodes)) as pool:
                list(pool.map(one, batch.nodes))
            last = index == len(plan.batches) - 1 and not gate_last
            healthy = not failed or keep_going
            if gate is not None and healthy and not last and not self._stop.is_set():
                halted = gate(batch)
        not_started = tuple(n for n in plan.targets if n not in started)
        return RolloutResult(tuple(sorted(done)), tuple(failed), not_started, plan.done, halted)

    def stop(self) -> None:
        """Start no other node; the ones in flight stop where the work can (a driver
        upgrade finishes, a fact rollout stops at its next wait, resumable there)."""
        self._stop.set()
        self.work.stop()

    def _wait_for_room(self, node: str, selection: set[str], limit: int) -> None:
        """Before a cordon: the live unavailable count of the selection, with this node,
        may not exceed the limit. Waits (another node of the batch may be uncordoning)."""
        deadline = self.clock() + self.ops.timeout
        pauses = poll_intervals(WAIT_POLL_SECONDS)
        while True:
            with self._lock:
                live = [
                    n
                    for n in self.cluster.list_nodes(label_selector=self.work.nodes_selector)
                    if n.name in selection
                ]
                # Nodes of this run already started count even before their cordon lands.
                busy = {n.name for n in live if _unavailable(n)} | self._active
                if node in busy or len(busy | {node}) <= limit:
                    self._active.add(node)
                    return
            if self.clock() >= deadline:
                raise UpgradeFailed(
                    f"{node}: {len(busy)} selected node(s) stayed unavailable "
                    f"({', '.join(sorted(busy))}) for {self.ops.timeout:g}s: "
                    f"--max-unavailable allows {limit}; nothing was done to {node}"
                )
            self.sleep(next(pauses))

    def _evictions(self, node: str) -> list[PodToEvict]:
        """What the node's drain will evict (none when a resumed run is past its drain,
        or when the node's own preflight will refuse it, and say why)."""
        if self.work.past_drain(self.cluster.get_node(node)):
            return []
        try:
            return self._drained(self.cluster.pods_on(node))
        except UpgradeRefused:
            return []

    def _wait_for_budgets(self, batch: Batch) -> str | None:
        """Before any node of the batch is cordoned: the budgets allow the evictions of
        all its nodes at once, waiting up to --timeout for them to (a replacement pod of
        the previous batch may still be starting). None when they do, or when the rollout
        is stopped; else why they did not in time."""
        subject = f"batch {batch.number} ({', '.join(batch.nodes)})"
        timeout = self.ops.timeout
        deadline = self.clock() + timeout
        said: list[str] = []
        pauses = poll_intervals(BUDGET_POLL_SECONDS)
        while True:
            evictions = [pod for node in batch.nodes for pod in self._evictions(node)]
            namespaces = sorted({p.namespace for p in evictions})
            budgets = {ns: self.cluster.budgets(ns) for ns in namespaces}
            waits = budget_waits(evictions, budgets, subject)
            if not waits or self._stop.is_set():
                return None
            if self.clock() >= deadline:
                return (
                    f"timed out after {timeout:g}s waiting for the budgets to "
                    f"allow the drain of {subject}: " + "; ".join(waits)
                )
            if waits != said:  # said when the reason changes, not at every poll
                said = waits
                for reason in waits:
                    self.note(
                        f"waiting: {reason}; {subject} starts when it allows the drain "
                        f"(up to {timeout:g}s)"
                    )
            self.sleep(min(next(pauses), max(0.0, deadline - self.clock())))

    def _run_node(self, node: str) -> None:
        run = self.work.prepare(node)
        if self.request.wait_for_completion:
            self._wait_for_pods(node)
        run()

    def _wait_for_pods(self, node: str) -> None:
        """The operator's waitForCompletion: pods matching the selector on the node finish
        (Succeeded or Failed, or gone) before it is drained."""
        selector = parse_selector(str(self.request.wait_for_completion))
        deadline = self.clock() + self.request.wait_timeout
        pauses = poll_intervals(WAIT_POLL_SECONDS)
        while True:
            running = [
                str((p.get("metadata") or {}).get("name"))
                for p in self.cluster.pods_on(node)
                if selector.matches((p.get("metadata") or {}).get("labels") or {})
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            ]
            if not running:
                return
            if self.clock() >= deadline:
                raise UpgradeFailed(
                    f"{node}: pods still running after --wait-timeout "
                    f"{self.request.wait_timeout:g}s: {', '.join(running)}; nothing was done to "
                    f"{node}"
                )
            self.ops.emit(Step(node, "waiting-for", ",".join(running)))
            self.sleep(next(pauses))
