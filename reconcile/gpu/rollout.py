"""A driver change across a pool of nodes: every node preflighted before the first write,
batches simulated against the disruption budgets, then the batches in order, each node
walking the GPU Operator's states (upgrade.py), never more nodes unavailable than allowed.

Preflight reports every problem in one run: the missing support-matrix rows (all of
them), the nodes that are not GPU nodes, and each batch a budget would block, with the
smallest change that lets it through (in desired/ when desired/ declares the budget).
A budget blocks the preflight only if it could not allow a batch's evictions even with
every pod it expects healthy. What is short only for now (the replacement of a pod the
previous batch evicted is still starting) is waited for before the batch starts, up to
--timeout, as `kubectl drain` retries an eviction the budget refuses and the GPU
Operator's upgrade controller waits; the wait is said as a `waiting: ...` note.

Execution stops at the first node that fails: nodes not started are untouched, the failed
one is left in `upgrade-failed` (cordoned if its drain had begun), and a rerun resumes
(nodes at the target driver are skipped and listed as done).

The Rollout document (`RolloutDocument` as preflighted, `RolloutOutcome` after the run)
is the rollout as `upgrade -o json` prints it: frozen, its JSON dump the document.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from reconcile.desired.models import DesiredState
from reconcile.diagnostics import NotFound, ReconcileError
from reconcile.engine import placement
from reconcile.engine.placement import DrainRoom
from reconcile.gpu import disruptive, drivers
from reconcile.gpu.upgrade import (
    DRAIN_REQUIRED,
    STATE,
    STATES,
    UPGRADE_FAILED,
    Declared,
    PodToEvict,
    Step,
    Upgrade,
    UpgradeFailed,
    UpgradeRefused,
    at_target,
    budget_blockers,
    budget_waits,
    pods_to_evict,
)
from reconcile.kube.api import NodeApi
from reconcile.kube.objects import LiveNode
from reconcile.kube.selector import SelectorError
from reconcile.kube.selector import parse as parse_selector

WAIT_POLL_SECONDS = 2.0
BUDGET_POLL_SECONDS = 1.0


@dataclass(frozen=True)
class RolloutRequest:
    version: str
    desired: DesiredState
    nodes: tuple[str, ...] = ()
    selector: str | None = None
    max_parallel: int = 1
    # An absolute number or a percentage of the selection's GPU nodes ("25%", rounded up).
    max_unavailable: str = "25%"
    canary: str | None = None
    # Pods (a label selector) that must finish on a node before it is drained.
    wait_for_completion: str | None = None
    wait_timeout: float = 3600.0
    timeout: float = 300.0
    ignore_daemonsets: bool = False
    force: bool = False


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
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def targets(self) -> list[str]:
        return [name for batch in self.batches for name in batch.nodes]


@dataclass(frozen=True)
class RolloutResult:
    done: tuple[str, ...]
    failed: tuple[tuple[str, str], ...]
    not_started: tuple[str, ...]
    skipped: tuple[str, ...]  # at the target before the run

    @property
    def ok(self) -> bool:
        return not self.failed and not self.not_started


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
    driver: str
    dryRun: bool
    maxUnavailable: int
    batches: tuple[BatchEntry, ...]
    alreadyDone: tuple[str, ...]

    @classmethod
    def of(cls, version: str, plan: RolloutPlan, *, dry_run: bool) -> RolloutDocument:
        return cls(
            driver=version,
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
        )

    @property
    def ok(self) -> bool:
        return not self.failed and not self.notStarted

    @property
    def summary(self) -> str:
        """`<node> failed: <why>; done: ...; not started: ...` (`none` for an empty list)."""
        parts = [f"{f.node} failed: {f.error}" for f in self.failed]
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


class Rollout:
    def __init__(
        self,
        request: RolloutRequest,
        cluster: NodeApi,
        *,
        emit: Callable[[Step], None],
        note: Callable[[str], None],
        declared: Declared,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.request = request
        self.cluster = cluster
        self.emit = emit
        self.note = note
        self.declared = declared
        self.sleep = sleep
        self.clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._active: set[str] = set()  # started, not finished

    # --- which nodes ------------------------------------------------------------------------

    def _selection(self) -> list[LiveNode]:
        request = self.request
        if request.selector is not None:
            try:
                parse_selector(request.selector)
            except SelectorError as e:
                raise UpgradeRefused(f"--selector {request.selector!r}: {e}") from None
            found = self.cluster.list_nodes(label_selector=request.selector)
            if not found:
                raise UpgradeRefused(f"--selector {request.selector} selects no node")
            return sorted(found, key=lambda n: n.name)
        nodes, missing = [], []
        for name in dict.fromkeys(request.nodes):  # a node named twice is upgraded once
            try:
                nodes.append(self.cluster.get_node(name))
            except NotFound:
                missing.append(name)
        if missing:
            raise UpgradeRefused(f"no such node: {', '.join(missing)} (nothing was changed)")
        return nodes

    # --- preflight --------------------------------------------------------------------------

    def _job(self, node: str) -> Upgrade:
        request = self.request
        return Upgrade(
            self.cluster,
            node,
            request.version,
            request.desired.matrix_tags,
            self.emit,
            self.note,
            timeout=request.timeout,
            ignore_daemonsets=request.ignore_daemonsets,
            force=request.force,
            sleep=self.sleep,
            clock=self.clock,
            declared=self.declared,
        )

    def preflight(self) -> RolloutPlan:
        """Every problem of the whole rollout in one UpgradeRefused, or the plan."""
        request = self.request
        if not request.desired.matrix:
            raise UpgradeRefused(
                "no support matrix in desired/drivers/: the target image cannot be checked"
            )
        selection = self._selection()
        names = [n.name for n in selection]
        if request.canary is not None and request.canary not in names:
            raise UpgradeRefused(f"--canary {request.canary} is not among the selected nodes")
        problems: list[str] = []
        not_gpu = [n.name for n in selection if not drivers.is_gpu_node(n.labels)]
        if not_gpu:
            problems.append(
                f'not GPU nodes ({drivers.GPU_PRESENT} is not "true"): {", ".join(not_gpu)}'
            )
        gpu = [n for n in selection if n.name not in not_gpu]
        done = [n.name for n in gpu if at_target(n, request.version)]
        todo = [n for n in gpu if n.name not in done]
        tags: dict[str, str] = {}
        missing: dict[str, list[str]] = {}
        for node in todo:
            job = self._job(node.name)
            labels = {**node.labels, drivers.DRIVER_MAJOR: job.major}
            try:
                tag = drivers.node_tag(node.name, labels)
            except drivers.TagError as e:
                problems.append(str(e))
                continue
            tags[node.name] = tag
            if tag not in request.desired.matrix_tags:
                row = f"{job.major},{labels[drivers.KERNEL]},{labels[drivers.OS_ID]}{labels[drivers.OS_VERSION]}"
                missing.setdefault(row, []).append(node.name)
        if missing:
            rows = "; ".join(
                f"`{row}` (for {', '.join(nodes)})" for row, nodes in sorted(missing.items())
            )
            problems.append(
                f"{len(missing)} driver image(s) are not in the support matrix: build and push "
                f"them, then add the row(s) to desired/drivers/: {rows}"
            )
        limit = limit_of(request.max_unavailable, len(gpu))
        already = [n.name for n in todo if _unavailable(n)] + [
            n.name for n in gpu if n.name in done and _unavailable(n)
        ]
        if len(already) >= limit:
            problems.append(
                f"{len(already)} of the selected GPU nodes are unavailable already "
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
        return RolloutPlan(tuple(rooms), tuple(done), limit, tags)

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

    def _batch_evictions(
        self, batch: Batch, on_node: Mapping[str, list[dict[str, Any]]], problems: list[str]
    ) -> list[PodToEvict]:
        """The pods a drain of the batch's nodes evicts; a node that cannot be drained
        adds its problem."""
        evictions: list[PodToEvict] = []
        for node in batch.nodes:
            try:
                evictions += pods_to_evict(
                    on_node.get(node, []),
                    ignore_daemonsets=self.request.ignore_daemonsets,
                    force=self.request.force,
                )
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
            problems += budget_blockers(evictions, budgets, subject, self.declared, at_best=True)
        return problems

    # --- execution --------------------------------------------------------------------------

    def run(self, plan: RolloutPlan) -> RolloutResult:
        done: list[str] = []
        failed: list[tuple[str, str]] = []
        started: set[str] = set()
        selection = set(plan.targets) | set(plan.done)
        for batch in plan.batches:
            if failed or self._stop.is_set():
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
                    failed.append((node, self._fail_unstarted(node, blocked)))
                break

            def one(node: str) -> None:
                if failed or self._stop.is_set():
                    return
                try:
                    self._wait_for_room(node, selection, plan.limit)
                    with self._lock:
                        started.add(node)
                    self._upgrade(node)
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
        not_started = tuple(n for n in plan.targets if n not in started)
        return RolloutResult(tuple(sorted(done)), tuple(failed), not_started, plan.done)

    def stop(self) -> None:
        """Start no other node (the ones in flight finish their current upgrade)."""
        self._stop.set()

    def _wait_for_room(self, node: str, selection: set[str], limit: int) -> None:
        """Before a cordon: the live unavailable count of the selection, with this node,
        may not exceed the limit. Waits (another node of the batch may be uncordoning)."""
        deadline = self.clock() + self.request.timeout
        while True:
            with self._lock:
                live = [
                    n
                    for n in self.cluster.list_nodes(label_selector=drivers.GPU_NODES)
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
                    f"({', '.join(sorted(busy))}) for {self.request.timeout:g}s: "
                    f"--max-unavailable allows {limit}; nothing was done to {node}"
                )
            self.sleep(WAIT_POLL_SECONDS)

    def _evictions(self, node: str) -> list[PodToEvict]:
        """What the node's drain will evict (none when a resumed run is past its drain,
        or when the node's own preflight will refuse it, and say why)."""
        if self._job(node).start_index(self.cluster.get_node(node)) > STATES.index(DRAIN_REQUIRED):
            return []
        try:
            return pods_to_evict(
                self.cluster.pods_on(node),
                ignore_daemonsets=self.request.ignore_daemonsets,
                force=self.request.force,
            )
        except UpgradeRefused:
            return []

    def _wait_for_budgets(self, batch: Batch) -> str | None:
        """Before any node of the batch is cordoned: the budgets allow the evictions of
        all its nodes at once, waiting up to --timeout for them to (a replacement pod of
        the previous batch may still be starting). None when they do, or when the rollout
        is stopped; else why they did not in time."""
        subject = f"batch {batch.number} ({', '.join(batch.nodes)})"
        deadline = self.clock() + self.request.timeout
        said: list[str] = []
        while True:
            evictions = [pod for node in batch.nodes for pod in self._evictions(node)]
            namespaces = sorted({p.namespace for p in evictions})
            budgets = {ns: self.cluster.budgets(ns) for ns in namespaces}
            waits = budget_waits(evictions, budgets, subject)
            if not waits or self._stop.is_set():
                return None
            if self.clock() >= deadline:
                return (
                    f"timed out after {self.request.timeout:g}s waiting for the budgets to "
                    f"allow the drain of {subject}: " + "; ".join(waits)
                )
            if waits != said:  # said when the reason changes, not at every poll
                said = waits
                for reason in waits:
                    self.note(
                        f"waiting: {reason}; {subject} starts when it allows the drain "
                        f"(up to {self.request.timeout:g}s)"
                    )
            self.sleep(min(BUDGET_POLL_SECONDS, max(0.0, deadline - self.clock())))

    def _fail_unstarted(self, node: str, reason: str) -> str:
        """A node whose batch could not start: labelled upgrade-failed, as the operator
        marks a node it could not drain; the failure as the rollout reports it."""
        left = f"is labelled {UPGRADE_FAILED}"
        try:
            self.cluster.patch_node(node, {"metadata": {"labels": {STATE: UPGRADE_FAILED}}})
        except ReconcileError as e:
            left = f"could not be labelled {UPGRADE_FAILED} ({e})"
        else:
            self.emit(Step(node, STATE, UPGRADE_FAILED))
        return (
            f"{reason}; {node} {left}, neither cordoned nor drained by this run: let the "
            "budget recover (or change it), then rerun"
        )

    def _upgrade(self, node: str) -> None:
        job = self._job(node)
        live = self.cluster.get_node(node)
        # The batch's budgets were waited for; an eviction still refused is retried
        # until --timeout by the drain.
        start, tag, evictions = job.preflight(live, check_budgets=False)
        if self.request.wait_for_completion:
            self._wait_for_pods(node)
        job.run(start, tag, evictions)

    def _wait_for_pods(self, node: str) -> None:
        """The operator's waitForCompletion: pods matching the selector on the node finish
        (Succeeded or Failed, or gone) before it is drained."""
        selector = parse_selector(str(self.request.wait_for_completion))
        deadline = self.clock() + self.request.wait_timeout
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
            self.emit(Step(node, "waiting-for", ",".join(running)))
            self.sleep(WAIT_POLL_SECONDS)
