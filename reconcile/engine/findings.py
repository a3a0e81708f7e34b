"""The plan's own vocabulary for what it reveals and what it consults: the `Finding`
every check returns, the node policy through which domain knowledge (the GPU's) decides
owners and refusals, and the labels a node carries once changes are laid over. Below the
plan and the checks, which both speak it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from reconcile.diagnostics import Severity
from reconcile.engine.diff import NodeChange
from reconcile.engine.facts import Fact
from reconcile.kube.objects import LiveNode


class Finding(BaseModel):
    """Something the plan reveals beyond drift, that review must see. `error`: must not
    merge as it is (the pull-request check fails); `warning`: review must see it. Either
    makes `plan` exit 1."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    severity: Severity
    kind: str
    subject: str
    message: str
    # The API server would reject the change (an object conflict, an invalid object...):
    # `apply` then writes nothing at all.
    blocksApply: bool = False

    @property
    def is_error(self) -> bool:
        """Must not merge as it is (a warning is for review to see)."""
        return self.severity is Severity.ERROR

    @property
    def is_note(self) -> bool:
        """Worth knowing, nothing to act on: it does not make `plan` exit 1."""
        return self.severity is Severity.NOTE


# How many pods (or other subjects) a finding names before "and N more".
NAMED_AT_MOST = 5


def named(names: Sequence[str], most: int = NAMED_AT_MOST) -> str:
    """`a, b, c` or, past `most`, `a, b, c, d, e and 3 more`."""
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def blocking(findings: Iterable[Finding]) -> list[Finding]:
    """The findings that stop `apply` before its first write."""
    return [f for f in findings if f.blocksApply]


class NodePolicy(Protocol):
    """Domain knowledge the engine consults for each node change."""

    def owner(self, live: LiveNode, key: str, inventory: frozenset[str]) -> str | None:
        """The component that writes `key` on `live` (shown with --show-owner)."""
        ...

    def refusal(self, live: LiveNode, changes: Sequence[NodeChange]) -> str | None:
        """Why these changes must not be written to `live` (apply skips the node and
        reports it unless told otherwise), or None."""
        ...

    def allocatable(self, live: LiveNode, labels: Mapping[str, str]) -> Mapping[str, str]:
        """What `live` will offer pods once it carries `labels` (a new MIG layout
        repartitions its GPUs)."""
        ...

    def disruptive(self, key: str) -> bool:
        """Whether writing label `key` makes an operator disrupt the node's workloads."""
        ...


class NoPolicy:
    """No domain knowledge: no owners, nothing refused."""

    def owner(self, live: LiveNode, key: str, inventory: frozenset[str]) -> str | None:
        return None

    def refusal(self, live: LiveNode, changes: Sequence[NodeChange]) -> str | None:
        return None

    def allocatable(self, live: LiveNode, labels: Mapping[str, str]) -> Mapping[str, str]:
        return live.allocatable

    def disruptive(self, key: str) -> bool:
        return False


# The policy of a plan made without domain knowledge.
NO_POLICY: NodePolicy = NoPolicy()


def overlay(live_labels: Mapping[str, str], changes: Iterable[NodeChange]) -> dict[str, str]:
    """The labels a node carries once `changes` (their label changes) are applied."""
    result = dict(live_labels)
    for change in changes:
        if change.fact is not Fact.LABEL:
            continue
        if change.after is None:
            result.pop(change.key, None)
        else:
            result[change.key] = change.after
    return result
