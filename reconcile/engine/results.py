"""What apply returns: a `NodeResult` per node and an `ObjectResult` per object, gathered
in one `ApplyResult`; and what node and object apply share: the note of a change another
writer made first (`DONE_BY_OTHERS`), and how many times either writes again after a
conflict before it gives up (`MAX_CONFLICT_RETRIES`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from reconcile.engine.diff import NodeChange
from reconcile.engine.plan import MissingNode, ObjectPlan

DONE_BY_OTHERS: Final = (
    "already in place (another writer, or an earlier run): not applied by this run"
)

MAX_CONFLICT_RETRIES: Final = 5


@dataclass(frozen=True)
class NodeResult:
    name: str
    applied: tuple[NodeChange, ...] = ()
    error: str | None = None
    conflicts: int = 0
    # Said on stderr: e.g. the drift was gone because another writer fixed it first.
    note: str | None = None


@dataclass(frozen=True)
class ObjectResult:
    id: str
    # The object as this run changed it (its planned changes), when it did.
    changed: ObjectPlan | None = None
    error: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class ApplyResult:
    nodes: tuple[NodeResult, ...] = ()
    missingNodes: tuple[MissingNode, ...] = ()
    # Declared, absent, and allowed to be: noted, not a failure.
    absentNodes: tuple[MissingNode, ...] = ()
    objects: tuple[ObjectResult, ...] = ()
    # Objects the API server would reject: when any, nothing at all was written.
    rejected: tuple[str, ...] = field(default_factory=tuple)
    # Nodes not started because the run was told to stop.
    skipped: tuple[str, ...] = field(default_factory=tuple)
    retries: int = 0

    @property
    def failed(self) -> tuple[NodeResult, ...]:
        return tuple(n for n in self.nodes if n.error is not None)

    @property
    def failed_objects(self) -> tuple[ObjectResult, ...]:
        return tuple(o for o in self.objects if o.error is not None)

    @property
    def ok(self) -> bool:
        return not (
            self.failed or self.missingNodes or self.failed_objects or self.rejected or self.skipped
        )

    def lines(self) -> Iterable[tuple[str, NodeChange]]:
        for node in self.nodes:
            for change in node.applied:
                yield node.name, change

    def changed_objects(self) -> Iterable[ObjectPlan]:
        """The objects this run changed, in apply order."""
        for obj in self.objects:
            if obj.changed is not None:
                yield obj.changed
