"""Continuous reconciliation: the plan, kept current by a watch of the nodes.

The nodes are listed once and then followed with a WATCH (bookmarks on); each event
re-plans that one node against the desired/ tree in force. Workload objects are
re-planned on a resync interval and whenever the tree changes. A new tree that does not
validate is reported and the last valid one stays in force: nothing is ever corrected
toward an invalid tree, nor toward a tree whose full plan has a finding that blocks
`apply` (running pods a NoExecute taint evicts, a missing driver image, an object the
server rejects). A node event re-plans that node alone: a correction that would put a
NoExecute taint on it looks at the node's pods first. A tree that declares nothing at all
is taken for an invalid one (a checkout in progress or an emptied volume looks like
that), unless an empty tree was allowed (`allow_empty_prune`).

Corrections (`correct`) are `apply`'s own one-request writes with their resourceVersion
precondition. A full plan's corrections (the first one's, a resync's) go out `parallel`
at a time, each node's Event right after its write; an event's correction is made at
once, on the loop's thread. A fact corrected more than `flap_limit` times in
`flap_window` on a node is another writer fighting reconcile: it is left alone for a
backoff that doubles each time the fight resumes, and reported once per backoff with the
writer's name.

In the steady state the only requests are the open watch (renewed every
`watch_timeout`) and the resync; nothing polls the cluster.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from reconcile import diagnostics as diag
from reconcile.desired.models import DesiredState
from reconcile.diagnostics import Diagnostic, EmptyPrune, ReconcileError
from reconcile.engine import operations, placement
from reconcile.engine.checks import Check
from reconcile.engine.diff import NodeChange
from reconcile.engine.facts import Fact, shown_value, taints_after
from reconcile.engine.findings import NodePolicy, blocking
from reconcile.engine.grants import Rule
from reconcile.engine.groups import node_facts
from reconcile.engine.leader import micro_time
from reconcile.engine.nodes.apply import apply_node
from reconcile.engine.nodes.plan import plan_node
from reconcile.engine.objects.apply import apply_objects
from reconcile.engine.objects.plan import desired_configs
from reconcile.engine.plan import NodePlan, ObjectPlan, Plan
from reconcile.engine.results import NodeResult
from reconcile.kube.objects import FIELD_MANAGER, LiveNode, NodeEvent

log = logging.getLogger(__name__)

# Where `--correct` records Events about nodes: events about cluster-scoped objects live
# in `default`.
EVENT_NAMESPACE: Final = "default"
RBAC: Final = (
    Rule("", ("nodes",), ("watch",), why="`watch` follows them"),
    Rule(
        "events.k8s.io",
        ("events",),
        ("create",),
        why="`watch --correct` records an Event on each node it corrects "
        "(events about cluster-scoped objects live in default)",
        where=EVENT_NAMESPACE,
    ),
)

# Largest Event note the API server accepts (events.k8s.io/v1: 1 KiB).
NOTE_LIMIT = 1024


class Trees(Protocol):
    """The desired/ tree as it is now on disk."""

    def fingerprint(self) -> object:
        """Changes whenever the tree may have changed (cheap: no parsing)."""
        ...

    def load(self) -> tuple[DesiredState, list[Diagnostic]]: ...


class WatchObserver(Protocol):
    """What a watch reports as it goes (the command line prints it, and its metrics count it)."""

    def drift(self, node: str, changes: Sequence[NodeChange]) -> None:
        """Drift that has just appeared on a node (not yet corrected)."""

    def object_drift(self, objects: Sequence[ObjectPlan]) -> None:
        """Workload objects that have just drifted."""

    def corrected(self, node: str, changes: Sequence[NodeChange]) -> None:
        """Changes written to a node."""

    def corrected_objects(self, objects: Sequence[ObjectPlan]) -> None:
        """Objects written."""

    def failed(self, subject: str, message: str) -> None:
        """A correction that did not go through, or a plan that could not be made."""

    def flap(self, node: str, key: str, writer: str, backoff: float) -> None:
        """Another writer keeps undoing a correction: left alone for `backoff` seconds."""

    def tree(self, digest: str, problems: Sequence[Diagnostic]) -> None:
        """A new desired/ tree was read: in force when `problems` holds no error (also
        when it is the tree in force again, after an invalid one)."""

    def blocked(self, findings: Sequence[str]) -> None:
        """The tree in force has findings that block corrections (empty: none now)."""

    def synced(self, drift: Mapping[str, int]) -> None:
        """The plan is current: drifted facts by kind (label, annotation, taint, object)."""

    def restarted(self, reason: str) -> None:
        """The watch broke or expired and the nodes are listed again."""

    def ready(self) -> None:
        """The first full plan is made."""


class QuietObserver:
    """Hears everything, says nothing (a library user's default)."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


@dataclass(frozen=True)
class WatchRequest:
    # What planning is asked for (prune and its guards); the tree is filled in per load.
    planning: operations.PlanRequest
    correct: bool = False
    allow_refused: bool = False
    # Nodes a full plan corrects at once (apply's --parallel): never more writes in flight.
    parallel: int = 8
    resync: float = 600.0
    desired_interval: float = 5.0
    watch_timeout: int = 300
    flap_limit: int = 3
    flap_window: float = 600.0
    flap_backoff: float = 60.0
    flap_backoff_max: float = 3600.0
    # Where Events about nodes go.
    event_namespace: str = EVENT_NAMESPACE
    instance: str = "reconcile"
    # How long to wait before listing again after the API server could not be reached.
    retry_after: float = 5.0


@dataclass
class _Hold:
    until: float
    backoff: float


@dataclass(frozen=True)
class _Correction:
    """The part of a node's plan to write now, and those of its changes not yet reported."""

    plan: NodePlan
    live: LiveNode
    unsaid: tuple[NodeChange, ...]


@dataclass(frozen=True)
class _Relist:
    reason: str


@dataclass(frozen=True)
class _Replan:
    reason: str


@dataclass
class _Flaps:
    """Corrections per (node, fact) in the window, and the facts left alone for now."""

    limit: int
    window: float
    first_backoff: float
    max_backoff: float
    seen: dict[tuple[str, str], deque[float]] = field(default_factory=dict)
    held: dict[tuple[str, str], _Hold] = field(default_factory=dict)

    def holding(self, node: str, key: str, now: float) -> bool:
        hold = self.held.get((node, key))
        return hold is not None and now < hold.until

    def corrected(self, node: str, key: str, now: float) -> float | None:
        """Count a correction; the backoff starting now when it makes a flap, else None."""
        times = self.seen.setdefault((node, key), deque())
        times.append(now)
        while times and times[0] <= now - self.window:
            times.popleft()
        if len(times) <= self.limit:
            return None
        times.clear()
        previous = self.held.get((node, key))
        backoff = (
            self.first_backoff if previous is None else min(previous.backoff * 2, self.max_backoff)
        )
        self.held[(node, key)] = _Hold(now + backoff, backoff)
        return backoff

    def forget(self, node: str) -> None:
        for table in (self.seen, self.held):
            for key in [k for k in table if k[0] == node]:
                del table[key]


class Watcher:
    def __init__(
        self,
        request: WatchRequest,
        cluster: operations.PlanCluster,
        trees: Trees,
        *,
        policy_for: Callable[[DesiredState], NodePolicy],
        checks: Sequence[Check] = operations.ENGINE_CHECKS,
        observer: WatchObserver | None = None,
        may_write: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.request = request
        self.cluster = cluster
        self.trees = trees
        self.policy_for = policy_for
        self.checks = checks
        self.observer: WatchObserver = observer or QuietObserver()
        self.may_write = may_write
        self.clock = clock
        self.events: queue.Queue[NodeEvent | _Relist | _Replan] = queue.Queue()
        self.nodes: dict[str, LiveNode] = {}
        self.state = DesiredState()
        self.policy: NodePolicy | None = None
        self.fingerprint: object = None
        self.tree_valid = True  # the newest tree read is the one in force
        self.prune = request.planning.options.prune  # off for a tree whose prune was refused
        self.blocking: list[str] = []
        self.node_drift: dict[str, tuple[NodeChange, ...]] = {}
        self.object_drift: dict[str, tuple[Any, ...]] = {}
        # Node changes held back because they evict running pods (node -> the changes),
        # until a full plan looks at the pods again.
        self.evicting: dict[str, tuple[NodeChange, ...]] = {}
        self.flaps = _Flaps(
            request.flap_limit, request.flap_window, request.flap_backoff, request.flap_backoff_max
        )
        self._stream_generation = 0
        self._stop = threading.Event()  # run()'s: set, no node write is started

    # --- the loop ---------------------------------------------------------------------------

    def load(self) -> None:
        """Read the tree: InvalidInput when it is invalid (there is no tree to keep)."""
        self.fingerprint = self.trees.fingerprint()
        state, problems = self._read()
        if diag.has_errors(problems):
            raise diag.InvalidInput(problems)
        self._take(state, problems)

    def start(self, stop: threading.Event | None = None) -> None:
        """List the nodes and make the first full plan (the tree read first if need be);
        once `stop` is set, no further correction is started."""
        if stop is not None:
            self._stop = stop
        if self.policy is None:
            self.load()
        self._relist()
        self.observer.ready()

    def run(self, stop: threading.Event) -> None:
        """Follow the nodes until `stop` is set; the writes in progress finish first."""
        self._stop = stop
        next_resync = self.clock() + self.request.resync
        next_poll = self.clock() + self.request.desired_interval
        while not stop.is_set():
            # At most a second: a signal that set `stop` is seen soon after.
            wait = min(1.0, max(0.0, min(next_resync, next_poll) - self.clock()))
            try:
                item = self.events.get(timeout=wait)
            except queue.Empty:
                item = None
            if stop.is_set():
                return
            if isinstance(item, NodeEvent):
                self._on_node(item)
            elif isinstance(item, _Relist):
                self.observer.restarted(item.reason)
                self._relist_until_done(stop)
            elif isinstance(item, _Replan) and item.reason != "wake":
                self._full_plan()
            now = self.clock()
            if now >= next_poll:
                next_poll = now + self.request.desired_interval
                if self._poll_tree():
                    self._full_plan()
                    next_resync = now + self.request.resync
            if now >= next_resync:
                next_resync = now + self.request.resync
                self._full_plan()

    def wake(self) -> None:
        """Have `run` look at its stop event now (not at its next tick)."""
        self.events.put(_Replan("wake"))

    def replan_soon(self, reason: str) -> None:
        """Ask for a full plan (e.g. this replica has just become the leader)."""
        self.events.put(_Replan(reason))

    # --- reading the cluster ----------------------------------------------------------------

    def _relist(self) -> None:
        nodes, version = self.cluster.list_nodes_at()
        self.nodes = {node.name: node for node in nodes}
        for gone in set(self.node_drift) - set(self.nodes):
            del self.node_drift[gone]
        self._full_plan()
        self._stream_generation += 1
        threading.Thread(
            target=self._stream,
            args=(version, self._stream_generation),
            name="reconcile-watch",
            daemon=True,
        ).start()

    def _relist_until_done(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self._relist()
                return
            except ReconcileError as error:
                self.observer.failed("nodes", str(error))
                stop.wait(self.request.retry_after)

    def _stream(self, version: str, generation: int) -> None:
        """Feed node events into the queue; on a break or 410, ask for a fresh LIST."""
        while generation == self._stream_generation:
            try:
                for event in self.cluster.watch_nodes(
                    version, timeout_seconds=self.request.watch_timeout
                ):
                    version = event.resource_version or version
                    if event.type != "BOOKMARK":
                        self.events.put(event)
            except ReconcileError as error:
                self.events.put(_Relist(str(error)))
                return
            # The server ended the stream after timeout_seconds: go on from where it was.

    # --- the tree ---------------------------------------------------------------------------

    def _read(self) -> tuple[DesiredState, list[Diagnostic]]:
        """The tree on disk and its problems, an empty tree one of them (unless allowed)."""
        state, problems = self.trees.load()
        empty = not (state.nodes or state.groups or state.matrix or state.manifests)
        if (
            empty
            and not diag.has_errors(problems)
            and not self.request.planning.options.allowEmptyPrune
        ):
            problems = [
                *problems,
                diag.error(
                    "desired/ declares nothing",
                    detail=(
                        "no node file, group, driver matrix or workload: taken for a checkout "
                        "in progress or an emptied volume, not as the end of every fact "
                        "(--allow-empty-prune takes an empty tree)"
                    ),
                ),
            ]
        return state, problems

    def _poll_tree(self) -> bool:
        """True when a new valid tree is in force."""
        fingerprint = self.trees.fingerprint()
        if fingerprint == self.fingerprint:
            return False
        self.fingerprint = fingerprint
        state, problems = self._read()
        if diag.has_errors(problems):
            self.tree_valid = False
            self.observer.tree(state.digest, problems)  # the last valid tree stays
            return False
        if state.digest == self.state.digest:
            if not self.tree_valid:  # the tree in force is back (a bad edit reverted)
                self.tree_valid = True
                self.observer.tree(state.digest, problems)
            return False
        self._take(state, problems)
        return True

    def _take(self, state: DesiredState, problems: Sequence[Diagnostic]) -> None:
        self.tree_valid = True
        self.state = state
        self.policy = self.policy_for(state)
        self.prune = self.request.planning.options.prune
        self.observer.tree(state.digest, problems)

    # --- planning and correcting ------------------------------------------------------------

    def _full_plan(self) -> None:
        """Every node and object against the tree; the findings decide whether
        corrections may go on."""
        assert self.policy is not None
        planning = dataclasses.replace(self.request.planning, desired=self.state).but(
            prune=self.prune
        )
        try:
            try:
                plan = self._plan(planning)
            except EmptyPrune as refused:
                self.observer.failed("--prune", str(refused))
                self.prune = False
                plan = self._plan(planning.but(prune=False))
        except ReconcileError as error:
            self.observer.failed("plan", str(error))
            return
        now_blocking = [f"{f.subject}: {f.message}" for f in blocking(plan.findings)]
        if now_blocking != self.blocking:  # said when it changes, not at every resync
            self.blocking = now_blocking
            self.observer.blocked(now_blocking)
        planned = {node_plan.name: node_plan for node_plan in plan.nodes}
        for name in set(self.node_drift) - set(planned):
            del self.node_drift[name]
        self.evicting.clear()  # the plan's own check saw the pods
        corrections = [
            self._settle(node_plan, self.nodes[node_plan.name], checked=True)
            for node_plan in plan.nodes
        ]
        self._correct([c for c in corrections if c is not None])
        self._settle_objects(plan)
        self._synced()

    def _plan(self, planning: operations.PlanRequest) -> Plan:
        assert self.policy is not None
        return operations.plan(
            planning,
            self.cluster,
            policy=self.policy,
            checks=self.checks,
            live=list(self.nodes.values()),
        )

    def _on_node(self, event: NodeEvent) -> None:
        node = event.node
        assert node is not None
        if event.type == "DELETED":
            self.nodes.pop(node.name, None)
            self.node_drift.pop(node.name, None)
            self.flaps.forget(node.name)
            self._synced()
            return
        self.nodes[node.name] = node
        assert self.policy is not None
        try:
            want = node_facts(self.state, node)
            node_plan = (
                None
                if want is None
                else plan_node(want, node, prune=self.prune, policy=self.policy)
            )
        except ReconcileError as error:
            self.observer.failed(node.name, str(error))
            return
        if node_plan is None:
            self.node_drift.pop(node.name, None)
        else:
            correction = self._settle(node_plan, node)
            if correction is not None:
                self._correct([correction])
        self._synced()

    def _writing(self) -> bool:
        return self.request.correct and not self.blocking and self.may_write()

    def _settle(
        self, node_plan: NodePlan, live: LiveNode, *, checked: bool = False
    ) -> _Correction | None:
        """Report drift not reported yet; what may be corrected (None: nothing). A change
        not `checked` by a full plan's findings that puts a NoExecute taint on the node is
        corrected only when it evicts no running pod (or --allow-evictions)."""
        before = set(self.node_drift.get(node_plan.name, ()))
        self.node_drift[node_plan.name] = node_plan.changes
        now = self.clock()
        writable = [
            c for c in node_plan.changes if not self.flaps.holding(node_plan.name, c.shown_key, now)
        ]
        writing = self._writing() and bool(writable)
        if node_plan.refusal is not None and not self.request.allow_refused:
            writing = False
        new = [c for c in node_plan.changes if c not in before]
        if writing and not checked and self._evicts(node_plan, live, reported=bool(new)):
            writing = False
        left = [c for c in new if not writing or c not in writable]
        if left:
            self.observer.drift(node_plan.name, left)
        if not writing:
            if node_plan.refusal is not None and new:
                self.observer.failed(node_plan.name, node_plan.refusal)
            return None
        unsaid = tuple(c for c in new if c in writable)
        return _Correction(_only(node_plan, writable, live), live, unsaid)

    def _evicts(self, node_plan: NodePlan, live: LiveNode, *, reported: bool) -> bool:
        """Whether the node's changes evict running pods that --allow-evictions did not
        accept (the pods on the node are read once per set of changes); said when
        `reported` (the drift is new)."""
        if self.request.planning.options.allowEvictions or not placement.adds_no_execute(
            node_plan.changes
        ):
            return False
        if self.evicting.get(node_plan.name) == node_plan.changes:
            return True
        try:
            findings = placement.taint_evictions(
                [live],
                {live.name: node_plan.taints or ()},
                self.cluster.pods_on_nodes([live.name]),
            )
        except ReconcileError as error:
            self.observer.failed(live.name, f"not corrected: cannot read its pods: {error}")
            return True
        if not findings:
            return False
        self.evicting[node_plan.name] = node_plan.changes
        if reported:
            for finding in findings:
                self.observer.failed(finding.subject, f"not corrected: {finding.message}")
        return True

    def _correct(self, corrections: Sequence[_Correction]) -> None:
        """Write each node (`parallel` at a time when there are several), say what was
        written as each write ends, then record its Event. Only this thread counts and
        reports; the workers write the node and its Event, nothing else. Returns once
        every write started has ended."""
        if not corrections:
            return
        if len(corrections) == 1:  # an event's: no pool to start
            [one] = corrections
            outcome = self._write(one.plan)
            self._corrected(one, outcome)
            self._record_event(outcome)
            return
        written: queue.SimpleQueue[tuple[_Correction, NodeResult | None]] = queue.SimpleQueue()

        def write(correction: _Correction) -> None:
            outcome = None
            try:
                outcome = self._write(correction.plan)
            finally:
                written.put((correction, outcome))
            self._record_event(outcome)  # while this thread's loop says what was written

        workers = min(self.request.parallel, len(corrections))
        with ThreadPoolExecutor(workers, thread_name_prefix="reconcile-correct") as pool:
            started = [pool.submit(write, c) for c in corrections]
            for _ in corrections:
                self._corrected(*written.get())
        for future in started:
            future.result()  # a failure that is not the cluster's (a bug) is not lost

    def _write(self, node_plan: NodePlan) -> NodeResult | None:
        """One node written with apply's guarded write; None when it was not started
        (stopping, or this replica may no longer write)."""
        assert self.policy is not None
        if self._stop.is_set() or not self.may_write():
            return None
        return apply_node(
            node_plan,
            self.cluster,
            desired=self.state,
            prune=self.prune,
            allow_refused=self.request.allow_refused,
            policy=self.policy,
        )

    def _corrected(self, correction: _Correction, outcome: NodeResult | None) -> None:
        name = correction.plan.name
        if outcome is None:  # left as drift: said as a standby says it
            if correction.unsaid:
                self.observer.drift(name, correction.unsaid)
            return
        if outcome.error is not None:
            self.observer.failed(name, outcome.error)
            return
        if not outcome.applied:
            return
        self.observer.corrected(name, outcome.applied)
        left = [c for c in self.node_drift.get(name, ()) if c not in outcome.applied]
        self.node_drift[name] = tuple(left)
        now = self.clock()
        for change in outcome.applied:
            backoff = self.flaps.corrected(name, change.shown_key, now)
            if backoff is not None:
                managers = correction.live.label_managers
                writer = managers.get(change.key) if change.fact is Fact.LABEL else None
                if writer in (None, FIELD_MANAGER):
                    writer = "another writer"
                self.observer.flap(name, change.shown_key, str(writer), backoff)

    def _settle_objects(self, plan: Plan) -> None:
        drifted = {obj.id: (obj.action, obj.changes) for obj in plan.objects}
        new = [obj for obj in plan.objects if self.object_drift.get(obj.id) != drifted[obj.id]]
        self.object_drift = drifted
        if not plan.objects:
            return
        if not self._writing():
            if new:
                self.observer.object_drift(new)
            return
        results = apply_objects(
            plan, self.cluster, saved=False, configs=desired_configs(self.state)
        )
        written = [r.changed for r in results if r.changed is not None]
        if written:
            self.observer.corrected_objects(written)
        for result in results:
            if result.error is not None:
                self.observer.failed(result.id, result.error)
            else:
                self.object_drift.pop(result.id, None)

    def _record_event(self, outcome: NodeResult | None) -> None:
        """An events.k8s.io/v1 Event on a node that was corrected: `kubectl describe node`
        shows who changed it back. (Node events carry the node's name as its uid, as the
        kubelet's do.)"""
        if outcome is None or outcome.error is not None or not outcome.applied:
            return
        node, changes = outcome.name, outcome.applied
        note = "; ".join(
            f"{c.shown_key}: {shown_value(c.before)} -> {shown_value(c.after)}" for c in changes
        )
        if len(note.encode()) > NOTE_LIMIT:
            note = note.encode()[: NOTE_LIMIT - 3].decode(errors="ignore") + "..."
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            # Named as client-go's recorder names them: the object, then the time in hex.
            "metadata": {
                "name": f"{node}.{time.time_ns():x}",
                "namespace": self.request.event_namespace,
            },
            "eventTime": micro_time(),
            "reportingController": FIELD_MANAGER,
            "reportingInstance": self.request.instance,
            "action": "Correct",
            "reason": "DriftCorrected",
            "type": "Normal",
            "regarding": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
            "note": note,
        }
        try:
            self.cluster.create_event(self.request.event_namespace, body)
        except ReconcileError as error:
            log.warning("cannot record the correction of %s as an Event: %s", node, error)

    def _synced(self) -> None:
        counts: Counter[str] = Counter({str(fact): 0 for fact in Fact})
        for changes in self.node_drift.values():
            counts.update(str(c.fact) for c in changes)
        counts["object"] = len(self.object_drift)
        self.observer.synced(counts)


def _only(node_plan: NodePlan, changes: Sequence[NodeChange], live: LiveNode) -> NodePlan:
    """`node_plan` with only `changes` (the others are left alone: a flap)."""
    if len(changes) == len(node_plan.changes):
        return node_plan
    taints = {c.key: c.after for c in changes if c.fact is Fact.TAINT}
    return node_plan.model_copy(
        update={
            "changes": tuple(changes),
            "taints": tuple(taints_after(live.taints, taints)) if taints else None,
        }
    )
