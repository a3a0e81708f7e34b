"""Request bodies in the Kubernetes protobuf encoding (`application/vnd.kubernetes.protobuf`),
decoded into the JSON object the same request would have carried as `application/json`.

kubectl 1.37's `create <generator>` commands (`kubectl create namespace|deployment|pdb|
configmap|secret|service|serviceaccount|job|cronjob|role|rolebinding|clusterrole|
clusterrolebinding`) send their object in protobuf and do not fall back to JSON on a 415.

No library does this: the `protobuf` package needs the Kubernetes messages compiled for
Python, and the only package that publishes them (`k8s-proto` 0.0.3, 2019) is unmaintained
and years behind the API. So the decoder is hand-written and driven by tables: one per
message, field numbers from the upstream `generated.proto` files (k8s.io/api core/v1, apps/v1,
batch/v1, policy/v1, rbac/v1; k8s.io/apimachinery meta/v1, util/intstr, api/resource).

The wire: `k8s\\x00`, then a `runtime.Unknown` {typeMeta=1 {apiVersion=1, kind=2}, raw=2,
contentEncoding=3, contentType=4}; `raw` is the object's message.

From Go struct to wire to JSON. The API types are marshalled by gogo-protobuf: a plain field
is always written, its zero value included; a pointer field only when set (then even when
zero); a slice or map only when it has entries. encoding/json, with the types' tags, leaves
out the zero value of an `omitempty` field, never a struct, writes a set pointer even when it
points at zero, and writes `null` for an empty slice or map that is not `omitempty`. So a
table entry says, besides the field's JSON name and type:

    *type    a pointer: kept when present, even zero; absent when not sent
    []type   a slice; map[type] a map with string keys
    type!    not `omitempty`: a zero value is kept, a missing slice or map is `null`

A field number a table does not know is skipped when its value is the zero value (what Go
writes for a plain field nobody set); any other value is refused (`Unsupported`) rather than
silently dropped, since dropping it could change what the object means. The one gap: a
pointer field the tables do not know, set to false, 0 or "", is skipped as if unset.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

MEDIA_TYPE: Final = "application/vnd.kubernetes.protobuf"
MAGIC: Final = b"k8s\x00"

# Types decoded here rather than through a table: JSON renders them as one value.
SCALAR_TYPES: Final = ("string", "bytes", "int", "bool")
SPECIAL_TYPES: Final = ("IntOrString", "Quantity", "Time")

# message name -> field number -> "jsonName type" (see the module docstring for the type syntax)
_TABLES: Final[dict[str, dict[int, str]]] = {
    # --- k8s.io/apimachinery/pkg/apis/meta/v1 -------------------------------------------------
    "ObjectMeta": {
        1: "name string",
        2: "generateName string",
        3: "namespace string",
        4: "selfLink string",
        5: "uid string",
        6: "resourceVersion string",
        7: "generation int",
        8: "creationTimestamp Time",
        9: "deletionTimestamp *Time",
        10: "deletionGracePeriodSeconds *int",
        11: "labels map[string]",
        12: "annotations map[string]",
        13: "ownerReferences []OwnerReference",
        14: "finalizers []string",
    },
    "OwnerReference": {
        5: "apiVersion string!",
        1: "kind string!",
        3: "name string!",
        4: "uid string!",
        6: "controller *bool",
        7: "blockOwnerDeletion *bool",
    },
    "LabelSelector": {
        1: "matchLabels map[string]",
        2: "matchExpressions []LabelSelectorRequirement",
    },
    "LabelSelectorRequirement": {1: "key string!", 2: "operator string!", 3: "values []string"},
    # --- k8s.io/api/core/v1 --------------------------------------------------------------------
    "Namespace": {1: "metadata ObjectMeta", 2: "spec NamespaceSpec", 3: "status NamespaceStatus"},
    "NamespaceSpec": {1: "finalizers []string"},
    "NamespaceStatus": {1: "phase string"},
    "ConfigMap": {
        1: "metadata ObjectMeta",
        4: "immutable *bool",
        2: "data map[string]",
        3: "binaryData map[bytes]",
    },
    "Secret": {
        1: "metadata ObjectMeta",
        5: "immutable *bool",
        2: "data map[bytes]",
        4: "stringData map[string]",
        3: "type string",
    },
    "ServiceAccount": {1: "metadata ObjectMeta", 4: "automountServiceAccountToken *bool"},
    "Service": {1: "metadata ObjectMeta", 2: "spec ServiceSpec", 3: "status ServiceStatus"},
    "ServiceSpec": {
        1: "ports []ServicePort",
        2: "selector map[string]",
        3: "clusterIP string",
        4: "type string",
        5: "externalIPs []string",
        7: "sessionAffinity string",
        8: "loadBalancerIP string",
        9: "loadBalancerSourceRanges []string",
        10: "externalName string",
        11: "externalTrafficPolicy string",
        12: "healthCheckNodePort int",
        13: "publishNotReadyAddresses bool",
    },
    "ServicePort": {
        1: "name string",
        2: "protocol string",
        3: "port int!",
        4: "targetPort IntOrString",
        5: "nodePort int",
    },
    "ServiceStatus": {1: "loadBalancer LoadBalancerStatus"},
    "LoadBalancerStatus": {},
    "PodTemplateSpec": {1: "metadata ObjectMeta", 2: "spec PodSpec"},
    "PodSpec": {
        2: "containers []Container!",
        3: "restartPolicy string",
        4: "terminationGracePeriodSeconds *int",
        5: "activeDeadlineSeconds *int",
        6: "dnsPolicy string",
        7: "nodeSelector map[string]",
        8: "serviceAccountName string",
        9: "serviceAccount string",
        10: "nodeName string",
        11: "hostNetwork bool",
        12: "hostPID bool",
        13: "hostIPC bool",
        16: "hostname string",
        17: "subdomain string",
        19: "schedulerName string",
        24: "priorityClassName string",
    },
    "Container": {
        1: "name string!",
        2: "image string",
        3: "command []string",
        4: "args []string",
        5: "workingDir string",
        6: "ports []ContainerPort",
        7: "env []EnvVar",
        8: "resources ResourceRequirements",
        13: "terminationMessagePath string",
        20: "terminationMessagePolicy string",
        14: "imagePullPolicy string",
        16: "stdin bool",
        17: "stdinOnce bool",
        18: "tty bool",
    },
    "ContainerPort": {
        1: "name string",
        2: "hostPort int",
        3: "containerPort int!",
        4: "protocol string",
        5: "hostIP string",
    },
    "EnvVar": {1: "name string!", 2: "value string"},
    "ResourceRequirements": {1: "limits map[Quantity]", 2: "requests map[Quantity]"},
    # --- k8s.io/api/apps/v1 --------------------------------------------------------------------
    "Deployment": {
        1: "metadata ObjectMeta",
        2: "spec DeploymentSpec",
        3: "status DeploymentStatus",
    },
    "DeploymentSpec": {
        1: "replicas *int",
        2: "selector *LabelSelector",
        3: "template PodTemplateSpec!",
        4: "strategy DeploymentStrategy",
        5: "minReadySeconds int",
        6: "revisionHistoryLimit *int",
        7: "paused bool",
        9: "progressDeadlineSeconds *int",
    },
    "DeploymentStrategy": {1: "type string", 2: "rollingUpdate *RollingUpdateDeployment"},
    "RollingUpdateDeployment": {1: "maxUnavailable *IntOrString", 2: "maxSurge *IntOrString"},
    "DeploymentStatus": {
        1: "observedGeneration int",
        2: "replicas int",
        3: "updatedReplicas int",
        7: "readyReplicas int",
        4: "availableReplicas int",
        5: "unavailableReplicas int",
        9: "terminatingReplicas *int",
        8: "collisionCount *int",
    },
    # --- k8s.io/api/batch/v1 -------------------------------------------------------------------
    "Job": {1: "metadata ObjectMeta", 2: "spec JobSpec", 3: "status JobStatus"},
    "JobSpec": {
        1: "parallelism *int",
        2: "completions *int",
        3: "activeDeadlineSeconds *int",
        7: "backoffLimit *int",
        4: "selector *LabelSelector",
        5: "manualSelector *bool",
        6: "template PodTemplateSpec!",
        8: "ttlSecondsAfterFinished *int",
        9: "completionMode *string",
        10: "suspend *bool",
    },
    "JobStatus": {
        4: "active int",
        5: "succeeded int",
        6: "failed int",
        7: "completedIndexes string",
    },
    "CronJob": {1: "metadata ObjectMeta", 2: "spec CronJobSpec", 3: "status CronJobStatus"},
    "CronJobSpec": {
        1: "schedule string!",
        8: "timeZone *string",
        2: "startingDeadlineSeconds *int",
        3: "concurrencyPolicy string",
        4: "suspend *bool",
        5: "jobTemplate JobTemplateSpec!",
        6: "successfulJobsHistoryLimit *int",
        7: "failedJobsHistoryLimit *int",
    },
    "JobTemplateSpec": {1: "metadata ObjectMeta", 2: "spec JobSpec"},
    "CronJobStatus": {},
    # --- k8s.io/api/policy/v1 ------------------------------------------------------------------
    "PodDisruptionBudget": {
        1: "metadata ObjectMeta",
        2: "spec PodDisruptionBudgetSpec",
        3: "status PodDisruptionBudgetStatus",
    },
    "PodDisruptionBudgetSpec": {
        1: "minAvailable *IntOrString",
        2: "selector *LabelSelector",
        3: "maxUnavailable *IntOrString",
    },
    "PodDisruptionBudgetStatus": {
        1: "observedGeneration int",
        3: "disruptionsAllowed int!",
        4: "currentHealthy int!",
        5: "desiredHealthy int!",
        6: "expectedPods int!",
    },
    # --- k8s.io/api/rbac/v1 --------------------------------------------------------------------
    "ClusterRole": {
        1: "metadata ObjectMeta",
        2: "rules []PolicyRule!",
        3: "aggregationRule *AggregationRule",
    },
    "Role": {1: "metadata ObjectMeta", 2: "rules []PolicyRule!"},
    "PolicyRule": {
        1: "verbs []string!",
        2: "apiGroups []string",
        3: "resources []string",
        4: "resourceNames []string",
        5: "nonResourceURLs []string",
    },
    "AggregationRule": {1: "clusterRoleSelectors []LabelSelector"},
    "ClusterRoleBinding": {
        1: "metadata ObjectMeta",
        2: "subjects []Subject",
        3: "roleRef RoleRef!",
    },
    "RoleBinding": {1: "metadata ObjectMeta", 2: "subjects []Subject", 3: "roleRef RoleRef!"},
    "Subject": {1: "kind string!", 2: "apiGroup string", 3: "name string!", 4: "namespace string"},
    "RoleRef": {1: "apiGroup string!", 2: "kind string!", 3: "name string!"},
}

# (apiVersion, kind) of a top-level object -> its message.
KINDS: Final[dict[tuple[str, str], str]] = {
    ("v1", "Namespace"): "Namespace",
    ("v1", "ConfigMap"): "ConfigMap",
    ("v1", "Secret"): "Secret",
    ("v1", "Service"): "Service",
    ("v1", "ServiceAccount"): "ServiceAccount",
    ("apps/v1", "Deployment"): "Deployment",
    ("batch/v1", "Job"): "Job",
    ("batch/v1", "CronJob"): "CronJob",
    ("policy/v1", "PodDisruptionBudget"): "PodDisruptionBudget",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "ClusterRole",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "ClusterRoleBinding",
    ("rbac.authorization.k8s.io/v1", "Role"): "Role",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "RoleBinding",
}


class ProtobufError(ValueError):
    """The body is not well-formed protobuf; worded as Go's decoder words it."""


class Unsupported(Exception):
    """Well-formed, but holds what the sandbox does not decode (a kind or a field)."""


@dataclass(frozen=True)
class Field:
    name: str  # the JSON name
    type: str  # a scalar, a special type, or a message of _TABLES
    repeated: bool = False
    map: bool = False
    pointer: bool = False
    keep: bool = False  # not `omitempty`

    @property
    def length_delimited(self) -> bool:
        return self.type not in ("int", "bool")


def _field(spec: str) -> Field:
    name, text = spec.split()
    keep = text.endswith("!")
    text = text.removesuffix("!")
    repeated = text.startswith("[]")
    is_map = text.startswith("map[")
    pointer = text.startswith("*")
    if repeated:
        text = text[2:]
    elif is_map:
        text = text[4:-1]
    elif pointer:
        text = text[1:]
    return Field(name, text, repeated, is_map, pointer, keep)


MESSAGES: Final[dict[str, dict[int, Field]]] = {
    message: {number: _field(spec) for number, spec in fields.items()}
    for message, fields in _TABLES.items()
}


@dataclass(frozen=True)
class Envelope:
    api_version: str
    kind: str
    raw: bytes


# --- the wire --------------------------------------------------------------------------------


def _varint(data: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if i >= len(data):
            raise ProtobufError("unexpected EOF")
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, i
        shift += 7
        if shift >= 64:
            raise ProtobufError("proto: integer overflow")


def _records(data: bytes, message: str) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) for each field on the wire, in order."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if number <= 0:
            raise ProtobufError(f"proto: {message}: illegal tag {number} (wire type {wire})")
        if wire == 0:
            value, i = _varint(data, i)
            yield number, wire, value
        elif wire == 2:
            length, i = _varint(data, i)
            if i + length > len(data):
                raise ProtobufError("unexpected EOF")
            yield number, wire, data[i : i + length]
            i += length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if i + size > len(data):
                raise ProtobufError("unexpected EOF")
            yield number, wire, data[i : i + size]
            i += size
        else:
            raise ProtobufError(f"proto: illegal wireType {wire}")


def _signed(value: int) -> int:
    """int32 and int64 are varints of their two's complement in 64 bits."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _zero(value: int | bytes) -> bool:
    return value == 0 if isinstance(value, int) else not any(value)


def _string(value: bytes) -> str:
    return value.decode("utf-8", errors="replace")


def envelope(body: bytes) -> Envelope:
    """The runtime.Unknown around the object: its apiVersion, kind and message bytes."""
    if not body:
        raise ProtobufError("empty data")
    if not body.startswith(MAGIC):
        raise ProtobufError(
            "provided data does not appear to be a protobuf message, expected prefix "
            f"[{' '.join(str(b) for b in MAGIC)}]"
        )
    data = body[len(MAGIC) :]
    if not data:
        raise ProtobufError("empty body")
    api_version = kind = ""
    raw = b""
    for number, wire, value in _records(data, "Unknown"):
        if number == 1 and isinstance(value, bytes):
            for inner, _, item in _records(value, "TypeMeta"):
                if isinstance(item, bytes) and inner == 1:
                    api_version = _string(item)
                elif isinstance(item, bytes) and inner == 2:
                    kind = _string(item)
        elif number == 2 and isinstance(value, bytes):
            raw = value
        elif number == 3 and isinstance(value, bytes) and value:
            raise Unsupported(f"a contentEncoding of {_string(value)!r}")
        elif number in (1, 2, 3, 4) and wire != 2:
            raise ProtobufError(f"proto: wrong wireType = {wire} for field {number} of Unknown")
    return Envelope(api_version, kind, raw)


def decode_object(api_version: str, kind: str, raw: bytes) -> dict[str, Any]:
    """The object in `raw` (the message of `kind`), with its apiVersion and kind, as JSON."""
    message = KINDS.get((api_version, kind))
    if message is None:
        raise Unsupported(f"{kind} objects")
    obj: dict[str, Any] = {"kind": kind, "apiVersion": api_version}
    obj.update(_message(raw, message, ""))
    return obj


def decode(body: bytes) -> dict[str, Any]:
    """A whole request body: the envelope and the object inside it."""
    unknown = envelope(body)
    return decode_object(unknown.api_version, unknown.kind, unknown.raw)


# --- messages --------------------------------------------------------------------------------


def _message(data: bytes, message: str, path: str) -> dict[str, Any]:
    table = MESSAGES[message]
    out: dict[str, Any] = {}
    seen: set[int] = set()
    for number, wire, value in _records(data, message):
        field = table.get(number)
        if field is None:
            if _zero(value):
                continue
            where = f" at {path}" if path else ""
            raise Unsupported(f"field {number} of {message}{where}")
        here = f"{path}.{field.name}" if path else field.name
        seen.add(number)
        if field.map:
            entry = _map_entry(_bytes(value, wire, field), field, here)
            out.setdefault(field.name, {}).update([entry])
        elif field.repeated:
            items = out.setdefault(field.name, [])
            if wire == 2 and not field.length_delimited:  # packed scalars
                packed = _bytes(value, wire, field)
                i = 0
                while i < len(packed):
                    item, i = _varint(packed, i)
                    items.append(_scalar(field.type, item))
            else:
                items.append(_value(field, wire, value, f"{here}[{len(items)}]"))
        else:
            out[field.name] = _value(field, wire, value, here)
    for number, field in table.items():
        plain = not (field.pointer or field.keep or field.repeated or field.map)
        if number in seen:
            if plain and _omitted(field, out[field.name]):
                del out[field.name]
        elif field.keep:
            out[field.name] = None if field.repeated or field.map else _zero_value(field)
    return out


def _bytes(value: int | bytes, wire: int, field: Field) -> bytes:
    if wire != 2 or not isinstance(value, bytes):
        raise ProtobufError(f"proto: wrong wireType = {wire} for field {field.name}")
    return value


def _value(field: Field, wire: int, value: int | bytes, path: str) -> Any:
    if field.length_delimited:
        data = _bytes(value, wire, field)
        if field.type == "string":
            return _string(data)
        if field.type == "bytes":
            return base64.b64encode(data).decode("ascii")
        if field.type == "IntOrString":
            return _int_or_string(data)
        if field.type == "Quantity":
            return _quantity(data)
        if field.type == "Time":
            return _time(data)
        return _message(data, field.type, path)
    if wire != 0 or not isinstance(value, int):
        raise ProtobufError(f"proto: wrong wireType = {wire} for field {field.name}")
    return _scalar(field.type, value)


def _scalar(kind: str, value: int) -> int | bool:
    return value != 0 if kind == "bool" else _signed(value)


def _map_entry(data: bytes, field: Field, path: str) -> tuple[str, Any]:
    """A map<string, V> entry: key=1, value=2 (either may be left out when zero)."""
    value_field = Field(field.name, field.type)
    key, value = "", _zero_value(value_field)
    for number, wire, item in _records(data, "MapEntry"):
        if number == 1:
            key = _string(_bytes(item, wire, field))
        elif number == 2:
            value = _value(value_field, wire, item, f"{path}[{key}]")
        elif not _zero(item):
            raise Unsupported(f"field {number} of a map entry at {path}")
    return key, value


def _zero_value(field: Field) -> Any:
    return {
        "string": "",
        "bytes": "",
        "int": 0,
        "bool": False,
        "IntOrString": 0,
        "Quantity": "0",
        "Time": None,
    }.get(field.type, {})


def _omitted(field: Field, value: Any) -> bool:
    """Whether encoding/json leaves a plain `omitempty` field out: its zero value, never a
    struct (a message), except metav1.Time, whose zero is left out."""
    if field.type == "Time":
        return value is None
    if field.type in MESSAGES or field.type in ("IntOrString", "Quantity"):
        return False
    return value in ("", 0)  # False == 0


def _int_or_string(data: bytes) -> int | str:
    """intstr.IntOrString {type=1 (0 Int, 1 String), intVal=2, strVal=3}."""
    kind, number, text = 0, 0, ""
    for field, wire, value in _records(data, "IntOrString"):
        if field in (1, 2) and isinstance(value, int):
            if field == 1:
                kind = value
            else:
                number = _signed(value)
        elif field == 3 and isinstance(value, bytes):
            text = _string(value)
        elif not _zero(value):
            raise ProtobufError(f"proto: wrong wireType = {wire} for field {field} of IntOrString")
    return text if kind == 1 else number


def _quantity(data: bytes) -> str:
    """resource.Quantity {string=1}."""
    text = "0"
    for field, _, value in _records(data, "Quantity"):
        if field == 1 and isinstance(value, bytes):
            text = _string(value)
    return text


def _time(data: bytes) -> str | None:
    """metav1.Time {seconds=1, nanos=2}: RFC 3339 in UTC to the second; the zero time (no
    bytes) is null."""
    if not data:
        return None
    seconds = 0
    for field, _, value in _records(data, "Timestamp"):
        if field == 1 and isinstance(value, int):
            seconds = _signed(value)
    try:
        moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    except (OverflowError, OSError, ValueError):
        raise ProtobufError(f"proto: time out of range: {seconds} seconds") from None
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def summarize(body: bytes, limit: int = 30) -> str:
    """How the API server quotes an undecodable body in its error (handlers.summarizeData)."""
    if not body:
        return "<empty>"
    if body[:1] == b"{":
        text = body.decode("utf-8", errors="replace")
        return text[:limit] + " ..." if len(body) > limit else text
    return body[:limit].hex() + " ..." if len(body) > limit else body.hex()
