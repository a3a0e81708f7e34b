"""A driver upgrade: one node's steps, or a pool's rollout in batches.

`DriverUpgrade` is what was asked, and says whether it is a pool. `upgrade` runs it: one
node with SIGINT raised as KeyboardInterrupt (the node is left at a state a rerun resumes
from), a pool under `stoppable` (nodes in flight finish, no other starts). A pool's
result is its Rollout document (gpu/rollout.py) and what became of desired/'s driver
labels. The command line hears the run as it goes through an `UpgradeWatch` and draws
it; nothing here prints.
"""

from __future__ import annotations

import contextlib
import datetime
import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final, Protocol, TypedDict

from reconcile.app.session import Session, Target, log, plan_key, stoppable
from reconcile.app.targets import load_one, load_targets, one_target
from reconcile.diagnostics import ReconcileError

# The GPU domain only for signatures here: the command line reads DEFAULT_MAX_UNAVAILABLE
# and Pacing while it registers its GPU commands, `sanitize` among them, which start fast.
if TYPE_CHECKING:
    from pathlib import Path

    from reconcile.desired.models import DesiredState, Manifest
    from reconcile.engine.plan import Plan
    from reconcile.gpu.change import NodeStatus
    from reconcile.gpu.journal import Step
    from reconcile.gpu.lock import RolloutLock
    from reconcile.gpu.rollout import (
        Gate,
        Rollout,
        RolloutDocument,
        RolloutOutcome,
        RolloutPlan,
        RolloutRequest,
        StateEvent,
    )
    from reconcile.gpu.upgrade import NodeOps
    from reconcile.kube.client import Cluster

DEFAULT_MAX_UNAVAILABLE: Final = "25%"
STOP_POLL_SECONDS: Final = 0.2


# --- the request ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Pacing:
    """How a pool moves: nodes upgraded at once (a batch), the selected GPU nodes that
    may be unavailable at once (`N` or `P%`), the node upgraded alone first, and the pods
    (a label selector) that must finish on a node before its drain, waited for up to
    `wait_timeout` seconds. The defaults are what one node's upgrade does."""

    max_parallel: int = 1
    max_unavailable: str = DEFAULT_MAX_UNAVAILABLE
    canary: str | None = None
    wait_for_completion: str | None = None
    wait_timeout: float = 3600.0

    @property
    def asks_for_a_pool(self) -> bool:
        """True when it says how several nodes move: other than one at a time, another
        unavailability budget, a canary, or pods to wait for (`wait_timeout` alone only
        qualifies `wait_for_completion`)."""
        return (
            self.max_parallel != 1
            or self.max_unavailable != DEFAULT_MAX_UNAVAILABLE
            or self.canary is not None
            or self.wait_for_completion is not None
        )


class UpgradeOptions(TypedDict):
    """`DriverUpgrade`'s fields after its nodes, pacing and document, as keywords (the
    command line passes its options on as they come)."""

    dry_run: bool
    timeout: float
    ignore_daemonsets: bool
    force: bool
    write_desired: bool
    cluster: str | None
    lease_duration: float


@dataclass(frozen=True)
class DriverUpgrade:
    """What `reconcile upgrade` is asked: the driver to move to, the NODEs or the selector
    of a pool, how a pool moves, how each node is drained (evictions retried for up to
    `timeout` seconds), and whether desired/ is written after. `document` asks for the
    Rollout document (-o json), which only a pool's rollout makes."""

    version: str
    nodes: tuple[str, ...] = ()
    selector: str | None = None
    pacing: Pacing = Pacing()
    document: bool = False
    dry_run: bool = False
    timeout: float = 300.0
    ignore_daemonsets: bool = False
    force: bool = False
    write_desired: bool = False
    cluster: str | None = None
    # How long the run's Lease outlives its last renewal (gpu/lock.py).
    lease_duration: float = 30.0

    @property
    def pool(self) -> bool:
        """True when the user asked for a pool's rollout (every node preflighted, then
        batches): a selector, several nodes (once `checked`: a node named twice is one),
        pacing of a pool, or the Rollout document; else one node's upgrade, step by step."""
        return (
            self.selector is not None
            or len(self.nodes) > 1
            or self.pacing.asks_for_a_pool
            or self.document
        )

    def checked(self) -> DriverUpgrade:
        """The request as it runs: ReconcileError for a node name no API server accepts,
        for NODEs and a selector both (or neither), or for a driver version that is not
        MAJOR.MINOR.REV. A node named twice is upgraded once (two workers on one node
        would race through its states; `upgrade N N` is the one-node upgrade of N)."""
        from reconcile.gpu import drivers
        from reconcile.kube.validation import name_problem

        canary = self.pacing.canary
        for node in (*self.nodes, *([canary] if canary else [])):
            if problem := name_problem(node, "node"):
                raise ReconcileError(problem)
        repeated = sorted({node for node in self.nodes if self.nodes.count(node) > 1})
        if repeated:
            log.info("%s named more than once: upgraded once", ", ".join(repeated))
        if bool(self.nodes) == bool(self.selector):
            raise ReconcileError("give the NODE(s) to upgrade, or --selector for a pool (not both)")
        try:
            drivers.split_driver_version(self.version)
        except ValueError as e:
            raise ReconcileError(str(e)) from None
        return replace(self, nodes=tuple(dict.fromkeys(self.nodes)))


# --- the results ----------------------------------------------------------------------------


@dataclass(frozen=True)
class DesiredAfter:
    """desired/'s driver labels for the nodes on the driver now: the files written
    (`<file>: key=value, ...`), the groups left alone because they cover nodes not
    upgraded, or (not written) the note that desired/ still declares the old driver."""

    written: tuple[str, ...] = ()
    left_alone: tuple[str, ...] = ()
    stale: str | None = None


@dataclass(frozen=True)
class NodeUpgraded:
    """One node's upgrade (or its dry run) finished; or, interrupted, the message naming
    the state a rerun resumes from."""

    interrupted: str | None = None


@dataclass(frozen=True)
class RolledOut:
    """A pool's rollout: its document as preflighted, and after the run (None for a dry
    run); what became of desired/; the signal (SIGINT, SIGTERM) that stopped it early."""

    planned: RolloutDocument
    desired: DesiredAfter
    outcome: RolloutOutcome | None = None
    stopped_by: int | None = None

    @property
    def document(self) -> RolloutDocument:
        """The Rollout document: the outcome, or a dry run's plan."""
        return self.outcome or self.planned


class UpgradeWatch(Protocol):
    """Hears an upgrade as it happens (the command line draws it as it goes)."""

    def note(self, line: str) -> None:
        """A note for the operator: the preflight, a resumption, a wait."""

    def step(self, step: Step) -> None:
        """One node's upgrade: each step as it happens (a dry run: each it would take)."""

    def planned(self, rollout: RolloutDocument) -> None:
        """A pool preflighted: its batches, before anything is written."""

    def detail(self, step: Step) -> None:
        """A pool's step other than a state change (a cordon, an eviction, a label)."""

    def moved(self, node: str, state: str, done: int, started: int) -> None:
        """A pool's node at a new upgrade state, and how many nodes are done and how many
        started and not done; one call at a time."""


# --- the operation --------------------------------------------------------------------------


def upgrade(
    session: Session, request: DriverUpgrade, watch: UpgradeWatch
) -> NodeUpgraded | RolledOut:
    """One node's upgrade, or a pool's rollout when the request is a pool; heard by
    `watch` as it happens. Raises ReconcileError when it is refused (nothing written) or a
    node's upgrade fails (naming the state a rerun resumes from)."""
    target = one_target(session, request.cluster, "upgrade")
    if not request.pool:
        return _upgrade_node(session, request, target, watch)
    return _roll_out(session, request, target, watch)


def _upgrade_node(
    session: Session, request: DriverUpgrade, target: Target, watch: UpgradeWatch
) -> NodeUpgraded:
    from reconcile.gpu import operations

    node = operations.UpgradeRequest(
        request.nodes[0],
        request.version,
        target.state,
        session.desired,
        dry_run=request.dry_run,
        timeout=request.timeout,
        ignore_daemonsets=request.ignore_daemonsets,
        force=request.force,
        write_desired=request.write_desired,
    )
    cluster = session.connect(None, target)
    lock = _lock(cluster, request.lease_duration)
    # Ctrl-C stops the upgrade at a state a rerun resumes from, whatever SIGINT was when
    # the command started (a shell ignores it for a job started with `&`).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        operations.upgrade(node, cluster, watch.step, watch.note, lock=lock)
    except operations.UpgradeInterrupted as e:
        return NodeUpgraded(interrupted=str(e))
    finally:
        signal.signal(signal.SIGINT, previous)
    return NodeUpgraded()


class _StateEvents:
    """A pool's steps as they come from its workers: state changes (steps of
    `state_field`) recorded as events and told to the watch one at a time, with the tally
    of nodes at `done_state`; other steps passed on."""

    def __init__(self, watch: UpgradeWatch, state_field: str, done_state: str) -> None:
        self.watch = watch
        self.state_field = state_field
        self.done_state = done_state
        self.events: list[StateEvent] = []
        self.states: dict[str, str] = {}
        self.lock = threading.Lock()

    def __call__(self, step: Step) -> None:
        from reconcile.gpu.rollout import StateEvent

        if step.field != self.state_field:
            self.watch.detail(step)
            return
        with self.lock:
            when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            self.events.append(StateEvent(time=when, node=step.subject, state=step.value))
            self.states[step.subject] = step.value
            done = sum(1 for state in self.states.values() if state == self.done_state)
            self.watch.moved(step.subject, step.value, done, len(self.states) - done)


def _roll_out(
    session: Session, request: DriverUpgrade, target: Target, watch: UpgradeWatch
) -> RolledOut:
    """The pool preflighted as a whole (UpgradeRefused naming every problem), then, unless
    a dry run, its batches run until done, the first failure, or a signal."""
    from reconcile.gpu import operations
    from reconcile.gpu.rollout import DriverWork
    from reconcile.gpu.upgrade import STATE, UPGRADE_DONE

    state = target.state
    events = _StateEvents(watch, STATE, UPGRADE_DONE)
    cluster = session.connect(None, target)
    ops = _node_ops(cluster, events, watch, state, request)
    lock = _lock(cluster, request.lease_duration)
    work = DriverWork(request.version, state, ops, binding=lock.binding())
    pool = _pool_request(request.nodes, request.selector, request.pacing)
    job, plan = operations.rollout_plan(pool, work, ops)
    planned = rollout_document(plan, request.dry_run, driver=request.version)
    watch.planned(planned)
    if request.dry_run:
        desired = _desired_after(
            session, state, request.version, cluster, [*plan.done, *plan.targets], write=False
        )
        return RolledOut(planned, desired)
    with holding(lock, plan.targets, "driver", request.version, job.stop, watch.note):
        outcome, stopped = run_stoppable(job, plan, planned, events)
    desired = _desired_after(
        session,
        state,
        request.version,
        cluster,
        [*plan.done, *outcome.done],
        write=request.write_desired,
    )
    return RolledOut(planned, desired, outcome, stopped)


class _Draining(Protocol):
    """How a request drains each node (`DriverUpgrade`, `FactRollout`)."""

    @property
    def timeout(self) -> float: ...

    @property
    def ignore_daemonsets(self) -> bool: ...

    @property
    def force(self) -> bool: ...


def _node_ops(
    cluster: Cluster,
    events: _StateEvents,
    watch: UpgradeWatch,
    state: DesiredState,
    request: _Draining,
) -> NodeOps:
    """What each node's work uses: the cluster, the watch, the drain the request asks for
    and the budgets desired/ declares."""
    from reconcile.gpu import operations
    from reconcile.gpu.upgrade import NodeOps

    ops = NodeOps(
        cluster,
        events,
        watch.note,
        timeout=request.timeout,
        ignore_daemonsets=request.ignore_daemonsets,
        force=request.force,
    )
    return operations.with_declared(ops, state)


def rollout_document(
    plan: RolloutPlan,
    dry_run: bool,
    *,
    driver: str | None = None,
    facts: Mapping[str, Mapping[str, str | None]] | None = None,
) -> RolloutDocument:
    from reconcile.gpu.rollout import RolloutDocument

    return RolloutDocument.of(plan, dry_run=dry_run, driver=driver, facts=facts)


def run_stoppable(
    job: Rollout,
    plan: RolloutPlan,
    planned: RolloutDocument,
    events: _StateEvents,
    gate: Gate | None = None,
    *,
    gate_last: bool = False,
) -> tuple[RolloutOutcome, int | None]:
    """The rollout run under `stoppable` (SIGINT, SIGTERM: nodes in flight finish, no
    other starts): its outcome, and the signal that stopped it early."""
    from reconcile.gpu.rollout import RolloutOutcome

    with stoppable() as stopped:
        over = threading.Event()
        threading.Thread(
            target=_stop_when, args=(stopped, job.stop, over), daemon=True, name="rollout-stop"
        ).start()
        try:
            result = job.run(plan, gate, gate_last=gate_last)
        finally:
            over.set()
    return RolloutOutcome.after(planned, result, events.events), stopped[0] if stopped else None


def _lock(cluster: Cluster, duration: float) -> RolloutLock:
    from reconcile.gpu.lock import RolloutLock

    return RolloutLock(cluster, duration=duration)


@contextlib.contextmanager
def holding(
    lock: RolloutLock,
    nodes: Sequence[str],
    work: str,
    target: str,
    stop: Callable[[], None],
    note: Callable[[str], None],
) -> Iterator[None]:
    """The run's Lease held over `nodes` while the block runs (Held, a ReconcileError,
    when another rollout holds some of them: nothing was changed), renewed, and given up
    at the end; when it is lost, `stop` (no other node starts)."""

    def lost() -> None:
        note(f"lost the rollout's Lease {lock.ref}: no other node starts")
        stop()

    lock.acquire(nodes, work, target)
    done = lock.renewing(lost)
    try:
        yield
    finally:
        done()
        lock.release(lock.cluster.list_nodes())


def _pool_request(nodes: tuple[str, ...], selector: str | None, pacing: Pacing) -> RolloutRequest:
    from reconcile.gpu.rollout import RolloutRequest

    return RolloutRequest(
        nodes=nodes,
        selector=selector,
        max_parallel=pacing.max_parallel,
        max_unavailable=pacing.max_unavailable,
        canary=pacing.canary,
        wait_for_completion=pacing.wait_for_completion,
        wait_timeout=pacing.wait_timeout,
    )


def _desired_after(
    session: Session,
    state: DesiredState,
    version: str,
    cluster: Cluster,
    upgraded: Sequence[str],
    *,
    write: bool,
) -> DesiredAfter:
    """The driver labels desired/ declares for the `upgraded` nodes (done before or in
    this run, or in a dry run's plan): written with `write`, else the note when desired/
    still declares the old driver (the next apply would revert them)."""
    from reconcile.gpu import operations

    if not upgraded:
        return DesiredAfter()
    # Only a group's selector needs the live labels.
    live = cluster.list_nodes() if state.groups else []
    if write:
        written, left_alone = operations.write_driver_labels(
            state, session.desired, version, upgraded, live
        )
        return DesiredAfter(written=tuple(written), left_alone=tuple(left_alone))
    return DesiredAfter(stale=operations.stale_driver_note(state, version, upgraded, live))


def _stop_when(stopped: list[int], stop: Callable[[], None], over: threading.Event) -> None:
    """`stop` called once a signal's number is in `stopped`; returns without calling it
    once `over` is set (the run ended by itself)."""
    while not stopped:
        if over.wait(STOP_POLL_SECONDS):
            return
    stop()


# --- disruptive facts -----------------------------------------------------------------------


@dataclass(frozen=True)
class GateSpec:
    """One `--gate`: `job` and a file of desired/gates/, or `prom` and a query."""

    kind: str
    value: str

    @classmethod
    def parse(cls, text: str) -> GateSpec:
        kind, sep, value = text.partition("=")
        if not sep or kind not in ("job", "prom") or not value:
            raise ReconcileError(
                f"--gate {text!r}: give job=FILE (a Job of desired/gates/) or prom=QUERY"
            )
        return cls(kind, value)


@dataclass(frozen=True)
class FactRollout:
    """What `reconcile rollout` is asked: the nodes to take (a selector; every node that
    plans a disruptive change when None), how they move, how long each may take to
    report its state and offer what it should, whether a node's failure stops the
    rollout, how long each batch stays healthy before the next, and each node's drain."""

    selector: str | None = None
    pacing: Pacing = Pacing()
    document: bool = False
    dry_run: bool = False
    timeout: float = 300.0
    settle_timeout: float = 1800.0
    keep_going: bool = False
    bake: float = 0.0
    gates: tuple[GateSpec, ...] = ()
    # A saved plan (`reconcile plan --out FILE`): its disruptive changes, as reviewed.
    plan_file: Path | None = None
    prometheus_url: str | None = None
    gate_timeout: float = 1800.0
    ignore_daemonsets: bool = False
    force: bool = False
    cluster: str | None = None
    lease_duration: float = 30.0


def roll_out_facts(session: Session, request: FactRollout, watch: UpgradeWatch) -> RolledOut:
    """The disruptive facts the plan of desired/ holds (and the nodes a run left midway),
    rolled out in batches on the one cluster (in a fleet: the one --cluster names): the
    plan's blocking findings and every batch's drain preflighted before the first write
    (UpgradeRefused naming every problem), then, unless a dry run, node by node: cordon,
    drain its GPU pods, write, wait for the operator's state, verify, uncordon."""
    target = one_target(session, request.cluster, "rollout")
    return _roll_out_on(session, request, target, watch, gate_last=False)


@dataclass(frozen=True)
class ClusterRollout:
    """One cluster of a fleet's rollout: its result, the error that refused or stopped
    it, or neither when it was not started (an earlier cluster stopped the rollout)."""

    cluster: str
    result: RolledOut | None = None
    error: str | None = None

    @property
    def stopped(self) -> bool:
        """True when the clusters after this one must not start."""
        if self.error is not None:
            return True
        if self.result is None or self.result.outcome is None:
            return False
        return self.result.stopped_by is not None or not self.result.outcome.ok


def roll_out_fleet(
    session: Session,
    request: FactRollout,
    watching: Callable[[str], AbstractContextManager[UpgradeWatch]],
) -> list[ClusterRollout]:
    """Each cluster of the fleet rolled out in the fleet's waves, one cluster at a time,
    each heard by the watch `watching(cluster)` gives. A cluster not in the last wave
    passes the gates after its last batch too (the next wave waits for them). The first
    cluster refused, failed, halted or interrupted stops the rest, which are not started."""
    found = load_targets(session, ())
    assert found.fleet is not None
    waves = found.fleet.waves
    done: list[ClusterRollout] = []
    for index, wave in enumerate(waves):
        for member in wave:
            if any(c.stopped for c in done):
                done.append(ClusterRollout(member.name))
                continue
            target = found.named(member.name)
            with watching(member.name) as watch:
                try:
                    rolled = _roll_out_on(
                        session, request, target, watch, gate_last=index < len(waves) - 1
                    )
                except ReconcileError as e:
                    done.append(ClusterRollout(member.name, error=str(e)))
                    continue
            done.append(ClusterRollout(member.name, rolled))
            if rolled.stopped_by is not None:
                return done + [
                    ClusterRollout(m.name)
                    for later in waves[index:]
                    for m in later
                    if m.name not in {c.cluster for c in done}
                ]
    return done


def _roll_out_on(
    session: Session,
    request: FactRollout,
    target: Target,
    watch: UpgradeWatch,
    *,
    gate_last: bool,
) -> RolledOut:
    """`roll_out_facts` on `target`; with `gate_last`, the gates are asked after the last
    batch too."""
    from reconcile.engine import saved
    from reconcile.engine.operations import PlanRequest
    from reconcile.engine.plan import NO_OPTIONS, ClusterIdentity
    from reconcile.gpu import change, operations
    from reconcile.gpu import checks as gpu
    from reconcile.gpu.rollout import Rollout

    if request.plan_file is not None:
        saved_plan, state = _open_saved(session, request.plan_file)
    else:
        saved_plan, state = None, target.state
    _check_gates(session, request, state)
    cluster = session.connect(None, target)
    # What blocks is decided now: a saved plan's tree is planned again for its findings.
    plan = gpu.plan(
        PlanRequest(state, saved_plan.options if saved_plan is not None else NO_OPTIONS), cluster
    )
    if saved_plan is not None:
        server, uid = cluster.identity()
        saved.check_origin(
            saved_plan,
            ClusterIdentity(server=server, kubeSystemUID=uid),
            state.digest,
            plan.options,
        )
    events = _StateEvents(watch, change.PHASE, change.ROLLOUT_DONE)
    ops = _node_ops(cluster, events, watch, state, request)
    source = saved_plan if saved_plan is not None else plan
    planned = {n.name: n for n in source.nodes if any(c.rollout for c in n.changes)}
    lock = _lock(cluster, request.lease_duration)
    work = change.FactWork(
        planned,
        {
            name: change.saved_replan(node)
            if saved_plan is not None
            else operations.fresh_replan(state, plan)
            for name, node in planned.items()
        },
        gpu.mig_table(state)[0],
        ops,
        problems=tuple(
            f"{f.subject}: {f.message}"
            for f in plan.findings
            if f.blocksApply and not change.resolved_by_rollout(f, planned)
        ),
        settle_timeout=request.settle_timeout,
        catalogue=gpu.policy(state).catalogue,
        binding=lock.binding(),
    )
    pool = replace(
        _pool_request((), request.selector, request.pacing), keep_going=request.keep_going
    )
    job = Rollout(pool, work, ops)
    rollout = job.preflight()
    facts = {
        name: {c.key: c.after for c in planned[name].changes if c.rollout}
        for name in rollout.targets
        if name in planned
    }
    document = rollout_document(rollout, request.dry_run, facts=facts)
    watch.planned(document)
    if request.dry_run or not rollout.batches:
        return RolledOut(document, DesiredAfter())
    gate = _gates(session, request, state, cluster, ops)
    with holding(lock, rollout.targets, "facts", "facts", job.stop, watch.note):
        outcome, stopped = run_stoppable(job, rollout, document, events, gate, gate_last=gate_last)
    return RolledOut(document, DesiredAfter(), outcome, stopped)


def _open_saved(session: Session, path: Path) -> tuple[Plan, DesiredState]:
    """A saved plan checked offline (its schema, digest and signature, and the tree it
    is rolled out from), and that tree."""
    from reconcile.engine import operations, saved

    state = load_one(session) if session.desired.is_dir() else None
    opened = operations.open_saved(saved.load(path), state, key=plan_key())
    return opened.plan, opened.desired


def _check_gates(session: Session, request: FactRollout, state: DesiredState) -> None:
    """Every --gate resolves before anything is read from the cluster: a job= names a
    Job of desired/gates/, a prom= has --prometheus-url, an http:// or https:// one."""
    from reconcile.gpu.gates import check_prometheus_url

    if request.prometheus_url is not None:
        check_prometheus_url(request.prometheus_url)
    for spec in request.gates:
        if spec.kind == "job":
            _gate_job(session, state, spec.value)
        elif request.prometheus_url is None:
            raise ReconcileError(f"--gate prom={spec.value}: give --prometheus-url too")


def _gate_job(session: Session, state: DesiredState, name: str) -> Manifest:
    """The Job of desired/gates/ that `name` names: its path (as given from here, or
    within desired/) or its file name."""
    from pathlib import Path

    given = Path(name)
    for manifest in state.gates:
        source = Path(manifest.source.file)
        if (
            given.resolve() == source.resolve()
            or (session.desired / given).resolve() == source.resolve()
            or given.name == source.name
        ):
            return manifest
    found = ", ".join(m.source.file for m in state.gates) or "none"
    raise ReconcileError(
        f"--gate job={name}: not a gate of desired/ (desired/gates/*.yaml holds one Job each; "
        f"found: {found})"
    )


def _gates(
    session: Session, request: FactRollout, state: DesiredState, cluster: Cluster, ops: NodeOps
) -> Gate | None:
    """The gates in the order they are asked after a batch: each Job gate, the bake,
    then each Prometheus query (what the bake let happen)."""
    from reconcile.gpu import gates
    from reconcile.gpu.disruptive import Catalogue

    chosen: list[Gate] = [
        gates.JobGate(_gate_job(session, state, spec.value), cluster, ops, request.gate_timeout)
        for spec in request.gates
        if spec.kind == "job"
    ]
    if request.bake:
        chosen.append(gates.bake(request.bake, ops, Catalogue.of(state)))
    chosen += [
        gates.PromGate(spec.value, str(request.prometheus_url))
        for spec in request.gates
        if spec.kind == "prom"
    ]
    return gates.all_of(chosen)


def rollout_status(target: Target, cluster: Cluster, stuck_after: float) -> list[NodeStatus]:
    """Each node of `cluster` with something to say about a rollout (gpu/change.py
    `status`): the nodes as they are now, the plan's disruptive changes when desired/ is
    there, the pods on those nodes and their namespaces' budgets."""
    from reconcile.engine.operations import PlanRequest
    from reconcile.gpu import change, journal
    from reconcile.gpu import checks as gpu

    plan = gpu.plan(PlanRequest(target.state), cluster)
    planned = {n.name: n for n in plan.nodes if any(c.rollout for c in n.changes)}
    nodes = cluster.list_nodes()
    involved = [n.name for n in nodes if n.name in planned or journal.marked(n)]
    pods = cluster.pods_on_nodes(involved) if involved else []
    namespaces = sorted({str(p["metadata"]["namespace"]) for p in pods})
    budgets = {ns: cluster.budgets(ns) for ns in namespaces}
    return change.status(
        nodes,
        planned,
        pods,
        budgets,
        stuck_after=stuck_after,
        now=datetime.datetime.now(datetime.UTC),
        catalogue=gpu.policy(target.state).catalogue,
        binding=_lock(cluster, 0).binding() if involved else None,
    )


@dataclass(frozen=True)
class Abandoned:
    """What `rollout abandon` did: per node, the journal removed and how it was left."""

    nodes: tuple[tuple[str, str], ...]


def abandon(
    session: Session, cluster_name: str | None, nodes: tuple[str, ...], selector: str | None
) -> Abandoned:
    """The journals (and foreign markers) of the nodes named or selected removed, their
    cordons left as they are, and the Leases no journal names any more deleted; refused
    (nothing removed) for a node in a rollout whose holder is alive."""
    from reconcile.gpu import journal
    from reconcile.gpu.rollout import RolloutRequest, node_selection

    if bool(nodes) == bool(selector):
        raise ReconcileError("give the NODE(s) whose journal to abandon, or --selector (not both)")
    target = one_target(session, cluster_name, "rollout abandon")
    cluster = session.connect(None, target)
    chosen = node_selection(cluster, RolloutRequest(nodes=nodes, selector=selector))
    lock = _lock(cluster, 0)
    done = journal.abandon(cluster, chosen, lock.binding())
    lock.release(cluster.list_nodes())
    return Abandoned(tuple(done))
