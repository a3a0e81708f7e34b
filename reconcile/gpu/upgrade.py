"""One node's driver change, in the GPU Operator's order, with its failure modes checked first.

Image first, budget second, then cordon, drain (through the Eviction API, never a plain
delete), relabel, validate, uncordon. The node's journal (gpu/journal.py) records each
state before its action, and the `nvidia.com/gpu-driver-upgrade-state` label reports it
as the operator's upgrade controller does, one PATCH per transition: interrupted
anywhere, a rerun resumes from the journal (never from the label, which the operator
writes too), and every step is safe to repeat. A node whose label says the operator is
midway through an upgrade of its own, with no journal of reconcile's, is refused. Where
it cannot go on, the node is left cordoned in `upgrade-failed`, which is what the
operator does too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, NoReturn

from reconcile.diagnostics import ApiError, NotFound, ReconcileError, TooManyRequests
from reconcile.engine.grants import Rule
from reconcile.gpu import drivers, journal
from reconcile.gpu.journal import Binding, Requires, Step, Untrusted
from reconcile.kube.api import NodeApi
from reconcile.kube.kinds import workload_id
from reconcile.kube.objects import LiveNode
from reconcile.kube.selector import SelectorError, from_label_selector

STATE: Final = drivers.UPGRADE_STATE
SKIP: Final = "nvidia.com/gpu-driver-upgrade.skip"

UPGRADE_REQUIRED: Final = "upgrade-required"
CORDON_REQUIRED: Final = "cordon-required"
POD_DELETION_REQUIRED: Final = "pod-deletion-required"
DRAIN_REQUIRED: Final = "drain-required"
POD_RESTART_REQUIRED: Final = "pod-restart-required"
VALIDATION_REQUIRED: Final = "validation-required"
UNCORDON_REQUIRED: Final = "uncordon-required"
UPGRADE_DONE: Final = "upgrade-done"
UPGRADE_FAILED: Final = "upgrade-failed"
# The documented order. reconcile drains (drain-required); pod-deletion-required is what the
# operator uses when draining is off, and a node found in it resumes at the drain.
STATES: Final = (
    UPGRADE_REQUIRED,
    CORDON_REQUIRED,
    POD_DELETION_REQUIRED,
    DRAIN_REQUIRED,
    POD_RESTART_REQUIRED,
    VALIDATION_REQUIRED,
    UNCORDON_REQUIRED,
    UPGRADE_DONE,
)
EVICTION_RETRY_SECONDS: Final = 5.0
DELETION_POLL_SECONDS: Final = 0.5
FIRST_POLL_SECONDS: Final = 0.1


def poll_intervals(longest: float) -> Iterator[float]:
    """The pauses of a wait between its reads: 0.1 s, then twice the last, up to
    `longest`. What the cluster does at once is seen at once; a long wait reads no
    more often than once every `longest` seconds."""
    pause = min(FIRST_POLL_SECONDS, longest)
    while True:
        yield pause
        pause = min(pause * 2, longest)


# What a drain asks of the API server beyond the node itself (gpu/operations.py).
RBAC: Final = (
    Rule(
        "",
        ("pods",),
        ("get", "list"),
        why="upgrade lists the pods on its node and waits for evicted ones to go",
    ),
    Rule(
        "",
        ("pods/eviction",),
        ("create",),
        why="a drain evicts through the Eviction API, which respects budgets; never a plain delete",
    ),
    Rule(
        "policy",
        ("poddisruptionbudgets",),
        ("list",),
        why="upgrade checks the budgets of the pods a drain would evict",
    ),
)


class UpgradeRefused(ReconcileError):
    """Preflight said no: nothing was written."""


class UpgradeFailed(ReconcileError):
    """A step could not finish; the node is where the state label says."""


@dataclass(frozen=True)
class PodToEvict:
    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str]
    ready: bool

    @property
    def id(self) -> str:
        return workload_id("Pod", self.namespace, self.name)


def _is_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _controller(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    owners = (pod.get("metadata") or {}).get("ownerReferences") or ()
    return next((o for o in owners if o.get("controller")), None)


def pods_to_evict(
    pods: list[dict[str, Any]], *, ignore_daemonsets: bool, force: bool
) -> list[PodToEvict]:
    """The pods a drain evicts, with kubectl drain's refusals: DaemonSet pods need
    --ignore-daemonsets (and are then left alone), pods no controller recreates --force."""
    found: list[PodToEvict] = []
    refused: list[str] = []
    for pod in pods:
        metadata = pod.get("metadata") or {}
        phase = (pod.get("status") or {}).get("phase")
        identity = workload_id("Pod", str(metadata.get("namespace")), str(metadata.get("name")))
        if phase in ("Succeeded", "Failed"):
            continue  # finished: nothing to move
        if "kubernetes.io/config.mirror" in (metadata.get("annotations") or {}):
            continue  # a static pod's mirror: the kubelet owns it
        owner = _controller(pod)
        if owner is not None and owner.get("kind") == "DaemonSet":
            if not ignore_daemonsets:
                refused.append(f"{identity} is managed by a DaemonSet (use --ignore-daemonsets)")
            continue
        if owner is None and not force:
            refused.append(
                f"{identity} has no controller to recreate it (use --force to evict it anyway)"
            )
            continue
        found.append(
            PodToEvict(
                str(metadata.get("namespace")),
                str(metadata.get("name")),
                str(metadata.get("uid") or ""),
                dict(metadata.get("labels") or {}),
                _is_ready(pod),
            )
        )
    if refused:
        raise UpgradeRefused("cannot drain: " + "; ".join(refused))
    return found


def _spec_summary(spec: Mapping[str, Any]) -> str:
    if spec.get("minAvailable") is not None:
        return f"minAvailable {spec['minAvailable']}"
    if spec.get("maxUnavailable") is not None:
        return f"maxUnavailable {spec['maxUnavailable']}"
    return "no minAvailable or maxUnavailable"


# Where desired/ declares a budget's field: (namespace, name) -> field -> "file:line:col".
Declared = Mapping[tuple[str, str], Callable[[str], str]]


def _suggestion(budget: Mapping[str, Any], shortfall: int, declared: Declared) -> str:
    spec = budget.get("spec") or {}
    metadata = budget.get("metadata") or {}
    name, namespace = metadata.get("name"), metadata.get("namespace")
    minimum, maximum = spec.get("minAvailable"), spec.get("maxUnavailable")
    if isinstance(minimum, int):
        field_, value = "minAvailable", max(0, minimum - shortfall)
    elif isinstance(maximum, int):
        field_, value = "maxUnavailable", maximum + shortfall
    else:
        return f"allow {shortfall} more disruption(s) in its spec, or add healthy replicas first"
    where = declared.get((str(namespace), str(name)))
    if where is not None:
        # A budget desired/ declares: a kubectl patch would be reverted by the next apply
        # (and would take the field from reconcile's field manager): the file is the place.
        return (
            f"set spec.{field_} to {value} at {where(field_)} (desired/ declares this budget: "
            "a `kubectl patch` would be reverted by the next apply), commit and apply it; or "
            "add healthy replicas first"
        )
    patch = f'{{"spec":{{"{field_}":{value}}}}}'
    return (
        f"set {field_} to {value} (kubectl patch pdb {name} -n {namespace} --type=merge -p '{patch}'), "
        "or add healthy replicas first"
    )


def _budget_needs(
    evictions: list[PodToEvict], budgets_by_namespace: Mapping[str, list[dict[str, Any]]]
) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], dict[str, Any]], list[str]]:
    """(evictions each budget must allow, the budgets by (namespace, name), pods the
    Eviction API refuses whatever the budgets say: selected by more than one)."""
    needed: dict[tuple[str, str], int] = {}
    found: dict[tuple[str, str], dict[str, Any]] = {}
    problems: list[str] = []
    for pod in evictions:
        matching = []
        for budget in budgets_by_namespace.get(pod.namespace, []):
            try:
                if from_label_selector((budget.get("spec") or {}).get("selector")).matches(
                    pod.labels
                ):
                    matching.append(budget)
            except SelectorError:
                continue
        if len(matching) > 1:
            names = ", ".join(str(b["metadata"]["name"]) for b in matching)
            problems.append(
                f"{pod.id} is selected by more than one PodDisruptionBudget ({names}): the Eviction API refuses it"
            )
            continue
        if matching:
            budget = matching[0]
            key = (pod.namespace, str(budget["metadata"]["name"]))
            found[key] = budget
            status = budget.get("status") or {}
            healthy_enough = status.get("currentHealthy", 0) >= status.get("desiredHealthy", 0)
            unhealthy_free = not pod.ready and (
                (budget.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow"
                or healthy_enough
            )
            if not unhealthy_free:
                needed[key] = needed.get(key, 0) + 1
    return needed, found, problems


def _at_best(status: Mapping[str, Any]) -> int | None:
    """The disruptions a budget allows once every pod it expects is healthy (None: the
    disruption controller has not said how many pods it expects)."""
    expected, desired = status.get("expectedPods"), status.get("desiredHealthy")
    if not isinstance(expected, int) or not isinstance(desired, int):
        return None
    return max(0, expected - desired)


def budget_blockers(
    evictions: list[PodToEvict],
    budgets_by_namespace: Mapping[str, list[dict[str, Any]]],
    node: str,
    declared: Declared | None = None,
    *,
    at_best: bool = False,
) -> list[str]:
    """Budgets that would refuse an eviction before the node is empty (or the batch of
    nodes `node` names), each named with its spec, healthy count and what change would
    let the drain pass: in desired/ when it declares the budget (`declared`).

    With `at_best`, a budget blocks only if it could not allow the evictions even with
    every pod it expects healthy (its spec, not the moment): what is short now only
    because pods are starting is for the caller to wait for (`budget_waits`)."""
    needed, found, problems = _budget_needs(evictions, budgets_by_namespace)
    for key, count in sorted(needed.items()):
        budget = found[key]
        status = budget.get("status") or {}
        allowed = int(status.get("disruptionsAllowed", 0))
        best = _at_best(status) if at_best else None
        limit = allowed if best is None else max(allowed, best)
        if count <= limit:
            continue
        shown = f"disruptionsAllowed {allowed}"
        if limit > allowed:
            shown += f", {limit} with all {status.get('expectedPods')} pods healthy"
        problems.append(
            f"PodDisruptionBudget {key[0]}/{key[1]} blocks the drain of {node}: "
            f"{_spec_summary(budget.get('spec') or {})}, {status.get('currentHealthy', 0)} healthy "
            f"({shown}), and the drain must evict {count} of its pods: "
            + _suggestion(budget, count - limit, declared or {})
        )
    return problems


def budget_waits(
    evictions: list[PodToEvict],
    budgets_by_namespace: Mapping[str, list[dict[str, Any]]],
    subject: str,
) -> list[str]:
    """Why the evictions cannot all go ahead now, one reason per budget short of them
    (empty: the budgets allow every one): what a drain waits for, as `kubectl drain`
    retries an eviction the budget refuses."""
    needed, found, problems = _budget_needs(evictions, budgets_by_namespace)
    for key, count in sorted(needed.items()):
        status = found[key].get("status") or {}
        allowed = int(status.get("disruptionsAllowed", 0))
        if count <= allowed:
            continue
        counts = (
            f"({status.get('currentHealthy', 0)} healthy, {status.get('expectedPods', 0)} desired)"
        )
        if allowed == 0:
            problems.append(
                f"PodDisruptionBudget {key[0]}/{key[1]} allows no disruption yet {counts}"
            )
        else:
            problems.append(
                f"PodDisruptionBudget {key[0]}/{key[1]} allows {allowed} disruption(s) yet, "
                f"{subject} needs {count} {counts}"
            )
    return problems


@dataclass(frozen=True)
class NodeOps:
    """What a node's operation works with: the cluster, where its steps and notes go,
    the budgets desired/ declares, how its drain goes (evictions retried for up to
    `timeout` seconds; DaemonSet pods left, bare pods evicted, as kubectl drain's flags),
    and the time it waits by."""

    cluster: NodeApi
    emit: Callable[[Step], None]
    note: Callable[[str], None]
    declared: Declared = field(default_factory=dict)
    timeout: float = 300.0
    ignore_daemonsets: bool = False
    force: bool = False
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic


def at_target(live: LiveNode, version: str) -> bool:
    """The node runs `version` already and no upgrade of it is in progress: nothing to do
    (a node in the middle of an upgrade to the same version is resumed instead)."""
    major, minor, rev = drivers.split_driver_version(version)
    labels = live.labels
    state = labels.get(drivers.UPGRADE_STATE)
    return (
        (
            labels.get(drivers.DRIVER_MAJOR),
            labels.get(drivers.DRIVER_MINOR),
            labels.get(drivers.DRIVER_REV),
        )
        == (major, minor, rev)
        and state in (None, "", UPGRADE_DONE, UPGRADE_REQUIRED)
        and journal.JOURNAL not in live.annotations
    )


# The states in which the operator's upgrade controller is working on a node.
OPERATOR_MIDWAY: Final = frozenset(STATES) - {UPGRADE_REQUIRED, UPGRADE_DONE}


def operator_midway(live: LiveNode) -> str | None:
    """Why the node is the operator's to finish: its upgrade-state label is midway and no
    journal of reconcile's accounts for it (None: it is not)."""
    state = live.labels.get(STATE)
    if state not in OPERATOR_MIDWAY or journal.marked(live):
        return None
    return (
        f"{live.name} is at {STATE}={state} with no journal of reconcile's: the GPU "
        "Operator's upgrade controller is upgrading it (or was): wait for upgrade-done or "
        "upgrade-failed, then rerun (nothing was changed)"
    )


@dataclass
class Upgrade:
    """One node's driver upgrade through the journal's machine. `emit` receives each step
    as it happens."""

    # The operator's states, each with what it needs of the node (pod-deletion-required,
    # the operator's path when draining is off, is not one of reconcile's).
    PHASES: ClassVar[tuple[journal.Phase, ...]] = journal.phases(
        (UPGRADE_REQUIRED, ()),
        (CORDON_REQUIRED, ()),
        (DRAIN_REQUIRED, (Requires.CORDONED,)),
        (POD_RESTART_REQUIRED, (Requires.CORDONED, Requires.DRAINED)),
        (VALIDATION_REQUIRED, (Requires.CORDONED, Requires.WRITTEN)),
        (UNCORDON_REQUIRED, (Requires.WRITTEN,)),
        (UPGRADE_DONE, ()),
    )
    STATE_FIELD: ClassVar[str] = STATE

    cluster: NodeApi
    node: str
    version: str
    matrix: frozenset[str]
    emit: Callable[[Step], None]
    note: Callable[[str], None]
    timeout: float = 300.0
    ignore_daemonsets: bool = False
    force: bool = False
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    declared: Declared = field(default_factory=dict)
    binding: Binding = field(default_factory=Binding.offline)
    machine: journal.Machine = field(init=False)
    _evictions: list[PodToEvict] = field(default_factory=list, init=False)
    _tag: str = field(default="", init=False)

    def __post_init__(self) -> None:
        self.major, self.minor, self.rev = drivers.split_driver_version(self.version)
        self.machine = journal.Machine(
            self.cluster,
            self.node,
            self.binding,
            "driver",
            self.version,
            self,
            self.emit,
            self.note,
        )

    @property
    def state(self) -> str | None:
        """The state it is at (None before the first)."""
        return self.machine.phase

    # --- preflight --------------------------------------------------------------------

    def start_index(self, live: LiveNode) -> int:
        """Where to begin: the state the node's journal records, or the start."""
        return self.machine.start_index(live)

    def preflight(
        self, live: LiveNode, *, check_budgets: bool = True
    ) -> tuple[int, str, list[PodToEvict]]:
        """Refuse before any write, or (start index, target tag, pods to evict). Without
        `check_budgets` the budgets are the caller's: a rollout has checked them for the
        whole batch and waits for them to allow its evictions."""
        if not drivers.is_gpu_node(live.labels):
            raise UpgradeRefused(
                f'{self.node}: not a GPU node: {drivers.GPU_PRESENT} is not "true" '
                "(nothing was changed)"
            )
        if live.labels.get(SKIP) == "true":
            raise UpgradeRefused(f"{self.node} is labelled {SKIP}=true: the upgrade skips it")
        try:
            journal.trusted(live, self.binding, "driver", self.version)
        except Untrusted as e:
            raise UpgradeRefused(f"{e} (nothing was changed)") from None
        midway = operator_midway(live)
        if midway is not None:
            raise UpgradeRefused(midway)
        start = self.start_index(live)
        labels = {**live.labels, drivers.DRIVER_MAJOR: self.major}
        try:
            tag = drivers.node_tag(self.node, labels)
        except drivers.TagError as e:
            raise UpgradeRefused(str(e)) from None
        if tag not in self.matrix:
            kernel = labels[drivers.KERNEL]
            os_tag = labels[drivers.OS_ID] + labels[drivers.OS_VERSION]
            raise UpgradeRefused(
                f"driver image {tag} is not in the support matrix: build and push it, then add the row "
                f"`{self.major},{kernel},{os_tag}` to desired/drivers/ (nothing was changed)"
            )
        evictions: list[PodToEvict] = []
        if start <= self._index(DRAIN_REQUIRED):
            pods = self.cluster.pods_on(self.node)
            evictions = pods_to_evict(
                pods, ignore_daemonsets=self.ignore_daemonsets, force=self.force
            )
            namespaces = sorted({p.namespace for p in evictions}) if check_budgets else []
            budgets = {ns: self.cluster.budgets(ns) for ns in namespaces}
            # Only a budget that could not allow the drain at all refuses now: one short
            # because pods are starting is waited for by the drain, as kubectl drain waits.
            blockers = budget_blockers(evictions, budgets, self.node, self.declared, at_best=True)
            if blockers:
                raise UpgradeRefused("; ".join(blockers) + " (nothing was changed)")
        return start, tag, evictions

    def _index(self, state: str) -> int:
        return self.machine.names.index(state)

    # --- the steps --------------------------------------------------------------------

    def planned_steps(self, start: int, tag: str, evictions: list[PodToEvict]) -> list[Step]:
        """What `run` would do, for --dry-run: its steps, an eviction as `<pod> evict` (to
        be done, where `run` says `evicted`)."""
        steps = []
        for state in self.machine.names[start:]:
            steps.append(Step(self.node, STATE, state))
            if state == CORDON_REQUIRED:
                steps.append(Step(self.node, "spec.unschedulable", "true"))
            elif state == DRAIN_REQUIRED:
                steps.extend(Step(pod.id, "evict") for pod in evictions)
            elif state == POD_RESTART_REQUIRED:
                steps.extend(Step(self.node, k, v) for k, v in self.driver_labels().items())
            elif state == VALIDATION_REQUIRED:
                steps.append(Step(self.node, "driver-image", f"{tag} OK"))
            elif state == UNCORDON_REQUIRED:
                steps.append(
                    Step(self.node, "spec.unschedulable", "false (unless it was cordoned before)")
                )
        return steps

    def driver_labels(self) -> dict[str, str]:
        return {
            drivers.DRIVER_MAJOR: self.major,
            drivers.DRIVER_MINOR: self.minor,
            drivers.DRIVER_REV: self.rev,
        }

    def run(self, start: int, tag: str, evictions: list[PodToEvict]) -> None:
        self._tag, self._evictions = tag, evictions
        self.machine.run(start)

    # --- what the machine asks -------------------------------------------------------------

    def before(self, phase: str) -> None:
        """Nothing: an upgrade in flight finishes (its states are brief)."""

    def phase_labels(self, phase: str) -> dict[str, str | None]:
        return {STATE: phase}

    def written(self, live: LiveNode) -> bool:
        return all(live.labels.get(k) == v for k, v in self.driver_labels().items())

    def undrained(self, live: LiveNode) -> list[str]:
        pods = pods_to_evict(self.cluster.pods_on(self.node), ignore_daemonsets=True, force=True)
        return [p.id for p in pods]

    def act(self, phase: str, live: LiveNode) -> LiveNode:
        if phase == CORDON_REQUIRED:
            return self.machine.cordon(live)
        if phase == DRAIN_REQUIRED:
            self._drain(self._evictions)
        elif phase == POD_RESTART_REQUIRED:
            return self._relabel(live)
        elif phase == VALIDATION_REQUIRED:
            self._validate(self._tag)
        elif phase == UNCORDON_REQUIRED:
            return self.machine.uncordon(live)
        return live

    def _relabel(self, live: LiveNode) -> LiveNode:
        wanted = self.driver_labels()
        changed = {k: v for k, v in wanted.items() if live.labels.get(k) != v}
        if changed:
            live = self.cluster.patch_node(self.node, {"metadata": {"labels": changed}})
        for key, value in wanted.items():
            self.emit(Step(self.node, key, value))
        return live

    def _validate(self, tag: str) -> None:
        live = self.cluster.get_node(self.node)
        coverage = drivers.coverage([(self.node, live.labels)], self.matrix)
        if not coverage or coverage[0].tag != tag or not coverage[0].covered:
            found = coverage[0].tag if coverage else "(not a GPU node)"
            self._fail(
                f"validation: {self.node} now needs driver image {found}, expected {tag} in the matrix"
            )
        self.emit(Step(self.node, "driver-image", f"{tag} OK"))

    def _fail(self, reason: str) -> NoReturn:
        """Record upgrade-failed on the node and the reason in its journal (as far as the
        API lets us), then stop."""
        left = f"is left cordoned in {UPGRADE_FAILED}"
        problem = self.machine.record_failure(reason, {STATE: UPGRADE_FAILED})
        if problem is not None:
            left = f"could not be labelled {UPGRADE_FAILED} ({problem}) and is left cordoned"
        else:
            self.emit(Step(self.node, STATE, UPGRADE_FAILED))
        raise UpgradeFailed(
            f"{reason}; {self.node} {left}: fix the cause, then rerun "
            "(or `reconcile rollout abandon` it to start over)"
        )

    def _drain(self, evictions: list[PodToEvict]) -> None:
        Drain(
            self.cluster,
            self.timeout,
            self.emit,
            self.note,
            self._fail,
            self.sleep,
            self.clock,
            self.declared,
        )(evictions)


@dataclass(frozen=True)
class Drain:
    """A node's drain: each pod evicted through the Eviction API (a refusal by a budget
    retried every EVICTION_RETRY_SECONDS, said once per reason), then each waited for
    until it is gone, all within `timeout` seconds; `fail` says why it could not, and
    for an eviction a budget refused to the end, what would let it pass: in desired/
    when it declares the budget (`declared`), else a `kubectl patch`."""

    cluster: NodeApi
    timeout: float
    emit: Callable[[Step], None]
    note: Callable[[str], None]
    fail: Callable[[str], NoReturn]
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    declared: Declared = field(default_factory=dict)

    def __call__(self, evictions: list[PodToEvict]) -> None:
        deadline = self.clock() + self.timeout
        for pod in evictions:
            self._evict(pod, deadline)
        for pod in evictions:
            self._wait_gone(pod, deadline)

    def _evict(self, pod: PodToEvict, deadline: float) -> None:
        said = ""
        while True:
            try:
                self.cluster.evict(pod.namespace, pod.name)
            except NotFound:
                return  # gone already
            except TooManyRequests as e:
                causes = "; ".join(str(c.get("message", "")) for c in e.causes if c.get("message"))
                reason = e.message + (f" ({causes})" if causes else "")
                remaining = deadline - self.clock()
                if remaining <= 0:
                    self.fail(
                        f"timed out after {self.timeout:g}s evicting {pod.id}: {reason}"
                        + self._advice(pod)
                    )
                if reason != said:  # once per reason, not once per retry
                    said = reason
                    self.note(
                        f"waiting: evicting {pod.id}: {reason}; retried every "
                        f"{EVICTION_RETRY_SECONDS:g}s for up to {self.timeout:g}s"
                    )
                self.sleep(min(EVICTION_RETRY_SECONDS, remaining))
                continue
            except ApiError as e:
                self.fail(f"evicting {pod.id}: {e.message or e}")
            self.emit(Step(pod.id, "evicted"))
            return

    def _advice(self, pod: PodToEvict) -> str:
        """`; PodDisruptionBudget NS/NAME: <what lets one more eviction pass>` for the one
        budget that selects `pod` (nothing when none or several do, or it cannot be read)."""
        try:
            budgets = self.cluster.budgets(pod.namespace)
        except ReconcileError:
            return ""
        _, found, _ = _budget_needs([pod], {pod.namespace: budgets})
        if len(found) != 1:
            return ""
        [(key, budget)] = found.items()
        return f"; PodDisruptionBudget {key[0]}/{key[1]}: " + _suggestion(budget, 1, self.declared)

    def _wait_gone(self, pod: PodToEvict, deadline: float) -> None:
        pauses = poll_intervals(DELETION_POLL_SECONDS)
        while True:
            found = self.cluster.get_pod(pod.namespace, pod.name)
            if found is None or str((found.get("metadata") or {}).get("uid")) != pod.uid:
                return
            if self.clock() >= deadline:
                self.fail(f"timed out after {self.timeout:g}s waiting for {pod.id} to terminate")
            self.sleep(next(pauses))
