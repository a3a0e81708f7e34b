"""Node facts as paths: a label, an annotation or a taint is a value at a path of the node
(`metadata.labels[key]`, `metadata.annotations[key]`, `spec.taints[key:effect]`).

Each kind of fact is one `FactRule`: where it lives, how the live node and the desired
node hold it, and how it is written. Drift, the write, its confirmation, prune and the
views work on `(fact, key)` whatever the kind, so a new kind of fact is a model field, a
reader rule and a rule here.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from reconcile.desired.reserved import ANNOTATION_INVENTORY, LABEL_INVENTORY, TAINT_INVENTORY

if TYPE_CHECKING:  # the command line reads this module before it needs the models
    from reconcile.desired.models import DesiredNode
    from reconcile.kube.objects import LiveNode


class Fact(enum.StrEnum):
    LABEL = "label"
    ANNOTATION = "annotation"
    TAINT = "taint"


@dataclass(frozen=True)
class FactRule:
    fact: Fact
    # How a drift line names the key: labels bare (the contract), the others prefixed.
    # `:` never occurs in a label key, so a line's kind is unambiguous.
    prefix: str
    # The node annotation listing the keys reconcile manages, what --prune may remove.
    inventory: str

    def path(self, key: str) -> tuple[str, ...]:
        if self.fact is Fact.LABEL:
            return ("metadata", "labels", key)
        if self.fact is Fact.ANNOTATION:
            return ("metadata", "annotations", key)
        return ("spec", "taints", key)

    def live(self, node: LiveNode) -> dict[str, str]:
        """key -> value on the live node."""
        if self.fact is Fact.LABEL:
            return dict(node.labels)
        if self.fact is Fact.ANNOTATION:
            return {k: v for k, v in node.annotations.items() if k not in INVENTORIES}
        return {taint_key(t): str(t.get("value") or "") for t in node.taints}

    def get(self, node: LiveNode, key: str) -> str | None:
        """The live value of one key, None when the node does not carry it: what
        `live(node).get(key)` answers, without copying the node's facts."""
        if self.fact is Fact.LABEL:
            return node.labels.get(key)
        if self.fact is Fact.ANNOTATION:
            return None if key in INVENTORIES else node.annotations.get(key)
        for taint in reversed(node.taints):  # the last of a key wins, as in live()
            if taint_key(taint) == key:
                return str(taint.get("value") or "")
        return None

    def desired(self, node: DesiredNode) -> Mapping[str, str | None]:
        """key -> value (None: must be absent) that desired/ declares."""
        if self.fact is Fact.LABEL:
            return node.labels
        if self.fact is Fact.ANNOTATION:
            return node.annotations
        return node.taints


# Like nfd-master's nfd.node.kubernetes.io/feature-labels: the keys this tool has set.
RULES: Final = (
    FactRule(Fact.LABEL, "", LABEL_INVENTORY),
    FactRule(Fact.ANNOTATION, "annotation:", ANNOTATION_INVENTORY),
    FactRule(Fact.TAINT, "taint:", TAINT_INVENTORY),
)
BY_FACT: Final = {rule.fact: rule for rule in RULES}
INVENTORIES: Final = frozenset(rule.inventory for rule in RULES)


def taint_key(taint: Mapping[str, Any]) -> str:
    """A taint's identity as the API server has it: key and effect."""
    return f"{taint.get('key', '')}:{taint.get('effect', '')}"


def taints_after(
    live: Iterable[Mapping[str, Any]], changes: Mapping[str, str | None]
) -> list[dict[str, Any]]:
    """The node's taint list once `changes` (key:effect -> value, None to remove) apply:
    untouched taints keep their place and fields, changed ones are replaced in place,
    new ones are appended."""
    result: list[dict[str, Any]] = []
    seen = set()
    for taint in live:
        key = taint_key(taint)
        seen.add(key)
        if key not in changes:
            result.append(dict(taint))
        elif (value := changes[key]) is not None:
            result.append(_taint(key, value, taint))
    for key, value in changes.items():
        if key not in seen and value is not None:
            result.append(_taint(key, value, {}))
    return result


def _taint(key: str, value: str, old: Mapping[str, Any]) -> dict[str, Any]:
    name, _, effect = key.rpartition(":")
    taint: dict[str, Any] = {"key": name, "effect": effect}
    if value:
        taint["value"] = value
    if "timeAdded" in old:  # the API server keeps it for NoExecute taints
        taint["timeAdded"] = old["timeAdded"]
    return taint


def shown_key(fact: Fact, key: str) -> str:
    return BY_FACT[fact].prefix + key


def parse_shown_key(shown: str) -> tuple[Fact, str]:
    """`taint:dedicated:NoSchedule` -> (TAINT, `dedicated:NoSchedule`); a bare key is a label."""
    for rule in RULES[1:]:
        if shown.startswith(rule.prefix):
            return rule.fact, shown[len(rule.prefix) :]
    return Fact.LABEL, shown


_PLAIN: Final = re.compile(r"[A-Za-z0-9_./:@+=-]+")


def shown_value(value: str | None) -> str:
    """A value as drift lines print it: `-` for must be absent, `""` for empty, a JSON
    string when it is not a plain token (annotations may hold anything)."""
    if value is None:
        return "-"
    if not value:
        return '""'
    return value if _PLAIN.fullmatch(value) else json.dumps(value)
