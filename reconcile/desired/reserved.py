"""The node annotations reconcile writes itself, which desired/ may therefore not declare.

The inventories list the facts reconcile manages on a node (what `--prune` may remove),
as nfd-master keeps `nfd.node.kubernetes.io/feature-labels`; a driver upgrade and a
rollout of disruptive facts mark the node they work on. A declared value would be overwritten by every apply (which then never
converges) and a declared `null` would delete what prune relies on.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

_GROUP: Final = "reconcile.dev"

LABEL_INVENTORY: Final = f"{_GROUP}/managed-labels"
ANNOTATION_INVENTORY: Final = f"{_GROUP}/managed-annotations"
TAINT_INVENTORY: Final = f"{_GROUP}/managed-taints"
UPGRADE_TARGET: Final = f"{_GROUP}/upgrade-target"
UPGRADE_WAS_CORDONED: Final = f"{_GROUP}/upgrade-was-cordoned"
# A rollout's journal on the node it works on (gpu/journal.py); the keys below it are
# the markers of earlier versions, which are no longer written or trusted.
ROLLOUT_JOURNAL: Final = f"{_GROUP}/rollout"
ROLLOUT_PHASE: Final = f"{_GROUP}/rollout-phase"
ROLLOUT_WAS_CORDONED: Final = f"{_GROUP}/rollout-was-cordoned"
ROLLOUT_CHECKS: Final = f"{_GROUP}/rollout-checks"
ROLLOUT_FAILED: Final = f"{_GROUP}/rollout-failed"
ROLLOUT_SINCE: Final = f"{_GROUP}/rollout-phase-since"

_INVENTORY: Final = (
    "reconcile writes it on every apply from what desired/ declares (the facts it "
    "manages, what --prune may remove): declare the facts themselves"
)
_ROLLOUT: Final = (
    "`reconcile upgrade` writes it while it changes the node's driver and removes it "
    "when done: run `reconcile upgrade` instead"
)
_FACT_ROLLOUT: Final = (
    "`reconcile rollout` writes it while it rolls disruptive facts out on the node and "
    "removes it when done: run `reconcile rollout` instead"
)
_JOURNAL: Final = (
    "`reconcile rollout` and `reconcile upgrade` keep their journal in it while they work "
    "on the node and remove it when done: run them instead"
)
# Key -> why it may not be declared, and what to do instead.
RECONCILE_ANNOTATIONS: Final = {
    LABEL_INVENTORY: _INVENTORY,
    ANNOTATION_INVENTORY: _INVENTORY,
    TAINT_INVENTORY: _INVENTORY,
    ROLLOUT_JOURNAL: _JOURNAL,
    UPGRADE_TARGET: _ROLLOUT,
    UPGRADE_WAS_CORDONED: _ROLLOUT,
    ROLLOUT_PHASE: _FACT_ROLLOUT,
    ROLLOUT_WAS_CORDONED: _FACT_ROLLOUT,
    ROLLOUT_CHECKS: _FACT_ROLLOUT,
    ROLLOUT_FAILED: _FACT_ROLLOUT,
    ROLLOUT_SINCE: _FACT_ROLLOUT,
}


def inventories_size(*managed: Iterable[str]) -> int:
    """The bytes the inventory annotations add to a node for the given keys reconcile
    manages (labels, annotations, taints as `key:effect`): each non-empty one is its
    annotation key and the keys joined by commas."""
    keys = (LABEL_INVENTORY, ANNOTATION_INVENTORY, TAINT_INVENTORY)
    total = 0
    for inventory, facts in zip(keys, managed, strict=False):
        names = [name.encode() for name in facts]
        if names:
            total += len(inventory) + sum(map(len, names)) + len(names) - 1
    return total
