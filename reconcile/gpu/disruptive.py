"""Disruptive node facts: labels whose write makes a GPU Operator component act on the
node's GPUs (mig-manager repartitions them, an operand is removed, the device plugin
restarts with another configuration). They are rolled out, never flipped under running
GPU pods. The catalogue is data (data/disruptive.json, its sources named there), and a
site adds its own in desired/disruptive/*.yaml (kind DisruptiveFacts)."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final

from reconcile.desired import models as declared
from reconcile.desired.models import DesiredState

GPU_RESOURCES: Final = "nvidia.com/"


@dataclass(frozen=True)
class StateLabel:
    """The label that reports how the operation went, and its values by meaning."""

    label: str
    working: tuple[str, ...]
    done: tuple[str, ...]
    failed: tuple[str, ...]


@dataclass(frozen=True)
class DisruptiveFact:
    """One catalogued key (or every key under a prefix)."""

    key: str
    disrupts: str
    prefix: bool = False
    state: StateLabel | None = None
    # What to check once done: "allocatable" (the node offers what the change projects)
    # or "none".
    verify: str = "none"

    def matches(self, key: str) -> bool:
        return key.startswith(self.key) if self.prefix else key == self.key


def _fact(entry: Mapping[str, Any]) -> DisruptiveFact:
    state = entry.get("state")
    return DisruptiveFact(
        key=str(entry.get("key") or entry.get("prefix")),
        disrupts=str(entry["disrupts"]),
        prefix="prefix" in entry,
        state=StateLabel(
            str(state["label"]),
            tuple(state["working"]),
            tuple(state["done"]),
            tuple(state["failed"]),
        )
        if state
        else None,
        verify=str(entry.get("verify", "none")),
    )


@functools.cache
def _packaged() -> tuple[DisruptiveFact, ...]:
    text = resources.files("reconcile.gpu").joinpath("data/disruptive.json").read_text()
    return tuple(_fact(entry) for entry in json.loads(text)["facts"])


def _declared(fact: declared.DisruptiveFact) -> DisruptiveFact:
    state = fact.state
    return DisruptiveFact(
        key=str(fact.key or fact.prefix),
        disrupts=fact.disrupts,
        prefix=fact.prefix is not None,
        state=StateLabel(state.label, tuple(state.working), tuple(state.done), tuple(state.failed))
        if state
        else None,
    )


@dataclass(frozen=True)
class Catalogue:
    """The disruptive facts: desired/'s (desired/disruptive/*.yaml) first, then the
    packaged ones (data/disruptive.json): a site's entry for a key wins."""

    facts: tuple[DisruptiveFact, ...]

    @classmethod
    def packaged(cls) -> Catalogue:
        return cls(_packaged())

    @classmethod
    def of(cls, state: DesiredState) -> Catalogue:
        return cls((*(_declared(fact) for fact, _ in state.disruptive), *_packaged()))

    def fact_for(self, key: str) -> DisruptiveFact | None:
        """The entry for a label key; None for an ordinary fact. A state label is never
        disruptive itself (`nvidia.com/mig.config.state` is mig-manager's report)."""
        for fact in self.facts:
            if fact.matches(key) and not (fact.state and key == fact.state.label):
                return fact
        return None

    def states(self) -> tuple[StateLabel, ...]:
        """Every state label, once (the first entry's meaning of its values wins)."""
        found: dict[str, StateLabel] = {}
        for fact in self.facts:
            if fact.state is not None:
                found.setdefault(fact.state.label, fact.state)
        return tuple(found.values())


def uses_gpu(pod_spec: Mapping[str, Any]) -> bool:
    """Whether a pod asks for a GPU resource (`nvidia.com/...`: whole GPUs, MIG slices)
    in any container's requests or limits."""
    containers = [*(pod_spec.get("containers") or ()), *(pod_spec.get("initContainers") or ())]
    for container in containers:
        spec = container.get("resources") or {}
        for part in ("requests", "limits"):
            if any(str(name).startswith(GPU_RESOURCES) for name in spec.get(part) or {}):
                return True
    return False
