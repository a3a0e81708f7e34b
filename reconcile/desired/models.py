"""The desired-state kinds (pydantic v2, strict, frozen, no unknown fields) and their JSON Schema.

A file's kind is its contract: `NodeFeatures` declares one node's labels, and
`DriverSupportMatrix` lists the precompiled driver images that exist. Label keys and
values are checked here with the API server's own rules (labels.py), so a model that
validates is a model the API server would accept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic_core import PydanticCustomError

from reconcile.diagnostics import Source, nearest
from reconcile.kube import labels
from reconcile.kube.kinds import ObjectId

API_GROUP: Final = "reconcile.dev"
API_VERSION: Final = f"{API_GROUP}/v1alpha1"

NODE_FEATURES: Final = "NodeFeatures"
DRIVER_SUPPORT_MATRIX: Final = "DriverSupportMatrix"

# Image tags (distribution spec): a word character first, then up to 127 of [\w.-].
_BRANCH = re.compile(r"[0-9]+")


def _check_label_key(key: str) -> str:
    problems = labels.is_qualified_name(key)
    if problems:
        raise PydanticCustomError(
            "label_key",
            "invalid label key {key}: {problems}",
            {"key": labels.go_quote(key), "problems": "; ".join(problems)},
        )
    if labels.is_kubelet_owned(key):
        # Declared with a value or with null alike: setting it and deleting it both fight
        # the kubelet, which writes it back, and move pods that select on it meanwhile.
        raise PydanticCustomError(
            "label_key_owned",
            "label key {key} may not be declared: {reason}",
            {"key": labels.go_quote(key), "reason": labels.KUBELET_OWNED_REASON},
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
            {"value": labels.go_quote(value), "problems": "; ".join(problems), "hint": hint},
        )
    return value


def _check_object_name(name: str) -> str:
    problems = labels.is_dns1123_subdomain(name)
    if problems:
        raise PydanticCustomError(
            "object_name",
            "invalid name {name}: {problems}",
            {"name": labels.go_quote(name), "problems": "; ".join(problems)},
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
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ObjectMeta(_Strict):
    name: ObjectName = Field(description="The node's name, exactly as in `kubectl get nodes`.")


class NodeFeatures(_Strict):
    """The labels one node must carry. Keys not listed are left alone."""

    model_config = ConfigDict(title="NodeFeatures")

    apiVersion: Literal["reconcile.dev/v1alpha1"]
    kind: Literal["NodeFeatures"]
    metadata: ObjectMeta
    labels: dict[LabelKey, LabelValue | None] = Field(
        description=(
            'Label key to value. A string is the value the label must have ("" is a '
            "value); null means the label must be absent."
        ),
        # Keys that do not match the key pattern are invalid, not "anything goes".
        json_schema_extra={"additionalProperties": False},
    )


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


KINDS: Final[dict[str, type[_Strict]]] = {
    NODE_FEATURES: NodeFeatures,
    DRIVER_SUPPORT_MATRIX: DriverSupportMatrix,
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
    label_sources: dict[str, Source] = field(default_factory=dict, compare=False)
    annotations: dict[str, str | None] = field(default_factory=dict)
    taints: dict[str, str | None] = field(default_factory=dict)

    def source_of(self, key: str) -> Source:
        return self.label_sources.get(key, self.source)


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

    def at(self, path: tuple[str | int, ...]) -> Source:
        """Where `path` (or the nearest value enclosing it) is written."""
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
    matrix: tuple[MatrixRow, ...] = ()
    manifests: tuple[Manifest, ...] = ()
    # sha256 of every file the state was read from (path and bytes): binds a saved plan.
    digest: str = ""

    @property
    def matrix_tags(self) -> frozenset[str]:
        return frozenset(row.tag for row in self.matrix)
