"""GPU node facts: precompiled driver image tags, support-matrix coverage, the GPU label audit.

A driver is a kernel module, so the image a node needs is named by three facts the node
carries as labels: `<driver branch>-<kernel>-<os tag>`. The tag is built from its parts,
never split (kernels contain '-'), and a missing or empty part is an error, never a
silently odd tag. These functions are pure: they take labels and return findings.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from reconcile import diagnostics as diag
from reconcile.desired.models import DesiredState, driver_tag
from reconcile.diagnostics import Diagnostic
from reconcile.gpu import provenance
from reconcile.kube import labels as label_rules

GPU_PRESENT: Final = "nvidia.com/gpu.present"
GPU_NODES: Final = f"{GPU_PRESENT}=true"  # the label selector of GPU nodes
GPU_PRODUCT: Final = "nvidia.com/gpu.product"
GPU_COUNT: Final = "nvidia.com/gpu.count"
GPU_MEMORY: Final = "nvidia.com/gpu.memory"
DRIVER_MAJOR: Final = "nvidia.com/cuda.driver.major"
DRIVER_MINOR: Final = "nvidia.com/cuda.driver.minor"
DRIVER_REV: Final = "nvidia.com/cuda.driver.rev"
KERNEL: Final = "feature.node.kubernetes.io/kernel-version.full"
OS_ID: Final = "feature.node.kubernetes.io/system-os_release.ID"
OS_VERSION: Final = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
TAG_PARTS: Final = (DRIVER_MAJOR, KERNEL, OS_ID, OS_VERSION)
UPGRADE_STATE: Final = provenance.UPGRADE_STATE_LABEL

_DIGITS: Final = re.compile(r"[0-9]+")
_PRODUCT: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_DRIVER_VERSION: Final = re.compile(r"([0-9]+)\.([0-9]+)\.([0-9]+)")


def is_gpu_node(labels: Mapping[str, str]) -> bool:
    return labels.get(GPU_PRESENT) == "true"


class TagError(ValueError):
    """A driver tag cannot be built; `label` is the part that is missing or empty."""

    def __init__(self, node: str, label: str, empty: bool) -> None:
        state = "empty" if empty else "missing"
        self.reason = f"cannot build the driver image tag: label {label} is {state}"
        super().__init__(f"{node}: {self.reason}")
        self.node = node
        self.label = label


def node_tag(node: str, labels: Mapping[str, str]) -> str:
    """`<branch>-<kernel>-<os ID><VERSION_ID>` from a node's labels, or TagError."""
    for part in TAG_PARTS:
        value = labels.get(part)
        if not value:
            raise TagError(node, part, empty=value == "")
    return driver_tag(labels[DRIVER_MAJOR], labels[KERNEL], labels[OS_ID] + labels[OS_VERSION])


@dataclass(frozen=True)
class AuditFinding:
    node: str
    key: str
    reason: str  # missing, not-a-number, too-long, bad-format, allocatable=<n>


def audit_labels(node: str, labels: Mapping[str, str]) -> list[AuditFinding]:
    """The GPU label conventions for one GPU node. Present-but-empty is not `missing`."""
    found = []
    for key in (GPU_PRODUCT, GPU_COUNT, GPU_MEMORY):
        if key not in labels:
            found.append(AuditFinding(node, key, "missing"))
    for key in (GPU_COUNT, GPU_MEMORY):
        if key in labels and not _DIGITS.fullmatch(labels[key]):
            found.append(AuditFinding(node, key, "not-a-number"))
    product = labels.get(GPU_PRODUCT)
    if product is not None:
        if len(product) > label_rules.LABEL_VALUE_MAX_LENGTH:
            found.append(AuditFinding(node, GPU_PRODUCT, "too-long"))
        if not _PRODUCT.fullmatch(product):
            found.append(AuditFinding(node, GPU_PRODUCT, "bad-format"))
    return sorted(found, key=lambda f: (f.key, f.reason))


def count_against_allocatable(
    node: str, labels: Mapping[str, str], allocatable: Mapping[str, str]
) -> AuditFinding | None:
    """`nvidia.com/gpu.count` that disagrees with the node's allocatable `nvidia.com/gpu`
    (reason `allocatable=<n>`): GFD's count went stale, or a label was hand-set, and a pod
    placed by the label finds other GPUs than it was told. Not judged where the two count
    different things: MIG devices advertised (`nvidia.com/mig-*`, or the single strategy's
    `nvidia.com/gpu` counting MIG slices), or no `nvidia.com/gpu` advertised at all."""
    count, offered = labels.get(GPU_COUNT), allocatable.get("nvidia.com/gpu")
    if count is None or not count.isdigit() or offered is None or not offered.isdigit():
        return None
    if any(key.startswith("nvidia.com/mig-") for key in allocatable):
        return None
    if labels.get("nvidia.com/mig.strategy") == "single" and labels.get(
        "nvidia.com/mig.config", "all-disabled"
    ) not in ("all-disabled", ""):
        return None
    if int(offered) == 0 or int(count) == int(offered):
        return None
    return AuditFinding(node, GPU_COUNT, f"allocatable={int(offered)}")


def audit(
    nodes: Iterable[
        tuple[str, Mapping[str, str]] | tuple[str, Mapping[str, str], Mapping[str, str]]
    ],
) -> list[AuditFinding]:
    """Audit every GPU node (gpu.present=true) of `nodes` (name, labels and, when known,
    allocatable), sorted by node then key."""
    found: list[AuditFinding] = []
    for name, node_labels, *rest in sorted(nodes, key=lambda n: n[0]):
        if is_gpu_node(node_labels):
            mine = audit_labels(name, node_labels)
            if rest and (stale := count_against_allocatable(name, node_labels, rest[0])):
                mine.append(stale)
            found.extend(sorted(mine, key=lambda f: (f.key, f.reason)))
    return found


@dataclass(frozen=True)
class Coverage:
    """One GPU node's tag against the matrix: tag is None when it cannot be built, and
    `problem` says why (without the node's name: the caller shows it as the subject)."""

    node: str
    tag: str | None
    covered: bool
    problem: str = ""


def coverage(
    nodes: Iterable[tuple[str, Mapping[str, str]]], matrix: frozenset[str]
) -> list[Coverage]:
    """Every GPU node of `nodes` with its tag and whether the matrix has that image."""
    found = []
    for name, node_labels in sorted(nodes, key=lambda n: n[0]):
        if not is_gpu_node(node_labels):
            continue
        try:
            tag = node_tag(name, node_labels)
        except TagError as e:
            found.append(Coverage(name, None, False, e.reason))
            continue
        found.append(Coverage(name, tag, tag in matrix))
    return found


def split_driver_version(version: str) -> tuple[str, str, str]:
    """550.90.07 -> ("550", "90", "07"): the three labels, leading zeros kept."""
    match = _DRIVER_VERSION.fullmatch(version)
    if match is None:
        raise ValueError(f"driver version {version!r} is not MAJOR.MINOR.REV (e.g. 550.90.07)")
    major, minor, rev = match.groups()
    return major, minor, rev


def env_name(node: str) -> str:
    """lab-node-1 -> LAB_NODE_1, for shell-sourceable report lines: always a valid shell
    variable name, so a node named 10-0-0-1 becomes _10_0_0_1, never a command."""
    name = re.sub(r"[^A-Za-z0-9]", "_", node).upper()
    return f"_{name}" if not name or name[0].isdigit() else name


def _catalogue_warnings(state: DesiredState) -> Iterable[Diagnostic]:
    """A declared key under NFD's or GFD's prefixes that neither publishes: a warning
    with the nearest key they do."""
    declarers = [*state.nodes.values(), *(g.node for g in state.groups)]
    unknown_keys = {
        key: unknown
        for key in {key for node in declarers for key in node.labels}
        if (unknown := provenance.unknown_label(key)) is not None
    }
    if not unknown_keys:
        return
    for node in declarers:
        for key in unknown_keys.keys() & node.labels.keys():
            unknown = unknown_keys[key]
            _, nearest = unknown
            hint = f"did you mean {nearest}?" if nearest else "no known label is close"
            yield diag.warning(
                f"{key} is not a label NFD, GPU Feature Discovery or the GPU Operator publishes",
                node.source_of(key),
                hint,
            )


def desired_diagnostics(state: DesiredState, *, coverage_check: bool) -> list[Diagnostic]:
    """The GPU label audit (and, with `coverage_check`, matrix coverage) over desired/ alone.

    Only declared values are audited: desired/ is partial by design (a key it leaves out
    is someone else's, gpu-feature-discovery's for the product), so `missing` is a finding
    of the live audit only.
    """
    found: list[Diagnostic] = list(_catalogue_warnings(state))
    for name, node in state.nodes.items():
        declared = {k: v for k, v in node.labels.items() if v is not None}
        if not is_gpu_node(declared):
            continue
        for finding in audit_labels(name, declared):
            if finding.reason != "missing":
                found.append(
                    diag.error(
                        f"{finding.key} of GPU node {name}: {finding.reason}",
                        node.source_of(finding.key),
                        _REASONS[finding.reason],
                    )
                )
        if coverage_check and state.matrix and all(declared.get(part) for part in TAG_PARTS):
            tag = node_tag(name, declared)
            if tag not in state.matrix_tags:
                found.append(
                    diag.error(
                        f"GPU node {name} needs driver image {tag}, which is not in the support matrix",
                        node.source_of(DRIVER_MAJOR),
                        "build and push the image, then add its row to desired/drivers/",
                    )
                )
    return found


_REASONS: Final = {
    "not-a-number": "GPU counts and memory (MiB) are digits only",
    "too-long": "a label value is at most 63 characters",
    "bad-format": "alphanumeric first, then only [A-Za-z0-9_.-]",
}
