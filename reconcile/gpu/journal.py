"""A rollout's journal, and the one state machine that `rollout` and `upgrade` run a node by.

The journal is one annotation on the node, `reconcile.dev/rollout`, that only reconcile
writes: the rollout it belongs to (an id, and the Lease that rollout holds, gpu/lock.py),
the work and its target (a driver version, or the facts written), the phase to do next,
whether this rollout cordoned the node, since when, what the written node is checked
against and, after a failure, why. A run resumes a node only from a journal it can trust:

- its Lease exists and names the same rollout and this node (a journal whose Lease is
  gone, or that names another, is stale or foreign);
- that Lease is this run's, or its holder is gone (expired or released): one held by a
  live process is another rollout's;
- its target is this run's target for the node.

Before each phase the machine checks the phase's preconditions against the live node
(`Phase.requires`): past the cordon the node is still cordoned, past the drain no pod the
drain moves runs there, past the write the change is on the node. What disagrees stops
the run with the node and what disagrees named, and the node as it is. Markers that the
journal does not account for (the annotations of earlier versions, or a bare
`reconcile.dev/rollout-phase`) are foreign: the run stops and `reconcile rollout abandon`
clears them. The GPU Operator's `nvidia.com/gpu-driver-upgrade-state` label is the
operator's state: an upgrade reports its states there, as the operator does, but never
resumes from it.
"""

from __future__ import annotations

import datetime
import enum
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal, NamedTuple, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from reconcile.desired.reserved import (
    ROLLOUT_CHECKS,
    ROLLOUT_FAILED,
    ROLLOUT_JOURNAL,
    ROLLOUT_PHASE,
    ROLLOUT_SINCE,
    ROLLOUT_WAS_CORDONED,
    UPGRADE_TARGET,
    UPGRADE_WAS_CORDONED,
)
from reconcile.diagnostics import ReconcileError
from reconcile.kube.api import NodeApi
from reconcile.kube.objects import LiveNode

JOURNAL: Final = ROLLOUT_JOURNAL
# Annotations reconcile wrote before the journal, which it no longer trusts or writes.
FOREIGN_MARKERS: Final = (
    ROLLOUT_PHASE,
    ROLLOUT_WAS_CORDONED,
    ROLLOUT_CHECKS,
    ROLLOUT_FAILED,
    ROLLOUT_SINCE,
    UPGRADE_TARGET,
    UPGRADE_WAS_CORDONED,
)
ABANDON: Final = "`reconcile rollout abandon {node}` clears it (cordons stay as they are)"

Work = Literal["driver", "facts"]


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Untrusted(ReconcileError):
    """A node's journal (or a marker) a run may not act on: foreign, stale, another
    rollout's, another target's, or contradicted by the node."""


class Journal(BaseModel):
    """One node's record of one rollout (the annotation's JSON)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rollout: str
    lease: str  # namespace/name of the rollout's Lease
    work: Work
    # The driver version, or the facts written: shown key -> value (None: removed).
    target: str | dict[str, str | None]
    phase: str
    cordoned: bool = False  # this rollout cordoned the node: it uncordons it
    wasCordoned: bool = False  # cordoned before this rollout began: it stays so
    since: str = ""
    checks: dict[str, Any] | None = None
    failed: str | None = None

    def dump(self) -> str:
        return json.dumps(self.model_dump(exclude_none=True), sort_keys=True, separators=(",", ":"))

    @classmethod
    def load(cls, text: str) -> Journal:
        """The journal of an annotation's value; Untrusted when it is not one."""
        try:
            return cls.model_validate_json(text)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "the value"
            raise Untrusted(
                f"{JOURNAL} is not a journal reconcile wrote ({where}: {first['msg']})"
            ) from None


@dataclass(frozen=True)
class LeaseView:
    """A rollout's Lease as read: which rollout, held by whom since when, whether its
    holder is alive (renewed within its duration and not released), and its nodes."""

    name: str
    namespace: str
    rollout: str
    holder: str
    acquired: str
    renewed: str
    live: bool
    nodes: frozenset[str]
    work: str = ""
    target: str = ""
    duration: float = 0.0

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def shown(self) -> str:
        return (
            f"rollout {self.rollout} held by {self.holder or '(nobody)'} since {self.acquired} "
            f"(Lease {self.ref}, renewed {self.renewed})"
        )


@dataclass(frozen=True)
class Binding:
    """The rollout a run's journal entries belong to (its id and Lease) and the other
    rollouts' Leases as read before the run (by their Lease's namespace/name)."""

    rollout: str
    lease: str
    leases: Mapping[str, LeaseView] = field(default_factory=dict)

    @classmethod
    def offline(cls, leases: Mapping[str, LeaseView] | None = None) -> Binding:
        """No rollout of its own (a dry run, `rollout status`): it only judges journals."""
        return cls("", "", leases or {})


def read(live: LiveNode) -> Journal | None:
    """The node's journal (None when it has none); Untrusted for a foreign marker or a
    journal that is not one."""
    foreign = [k for k in FOREIGN_MARKERS if k in live.annotations]
    text = live.annotations.get(JOURNAL)
    if text is None:
        if foreign:
            raise Untrusted(
                f"{live.name} carries {', '.join(foreign)}, a marker no journal of reconcile's "
                f"accounts for: nothing resumes from it; {ABANDON.format(node=live.name)}"
            )
        return None
    try:
        return Journal.load(text)
    except Untrusted as e:
        raise Untrusted(f"{live.name}: {e}; {ABANDON.format(node=live.name)}") from None


def trusted(live: LiveNode, binding: Binding, work: Work, target: object) -> Journal | None:
    """The node's journal when this run may resume from it (None: no journal, start
    afresh); Untrusted naming the node and what disagrees. `target` is this run's target
    for the node (None: the run has none, any target of the work is accepted)."""
    journal = read(live)
    if journal is None:
        return None
    name = live.name
    if journal.lease != binding.lease or journal.rollout != binding.rollout:
        lease = binding.leases.get(journal.lease)
        if lease is None or lease.rollout != journal.rollout:
            raise Untrusted(
                f"{name}: its journal (rollout {journal.rollout}, at {journal.phase}) names "
                f"Lease {journal.lease}, which {'is gone' if lease is None else 'is another rollout' + chr(39) + 's'}: "
                f"the journal is stale or foreign; {ABANDON.format(node=name)}"
            )
        if name not in lease.nodes:
            raise Untrusted(
                f"{name}: its journal names rollout {journal.rollout}, whose Lease does not "
                f"list {name}: the journal is foreign; {ABANDON.format(node=name)}"
            )
        if lease.live:
            raise Untrusted(f"{name} is in another rollout: {lease.shown}; wait for it to finish")
    if journal.work != work:
        raise Untrusted(
            f"{name} is at {journal.phase} of a {journal.work} rollout (rollout "
            f"{journal.rollout}): finish it with `reconcile {'upgrade' if journal.work == 'driver' else 'rollout'}`, "
            f"or {ABANDON.format(node=name)}"
        )
    if target is not None and journal.target != target:
        raise Untrusted(
            f"{name} is at {journal.phase} of a rollout to {shown_target(journal.target)}, "
            f"not {shown_target(target)}: finish that one, or {ABANDON.format(node=name)}"
        )
    return journal


def shown_target(target: object) -> str:
    if isinstance(target, dict):
        return ",".join(f"{k}={'-' if v is None else v}" for k, v in sorted(target.items()))
    return f"driver {target}"


# --- the state machine ----------------------------------------------------------------------


class Requires(enum.Enum):
    """What a phase needs of the live node before it acts."""

    CORDONED = "cordoned"  # spec.unschedulable
    DRAINED = "drained"  # no pod the drain moves runs there
    WRITTEN = "written"  # the target is on the node


@dataclass(frozen=True)
class Phase:
    name: str
    requires: frozenset[Requires] = frozenset()


def phases(*table: tuple[str, tuple[Requires, ...]]) -> tuple[Phase, ...]:
    return tuple(Phase(name, frozenset(needs)) for name, needs in table)


class Contradiction(Untrusted):
    """The node disagrees with what its journal says was done: the run stops there."""


class Step(NamedTuple):
    """One thing a node's operation did (or, dry, would do): a fact of a node or pod that moved."""

    subject: str
    field: str
    value: str = ""


class Steps(Protocol):
    """What a job does at each phase of its `PHASES` (change.FactJob, upgrade.Upgrade)
    and what the machine checks the node by."""

    PHASES: ClassVar[tuple[Phase, ...]]
    # The field that steps report the phase in.
    STATE_FIELD: ClassVar[str]

    def act(self, phase: str, live: LiveNode) -> LiveNode: ...

    def written(self, live: LiveNode) -> bool:
        """The target is on the node."""
        ...

    def undrained(self, live: LiveNode) -> list[str]:
        """The pods on the node that its drain moves (none once drained)."""
        ...

    def phase_labels(self, phase: str) -> dict[str, str | None]:
        """Labels written with the journal at `phase` (a driver: the operator's state)."""
        ...

    def before(self, phase: str) -> None:
        """Asked before each phase (a job stopping at a signal raises here)."""
        ...


@dataclass
class Machine:
    """One node through its job's phases: before each, the phase's preconditions
    checked against the live node, then the journal written, then the action."""

    cluster: NodeApi
    node: str
    binding: Binding
    work: Work
    target: str | dict[str, str | None]
    steps: Steps
    emit: Callable[[Step], None]
    note: Callable[[str], None]
    phase: str | None = field(default=None, init=False)
    journal: Journal | None = field(default=None, init=False)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.steps.PHASES)

    def start_index(self, live: LiveNode) -> int:
        """Where the node's journal says to resume (0: from the start). The journal is
        the caller's to trust first (`trusted`)."""
        journal = read(live)
        if journal is None or journal.phase not in self.names:
            return 0
        return self.names.index(journal.phase)

    def check(self, phase: Phase, live: LiveNode) -> None:
        """Contradiction when the node disagrees with what `phase` needs."""
        problems = []
        if Requires.CORDONED in phase.requires and not live.unschedulable:
            problems.append("it is not cordoned (someone uncordoned it)")
        if Requires.DRAINED in phase.requires:
            left = self.steps.undrained(live)
            if left:
                problems.append(f"pods the drain moves run there: {', '.join(left)}")
        if Requires.WRITTEN in phase.requires and not self.steps.written(live):
            problems.append(f"{shown_target(self.target)} is not on the node")
        if problems:
            raise Contradiction(
                f"{self.node}: its journal says {phase.name}, but {'; '.join(problems)}: "
                f"nothing more was done to {self.node}; {ABANDON.format(node=self.node)}, then "
                "rerun to start it over"
            )

    def run(self, start: int) -> None:
        live = self.cluster.get_node(self.node)
        self.journal = read(live)
        for phase in self.steps.PHASES[start:]:
            self.steps.before(phase.name)
            self.phase = phase.name
            if start > 0 or phase.requires:
                live = self.cluster.get_node(self.node)
            self.check(phase, live)
            live = self._enter(live, phase.name)
            live = self.steps.act(phase.name, live)

    def _record(self, **changes: Any) -> Journal:
        journal = self.journal or Journal(
            rollout=self.binding.rollout,
            lease=self.binding.lease,
            work=self.work,
            target=self.target,
            phase="",
        )
        # Taken over from a rollout whose holder is gone: this run's from now on.
        return journal.model_copy(
            update={"rollout": self.binding.rollout, "lease": self.binding.lease, **changes}
        )

    def _enter(self, live: LiveNode, phase: str) -> LiveNode:
        """The journal at `phase` (a failure's reason cleared: it is retried), before its
        action; at the last phase the journal goes."""
        last = phase == self.names[-1]
        changes: dict[str, Any] = {"phase": phase, "failed": None}
        if self.journal is None:
            changes["wasCordoned"] = live.unschedulable
        journal = self._record(**changes)
        labels = self.steps.phase_labels(phase)
        if (
            not last
            and journal == self.journal
            and all(live.labels.get(k) == v for k, v in labels.items())
        ):
            return live
        moved = (
            last
            or self.journal is None
            or (self.journal.phase, self.journal.failed) != (phase, None)
            or any(live.labels.get(k) != v for k, v in labels.items())
        )
        if moved:
            journal = journal.model_copy(update={"since": now()})
        metadata: dict[str, Any] = {"annotations": {JOURNAL: None if last else journal.dump()}}
        if labels:
            metadata["labels"] = labels
        live = self.cluster.patch_node(self.node, {"metadata": metadata})
        self.journal = None if last else journal
        if moved:  # a journal only taken over (a rerun at the same phase) says nothing
            self.emit(Step(self.node, self.steps.STATE_FIELD, phase))
        return live

    def recorded(self, **changes: Any) -> dict[str, str]:
        """The annotation that records `changes` in the journal, for a job's own PATCH
        (which writes them together with its action); the journal as it will then be."""
        self.journal = self._record(**changes)
        return {JOURNAL: self.journal.dump()}

    def cordon(self, live: LiveNode) -> LiveNode:
        """Cordoned, the journal saying that this rollout did it."""
        if live.unschedulable:
            return live
        patch = {
            "spec": {"unschedulable": True},
            "metadata": {"annotations": self.recorded(cordoned=True)},
        }
        live = self.cluster.patch_node(self.node, patch)
        self.emit(Step(self.node, "spec.unschedulable", "true"))
        return live

    def uncordon(self, live: LiveNode) -> LiveNode:
        """Uncordoned only when this rollout cordoned it."""
        journal = self.journal
        if journal is None or not journal.cordoned:
            if live.unschedulable:
                began = "upgrade" if self.work == "driver" else "rollout"
                self.note(f"{self.node} stays cordoned: it was cordoned before the {began} began")
            return live
        patch: dict[str, Any] = {"metadata": {"annotations": self.recorded(cordoned=False)}}
        if live.unschedulable:
            patch["spec"] = {"unschedulable": None}
        live = self.cluster.patch_node(self.node, patch)
        if "spec" in patch:
            self.emit(Step(self.node, "spec.unschedulable", "false"))
        return live

    def record_failure(self, reason: str, labels: Mapping[str, str] | None = None) -> str | None:
        """The failure in the journal (with `labels`, a driver's upgrade-failed): None, or
        why it could not be recorded."""
        metadata: dict[str, Any] = {"annotations": self.recorded(failed=reason[:1024])}
        if labels:
            metadata["labels"] = dict(labels)
        try:
            self.cluster.patch_node(self.node, {"metadata": metadata})
        except ReconcileError as e:
            return str(e)
        return None


def abandon(cluster: NodeApi, nodes: Sequence[LiveNode], binding: Binding) -> list[tuple[str, str]]:
    """The journal (and any foreign marker) removed from each node that carries one, the
    cordons left as they are: (node, what was left) for each. Untrusted, before anything
    is removed, when a node is in a rollout whose holder is alive."""
    for live in nodes:
        try:
            journal = read(live)
        except Untrusted:
            continue
        if journal is None:
            continue
        lease = binding.leases.get(journal.lease)
        if lease is not None and lease.live and lease.rollout == journal.rollout:
            raise Untrusted(
                f"{live.name} is in a running rollout: {lease.shown}; stop it first "
                "(nothing was abandoned)"
            )
    done = []
    for live in nodes:
        keys = [k for k in (JOURNAL, *FOREIGN_MARKERS) if k in live.annotations]
        if not keys:
            continue
        try:
            journal = read(live)
            phase = journal.phase if journal is not None else None
        except Untrusted:
            phase = live.annotations.get(ROLLOUT_PHASE)
        cluster.patch_node(live.name, {"metadata": {"annotations": dict.fromkeys(keys)}})
        left = "left cordoned" if live.unschedulable else "left uncordoned"
        done.append((live.name, f"{left}, was at {phase or 'an unknown phase'}"))
    return done


def journals(nodes: Sequence[LiveNode]) -> dict[str, Journal]:
    """The readable journals of `nodes`, by node."""
    found = {}
    for live in nodes:
        try:
            journal = read(live)
        except Untrusted:
            continue
        if journal is not None:
            found[live.name] = journal
    return found


def marked(live: LiveNode) -> bool:
    """The node carries a journal, or a marker of an earlier version's."""
    return JOURNAL in live.annotations or any(k in live.annotations for k in FOREIGN_MARKERS)


def conflicts(binding: Binding, nodes: Collection[str]) -> list[str]:
    """Each live Lease of another rollout that lists some of `nodes`, in words."""
    problems = []
    for lease in sorted(binding.leases.values(), key=lambda v: (v.acquired, v.name)):
        if lease.ref == binding.lease or not lease.live:
            continue
        shared = sorted(lease.nodes & set(nodes))
        if shared:
            more = " and more" if len(shared) > 5 else ""
            problems.append(
                f"{', '.join(shared[:5])}{more} {'is' if len(shared) == 1 else 'are'} in "
                f"another rollout: {lease.shown}; wait for it to finish (its Lease expires "
                f"{lease.duration:g}s after its holder stops renewing it)"
            )
    return problems
