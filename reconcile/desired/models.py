"""The desired-state kinds (pydantic v2, strict, frozen, no unknown fields) and their JSON Schema.

A file's kind is its contract: `NodeFeatures` declares one node's labels, and
`DriverSupportMatrix` lists the precompiled driver images that exist. Label keys and
values are checked here with the API server's own rules (labels.py), so a model that
validates is a model the API server would accept.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from reconcile.desired.reserved import RECONCILE_ANNOTATIONS
from reconcile.diagnostics import Source, nearest
from reconcile.kube import labels
from reconcile.kube.kinds import ObjectId
from reconcile.kube.validation import TOTAL_ANNOTATION_SIZE_LIMIT, annotations_size

API_GROUP: Final = "reconcile.dev"
API_VERSION: Final = f"{API_GROUP}/v1alpha1"

NODE_FEATURES: Final = "NodeFeatures"
NODE_GROUP: Final = "NodeGroup"
DRIVER_SUPPORT_MATRIX: Final = "DriverSupportMatrix"
DISRUPTIVE_FACTS: Final = "DisruptiveFacts"
FLEET: Final = "Fleet"
# All annotations of one object together, as the API server counts them (keys and values).
ANNOTATIONS_MAX_BYTES: Final = TOTAL_ANNOTATION_SIZE_LIMIT
TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")

# Image tags (distribution spec): a word character first, then up to 127 of [\w.-].
_BRANCH = re.compile(r"[0-9]+")


def _name(text: str) -> str:
    """A key or name for a message: whole when it could be valid, cut when it is huge."""
    return labels.shown(text, labels.SHOWN_NAME)


def _qualified(key: str, what: str) -> str:
    """A label or annotation key as the API server checks it (a qualified name)."""
    problems = labels.is_qualified_name(key)
    if problems:
        raise PydanticCustomError(
            "qualified_name",
            "invalid {what} key {key}: {problems}",
            {"what": what, "key": _name(key), "problems": "; ".join(problems)},
        )
    return key


def _check_label_key(key: str) -> str:
    _qualified(key, "label")
    if labels.is_kubelet_owned(key):
        # Declared with a value or with null alike: setting it and deleting it both fight
        # the kubelet, which writes it back, and move pods that select on it meanwhile.
        raise PydanticCustomError(
            "label_key_owned",
            "label key {key} may not be declared: {reason}",
            {"key": _name(key), "reason": labels.KUBELET_OWNED_REASON},
        )
    return key


def _check_label_value(value: str) -> str:
    problems = labels.is_valid_label_value(value)
    if problems:
        suggestion = labels.sanitize_label_value(value)
        hint = (
            f" (sanitized: {labels.go_quote(suggestion)})"
            if suggestion
            else " (nothing is left of it after sanitizing)"
        )
        raise PydanticCustomError(
            "label_value",
            "invalid label value {value}: {problems}{hint}",
            {"value": labels.shown(value), "problems": "; ".join(problems), "hint": hint},
        )
    return value


def _check_object_name(name: str) -> str:
    problems = labels.is_dns1123_subdomain(name)
    if problems:
        raise PydanticCustomError(
            "object_name",
            "invalid name {name}: {problems}",
            {"name": _name(name), "problems": "; ".join(problems)},
        )
    return name


_KEY_SCHEMA = {
    "type": "string",
    "pattern": (
        r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$"
    ),
}
_VALUE_SCHEMA = {"type": "string", "maxLength": 63, "pattern": f"^{labels.LABEL_VALUE_FMT}$"}

LabelKey = Annotated[str, AfterValidator(_check_label_key), WithJsonSchema(_KEY_SCHEMA)]
LabelValue = Annotated[str, AfterValidator(_check_label_value), WithJsonSchema(_VALUE_SCHEMA)]
ObjectName = Annotated[
    str,
    AfterValidator(_check_object_name),
    WithJsonSchema(
        {"type": "string", "maxLength": 253, "pattern": f"^{labels.DNS1123_SUBDOMAIN_FMT}$"}
    ),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)


class ObjectMeta(_Strict):
    name: ObjectName = Field(description="The node's name, exactly as in `kubectl get nodes`.")


def _refuse_owned(kind: str, key: str, reason: str | None) -> str:
    """`key`, unless another writer owns it (`reason` says which and what to do instead)."""
    if reason is not None:
        raise PydanticCustomError(
            f"{kind}_key_owned",
            f"{kind} key {{key}} may not be declared: {{reason}}",
            {"key": labels.go_quote(key), "reason": reason},
        )
    return key


def _check_annotation_key(key: str) -> str:
    _qualified(key, "annotation")
    # With a value or with null alike: apply would rewrite it (and never converge), or
    # delete the inventory that --prune relies on.
    return _refuse_owned("annotation", key, RECONCILE_ANNOTATIONS.get(key))


AnnotationKey = Annotated[str, AfterValidator(_check_annotation_key), WithJsonSchema(_KEY_SCHEMA)]


def _check_annotations(annotations: dict[str, str | None]) -> dict[str, str | None]:
    if annotations_size(annotations) > ANNOTATIONS_MAX_BYTES:
        raise PydanticCustomError(
            "annotations_size",
            "Too long: may not be more than {limit} bytes",
            {"limit": ANNOTATIONS_MAX_BYTES},
        )
    return annotations


Annotations = Annotated[dict[AnnotationKey, str | None], AfterValidator(_check_annotations)]


def _check_taint_effect(effect: str) -> str:
    if effect not in TAINT_EFFECTS:
        # As kube-apiserver's field.NotSupported puts it, the supported values sorted.
        supported = ", ".join(f'"{e}"' for e in sorted(TAINT_EFFECTS))
        raise PydanticCustomError(
            "taint_effect",
            "Unsupported value: {value}: supported values: {supported}",
            {"value": labels.shown(effect), "supported": supported},
        )
    return effect


TaintEffect = Annotated[
    str,
    AfterValidator(_check_taint_effect),
    WithJsonSchema({"type": "string", "enum": list(TAINT_EFFECTS)}),
]


class Taint(_Strict):
    """A taint the node must carry (or, with `absent`, must not), identified as the API
    server identifies taints: by key and effect."""

    key: LabelKey = Field(description="The taint's key (the label-key rules).")
    value: LabelValue | None = Field(
        default=None, description="Its value (the label-value rules); empty when omitted."
    )
    effect: TaintEffect
    absent: bool = Field(
        default=False, description="The node must not carry a taint with this key and effect."
    )

    @field_validator("key")
    @classmethod
    def _not_a_controllers(cls, key: str) -> str:
        # Present or absent alike: the controller puts it back or takes it away.
        return _refuse_owned("taint", key, labels.controller_owned_taint(key))

    @property
    def identity(self) -> str:
        return f"{self.key}:{self.effect}"


def _check_taints(taints: list[Taint]) -> list[Taint]:
    seen: set[str] = set()
    for index, taint in enumerate(taints):
        if taint.identity in seen:
            raise PydanticCustomError(
                "taint_duplicate",
                "taints[{index}]: Duplicate value: {identity}: taints must be unique by key and effect pair",
                {"index": index, "identity": labels.go_quote(taint.identity)},
            )
        if taint.absent and taint.value is not None:
            raise PydanticCustomError(
                "taint_absent_value",
                "taints[{index}]: a taint that must be absent has no value",
                {"index": index},
            )
        seen.add(taint.identity)
    return taints


Taints = Annotated[list[Taint], AfterValidator(_check_taints)]

_LABELS_DESCRIPTION = (
    'Label key to value. A string is the value the label must have ("" is a value); null '
    "means the label must be absent."
)
_ANNOTATIONS_DESCRIPTION = (
    "Annotation key to value (any text); null means the annotation must be absent. All "
    "annotations of a node together may not exceed 256 KiB."
)


class NodeFeatures(_Strict):
    """The labels, annotations and taints one node must carry. Keys not listed are left
    alone; a value here overrides a NodeGroup's for this node."""

    model_config = ConfigDict(title="NodeFeatures")

    apiVersion: Literal["reconcile.dev/v1alpha1"]
    kind: Literal["NodeFeatures"]
    metadata: ObjectMeta
    optional: bool = Field(
        default=False,
        description=(
            "The node may be absent from the cluster (an autoscaler removes it): then it is "
            "noted, not drift."
        ),
    )
    labels: dict[LabelKey, LabelValue | None] = Field(
        default_factory=dict,
        description=_LABELS_DESCRIPTION,
        # Keys that do not match the key pattern are invalid, not "anything goes".
        json_schema_extra={"additionalProperties": False},
    )
    annotations: Annotations = Field(default_factory=dict, description=_ANNOTATIONS_DESCRIPTION)
    taints: Taints = Field(default_factory=list, description="Taints by key and effect.")


def _check_selector_key(key: str) -> str:
    return _qualified(key, "label")


# A key a selector reads: any label key, the kubelet's and the cloud provider's included
# (kubernetes.io/hostname, topology.kubernetes.io/zone select pools), which desired/ may
# not set.
SelectorKey = Annotated[str, AfterValidator(_check_selector_key), WithJsonSchema(_KEY_SCHEMA)]


class SelectorRequirement(_Strict):
    key: SelectorKey
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[LabelValue] = Field(default_factory=list)


class LabelSelector(_Strict):
    """A Kubernetes LabelSelector: every requirement must hold (an empty one selects all)."""

    matchLabels: dict[SelectorKey, LabelValue] = Field(default_factory=dict)
    matchExpressions: list[SelectorRequirement] = Field(default_factory=list)


class GroupMeta(_Strict):
    name: ObjectName = Field(description="The group's name.")


class NodeGroup(_Strict):
    """The labels, annotations and taints every node its selector matches must carry,
    decided on the nodes' live labels: a node that joins the pool later is covered too."""

    model_config = ConfigDict(title="NodeGroup")

    apiVersion: Literal["reconcile.dev/v1alpha1"]
    kind: Literal["NodeGroup"]
    metadata: GroupMeta
    selector: LabelSelector
    labels: dict[LabelKey, LabelValue | None] = Field(
        default_factory=dict,
        description=_LABELS_DESCRIPTION,
        json_schema_extra={"additionalProperties": False},
    )
    annotations: Annotations = Field(default_factory=dict, description=_ANNOTATIONS_DESCRIPTION)
    taints: Taints = Field(default_factory=list, description="Taints by key and effect.")


class DriverImage(_Strict):
    """One precompiled driver image that is built and pushed: `<branch>-<kernel>-<osTag>`."""

    branch: Annotated[str, Field(pattern=r"^[0-9]+$", description="Driver branch, e.g. 550.")]
    kernel: Annotated[
        str,
        Field(
            min_length=1,
            pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$",
            description="Full kernel version, e.g. 5.15.0-119-generic.",
        ),
    ]
    osTag: Annotated[
        str,
        Field(
            pattern=r"^[a-z]+[A-Za-z0-9_.-]*$",
            description="os_release ID followed by VERSION_ID, e.g. ubuntu22.04.",
        ),
    ]

    @property
    def tag(self) -> str:
        return driver_tag(self.branch, self.kernel, self.osTag)


class DriverSupportMatrix(_Strict):
    """The precompiled driver images that exist in the registry."""

    model_config = ConfigDict(title="DriverSupportMatrix")

    apiVersion: Literal["reconcile.dev/v1alpha1"]
    kind: Literal["DriverSupportMatrix"]
    metadata: ObjectMeta
    rows: list[DriverImage] = Field(description="One entry per image tag that exists.")


class FactState(_Strict):
    """The label an operator writes to report how the change went, and its values."""

    label: LabelKey = Field(description="The label the operator writes on the node.")
    working: list[str] = Field(
        default_factory=list, description="Values while it works (the rollout waits)."
    )
    done: list[str] = Field(min_length=1, description="Values once it is done.")
    failed: list[str] = Field(
        default_factory=list, description="Values when it failed (the node fails)."
    )


class DisruptiveFact(_Strict):
    """A label whose write makes a component act on the node's workloads: it is rolled
    out (cordon, drain the GPU pods, write, wait for the state, uncordon), never written
    under pods that use GPUs."""

    key: LabelKey | None = Field(default=None, description="The label key.")
    prefix: str | None = Field(
        default=None,
        min_length=1,
        description="Every label key that starts with it (instead of one key).",
    )
    disrupts: str = Field(min_length=1, description="What the write does to the node's pods.")
    state: FactState | None = Field(
        default=None, description="The label that reports completion, when there is one."
    )

    @model_validator(mode="after")
    def _key_or_prefix(self) -> DisruptiveFact:
        if (self.key is None) == (self.prefix is None):
            raise PydanticCustomError("disruptive_fact", "give exactly one of key and prefix")
        return self


class DisruptiveFacts(_Strict):
    """Facts of this site that are rolled out, added to the packaged catalogue (MIG
    layouts, the GPU Operator's deploy labels, the device plugin's config)."""

    model_config = ConfigDict(title="DisruptiveFacts")

    apiVersion: Literal["reconcile.dev/v1alpha1"]
    kind: Literal["DisruptiveFacts"]
    metadata: ObjectMeta
    facts: list[DisruptiveFact] = Field(min_length=1, description="Each fact once.")


def _check_cluster_name(name: str) -> str:
    if len(name) > 63 or not re.fullmatch(labels.DNS1123_LABEL_FMT, name):
        raise PydanticCustomError(
            "cluster_name",
            "{name}: a cluster name is a DNS label (lower-case letters, digits and '-', at "
            "most 63): it names a directory under desired/clusters/ and prefixes output lines",
            {"name": _name(name)},
        )
    return name


class FleetCluster(_Strict):
    """One cluster of the fleet and how to reach it."""

    name: Annotated[
        str,
        AfterValidator(_check_cluster_name),
        WithJsonSchema(
            {"type": "string", "maxLength": 63, "pattern": f"^{labels.DNS1123_LABEL_FMT}$"}
        ),
    ] = Field(description="The cluster's name: its overlay is desired/clusters/<name>/.")
    context: str | None = Field(
        default=None, min_length=1, description="The kubeconfig context that reaches it."
    )
    inCluster: bool = Field(
        default=False,
        description="The cluster reconcile runs in (the pod's service account); instead of context.",
    )
    wave: int = Field(
        default=1, ge=0, description="Apply order: waves go in ascending order, one at a time."
    )

    @model_validator(mode="after")
    def _one_way_in(self) -> FleetCluster:
        if (self.context is None) == (not self.inCluster):
            raise PydanticCustomError(
                "fleet_cluster", "give exactly one of context and inCluster: true"
            )
        return self


class FleetMeta(_Strict):
    name: ObjectName = Field(description="The fleet's name.")


class Fleet(_Strict):
    """The clusters one desired/ tree is for: desired/{groups,drivers,workloads} is the base
    every cluster gets, desired/clusters/<name>/ adds to it and replaces in it."""

    model_config = ConfigDict(title="Fleet")

    apiVersion: Literal["reconcile.dev/v1alpha1"]
    kind: Literal["Fleet"]
    metadata: FleetMeta
    clusters: list[FleetCluster] = Field(min_length=1, description="Each cluster once.")

    @field_validator("clusters")
    @classmethod
    def _unique(cls, clusters: list[FleetCluster]) -> list[FleetCluster]:
        seen: set[str] = set()
        for cluster in clusters:
            if cluster.name in seen:
                raise PydanticCustomError(
                    "fleet_cluster", "cluster {name} is listed twice", {"name": cluster.name}
                )
            seen.add(cluster.name)
        return clusters


KINDS: Final[dict[str, type[_Strict]]] = {
    NODE_FEATURES: NodeFeatures,
    NODE_GROUP: NodeGroup,
    DRIVER_SUPPORT_MATRIX: DriverSupportMatrix,
    DISRUPTIVE_FACTS: DisruptiveFacts,
    FLEET: Fleet,
}


def driver_tag(branch: str, kernel: str, os_tag: str) -> str:
    return f"{branch}-{kernel}-{os_tag}"


def json_schemas(extra: dict[str, type[BaseModel]] | None = None) -> dict[str, dict[str, Any]]:
    """File name -> JSON Schema of every project kind (and of `extra` kinds defined
    elsewhere, such as the saved Plan), as `reconcile schemas` writes them."""
    schemas = {}
    for kind, model in {**KINDS, **(extra or {})}.items():
        schema = model.model_json_schema()
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["$id"] = f"https://{API_GROUP}/schemas/{kind.lower()}.schema.json"
        schemas[f"{kind.lower()}.schema.json"] = schema
    return schemas


@dataclass(frozen=True)
class DesiredNode:
    """One node's declared facts after loading; `None` means must be absent. Taints are
    keyed `key:effect`, as the API server tells them apart."""

    name: str
    labels: dict[str, str | None]
    source: Source
    label_sources: Mapping[str, Source] = field(default_factory=dict, compare=False)
    annotations: dict[str, str | None] = field(default_factory=dict)
    taints: dict[str, str | None] = field(default_factory=dict)
    # Where each annotation and taint is declared, by its shown key
    # (`annotation:<key>`, `taint:<key>:<effect>`).
    fact_sources: dict[str, Source] = field(default_factory=dict, compare=False)
    # The node may be absent from the cluster: not drift (NodeFeatures `optional: true`).
    optional: bool = False

    def source_of(self, key: str) -> Source:
        """Where a label, or (by its shown key) an annotation or taint, is declared."""
        return self.label_sources.get(key) or self.fact_sources.get(key, self.source)


def taint_facts(taints: list[Taint]) -> dict[str, str | None]:
    """key:effect -> value ("" when none; None: must be absent), as facts of a node."""
    return {t.identity: None if t.absent else (t.value or "") for t in taints}


@dataclass(frozen=True)
class DesiredGroup:
    """One NodeGroup after loading: its selector and the facts its nodes must carry."""

    name: str
    selector: LabelSelector
    node: DesiredNode  # the facts, as a node's (its name is the group's)
    selector_keys: dict[str, Source] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class MigConfig:
    """A custom mig-parted configuration declared in desired/: the `config.yaml` of a
    ConfigMap (what ClusterPolicy `migManager.config.name` points the GPU Operator at)."""

    name: str  # `ConfigMap <namespace>/<name>`
    document: Mapping[str, Any]
    source: Source


@dataclass(frozen=True)
class MatrixRow:
    branch: str
    kernel: str
    os_tag: str
    source: Source

    @property
    def tag(self) -> str:
        return driver_tag(self.branch, self.kernel, self.os_tag)


@dataclass(frozen=True)
class Manifest:
    """A Kubernetes object from desired/workloads, as plain JSON-compatible data."""

    body: dict[str, Any]
    source: Source
    # Where each value of the document is written: path -> (line, column).
    positions: dict[tuple[str | int, ...], tuple[int, int]] = field(
        default_factory=dict, compare=False, repr=False
    )
    # Where each mapping key is written (the reader's own dict, shared, never copied).
    keys: dict[tuple[str | int, ...], tuple[int, int]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def at(self, path: tuple[str | int, ...], *, key: bool = False) -> Source:
        """Where `path` (or the nearest value enclosing it) is written; with `key`, the
        key that names it, when `path` ends in a mapping key."""
        if key and path in self.keys:
            return Source(self.source.file, *self.keys[path])
        return nearest(self.source.file, self.positions, path, self.source)

    @property
    def api_version(self) -> str:
        return str(self.body.get("apiVersion", ""))

    @property
    def identity(self) -> ObjectId:
        return ObjectId.of(self.api_version, self.kind, self.namespace, self.name)

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", ""))

    @property
    def name(self) -> str:
        return str(self.body.get("metadata", {}).get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.body.get("metadata", {}).get("namespace") or "")


@dataclass(frozen=True)
class DesiredState:
    """Everything under desired/, validated."""

    nodes: dict[str, DesiredNode] = field(default_factory=dict)
    groups: tuple[DesiredGroup, ...] = ()
    matrix: tuple[MatrixRow, ...] = ()
    manifests: tuple[Manifest, ...] = ()
    # Custom MIG layouts (ConfigMaps whose config.yaml is a mig-parted configuration).
    mig_configs: tuple[MigConfig, ...] = ()
    # Jobs a rollout runs on each node of a batch before the next (desired/gates/*.yaml).
    gates: tuple[Manifest, ...] = ()
    # Facts of this site that are rolled out, with where each is declared
    # (desired/disruptive/*.yaml), beside the packaged catalogue.
    disruptive: tuple[tuple[DisruptiveFact, Source], ...] = ()
    # sha256 of every file the state was read from (path and bytes): binds a saved plan.
    digest: str = ""

    @property
    def matrix_tags(self) -> frozenset[str]:
        return frozenset(row.tag for row in self.matrix)
