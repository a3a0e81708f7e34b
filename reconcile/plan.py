"""The plan: a frozen value that says what apply will change, and from which state.

Every drifted node records the resourceVersion it was planned against, so a saved plan
can be refused as stale when its node moved on, and every write carries that version
as a precondition. A node's plan also carries the new inventory annotation: the label
keys reconcile manages there, which is what `--prune` may later remove and nothing else.

A plan also names what it was made from: the cluster (API server URL and the UID of its
`kube-system` namespace), the digest of the `desired/` tree, and a digest of its own body,
so that a saved plan can be refused when it was edited or is applied elsewhere.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reconcile import drivers, labels
from reconcile.diagnostics import EmptyPrune, ReconcileError
from reconcile.diff import FieldChange, LabelChange, label_drift
from reconcile.kinds import workload_id
from reconcile.models import ApiResource, DesiredNode, DesiredState, LiveNode, json_schemas

PLAN_API_VERSION: Final = "reconcile.dev/v1alpha1"
# Like nfd-master's nfd.node.kubernetes.io/feature-labels: the keys this tool has set.
INVENTORY_ANNOTATION: Final = "reconcile.dev/managed-labels"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NodePlan(_Frozen):
    """The label changes for one node, planned against one resourceVersion."""

    name: str
    resourceVersion: str
    source: str
    changes: tuple[LabelChange, ...]
    inventory: tuple[str, ...]
    # Set when these changes move a GPU node onto a driver image the matrix does not list:
    # apply refuses the node unless told --allow-missing-image.
    unsupportedImage: str | None = None

    def patch(self, *, with_precondition: bool = True) -> dict[str, object]:
        """The JSON merge patch for this node: changed labels, inventory, precondition."""
        metadata: dict[str, object] = {
            "labels": {change.key: change.after for change in self.changes},
            "annotations": {INVENTORY_ANNOTATION: ",".join(self.inventory) or None},
        }
        if with_precondition:
            metadata["resourceVersion"] = self.resourceVersion
        return {"metadata": metadata}

    def converged(self, live: LiveNode) -> list[LabelChange]:
        """Changes the live node does not carry (an empty list when all took effect)."""
        return [c for c in self.changes if live.labels.get(c.key) != c.after]


class MissingNode(_Frozen):
    name: str
    source: str


class PrunableLabel(_Frozen):
    node: str
    key: str
    value: str


class PlanWarning(_Frozen):
    node: str
    key: str
    message: str


class Finding(_Frozen):
    """Something the plan reveals beyond label drift, that review must see."""

    severity: Literal["error", "warning"]
    kind: str
    subject: str
    message: str


class ObjectPlan(_Frozen):
    """What apply does to one workload object, with what it needs to do it unaided."""

    apiVersion: str
    kind: str
    namespace: str
    name: str
    plural: str
    namespaced: bool
    source: str
    action: Literal["create", "update", "recreate", "prune"]
    resourceVersion: str | None = None
    changes: tuple[FieldChange, ...] = ()
    # The configuration reconcile applies (the manifest plus its managed-by label).
    manifest: dict[str, Any] | None = None

    @property
    def id(self) -> str:
        return workload_id(self.kind, self.namespace, self.name)

    @property
    def resource(self) -> ApiResource:
        group, _, version = self.apiVersion.rpartition("/")
        return ApiResource(group, version, self.plural, self.kind, self.namespaced)

    def lines(self) -> list[str]:
        """The drift lines: `<id> + ` to create, `<id> - ` to prune, else one per field."""
        if self.action == "create":
            return [f"{self.id} + "]
        if self.action == "prune":
            return [f"{self.id} - "]
        return [f"{self.id} {c.shown_path} {c.shown_value}" for c in self.changes]


class ClusterIdentity(_Frozen):
    """Which cluster a plan was made against: a URL can move, a namespace UID cannot."""

    server: str
    kubeSystemUID: str


_DIGEST: Final = r"^sha256:[0-9a-f]{64}$"


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Plan(_Frozen):
    apiVersion: Literal["reconcile.dev/v1alpha1"] = PLAN_API_VERSION
    kind: Literal["Plan"] = "Plan"
    cluster: ClusterIdentity | None = None
    # The digest of the desired/ tree the plan was computed from (loader.tree_digest).
    desiredDigest: str | None = None
    # sha256 of the plan's canonical JSON without this field: an edited plan no longer matches.
    digest: str | None = None
    prune: bool = False
    allowEmptyPrune: bool = False
    pruneNamespaceContents: bool = False
    forceConflicts: bool = False
    nodes: tuple[NodePlan, ...] = ()
    missingNodes: tuple[MissingNode, ...] = ()
    # Labels reconcile set earlier that desired/ no longer declares; removed only with --prune.
    prunable: tuple[PrunableLabel, ...] = ()
    warnings: tuple[PlanWarning, ...] = ()
    findings: tuple[Finding, ...] = ()
    # Workload objects in apply order (prunes last, in reverse order).
    objects: tuple[ObjectPlan, ...] = ()
    # Objects reconcile applied earlier that desired/ no longer holds; removed only with --prune.
    prunableObjects: tuple[str, ...] = ()
    # The inventory of applied objects to record after apply (None: unchanged).
    inventory: tuple[str, ...] | None = None

    @property
    def has_drift(self) -> bool:
        return bool(self.nodes or self.missingNodes or self.objects)

    def with_objects(
        self,
        objects: Iterable[ObjectPlan],
        findings: Iterable[Finding],
        prunable: Iterable[str],
        inventory: tuple[str, ...] | None,
        *,
        force_conflicts: bool = False,
    ) -> Plan:
        return self.model_copy(
            update={
                "objects": tuple(objects),
                "findings": (*self.findings, *findings),
                "prunableObjects": tuple(prunable),
                "inventory": inventory,
                "forceConflicts": force_conflicts,
            }
        )

    @property
    def needs_attention(self) -> bool:
        """Drift or findings: what makes `plan` exit 1."""
        return self.has_drift or bool(self.findings)

    def lines(self) -> Iterator[tuple[str, LabelChange]]:
        """(node, change) pairs sorted by node then key, as the drift lines print them."""
        for node in self.nodes:
            for change in node.changes:
                yield node.name, change

    def body_digest(self) -> str:
        """The digest of everything in the plan but the digest itself."""
        body = self.model_dump(mode="json", exclude={"digest"})
        return digest_of(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())

    def bound(self, cluster: ClusterIdentity, desired_digest: str) -> Plan:
        """The plan with what it was made from recorded, and sealed with its own digest."""
        unsealed = self.model_copy(
            update={"cluster": cluster, "desiredDigest": desired_digest, "digest": None}
        )
        return unsealed.model_copy(update={"digest": unsealed.body_digest()})

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> Plan:
        """A saved plan, checked against plan.schema.json and its own digest."""
        try:
            saved = SavedPlan.model_validate_json(path.read_bytes())
        except OSError as e:
            raise ReconcileError(f"cannot read plan {path}: {e.strerror}") from e
        except ValidationError as e:
            first = e.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"]) or "(document)"
            raise ReconcileError(
                f"{path} is not a saved reconcile plan ({where}: {first['msg']}); "
                "write one with `reconcile plan --out FILE`"
            ) from e
        plan = cls.model_validate(saved.model_dump())
        if plan.body_digest() != saved.digest:
            raise ReconcileError(
                f"{path} was changed after `reconcile plan` wrote it (its digest {saved.digest} "
                f"does not match its content, {plan.body_digest()}): nothing was applied. "
                "Run `reconcile plan --out FILE` again"
            )
        return plan


class SavedPlan(Plan):
    """A plan as a file: what it was made from is required (schemas/plan.schema.json)."""

    cluster: ClusterIdentity
    desiredDigest: str = Field(pattern=_DIGEST)
    digest: str = Field(pattern=_DIGEST)


def all_schemas() -> dict[str, dict[str, Any]]:
    """Every published JSON Schema: the desired-state kinds and the saved plan."""
    return json_schemas({"Plan": SavedPlan})


def parse_inventory(annotations: dict[str, str]) -> frozenset[str]:
    """The label keys reconcile manages on a node. Never one the kubelet or the cloud
    provider owns, whatever the annotation says (an older desired/ could declare them;
    anyone can edit the annotation): `--prune` must not delete kubernetes.io/os."""
    raw = annotations.get(INVENTORY_ANNOTATION, "")
    return frozenset(key for key in raw.split(",") if key and not labels.is_kubelet_owned(key))


def owned(
    changes: list[LabelChange], live: LiveNode, inventory: frozenset[str]
) -> list[LabelChange]:
    """The changes with the component that writes each label filled in."""
    nfd = labels.nfd_feature_labels(live.annotations.get(labels.NFD_FEATURE_LABELS_ANNOTATION, ""))
    return [
        c.model_copy(update={"owner": labels.label_owner(c.key, nfd, inventory)}) for c in changes
    ]


def fights(node_plan: NodePlan, live: LiveNode) -> list[PlanWarning]:
    """Changes that overwrite a value its owner wrote: the owner will write it back."""
    found = []
    for change in node_plan.changes:
        writers = labels.WRITER_MANAGERS.get(change.owner or "", frozenset())
        manager = live.label_managers.get(change.key)
        if manager in writers and change.before is not None:
            found.append(
                PlanWarning(
                    node=node_plan.name,
                    key=change.key,
                    message=(
                        f"{change.owner} wrote {change.before!r} (field manager {manager}) and "
                        "re-asserts it on its next resync: the label will flap unless its "
                        "source changes too"
                    ),
                )
            )
    return found


def overlay(live_labels: Mapping[str, str], changes: Iterable[LabelChange]) -> dict[str, str]:
    """The labels a node carries once `changes` are applied."""
    result = dict(live_labels)
    for change in changes:
        if change.after is None:
            result.pop(change.key, None)
        else:
            result[change.key] = change.after
    return result


def projected_labels(
    desired: DesiredState, live: Iterable[LiveNode], planned: Iterable[NodePlan] | None = None
) -> dict[str, dict[str, str]]:
    """Every node's labels as they will be after apply, and for a node declared but not
    (yet) in the cluster, what desired declares. With `planned`, the live labels with the
    plan's own changes laid over, prunes included; without, desired laid over live."""
    projected = {node.name: dict(node.labels) for node in live}
    if planned is not None:
        for node_plan in planned:
            projected[node_plan.name] = overlay(
                projected.get(node_plan.name, {}), node_plan.changes
            )
    for name, want in desired.nodes.items():
        if planned is not None and name in projected:
            continue
        labels_ = projected.setdefault(name, {})
        for key, value in want.labels.items():
            if value is None:
                labels_.pop(key, None)
            else:
                labels_[key] = value
    return projected


def _unsupported_image(
    live: LiveNode, changes: list[LabelChange], matrix: frozenset[str]
) -> str | None:
    """The image tag these changes would move a GPU node onto, if the matrix lacks it."""
    if not matrix or not any(
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
    return None if tag in matrix else tag


def plan_node(
    desired: DesiredNode, live: LiveNode, *, prune: bool, matrix: frozenset[str] = frozenset()
) -> NodePlan | None:
    """What makes `live` match `desired`, or None when it already does."""
    inventory = parse_inventory(live.annotations)
    undeclared = {key for key in inventory if key not in desired.labels and key in live.labels}
    changes = owned(
        label_drift(desired.labels, live.labels, prune=undeclared if prune else ()), live, inventory
    )
    if not changes:
        return None
    managed = {key for key, value in desired.labels.items() if value is not None}
    if not prune:
        managed |= undeclared  # still ours: a later --prune may remove them
    return NodePlan(
        name=live.name,
        resourceVersion=live.resource_version,
        source=str(desired.source),
        changes=tuple(changes),
        inventory=tuple(sorted(managed)),
        unsupportedImage=_unsupported_image(live, changes, matrix),
    )


def coverage_findings(
    desired: DesiredState, live: Iterable[LiveNode], planned: Iterable[NodePlan] | None = None
) -> list[Finding]:
    """GPU nodes whose driver image, after apply, is not in the support matrix."""
    if not desired.matrix:
        return []  # nothing declared to check against
    found = []
    projected = projected_labels(desired, live, planned)
    for item in drivers.coverage(projected.items(), desired.matrix_tags):
        if item.tag is None:
            found.append(
                Finding(
                    severity="error",
                    kind="driver-tag-incomplete",
                    subject=item.node,
                    message=item.problem,
                )
            )
        elif not item.covered:
            found.append(
                Finding(
                    severity="error",
                    kind="driver-image-missing",
                    subject=item.node,
                    message=(
                        f"driver image {item.tag} is not in the support matrix: build and push it, "
                        "then add its row to desired/drivers/"
                    ),
                )
            )
    return found


def _refuse_empty_label_prune(
    desired: DesiredState, nodes: Iterable[NodePlan], live: Iterable[LiveNode]
) -> None:
    """Refuse a prune that removes every label the inventories of all nodes hold."""
    managed = {
        (node.name, key)
        for node in live
        for key in parse_inventory(node.annotations)
        if key in node.labels
    }
    pruned = {
        (node_plan.name, change.key)
        for node_plan in nodes
        for change in node_plan.changes
        if change.after is None and change.key not in desired.nodes[node_plan.name].labels
    } & managed
    if pruned and pruned == managed:
        shown = ", ".join(f"{node} {key}" for node, key in sorted(pruned)[:5])
        more = f" and {len(pruned) - 5} more" if len(pruned) > 5 else ""
        raise EmptyPrune(
            f"--prune would remove all {len(pruned)} label(s) reconcile manages ({shown}{more}), "
            "because desired/ declares none of them: nothing was changed. Check --desired; "
            "to remove them all on purpose, pass --allow-empty-prune"
        )


def build_plan(
    desired: DesiredState,
    live: Iterable[LiveNode],
    *,
    prune: bool = False,
    allow_empty_prune: bool = False,
) -> Plan:
    """Label drift of every declared node. With `prune`, also the removal of labels that
    reconcile set and desired/ no longer declares; a prune of every such label is refused
    (EmptyPrune) unless `allow_empty_prune`."""
    live = list(live)
    live_by_name = {node.name: node for node in live}
    nodes: list[NodePlan] = []
    missing: list[MissingNode] = []
    prunable: list[PrunableLabel] = []
    warnings: list[PlanWarning] = []
    for name, want in desired.nodes.items():
        node = live_by_name.get(name)
        if node is None:
            missing.append(MissingNode(name=name, source=str(want.source)))
            continue
        node_plan = plan_node(want, node, prune=prune, matrix=desired.matrix_tags)
        if node_plan is not None:
            nodes.append(node_plan)
            warnings.extend(fights(node_plan, node))
        if not prune:
            prunable.extend(
                PrunableLabel(node=name, key=key, value=node.labels[key])
                for key in sorted(parse_inventory(node.annotations))
                if key not in want.labels and key in node.labels
            )
    if prune and not allow_empty_prune:
        _refuse_empty_label_prune(desired, nodes, live)
    return Plan(
        prune=prune,
        allowEmptyPrune=allow_empty_prune,
        nodes=tuple(sorted(nodes, key=lambda n: n.name)),
        missingNodes=tuple(missing),
        prunable=tuple(prunable),
        warnings=tuple(warnings),
        findings=tuple(coverage_findings(desired, live, nodes)),
    )
