"""Who writes which label on a GPU node: nfd-worker (through nfd-master), GPU Feature
Discovery, the GPU Operator, or reconcile itself; and the plan's part of it, a policy that
names each change's owner and a check that warns when a change fights its owner."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from reconcile.diagnostics import Severity
from reconcile.engine.checks import Finding, Projection
from reconcile.engine.diff import LabelChange
from reconcile.engine.facts import Fact
from reconcile.kube.labels import NFD_DEFAULT_NAMESPACE
from reconcile.kube.objects import LiveNode

NFD: Final = "nfd-worker"
GFD: Final = "gpu-feature-discovery"
GPU_OPERATOR: Final = "gpu-operator"
RECONCILE: Final = "reconcile"
NFD_FEATURE_LABELS_ANNOTATION: Final = "nfd.node.kubernetes.io/feature-labels"
UPGRADE_STATE_LABEL: Final = "nvidia.com/gpu-driver-upgrade-state"

# The field managers through which each writer's labels reach the node: GFD's labels go
# through NFD (a feature file or a NodeFeature object) and are written by nfd-master.
WRITER_MANAGERS: Final = {
    NFD: frozenset({"nfd-master", "nfd-worker"}),
    GFD: frozenset({"nfd-master", "gpu-feature-discovery"}),
    GPU_OPERATOR: frozenset({"gpu-operator"}),
}


def nfd_feature_labels(annotation: str) -> frozenset[str]:
    """Full label keys from nfd-master's feature-labels annotation (bare names are in
    the default feature.node.kubernetes.io/ namespace)."""
    keys = (name.strip() for name in annotation.split(","))
    return frozenset(key if "/" in key else NFD_DEFAULT_NAMESPACE + key for key in keys if key)


# GPU Feature Discovery's label families, and the GPU Operator's decisions within them.
GFD_PREFIXES: Final = ("nvidia.com/gpu.", "nvidia.com/cuda.", "nvidia.com/mig.")
OPERATOR_PREFIXES: Final = ("nvidia.com/gpu.deploy.",)
# Facts discovered on the node (NFD and GFD), not decisions: what `import` brings into git.
DISCOVERED_PREFIXES: Final = (NFD_DEFAULT_NAMESPACE, *GFD_PREFIXES)


def label_owner(
    key: str, nfd_owned: frozenset[str] = frozenset(), managed: frozenset[str] = frozenset()
) -> str | None:
    """Which component writes `key`: by nfd-master's record first, then by prefix, then
    reconcile's own inventory; None when nobody known owns it."""
    if key in nfd_owned or key.startswith(NFD_DEFAULT_NAMESPACE):
        return NFD
    if key == UPGRADE_STATE_LABEL or key.startswith(OPERATOR_PREFIXES):
        return GPU_OPERATOR
    if key.startswith(GFD_PREFIXES):
        return GFD
    if key in managed:
        return RECONCILE
    return None


def owner_of(live: LiveNode, key: str, inventory: frozenset[str]) -> str | None:
    """The writer of `key` on `live`, by nfd-master's feature-labels record first."""
    nfd = nfd_feature_labels(live.annotations.get(NFD_FEATURE_LABELS_ANNOTATION, ""))
    return label_owner(key, nfd, inventory)


def _fight(node: str, change: LabelChange, manager: str | None) -> Finding | None:
    writers = WRITER_MANAGERS.get(change.owner or "", frozenset())
    if manager not in writers or change.before is None:
        return None
    return Finding(
        severity=Severity.WARNING,
        kind="label-fight",
        subject=f"{node} {change.key}",
        message=(
            f"{change.owner} wrote {change.before!r} (field manager {manager}) and "
            "re-asserts it on its next resync: the label will flap unless its "
            "source changes too"
        ),
    )


def label_fights(projection: Projection) -> Iterable[Finding]:
    """Changes that overwrite a value its owner wrote itself: the owner writes it back."""
    live = {node.name: node for node in projection.live}
    for node_plan in projection.nodes:
        managers = live[node_plan.name].label_managers if node_plan.name in live else {}
        for change in node_plan.changes:
            if change.fact is not Fact.LABEL:
                continue  # field managers are tracked for labels
            if (found := _fight(node_plan.name, change, managers.get(change.key))) is not None:
                yield found
