"""RBAC as each operation declares it: a module that calls the API server names the rules
it needs beside its calls (a module-level `RBAC`), and `rbac.py` merges every declared
rule into the Roles `reconcile rbac` prints."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


class Scope(enum.Enum):
    """Where a rule is granted when no namespace names it."""

    CLUSTER = "cluster"  # the ClusterRole
    OWN_NAMESPACE = "own namespace"  # a Role in the service account's namespace


@dataclass(frozen=True)
class Rule:
    """One PolicyRule, why reconcile needs it (a comment in the YAML), and where it is
    granted: cluster-wide, in the service account's namespace, or in a named namespace."""

    group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    names: tuple[str, ...] = ()
    why: str = ""
    where: Scope | str = Scope.CLUSTER

    def document(self) -> dict[str, Any]:
        rule: dict[str, Any] = {"apiGroups": [self.group], "resources": list(self.resources)}
        if self.names:
            rule["resourceNames"] = list(self.names)
        rule["verbs"] = list(self.verbs)
        return rule


def merged(rules: Iterable[Rule]) -> list[Rule]:
    """One rule for each (where, group, resources, names) that `rules` declare, in the order
    first declared: its verbs those of every declaration, in alphabetical order (as the API
    server's discovery lists verbs); its reason theirs, in order, joined by "; "."""
    found: dict[tuple[Scope | str, str, tuple[str, ...], tuple[str, ...]], Rule] = {}
    for rule in rules:
        key = (rule.where, rule.group, rule.resources, rule.names)
        so_far = found.get(key)
        if so_far is None:
            found[key] = dataclasses.replace(rule, verbs=tuple(sorted(set(rule.verbs))))
            continue
        found[key] = dataclasses.replace(
            so_far,
            verbs=tuple(sorted({*so_far.verbs, *rule.verbs})),
            why="; ".join(why for why in (so_far.why, rule.why) if why),
        )
    return list(found.values())
