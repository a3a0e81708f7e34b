"""The JSON types of the built-in kinds' fields, as the API server decodes them: a value of
another type (a list where a string goes, a date where an integer goes) is refused before
any other rule is applied, as kube-apiserver refuses it while decoding the request body.

Only the fields reconcile itself reads (names, labels, selectors, pod templates, budgets,
claims) and their neighbours are described; a field not described here is passed on as
it is written, for the API server to judge. Whatever is described may then be read
without checking its type again.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

PathT = tuple[str | int, ...]


@dataclass(frozen=True)
class Scalar:
    """A JSON scalar: `allowed` names the Python types it may be read as."""

    name: str  # what is allowed, for a message: "a string", "an integer"
    plural: str  # "strings", for "a list of strings"
    allowed: tuple[type, ...]
    # For integers: the largest magnitude the Go type holds (int32, int64).
    bits: int = 0


@dataclass(frozen=True)
class ListOf:
    item: Shape


@dataclass(frozen=True)
class MapOf:
    """A map of string keys to `value` (labels, resource lists, ConfigMap data)."""

    value: Shape


@dataclass(frozen=True)
class Fields:
    """An object whose named fields have the given shapes; other fields are not checked."""

    fields: Mapping[str, Shape]


Shape = Scalar | ListOf | MapOf | Fields

STRING: Final = Scalar("a string", "strings", (str,))
INT32: Final = Scalar("an integer", "integers", (int,), 32)
INT64: Final = Scalar("an integer", "integers", (int,), 64)
BOOL: Final = Scalar("a boolean", "booleans", (bool,))
# IntOrString (maxUnavailable, targetPort): 3 or "25%".
INT_OR_STRING: Final = Scalar("an integer or a string", "integers or strings", (int, str), 32)
# resource.Quantity: "100m", "4Gi", 2 or 2.5.
QUANTITY: Final = Scalar(
    "a quantity (a string or a number)", "quantities (strings or numbers)", (str, int, float)
)
STRINGS: Final = ListOf(STRING)
STRING_MAP: Final = MapOf(STRING)
RESOURCE_LIST: Final = MapOf(QUANTITY)

OBJECT_META: Final = Fields(
    {
        "name": STRING,
        "generateName": STRING,
        "namespace": STRING,
        "labels": STRING_MAP,
        "annotations": STRING_MAP,
        "finalizers": STRINGS,
        "ownerReferences": ListOf(
            Fields({"apiVersion": STRING, "kind": STRING, "name": STRING, "uid": STRING})
        ),
    }
)
LABEL_SELECTOR: Final = Fields(
    {
        "matchLabels": STRING_MAP,
        "matchExpressions": ListOf(Fields({"key": STRING, "operator": STRING, "values": STRINGS})),
    }
)
_NODE_SELECTOR_TERM: Final = Fields(
    {
        "matchExpressions": ListOf(Fields({"key": STRING, "operator": STRING, "values": STRINGS})),
        "matchFields": ListOf(Fields({"key": STRING, "operator": STRING, "values": STRINGS})),
    }
)
_POD_AFFINITY_TERM: Final = Fields(
    {
        "labelSelector": LABEL_SELECTOR,
        "namespaceSelector": LABEL_SELECTOR,
        "namespaces": STRINGS,
        "topologyKey": STRING,
        "matchLabelKeys": STRINGS,
        "mismatchLabelKeys": STRINGS,
    }
)
_POD_AFFINITY: Final = Fields(
    {
        "requiredDuringSchedulingIgnoredDuringExecution": ListOf(_POD_AFFINITY_TERM),
        "preferredDuringSchedulingIgnoredDuringExecution": ListOf(
            Fields({"weight": INT32, "podAffinityTerm": _POD_AFFINITY_TERM})
        ),
    }
)
AFFINITY: Final = Fields(
    {
        "nodeAffinity": Fields(
            {
                "requiredDuringSchedulingIgnoredDuringExecution": Fields(
                    {"nodeSelectorTerms": ListOf(_NODE_SELECTOR_TERM)}
                ),
                "preferredDuringSchedulingIgnoredDuringExecution": ListOf(
                    Fields({"weight": INT32, "preference": _NODE_SELECTOR_TERM})
                ),
            }
        ),
        "podAffinity": _POD_AFFINITY,
        "podAntiAffinity": _POD_AFFINITY,
    }
)
TOLERATION: Final = Fields(
    {
        "key": STRING,
        "operator": STRING,
        "value": STRING,
        "effect": STRING,
        "tolerationSeconds": INT64,
    }
)
RESOURCES: Final = Fields(
    {
        "limits": RESOURCE_LIST,
        "requests": RESOURCE_LIST,
        "claims": ListOf(Fields({"name": STRING, "request": STRING})),
    }
)
CONTAINER: Final = Fields(
    {
        "name": STRING,
        "image": STRING,
        "imagePullPolicy": STRING,
        "command": STRINGS,
        "args": STRINGS,
        "workingDir": STRING,
        "restartPolicy": STRING,
        "ports": ListOf(
            Fields(
                {
                    "name": STRING,
                    "containerPort": INT32,
                    "hostPort": INT32,
                    "hostIP": STRING,
                    "protocol": STRING,
                }
            )
        ),
        "env": ListOf(Fields({"name": STRING, "value": STRING})),
        "resources": RESOURCES,
    }
)
POD_SPEC: Final = Fields(
    {
        "containers": ListOf(CONTAINER),
        "initContainers": ListOf(CONTAINER),
        "ephemeralContainers": ListOf(CONTAINER),
        "restartPolicy": STRING,
        "nodeName": STRING,
        "nodeSelector": STRING_MAP,
        "affinity": AFFINITY,
        "tolerations": ListOf(TOLERATION),
        "schedulerName": STRING,
        "priorityClassName": STRING,
        "priority": INT32,
        "runtimeClassName": STRING,
        "serviceAccountName": STRING,
        "hostNetwork": BOOL,
        "overhead": RESOURCE_LIST,
        "resources": RESOURCES,
        "activeDeadlineSeconds": INT64,
        "terminationGracePeriodSeconds": INT64,
        "topologySpreadConstraints": ListOf(
            Fields(
                {
                    "maxSkew": INT32,
                    "topologyKey": STRING,
                    "whenUnsatisfiable": STRING,
                    "labelSelector": LABEL_SELECTOR,
                    "minDomains": INT32,
                    "nodeAffinityPolicy": STRING,
                    "nodeTaintsPolicy": STRING,
                    "matchLabelKeys": STRINGS,
                }
            )
        ),
        "resourceClaims": ListOf(
            Fields(
                {
                    "name": STRING,
                    "resourceClaimName": STRING,
                    "resourceClaimTemplateName": STRING,
                }
            )
        ),
        "schedulingGates": ListOf(Fields({"name": STRING})),
        "volumes": ListOf(Fields({"name": STRING})),
    }
)
POD_TEMPLATE: Final = Fields({"metadata": OBJECT_META, "spec": POD_SPEC})
_ROLLING: Final = Fields(
    {
        "type": STRING,
        "rollingUpdate": Fields(
            {"maxUnavailable": INT_OR_STRING, "maxSurge": INT_OR_STRING, "partition": INT32}
        ),
    }
)
_WORKLOAD: Final[dict[str, Shape]] = {
    "replicas": INT32,
    "minReadySeconds": INT32,
    "revisionHistoryLimit": INT32,
    "selector": LABEL_SELECTOR,
    "template": POD_TEMPLATE,
}
JOB_SPEC: Final = Fields(
    {
        "parallelism": INT32,
        "completions": INT32,
        "backoffLimit": INT32,
        "activeDeadlineSeconds": INT64,
        "ttlSecondsAfterFinished": INT32,
        "suspend": BOOL,
        "completionMode": STRING,
        "selector": LABEL_SELECTOR,
        "template": POD_TEMPLATE,
    }
)
_CEL_SELECTORS: Final = ListOf(Fields({"cel": Fields({"expression": STRING})}))
_DEVICE_REQUEST: Final[dict[str, Shape]] = {
    "deviceClassName": STRING,
    "allocationMode": STRING,
    "count": INT64,
    "adminAccess": BOOL,
    "selectors": _CEL_SELECTORS,
    "tolerations": ListOf(TOLERATION),
}
_CLAIM_SPEC: Final = Fields(
    {
        "devices": Fields(
            {
                "requests": ListOf(
                    Fields(
                        {
                            "name": STRING,
                            "exactly": Fields(_DEVICE_REQUEST),
                            "firstAvailable": ListOf(Fields({"name": STRING, **_DEVICE_REQUEST})),
                            **_DEVICE_REQUEST,
                        }
                    )
                ),
                "constraints": ListOf(Fields({"requests": STRINGS, "matchAttribute": STRING})),
            }
        )
    }
)
_RULES: Final = ListOf(
    Fields(
        {
            "apiGroups": STRINGS,
            "resources": STRINGS,
            "resourceNames": STRINGS,
            "verbs": STRINGS,
            "nonResourceURLs": STRINGS,
        }
    )
)

# (API group, kind) -> the shape of its fields beside apiVersion, kind and metadata.
KINDS: Final[dict[tuple[str, str], Mapping[str, Shape]]] = {
    ("", "Pod"): {"spec": POD_SPEC},
    ("", "PodTemplate"): {"template": POD_TEMPLATE},
    ("", "ReplicationController"): {"spec": Fields(_WORKLOAD | {"selector": STRING_MAP})},
    ("apps", "Deployment"): {
        "spec": Fields(_WORKLOAD | {"strategy": _ROLLING, "paused": BOOL}),
    },
    ("apps", "ReplicaSet"): {"spec": Fields(_WORKLOAD)},
    ("apps", "StatefulSet"): {
        "spec": Fields(
            _WORKLOAD
            | {"serviceName": STRING, "podManagementPolicy": STRING, "updateStrategy": _ROLLING}
        ),
    },
    ("apps", "DaemonSet"): {"spec": Fields(_WORKLOAD | {"updateStrategy": _ROLLING})},
    ("batch", "Job"): {"spec": JOB_SPEC},
    ("batch", "CronJob"): {
        "spec": Fields(
            {
                "schedule": STRING,
                "timeZone": STRING,
                "suspend": BOOL,
                "concurrencyPolicy": STRING,
                "jobTemplate": Fields({"metadata": OBJECT_META, "spec": JOB_SPEC}),
            }
        ),
    },
    ("policy", "PodDisruptionBudget"): {
        "spec": Fields(
            {
                "minAvailable": INT_OR_STRING,
                "maxUnavailable": INT_OR_STRING,
                "selector": LABEL_SELECTOR,
                "unhealthyPodEvictionPolicy": STRING,
            }
        ),
    },
    ("", "Namespace"): {"spec": Fields({"finalizers": STRINGS})},
    ("", "ConfigMap"): {"data": STRING_MAP, "binaryData": STRING_MAP, "immutable": BOOL},
    ("", "Secret"): {
        "type": STRING,
        "data": STRING_MAP,
        "stringData": STRING_MAP,
        "immutable": BOOL,
    },
    ("", "Service"): {
        "spec": Fields(
            {
                "type": STRING,
                "clusterIP": STRING,
                "selector": STRING_MAP,
                "ports": ListOf(
                    Fields(
                        {
                            "name": STRING,
                            "protocol": STRING,
                            "port": INT32,
                            "targetPort": INT_OR_STRING,
                            "nodePort": INT32,
                        }
                    )
                ),
            }
        ),
    },
    ("", "ServiceAccount"): {},
    ("", "ResourceQuota"): {"spec": Fields({"hard": RESOURCE_LIST})},
    ("", "LimitRange"): {},
    ("scheduling.k8s.io", "PriorityClass"): {
        "value": INT32,
        "globalDefault": BOOL,
        "preemptionPolicy": STRING,
        "description": STRING,
    },
    ("rbac.authorization.k8s.io", "Role"): {"rules": _RULES},
    ("rbac.authorization.k8s.io", "ClusterRole"): {"rules": _RULES},
    ("coordination.k8s.io", "Lease"): {
        "spec": Fields(
            {
                "holderIdentity": STRING,
                "leaseDurationSeconds": INT32,
                "leaseTransitions": INT32,
            }
        ),
    },
    ("resource.k8s.io", "ResourceClaim"): {"spec": _CLAIM_SPEC},
    ("resource.k8s.io", "ResourceClaimTemplate"): {
        "spec": Fields({"metadata": OBJECT_META, "spec": _CLAIM_SPEC})
    },
    ("resource.k8s.io", "DeviceClass"): {"spec": Fields({"selectors": _CEL_SELECTORS})},
}
HEADER: Final[Mapping[str, Shape]] = {
    "apiVersion": STRING,
    "kind": STRING,
    "metadata": OBJECT_META,
}


@dataclass(frozen=True)
class Mistyped:
    """A value whose JSON type is not its field's: where, what is allowed, what it is."""

    path: PathT
    allowed: str
    value: Any
    # The field as the API server names it: spec.containers[0].image, metadata.labels[app].
    field: str


def mistyped(obj: Mapping[str, Any]) -> list[Mistyped]:
    """Every value of `obj` (a Kubernetes object as decoded YAML) whose type its field
    does not allow: apiVersion, kind and metadata of any object, and the fields above of
    the built-in kinds. A null is as good as an absent field (as in JSON decoding), except
    as an item of a list or a value of a map."""
    found = list(_check(Fields(HEADER), obj, ()))
    api, kind = obj.get("apiVersion"), obj.get("kind")
    if not found and isinstance(api, str) and isinstance(kind, str):
        shape = KINDS.get((api.rpartition("/")[0], kind))
        if shape:
            found += _check(Fields(shape), obj, ())
    return found


def _check(shape: Shape, value: Any, path: PathT, field: str = "") -> Iterator[Mistyped]:
    if isinstance(shape, Fields):
        if not isinstance(value, dict):
            yield Mistyped(path, _name(shape), value, field)
            return
        for name, inner in shape.fields.items():
            if value.get(name) is not None:
                yield from _check(inner, value[name], (*path, name), f"{field}.{name}".lstrip("."))
    elif isinstance(shape, ListOf):
        if not isinstance(value, list):
            yield Mistyped(path, _name(shape), value, field)
            return
        for index, item in enumerate(value):
            yield from _check_item(shape.item, item, (*path, index), f"{field}[{index}]")
    elif isinstance(shape, MapOf):
        if not isinstance(value, dict):
            yield Mistyped(path, _name(shape), value, field)
            return
        for key, item in value.items():
            yield from _check_item(shape.value, item, (*path, key), f"{field}[{key}]")
    elif not _fits(shape, value):
        yield Mistyped(path, shape.name, value, field)


def _check_item(shape: Shape, value: Any, path: PathT, field: str) -> Iterator[Mistyped]:
    if value is None and not isinstance(shape, Fields):
        yield Mistyped(path, _name(shape), value, field)
        return
    yield from _check(shape, value, path, field)


def _fits(shape: Scalar, value: Any) -> bool:
    # bool is an int to Python, never to JSON's integers; a date or bytes is no JSON value.
    if isinstance(value, bool):
        return bool in shape.allowed
    if not isinstance(value, shape.allowed) or isinstance(value, datetime.date):
        return False
    if isinstance(value, int) and shape.bits:
        return bool(-(2 ** (shape.bits - 1)) <= value < 2 ** (shape.bits - 1))
    if isinstance(value, float):
        return math.isfinite(value)
    return True


def _name(shape: Shape) -> str:
    if isinstance(shape, Scalar):
        return shape.name
    if isinstance(shape, ListOf):
        return f"a list of {_plural(shape.item)}"
    if isinstance(shape, MapOf):
        return f"a map of {_plural(shape.value)}"
    return "an object (a mapping)"


def _plural(shape: Shape) -> str:
    """What a list or map of `shape` holds: "strings", for "a list of strings"."""
    if isinstance(shape, Scalar):
        return shape.plural
    if isinstance(shape, ListOf):
        return f"lists of {_plural(shape.item)}"
    if isinstance(shape, MapOf):
        return f"maps of {_plural(shape.value)}"
    return "objects (mappings)"
