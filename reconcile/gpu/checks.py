"""The GPU domain's part in a plan: the node policy (who owns each label; a change that
moves a GPU node onto a driver image the support matrix lacks is refused) and the checks
(every GPU node's image after apply is in the matrix; a change that fights its owner)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from reconcile import diagnostics as diag
from reconcile.desired.models import DesiredState
from reconcile.diagnostics import Diagnostic, Severity
from reconcile.engine import operations
from reconcile.engine.capacity import running_pods
from reconcile.engine.checks import Check, Projection
from reconcile.engine.diff import NodeChange
from reconcile.engine.findings import Finding, named, overlay
from reconcile.engine.operations import ENGINE_CHECKS, PlanCluster, PlanRequest
from reconcile.engine.plan import Plan
from reconcile.gpu import disruptive, drivers, mig, provenance
from reconcile.kube.objects import LiveNode


@dataclass(frozen=True)
class GpuPolicy:
    """Owners by provenance; a refusal when changes move a GPU node onto a driver image
    that is not in `matrix` (an empty matrix declares nothing to check against)."""

    matrix: frozenset[str] = frozenset()
    mig: mig.MigTable = field(default_factory=mig.MigTable.default)
    catalogue: disruptive.Catalogue = field(default_factory=disruptive.Catalogue.packaged)

    def owner(self, live: LiveNode, key: str, inventory: frozenset[str]) -> str | None:
        return provenance.owner_of(live, key, inventory)

    def refusal(self, live: LiveNode, changes: Sequence[NodeChange]) -> str | None:
        image = self.unsupported_image(live, changes)
        if image is None:
            return None
        return (
            f"refused: these changes move the node onto driver image {image}, which is not "
            "in the support matrix; add the image first, or pass --allow-missing-image"
        )

    def allocatable(self, live: LiveNode, labels: Mapping[str, str]) -> Mapping[str, str]:
        """The node's allocatable once mig-manager has applied a new
        `nvidia.com/mig.config` (its current one when the layout does not change, or
        when it cannot be projected: `mig_layouts` reports that)."""
        projected = _mig_projection(self.mig, live, labels)
        if projected is None or isinstance(projected, mig.MigProblem):
            return live.allocatable
        return projected.allocatable

    def disruptive(self, key: str) -> bool:
        return self.catalogue.fact_for(key) is not None

    def unsupported_image(self, live: LiveNode, changes: Sequence[NodeChange]) -> str | None:
        """The image tag these changes would move a GPU node onto, if the matrix lacks it."""
        if not self.matrix or not any(
            c.key in drivers.TAG_PARTS or c.key == drivers.GPU_PRESENT for c in changes
        ):
            return None
        after = overlay(live.labels, changes)
        if not drivers.is_gpu_node(after):
            return None
        try:
            tag = drivers.node_tag(live.name, after)
        except drivers.TagError as e:
            return f"(none: label {e.label} would be missing)"
        return None if tag in self.matrix else tag


def _mig_projection(
    table: mig.MigTable, live: LiveNode, labels: Mapping[str, str]
) -> mig.Projected | mig.MigProblem | None:
    """What the node offers once its new MIG layout is applied; None when the plan does
    not change its layout (nor the strategy the layout is advertised under)."""
    keys = (mig.MIG_CONFIG, mig.MIG_STRATEGY)
    if all(labels.get(k) == live.labels.get(k) for k in keys) or mig.MIG_CONFIG not in labels:
        return None
    return table.projected(labels, live.allocatable, capacity=live.capacity)


def mig_layouts(projection: Projection) -> Iterable[Finding]:
    """Nodes whose new `nvidia.com/mig.config` mig-manager cannot apply (a layout the
    node's GPU does not have, an unknown layout): mig-manager would fail on the node
    with no clear word (NVIDIA/mig-parted#18), so apply refuses. A node that does not
    say how many GPUs it has gets a warning instead: the layout is written, what it
    offers after is not projected."""
    table = policy(projection.desired).mig
    after = projection.labels_after
    for live in projection.live:
        labels = after.get(live.name)
        if labels is None:
            continue
        projected = _mig_projection(table, live, labels)
        if isinstance(projected, mig.MigProblem) and projected.unknown:
            # GFD has not labelled the node yet: the label is written, the room it makes
            # is not known (placement keeps the node's allocatable as it is).
            yield Finding(
                severity=Severity.WARNING,
                kind=MIG_CAPACITY_UNKNOWN,
                subject=live.name,
                message=(
                    f"{mig.MIG_CONFIG}={projected.layout}: the node's capacity after the "
                    f"layout cannot be projected: {projected.message}"
                ),
            )
        elif isinstance(projected, mig.MigProblem):
            yield Finding(
                severity=Severity.ERROR,
                kind="mig-layout-invalid",
                subject=live.name,
                message=f"{mig.MIG_CONFIG}={projected.layout}: {projected.message}",
                blocksApply=True,
            )


ROLLOUT_REQUIRED: Final = "rollout-required"
MIG_CAPACITY_UNKNOWN: Final = "mig-capacity-unknown"


def busy_rollouts(projection: Projection) -> Iterable[Finding]:
    """A disruptive fact (a MIG layout, an operand, the device plugin's config) planned on
    a node where pods use GPUs: the operator would act under them, so apply refuses it
    until the node is drained (NVIDIA/gpu-operator#262: cordon, wait for the GPU pods to
    go, label, wait for the state, uncordon)."""
    planned = [n for n in projection.nodes if any(c.rollout for c in n.changes)]
    if not planned:
        return
    catalogue = disruptive.Catalogue.of(projection.desired)
    on_node: dict[str, list[str]] = {}
    for pod in running_pods(projection.pods_on(n.name for n in planned)):
        if disruptive.uses_gpu(pod.spec):
            on_node.setdefault(pod.node, []).append(pod.id.removeprefix("Pod/"))
    for node in planned:
        users = sorted(on_node.get(node.name, ()))
        if not users:
            continue
        changes = [c for c in node.changes if c.rollout]
        facts = [catalogue.fact_for(c.key) for c in changes]
        shown = ", ".join(f"{c.key}={c.shown_value}" for c in changes)
        state = next((f.state for f in facts if f is not None and f.state), None)
        then = f", waits for {state.label}={state.done[0]}" if state else ""
        yield Finding(
            severity=Severity.ERROR,
            kind=ROLLOUT_REQUIRED,
            subject=node.name,
            message=(
                f"{shown} on a node where {len(users)} pod(s) use GPUs ({named(users)}): "
                f"{facts[0].disrupts if facts[0] else 'it disrupts them'}. Roll it out: "
                f"`reconcile rollout` cordons the node, drains its GPU pods within the "
                f"budgets, writes it{then} and uncordons the node"
            ),
            blocksApply=True,
        )


def driver_coverage(projection: Projection) -> Iterable[Finding]:
    """GPU nodes whose driver image, after apply, is not in the support matrix."""
    desired = projection.desired
    if not desired.matrix:
        return  # nothing declared to check against
    for item in drivers.coverage(projection.labels_after.items(), desired.matrix_tags):
        if item.tag is None:
            yield Finding(
                severity=Severity.ERROR,
                kind="driver-tag-incomplete",
                subject=item.node,
                message=item.problem,
            )
        elif not item.covered:
            yield Finding(
                severity=Severity.ERROR,
                kind="driver-image-missing",
                subject=item.node,
                message=(
                    f"driver image {item.tag} is not in the support matrix: build and push it, "
                    "then add its row to desired/drivers/"
                ),
            )


GPU_CHECKS: tuple[Check, ...] = (
    driver_coverage,
    mig_layouts,
    busy_rollouts,
    provenance.label_fights,
)
# Everything a plan of a GPU cluster runs: the engine's checks and the GPU domain's.
ALL_CHECKS: tuple[Check, ...] = (*ENGINE_CHECKS, *GPU_CHECKS)


def policy(state: DesiredState) -> GpuPolicy:
    return GpuPolicy(state.matrix_tags, mig_table(state)[0], disruptive.Catalogue.of(state))


CLUSTER_POLICY: Final = ("nvidia.com/v1", "ClusterPolicy")


def mig_table(state: DesiredState) -> tuple[mig.MigTable, list[Diagnostic]]:
    """The MIG layouts mig-manager applies: a custom mig-parted configuration declared in
    desired/ (the ConfigMap a declared ClusterPolicy's `migManager.config.name` names, or
    the only one there is), else the GPU Operator's default; and what is wrong with the
    custom one (the default is used meanwhile)."""
    if not state.mig_configs:
        return mig.MigTable.default(), []
    named = {
        str((((m.body.get("spec") or {}).get("migManager") or {}).get("config") or {}).get("name"))
        for m in state.manifests
        if (m.api_version, m.kind) == CLUSTER_POLICY
    }
    chosen = [c for c in state.mig_configs if c.name.rpartition("/")[2] in named]
    if not chosen and len(state.mig_configs) == 1:
        chosen = list(state.mig_configs)
    if len(chosen) != 1:
        return mig.MigTable.default(), [
            diag.error(
                f"{len(state.mig_configs)} mig-parted configurations and no ClusterPolicy "
                "naming one of them: which MIG layouts apply is not known",
                state.mig_configs[0].source,
                "declare the ClusterPolicy with spec.migManager.config.name, or keep one",
            )
        ]
    config = chosen[0]
    try:
        return mig.MigTable.from_config(config.document, config.name), []
    except mig.MigConfigError as e:
        return mig.MigTable.default(), [
            diag.error(f"{config.name}: {problem}", config.source) for problem in e.problems
        ]


def mig_diagnostics(state: DesiredState) -> list[Diagnostic]:
    """A declared `nvidia.com/mig.config` that names no layout of the MIG table, or
    (where desired/ declares the GPU product too) a layout that product does not have;
    and what is wrong with a custom mig-parted configuration."""
    table, found = mig_table(state)
    declared = [(f"node {name}", node) for name, node in state.nodes.items()]
    declared += [(f"NodeGroup {group.name}", group.node) for group in state.groups]
    for what, node in declared:
        layout = node.labels.get(mig.MIG_CONFIG)
        if layout is None:
            continue
        product = node.labels.get(mig.GPU_PRODUCT)
        if layout not in table.configs:
            found.append(
                diag.error(
                    f"{what}: MIG layout {layout} is not in {table.source}",
                    node.source_of(mig.MIG_CONFIG),
                    f"layouts: {', '.join(sorted(table.configs))}",
                )
            )
        elif product is not None and layout not in table.layouts(product):
            found.append(
                diag.error(
                    f"{what}: MIG layout {layout} does not exist for {product}",
                    node.source_of(mig.MIG_CONFIG),
                    f"layouts for {mig.base_product(product)}: "
                    + ", ".join(table.layouts(product)),
                )
            )
    return found


def plan(
    request: PlanRequest, cluster: PlanCluster, *, phase: Callable[[str], None] = lambda name: None
) -> Plan:
    """The engine's plan operation with the GPU domain's policy and every check, the
    engine's and the GPU's: what `plan` and `apply` run."""
    return operations.plan(
        request, cluster, policy=policy(request.desired), checks=ALL_CHECKS, phase=phase
    )
