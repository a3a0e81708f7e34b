"""Who writes which label on a GPU node: nfd-worker (through nfd-master), GPU Feature
Discovery, the GPU Operator, or reconcile itself; and the plan's part of it, a policy that
names each change's owner and a check that warns when a change fights its owner."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Final

from reconcile.diagnostics import Severity
from reconcile.engine.checks import Projection
from reconcile.engine.diff import NodeChange
from reconcile.engine.facts import Fact
from reconcile.engine.findings import Finding
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


def _fight(node: str, change: NodeChange, manager: str | None) -> Finding | None:
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


# The labels GPU Feature Discovery and the GPU Operator publish (their documented names):
# a key under their prefixes that is none of these is most likely a typo, and a typo is
# silent on a cluster (nothing selects on it, or a selector matches nothing).
GPU_LABEL_CATALOGUE: Final = frozenset(
    {
        "nvidia.com/gpu.present",
        "nvidia.com/gpu.product",
        "nvidia.com/gpu.count",
        "nvidia.com/gpu.memory",
        "nvidia.com/gpu.family",
        "nvidia.com/gpu.machine",
        "nvidia.com/gpu.replicas",
        "nvidia.com/gpu.sharing-strategy",
        "nvidia.com/gpu.mode",
        "nvidia.com/gpu.clique",
        "nvidia.com/gpu.compute.major",
        "nvidia.com/gpu.compute.minor",
        "nvidia.com/gpu.deploy.driver",
        "nvidia.com/gpu.deploy.gpu-feature-discovery",
        "nvidia.com/gpu.deploy.container-toolkit",
        "nvidia.com/gpu.deploy.device-plugin",
        "nvidia.com/gpu.deploy.dcgm",
        "nvidia.com/gpu.deploy.dcgm-exporter",
        "nvidia.com/gpu.deploy.mig-manager",
        "nvidia.com/gpu.deploy.node-status-exporter",
        "nvidia.com/gpu.deploy.operator-validator",
        "nvidia.com/gpu.deploy.sandbox-device-plugin",
        "nvidia.com/gpu.deploy.sandbox-validator",
        "nvidia.com/gpu.deploy.vgpu-manager",
        "nvidia.com/gpu.deploy.vgpu-device-manager",
        "nvidia.com/gpu.deploy.vfio-manager",
        "nvidia.com/gpu.deploy.cc-manager",
        "nvidia.com/gpu.workload.config",
        "nvidia.com/cuda.driver.major",
        "nvidia.com/cuda.driver.minor",
        "nvidia.com/cuda.driver.rev",
        "nvidia.com/cuda.driver-version.major",
        "nvidia.com/cuda.driver-version.minor",
        "nvidia.com/cuda.driver-version.revision",
        "nvidia.com/cuda.driver-version.full",
        "nvidia.com/cuda.runtime.major",
        "nvidia.com/cuda.runtime.minor",
        "nvidia.com/cuda.runtime-version.major",
        "nvidia.com/cuda.runtime-version.minor",
        "nvidia.com/cuda.runtime-version.full",
        "nvidia.com/mig.capable",
        "nvidia.com/mig.strategy",
        "nvidia.com/mig.config",
        "nvidia.com/mig.config.state",
        UPGRADE_STATE_LABEL,
    }
)
# NFD's own fixed feature labels (its custom rules and PCI/USB ids are open-ended, so only
# a near miss of one of these is worth a word).
NFD_LABEL_CATALOGUE: Final = frozenset(
    NFD_DEFAULT_NAMESPACE + name
    for name in (
        "kernel-version.full",
        "kernel-version.major",
        "kernel-version.minor",
        "kernel-version.revision",
        "system-os_release.ID",
        "system-os_release.VERSION_ID",
        "system-os_release.VERSION_ID.major",
        "system-os_release.VERSION_ID.minor",
        "pci-10de.present",
        "pci-10de.sriov.capable",
        "cpu-model.vendor_id",
        "cpu-model.family",
        "cpu-model.id",
        "cpu-hardware_multithreading",
        "memory-numa",
        "storage-nonrotationaldisk",
        "network-sriov.capable",
    )
)


def unknown_label(key: str) -> tuple[bool, str | None] | None:
    """For a key under NFD's or GFD's prefix that neither publishes: (always worth a word,
    the nearest known key). None for a known key or one under other prefixes."""
    if key in GPU_LABEL_CATALOGUE or key in NFD_LABEL_CATALOGUE:
        return None
    if key.startswith(GFD_PREFIXES) or key == UPGRADE_STATE_LABEL:
        nearest = difflib.get_close_matches(key, GPU_LABEL_CATALOGUE, n=1, cutoff=0.8)
        return True, nearest[0] if nearest else None
    if key.startswith(NFD_DEFAULT_NAMESPACE):
        nearest = difflib.get_close_matches(key, NFD_LABEL_CATALOGUE, n=1, cutoff=0.9)
        return (False, nearest[0]) if nearest else None
    return None
