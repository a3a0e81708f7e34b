"""The API server's validation of the objects reconcile deals with, as field errors.

Ported from k8s.io/kubernetes/pkg/apis/core/validation and friends for what matters
here: object metadata (names, labels, annotations), pod specs (containers, nodeSelector,
node and pod affinity, tolerations), Deployments, PodDisruptionBudgets, node taints,
Secrets and ConfigMaps (data keys, size, the keys each Secret type needs), and the
Events and Leases a controller writes. What is not here the API server checks: `plan`
dry-runs every object it can.
The sandbox answers with these errors (same field, type and message), and `validate`
runs them offline, so a manifest refused in review is one the API server would refuse.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from reconcile.kube import labels
from reconcile.kube.labels import go_quote

_OMIT: Final = object()


@dataclass(frozen=True)
class FieldError:
    """field.Error: a type ("Invalid value", "Required value", ...), a path and a detail."""

    type: str
    field: str
    bad_value: Any = _OMIT
    detail: str = ""

    def body(self, limit: int | None = None) -> str:
        """field.Error.ErrorBody(); with `limit`, the bad value cut after that many
        characters (the API server's answers show it whole)."""
        if self.type in ("Required value", "Forbidden", "Too long") or self.bad_value is _OMIT:
            text = self.type
        else:
            text = f"{self.type}: {go_value(self.bad_value, limit)}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"

    def shown(self, limit: int) -> str:
        """As str(), the field path and the bad value cut after `limit` characters each:
        what `validate` prints, whatever the size of the value."""
        return f"{labels.shown(self.field, limit, quote=False)}: {self.body(limit)}"

    def cause(self) -> dict[str, str]:
        return {
            "reason": _CAUSES.get(self.type, self.type),
            "message": self.body(),
            "field": self.field,
        }


_CAUSES: Final = {
    "Invalid value": "FieldValueInvalid",
    "Required value": "FieldValueRequired",
    "Forbidden": "FieldValueForbidden",
    "Unsupported value": "FieldValueNotSupported",
    "Duplicate value": "FieldValueDuplicate",
    "Too long": "FieldValueTooLong",
    "Not found": "FieldValueNotFound",
}


def invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError("Invalid value", field, value, detail)


def required(field: str, detail: str = "") -> FieldError:
    return FieldError("Required value", field, _OMIT, detail)


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError("Forbidden", field, _OMIT, detail)


def duplicate(field: str, value: Any) -> FieldError:
    return FieldError("Duplicate value", field, value)


def not_supported(field: str, value: Any, supported: list[str]) -> FieldError:
    return FieldError(
        "Unsupported value",
        field,
        value,
        "supported values: " + ", ".join(go_quote(s) for s in supported),
    )


@dataclass(frozen=True)
class Printed:
    """A bad value printed already, as upstream prints it (a Go struct as JSON with its
    Go field names: `{"Kind":"Node","Namespace":"",...}`)."""

    text: str


def go_value(value: Any, limit: int | None = None) -> str:
    """How field.Error prints a bad value: %q for strings, %v for numbers, %#v for the rest;
    with `limit`, cut after that many characters, its whole size said."""
    if limit is None:
        return _go_value(value)
    if isinstance(value, str):
        return labels.shown(value, limit)
    return labels.shown(_go_value(value), limit, quote=False)


def _go_value(value: Any) -> str:
    if isinstance(value, Printed):
        return value.text
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if value is None:
        return "null"
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return "[]string{" + ", ".join(go_quote(v) for v in value) + "}"
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        entries = ", ".join(f"{go_quote(k)}:{go_quote(value[k])}" for k in sorted(value))
        return "map[string]string{" + entries + "}"
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def aggregate(errors: list[FieldError]) -> str:
    """utilerrors.Aggregate.Error(): one message as is, several in brackets, deduplicated."""
    messages = list(dict.fromkeys(str(e) for e in errors))
    return messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"


# --- metadata ------------------------------------------------------------------------------

NAME_DNS_LABEL: Final = "dns-label"
NAME_DNS_SUBDOMAIN: Final = "dns-subdomain"
NAME_PATH_SEGMENT: Final = "path-segment"
TOTAL_ANNOTATION_SIZE_LIMIT: Final = 256 * 1024


def validate_labels(values: Any, field: str) -> list[FieldError]:
    """metav1validation.ValidateLabels: key and value errors, all at the map's path."""
    if not isinstance(values, dict):
        return [invalid(field, values, "must be a map of string keys to string values")]
    errors = []
    for key in sorted(values):
        value = values[key]
        errors += [invalid(field, key, msg) for msg in labels.is_qualified_name(str(key))]
        if not isinstance(value, str):
            errors.append(invalid(f"{field}[{key}]", value, "label values must be strings"))
            continue
        errors += [invalid(field, value, msg) for msg in labels.is_valid_label_value(value)]
    return errors


def annotations_size(annotations: Mapping[str, Any]) -> int:
    """What the API server counts against TOTAL_ANNOTATION_SIZE_LIMIT: every key and
    value, in bytes (Go's len), a null value counting as empty."""
    return sum(
        len(str(key).encode("utf-8", "surrogatepass"))
        + len(str(value if value is not None else "").encode("utf-8", "surrogatepass"))
        for key, value in annotations.items()
    )


def validate_annotations(values: Any, field: str) -> list[FieldError]:
    if not isinstance(values, dict):
        return [invalid(field, values, "must be a map of string keys to string values")]
    errors = []
    for key in sorted(values):
        errors += [invalid(field, key, msg) for msg in labels.is_qualified_name(str(key).lower())]
    if annotations_size(values) > TOTAL_ANNOTATION_SIZE_LIMIT:
        errors.append(
            FieldError(
                "Too long",
                field,
                _OMIT,
                f"may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes",
            )
        )
    return errors


def name_errors(name: str, rule: str) -> list[str]:
    """What is wrong with an object name under one of the API server's name rules."""
    if rule == NAME_DNS_LABEL:
        return labels.is_dns1123_label(name)
    if rule == NAME_PATH_SEGMENT:
        if name in (".", ".."):
            return [f"may not be '{name}'"]
        return [f"may not contain '{c}'" for c in "/%" if c in name]
    return labels.is_dns1123_subdomain(name)


def name_problem(name: str, what: str, rule: str = NAME_DNS_SUBDOMAIN) -> str | None:
    """`invalid node name "..": ...` when `name` breaks `rule`; None when it is valid.

    Checked before a name goes into a request path: node names are DNS-1123 subdomains,
    namespaces DNS-1123 labels, and any object name at least one path segment."""
    problems = name_errors(name, rule) if name else ["may not be empty"]
    if not problems:
        return None
    return f"invalid {what} name {labels.go_quote(name)}: {'; '.join(problems)}"


def validate_object_meta(
    obj: dict[str, Any], *, namespaced: bool, name_rule: str
) -> list[FieldError]:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return [required("metadata.name", "name or generateName is required")]
    errors: list[FieldError] = []
    name = metadata.get("name")
    if not name:
        errors.append(required("metadata.name", "name or generateName is required"))
    elif not isinstance(name, str):
        errors.append(invalid("metadata.name", name, "must be a string"))
    else:
        errors += [invalid("metadata.name", name, msg) for msg in name_errors(name, name_rule)]
    namespace = metadata.get("namespace")
    if namespaced:
        if not namespace:
            errors.append(required("metadata.namespace"))
        elif isinstance(namespace, str):
            errors += [
                invalid("metadata.namespace", namespace, m)
                for m in labels.is_dns1123_label(namespace)
            ]
    elif namespace:
        errors.append(forbidden("metadata.namespace", "not allowed on this type"))
    if "labels" in metadata and metadata["labels"] is not None:
        errors += validate_labels(metadata["labels"], "metadata.labels")
    if "annotations" in metadata and metadata["annotations"] is not None:
        errors += validate_annotations(metadata["annotations"], "metadata.annotations")
    return errors


# --- selectors -----------------------------------------------------------------------------


def validate_label_selector(selector: Any, field: str) -> list[FieldError]:
    """metav1validation.ValidateLabelSelector."""
    if selector is None:
        return []
    if not isinstance(selector, dict):
        return [invalid(field, selector, "must be an object")]
    errors = validate_labels(selector.get("matchLabels") or {}, f"{field}.matchLabels")
    for i, expression in enumerate(selector.get("matchExpressions") or ()):
        path = f"{field}.matchExpressions[{i}]"
        operator = expression.get("operator")
        values = expression.get("values") or []
        if operator in ("In", "NotIn"):
            if not values:
                errors.append(
                    required(
                        f"{path}.values", "must be specified when `operator` is 'In' or 'NotIn'"
                    )
                )
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                errors.append(
                    forbidden(
                        f"{path}.values",
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    )
                )
        else:
            errors.append(invalid(f"{path}.operator", operator, "not a valid selector operator"))
        key = str(expression.get("key", ""))
        errors += [invalid(f"{path}.key", key, msg) for msg in labels.is_qualified_name(key)]
        for j, value in enumerate(values):
            errors += [
                invalid(f"{path}.values[{j}]", value, m)
                for m in labels.is_valid_label_value(str(value))
            ]
    return errors


def validate_node_selector_requirement(requirement: dict[str, Any], path: str) -> list[FieldError]:
    """corevalidation.ValidateNodeSelectorRequirement (label values checked, as since v1.32)."""
    errors: list[FieldError] = []
    operator = requirement.get("operator")
    values = requirement.get("values") or []
    if operator in ("In", "NotIn"):
        if not values:
            errors.append(
                required(f"{path}.values", "must be specified when `operator` is 'In' or 'NotIn'")
            )
    elif operator in ("Exists", "DoesNotExist"):
        if values:
            errors.append(
                forbidden(
                    f"{path}.values",
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                )
            )
    elif operator in ("Gt", "Lt"):
        if len(values) != 1:
            errors.append(
                required(
                    f"{path}.values",
                    "must be specified single value when `operator` is 'Lt' or 'Gt'",
                )
            )
    else:
        errors.append(invalid(f"{path}.operator", operator, "not a valid selector operator"))
    key = str(requirement.get("key", ""))
    errors += [invalid(f"{path}.key", key, msg) for msg in labels.is_qualified_name(key)]
    for i, value in enumerate(values):
        errors += [
            invalid(f"{path}.values[{i}]", value, m)
            for m in labels.is_valid_label_value(str(value))
        ]
    return errors


def validate_node_field_selector_requirement(
    requirement: dict[str, Any], path: str
) -> list[FieldError]:
    errors: list[FieldError] = []
    operator = requirement.get("operator")
    values = requirement.get("values") or []
    if operator in ("In", "NotIn"):
        if len(values) != 1:
            errors.append(
                required(
                    f"{path}.values",
                    "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
                )
            )
    else:
        errors.append(invalid(f"{path}.operator", operator, "not a valid selector operator"))
    key = requirement.get("key")
    if key != "metadata.name":
        errors.append(invalid(f"{path}.key", key, "not a valid field selector key"))
    else:
        for i, value in enumerate(values):
            errors += [
                invalid(f"{path}.values[{i}]", value, m)
                for m in labels.is_dns1123_subdomain(str(value))
            ]
    return errors


def validate_node_selector_term(term: dict[str, Any], path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    for i, requirement in enumerate(term.get("matchExpressions") or ()):
        errors += validate_node_selector_requirement(requirement, f"{path}.matchExpressions[{i}]")
    for i, requirement in enumerate(term.get("matchFields") or ()):
        errors += validate_node_field_selector_requirement(requirement, f"{path}.matchFields[{i}]")
    return errors


def validate_node_selector(selector: dict[str, Any], path: str) -> list[FieldError]:
    terms = selector.get("nodeSelectorTerms") or []
    if not terms:
        return [required(f"{path}.nodeSelectorTerms", "must have at least one node selector term")]
    errors: list[FieldError] = []
    for i, term in enumerate(terms):
        errors += validate_node_selector_term(term or {}, f"{path}.nodeSelectorTerms[{i}]")
    return errors


def _validate_pod_affinity_term(term: dict[str, Any], path: str) -> list[FieldError]:
    errors = validate_label_selector(term.get("labelSelector"), f"{path}.labelSelector")
    topology_key = term.get("topologyKey") or ""
    if not topology_key:
        errors.append(required(f"{path}.topologyKey", "can not be empty"))
    else:
        errors += [
            invalid(f"{path}.topologyKey", topology_key, m)
            for m in labels.is_qualified_name(topology_key)
        ]
    for i, namespace in enumerate(term.get("namespaces") or ()):
        errors += [
            invalid(f"{path}.namespace[{i}]", namespace, m)
            for m in labels.is_dns1123_label(str(namespace))
        ]
    return errors


def validate_affinity(affinity: Any, path: str) -> list[FieldError]:
    if not isinstance(affinity, dict):
        return []
    errors: list[FieldError] = []
    node = affinity.get("nodeAffinity") or {}
    required_terms = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required_terms is not None:
        errors += validate_node_selector(
            required_terms, f"{path}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        )
    for i, preferred in enumerate(
        node.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    ):
        item = f"{path}.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
        weight = preferred.get("weight", 0)
        if not isinstance(weight, int) or not 1 <= weight <= 100:
            errors.append(invalid(f"{item}.weight", weight, "must be in the range 1-100"))
        errors += validate_node_selector_term(
            preferred.get("preference") or {}, f"{item}.preference"
        )
    for kind in ("podAffinity", "podAntiAffinity"):
        section = affinity.get(kind) or {}
        for i, term in enumerate(
            section.get("requiredDuringSchedulingIgnoredDuringExecution") or ()
        ):
            errors += _validate_pod_affinity_term(
                term, f"{path}.{kind}.requiredDuringSchedulingIgnoredDuringExecution[{i}]"
            )
        for i, weighted in enumerate(
            section.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
        ):
            item = f"{path}.{kind}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
            weight = weighted.get("weight", 0)
            if not isinstance(weight, int) or not 1 <= weight <= 100:
                errors.append(invalid(f"{item}.weight", weight, "must be in the range 1-100"))
            errors += _validate_pod_affinity_term(
                weighted.get("podAffinityTerm") or {}, f"{item}.podAffinityTerm"
            )
    return errors


# --- pods ----------------------------------------------------------------------------------

TAINT_EFFECTS: Final = ["NoSchedule", "PreferNoSchedule", "NoExecute"]
RESTART_POLICIES: Final = ["Always", "OnFailure", "Never"]
POD_UPDATE_FORBIDDEN: Final = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)


def _validate_containers(containers: Any, path: str, *, needed: bool) -> list[FieldError]:
    if not containers:
        return [required(path)] if needed else []
    errors: list[FieldError] = []
    seen: set[str] = set()
    for i, container in enumerate(containers):
        item = f"{path}[{i}]"
        name = container.get("name") if isinstance(container, dict) else None
        if not name:
            errors.append(required(f"{item}.name"))
        else:
            errors += [invalid(f"{item}.name", name, m) for m in labels.is_dns1123_label(str(name))]
            if name in seen:
                errors.append(duplicate(f"{item}.name", name))
            seen.add(str(name))
        if not isinstance(container, dict) or not container.get("image"):
            errors.append(required(f"{item}.image"))
    return errors


def _validate_tolerations(tolerations: Any, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    for i, toleration in enumerate(tolerations or ()):
        item = f"{path}[{i}]"
        key = toleration.get("key") or ""
        if key:
            errors += [invalid(f"{item}.key", key, m) for m in labels.is_qualified_name(key)]
        operator = toleration.get("operator") or "Equal"
        if operator == "Exists" and toleration.get("value"):
            errors.append(
                invalid(
                    f"{item}.operator",
                    toleration.get("value"),
                    "value must be empty when `operator` is 'Exists'",
                )
            )
        elif operator not in ("Exists", "Equal"):
            errors.append(not_supported(f"{item}.operator", operator, ["Equal", "Exists"]))
        if not key and operator != "Exists":
            errors.append(
                invalid(
                    f"{item}.operator",
                    operator,
                    'operator must be Exists when `key` is empty, which means "match all values and all keys"',
                )
            )
        effect = toleration.get("effect")
        if effect and effect not in TAINT_EFFECTS:
            errors.append(not_supported(f"{item}.effect", effect, TAINT_EFFECTS))
    return errors


def validate_pod_spec(
    spec: Any, path: str, *, restart_policies: list[str] = RESTART_POLICIES
) -> list[FieldError]:
    if not isinstance(spec, dict):
        return [required(f"{path}.containers")]
    errors = _validate_containers(spec.get("containers"), f"{path}.containers", needed=True)
    errors += _validate_containers(
        spec.get("initContainers"), f"{path}.initContainers", needed=False
    )
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in restart_policies:
        errors.append(not_supported(f"{path}.restartPolicy", policy, restart_policies))
    if spec.get("nodeSelector") is not None:
        errors += validate_labels(spec["nodeSelector"], f"{path}.nodeSelector")
    errors += validate_affinity(spec.get("affinity"), f"{path}.affinity")
    errors += _validate_tolerations(spec.get("tolerations"), f"{path}.tolerations")
    return errors


def _mutable_pod_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec with the fields a pod update may change blanked out."""
    spec = json.loads(json.dumps(spec))
    for group in ("containers", "initContainers"):
        for container in spec.get(group) or ():
            container.pop("image", None)
    for key in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"):
        spec.pop(key, None)
    return spec


def validate_pod_update(new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
    new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    # Binding a pod (setting nodeName once) goes through pods/binding; a set nodeName is fixed.
    if old_spec.get("nodeName") and new_spec.get("nodeName") != old_spec.get("nodeName"):
        return [forbidden("spec", POD_UPDATE_FORBIDDEN)]
    new_rest = {k: v for k, v in _mutable_pod_spec(new_spec).items() if k != "nodeName"}
    old_rest = {k: v for k, v in _mutable_pod_spec(old_spec).items() if k != "nodeName"}
    if new_rest != old_rest:
        return [forbidden("spec", POD_UPDATE_FORBIDDEN)]
    return []


# --- other kinds ---------------------------------------------------------------------------

_PERCENT: Final = re.compile(r"^([0-9]+)%$")


def _int_or_percent(value: Any, path: str) -> list[FieldError]:
    if isinstance(value, bool):
        return [invalid(path, value, "must be an integer or percentage (e.g '5%')")]
    if isinstance(value, int):
        return [] if value >= 0 else [invalid(path, value, "must be greater than or equal to 0")]
    if isinstance(value, str):
        match = _PERCENT.match(value)
        if not match:
            return [
                invalid(
                    path,
                    value,
                    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                )
            ]
        if int(match.group(1)) > 100:
            return [invalid(path, value, "must not be greater than 100%")]
        return []
    return [invalid(path, value, "must be an integer or percentage (e.g '5%')")]


def validate_pdb_spec(spec: Any) -> list[FieldError]:
    if not isinstance(spec, dict):
        return []
    errors: list[FieldError] = []
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        errors.append(invalid("spec", spec, "minAvailable and maxUnavailable cannot be both set"))
    for field in ("minAvailable", "maxUnavailable"):
        if spec.get(field) is not None:
            errors += _int_or_percent(spec[field], f"spec.{field}")
    errors += validate_label_selector(spec.get("selector"), "spec.selector")
    return errors


def validate_workload_template(spec: Any, *, kind: str) -> list[FieldError]:
    """Deployments, ReplicaSets, StatefulSets, DaemonSets: selector, template, replicas."""
    if not isinstance(spec, dict):
        return [required("spec.selector"), required("spec.template.spec.containers")]
    errors: list[FieldError] = []
    selector = spec.get("selector")
    if selector is None:
        errors.append(required("spec.selector"))
    elif not (selector.get("matchLabels") or selector.get("matchExpressions")):
        errors.append(
            invalid("spec.selector", selector, f"empty selector is invalid for {kind.lower()}")
        )
    else:
        errors += validate_label_selector(selector, "spec.selector")
    replicas = spec.get("replicas")
    if replicas is not None and (not isinstance(replicas, int) or replicas < 0):
        errors.append(invalid("spec.replicas", replicas, "must be greater than or equal to 0"))
    template = spec.get("template") or {}
    template_labels = (template.get("metadata") or {}).get("labels") or {}
    if template_labels:
        errors += validate_labels(template_labels, "spec.template.metadata.labels")
    if selector and (selector.get("matchLabels") or selector.get("matchExpressions")):
        from reconcile.kube.selector import SelectorError, from_label_selector

        try:
            matches = from_label_selector(selector).matches(template_labels)
        except SelectorError:
            matches = True  # reported above as a selector error
        if not matches:
            errors.append(
                invalid(
                    "spec.template.metadata.labels",
                    template_labels,
                    "`selector` does not match template `labels`",
                )
            )
    policies = (
        ["Always"]
        if kind in ("Deployment", "ReplicaSet", "DaemonSet", "StatefulSet")
        else RESTART_POLICIES
    )
    errors += validate_pod_spec(
        template.get("spec"), "spec.template.spec", restart_policies=policies
    )
    return errors


def validate_taints(taints: Any, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    for i, taint in enumerate(taints or ()):
        item = f"{path}[{i}]"
        key = taint.get("key") or ""
        if not key:
            errors.append(required(f"{item}.key"))
        else:
            errors += [invalid(f"{item}.key", key, m) for m in labels.is_qualified_name(key)]
        if taint.get("value"):
            errors += [
                invalid(f"{item}.value", taint["value"], m)
                for m in labels.is_valid_label_value(taint["value"])
            ]
        effect = taint.get("effect")
        if not effect:
            errors.append(required(f"{item}.effect"))
        elif effect not in TAINT_EFFECTS:
            errors.append(not_supported(f"{item}.effect", effect, TAINT_EFFECTS))
    return errors


NAME_RULES: Final = {
    ("", "Namespace"): NAME_DNS_LABEL,
    # NameIsDNSLabel since RelaxedServiceNameValidation (beta, on by default in v1.36).
    ("", "Service"): NAME_DNS_LABEL,
    ("rbac.authorization.k8s.io", "ClusterRole"): NAME_PATH_SEGMENT,
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): NAME_PATH_SEGMENT,
    ("rbac.authorization.k8s.io", "Role"): NAME_PATH_SEGMENT,
    ("rbac.authorization.k8s.io", "RoleBinding"): NAME_PATH_SEGMENT,
}


def validate_object(
    group: str,
    kind: str,
    obj: dict[str, Any],
    *,
    namespaced: bool,
    old: dict[str, Any] | None = None,
) -> list[FieldError]:
    """Every error the API server would report for `obj` (of group/kind) on create or update."""
    errors = validate_object_meta(
        obj, namespaced=namespaced, name_rule=NAME_RULES.get((group, kind), NAME_DNS_SUBDOMAIN)
    )
    if (group, kind) == ("events.k8s.io", "Event"):
        return validate_event(obj, old, errors)
    spec = obj.get("spec")
    if (group, kind) == ("", "Pod"):
        errors += validate_pod_spec(spec, "spec")
        if old is not None:
            errors += validate_pod_update(obj, old)
    elif (group, kind) == ("", "Secret"):
        errors += validate_secret(obj, old)
    elif (group, kind) == ("", "ConfigMap"):
        errors += validate_config_map(obj, old)
    elif (group, kind) == ("", "Node"):
        errors += validate_taints((spec or {}).get("taints"), "spec.taints")
    elif (group, kind) == ("policy", "PodDisruptionBudget"):
        errors += validate_pdb_spec(spec)
    elif group == "apps" and kind in ("Deployment", "ReplicaSet", "DaemonSet", "StatefulSet"):
        errors += validate_workload_template(spec, kind=kind)
        if old is not None and (old.get("spec") or {}).get("selector") != (spec or {}).get(
            "selector"
        ):
            errors.append(
                invalid("spec.selector", (spec or {}).get("selector"), "field is immutable")
            )
    elif (group, kind) == ("coordination.k8s.io", "Lease"):
        errors += validate_lease_spec(spec)
    elif (group, kind) == ("batch", "Job"):
        template = (spec or {}).get("template") or {}
        errors += validate_pod_spec(
            template.get("spec"), "spec.template.spec", restart_policies=["OnFailure", "Never"]
        )
    return errors


# --- v1 Secret and ConfigMap ---------------------------------------------------------------
# pkg/apis/core/validation/validation.go ValidateSecret, ValidateConfigMap and their
# updates; the keys' rule is IsConfigMapKey (k8s.io/apimachinery/pkg/util/validation).
# The API server validates the internal Secret: `stringData` is merged into `data` first,
# so a key of either is reported at `data[KEY]`. No message carries a value.

MAX_SECRET_SIZE: Final = 1024 * 1024  # core.MaxSecretSize, ConfigMaps' limit too
CONFIG_MAP_KEY_FMT: Final = "[-._a-zA-Z0-9]+"
CONFIG_MAP_KEY_ERR_MSG: Final = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.'"
)
_CONFIG_MAP_KEY_RE: Final = re.compile(CONFIG_MAP_KEY_FMT)
REDACTED: Final = "<secret contents redacted>"
FIELD_IMMUTABLE: Final = "field is immutable"
IMMUTABLE_SET: Final = "field is immutable when `immutable` is set"
SERVICE_ACCOUNT_NAME_KEY: Final = "kubernetes.io/service-account.name"
# Secret type -> the data keys it needs: (keys, how many of them at least).
SECRET_TYPE_TLS: Final = "kubernetes.io/tls"
SECRET_TYPE_DOCKERCFG: Final = "kubernetes.io/dockercfg"
SECRET_TYPE_DOCKER_CONFIG_JSON: Final = "kubernetes.io/dockerconfigjson"
SECRET_TYPE_BASIC_AUTH: Final = "kubernetes.io/basic-auth"
SECRET_TYPE_SSH_AUTH: Final = "kubernetes.io/ssh-auth"
SECRET_TYPE_SERVICE_ACCOUNT_TOKEN: Final = "kubernetes.io/service-account-token"


def is_config_map_key(value: str) -> list[str]:
    """validation.IsConfigMapKey: a key of a ConfigMap's or a Secret's data."""
    errors = []
    if len(value.encode("utf-8", "surrogatepass")) > labels.DNS1123_SUBDOMAIN_MAX_LENGTH:
        errors.append(labels.max_len_error(labels.DNS1123_SUBDOMAIN_MAX_LENGTH))
    if not _CONFIG_MAP_KEY_RE.fullmatch(value):
        errors.append(
            labels.regex_error(
                CONFIG_MAP_KEY_ERR_MSG, CONFIG_MAP_KEY_FMT, "key.name", "KEY_NAME", "key-name"
            )
        )
    if value == ".":
        errors.append("must not be '.'")
    elif value == "..":
        errors.append("must not be '..'")
    elif value.startswith(".."):
        errors.append("must not start with '..'")
    return errors


def _decoded(value: Any) -> bytes | None:
    """A `data` or `binaryData` value as the bytes the API server holds (base64 in JSON);
    None when it is not base64 (the server refuses the body before validating it)."""
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def _encoded(value: Any) -> bytes:
    return str(value if value is not None else "").encode("utf-8", "surrogatepass")


def secret_data(obj: Mapping[str, Any]) -> dict[str, bytes | None]:
    """The internal Secret's data: `data` decoded, `stringData` merged over it (the v1
    conversion), each key with its bytes (None where a `data` value is not base64)."""
    data: dict[str, bytes | None] = {}
    section = obj.get("data")
    if isinstance(section, Mapping):
        data.update({str(key): _decoded(value) for key, value in section.items()})
    string_data = obj.get("stringData")
    if isinstance(string_data, Mapping):
        data.update({str(key): _encoded(value) for key, value in string_data.items()})
    return data


def _total(values: Iterable[bytes | None]) -> int:
    return sum(len(value) for value in values if value is not None)


def _too_big(field: str, limit: int) -> FieldError:
    return FieldError("Too long", field, _OMIT, f"may not be more than {limit} bytes")


def validate_secret(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[FieldError]:
    errors: list[FieldError] = []
    if old is not None:
        new_type, old_type = obj.get("type") or "", old.get("type") or ""
        if new_type != old_type:
            errors.append(invalid("type", new_type, FIELD_IMMUTABLE))
        if old.get("immutable") is True:
            if obj.get("immutable") is not True:
                errors.append(forbidden("immutable", IMMUTABLE_SET))
            if secret_data(obj) != secret_data(old):
                errors.append(forbidden("data", IMMUTABLE_SET))
    data = secret_data(obj)
    for key in sorted(data):
        errors += [invalid(f"data[{key}]", key, message) for message in is_config_map_key(key)]
    if _total(data.values()) > MAX_SECRET_SIZE:
        errors.append(_too_big("data", MAX_SECRET_SIZE))
    secret_type = obj.get("type") or ""
    if secret_type == SECRET_TYPE_SERVICE_ACCOUNT_TOKEN:
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        if not (isinstance(annotations, Mapping) and annotations.get(SERVICE_ACCOUNT_NAME_KEY)):
            errors.append(required(f"metadata.annotations[{SERVICE_ACCOUNT_NAME_KEY}]"))
    elif secret_type in (SECRET_TYPE_DOCKERCFG, SECRET_TYPE_DOCKER_CONFIG_JSON):
        key = ".dockercfg" if secret_type == SECRET_TYPE_DOCKERCFG else ".dockerconfigjson"
        if key not in data:
            errors.append(required(f"data[{key}]"))
        else:
            problem = go_json_map_error(data[key] or b"")
            if problem is not None:
                errors.append(invalid(f"data[{key}]", REDACTED, problem))
    elif secret_type == SECRET_TYPE_BASIC_AUTH:
        if "username" not in data and "password" not in data:
            errors += [required("data[username]"), required("data[password]")]
    elif secret_type == SECRET_TYPE_SSH_AUTH:
        if not data.get("ssh-privatekey"):
            errors.append(required("data[ssh-privatekey]"))
    elif secret_type == SECRET_TYPE_TLS:
        errors += [required(f"data[{key}]") for key in ("tls.crt", "tls.key") if key not in data]
    return errors


def _config_map_sections(obj: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    data, binary = obj.get("data"), obj.get("binaryData")
    return (
        dict(data) if isinstance(data, Mapping) else {},
        dict(binary) if isinstance(binary, Mapping) else {},
    )


def validate_config_map(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[FieldError]:
    errors: list[FieldError] = []
    data, binary = _config_map_sections(obj)
    if old is not None and old.get("immutable") is True:
        old_data, old_binary = _config_map_sections(old)
        if obj.get("immutable") is not True:
            errors.append(forbidden("immutable", IMMUTABLE_SET))
        if data != old_data:
            errors.append(forbidden("data", IMMUTABLE_SET))
        if binary != old_binary:
            errors.append(forbidden("binaryData", IMMUTABLE_SET))
    total = 0
    for key in sorted(data, key=str):
        errors += [invalid(f"data[{key}]", key, m) for m in is_config_map_key(str(key))]
        if key in binary:
            errors.append(invalid(f"data[{key}]", key, "duplicate of key present in binaryData"))
        if isinstance(data[key], str):
            total += len(_encoded(data[key]))
    for key in sorted(binary, key=str):
        errors += [invalid(f"binaryData[{key}]", key, m) for m in is_config_map_key(str(key))]
    total += _total(_decoded(value) for value in binary.values())
    if total > MAX_SECRET_SIZE:
        # The error is about the whole object: its field path is empty.
        errors.append(_too_big("", MAX_SECRET_SIZE))
    return errors


# --- encoding/json, as the API server reports a docker config that is not JSON ------------
# json.Unmarshal(bytes, &map[string]interface{}{}): the syntax errors of Go's scanner
# (encoding/json/scanner.go), then the one type error a JSON value that is not an object
# meets. The character Go quotes is shown as `***`: it is part of the Secret.

_GO_SPACE: Final = b" \t\r\n"
_DIGITS: Final = b"0123456789"
_HEX: Final = b"0123456789abcdefABCDEF"
_LITERALS: Final = {ord("t"): b"rue", ord("f"): b"alse", ord("n"): b"ull"}
_LITERAL_NAMES: Final = {ord("t"): "true", ord("f"): "false", ord("n"): "null"}


class _GoSyntaxError(Exception):
    pass


def _go_invalid(context: str) -> _GoSyntaxError:
    return _GoSyntaxError(f"invalid character '***' {context}")


def go_json_map_error(data: bytes) -> str | None:
    """The error json.Unmarshal into a map[string]interface{} returns for `data`, or None."""
    try:
        first = _go_scan(data)
    except _GoSyntaxError as e:
        return str(e)
    except RecursionError:
        return None  # nested deeper than Python follows: left to the API server
    kinds = {ord("{"): None, ord("n"): None, ord("["): "array", ord('"'): "string"}
    kind = kinds.get(first, "bool" if first in (ord("t"), ord("f")) else "number")
    if kind is None:
        return None
    return f"json: cannot unmarshal {kind} into Go value of type map[string]interface {{}}"


def _go_scan(data: bytes) -> int:
    """Check `data` as encoding/json's checkValid does; the first byte of its value."""
    end = len(data)

    def space(i: int) -> int:
        while i < end and data[i] in _GO_SPACE:
            i += 1
        return i

    def eof() -> _GoSyntaxError:
        return _GoSyntaxError("unexpected end of JSON input")

    def value(i: int) -> int:
        """One value from data[i] (spaces skipped); the index after it."""
        i = space(i)
        if i >= end:
            raise eof()
        c = data[i]
        if c == ord("{"):
            i = space(i + 1)
            if i < end and data[i] == ord("}"):
                return i + 1
            while True:
                i = space(i)
                if i >= end:
                    raise eof()
                if data[i] != ord('"'):
                    raise _go_invalid("looking for beginning of object key string")
                i = space(string(i + 1))
                if i >= end:
                    raise eof()
                if data[i] != ord(":"):
                    raise _go_invalid("after object key")
                i = space(value(i + 1))
                if i >= end:
                    raise eof()
                if data[i] == ord("}"):
                    return i + 1
                if data[i] != ord(","):
                    raise _go_invalid("after object key:value pair")
                i += 1
        if c == ord("["):
            i = space(i + 1)
            if i < end and data[i] == ord("]"):
                return i + 1
            while True:
                i = space(value(i))
                if i >= end:
                    raise eof()
                if data[i] == ord("]"):
                    return i + 1
                if data[i] != ord(","):
                    raise _go_invalid("after array element")
                i += 1
        if c == ord('"'):
            return string(i + 1)
        if c == ord("-") or c in _DIGITS:
            return number(i)
        if c in _LITERALS:
            for expected in _LITERALS[c]:
                i += 1
                if i >= end:
                    raise eof()
                if data[i] != expected:
                    raise _go_invalid(
                        f"in literal {_LITERAL_NAMES[c]} (expecting '{chr(expected)}')"
                    )
            return i + 1
        raise _go_invalid("looking for beginning of value")

    def string(i: int) -> int:
        """After an opening quote: the index after the closing one."""
        while i < end:
            c = data[i]
            if c == ord('"'):
                return i + 1
            if c == ord("\\"):
                i += 1
                if i >= end:
                    raise eof()
                if data[i] == ord("u"):
                    for _ in range(4):
                        i += 1
                        if i >= end:
                            raise eof()
                        if data[i] not in _HEX:
                            raise _go_invalid("in \\u hexadecimal character escape")
                elif data[i] not in b'bfnrt\\/"':
                    raise _go_invalid("in string escape code")
            elif c < 0x20:
                raise _go_invalid("in string literal")
            i += 1
        raise eof()

    def digits(i: int) -> int:
        while i < end and data[i] in _DIGITS:
            i += 1
        return i

    def number(i: int) -> int:
        if data[i] == ord("-"):
            i += 1
            if i >= end:
                raise eof()
            if data[i] not in _DIGITS:
                raise _go_invalid("in numeric literal")
        i = i + 1 if data[i] == ord("0") else digits(i)
        if i < end and data[i] == ord("."):
            i += 1
            if i >= end:
                raise eof()
            if data[i] not in _DIGITS:
                raise _go_invalid("after decimal point in numeric literal")
            i = digits(i)
        if i < end and data[i] in b"eE":
            i += 1
            if i < end and data[i] in b"+-":
                i += 1
            if i >= end:
                raise eof()
            if data[i] not in _DIGITS:
                raise _go_invalid("in exponent of numeric literal")
            i = digits(i)
        return i

    start = space(0)
    after = space(value(0))
    if after < end:
        raise _go_invalid("after top-level value")
    return data[start]


# --- events.k8s.io/v1 Event ----------------------------------------------------------------
# pkg/apis/core/validation/events.go. Upstream validates the internal (core) Event, so the
# errors name core fields: `message` for note, `involvedObject` for regarding, `count`,
# `source`, `firstTimestamp` for the deprecated ones.

EVENT_TYPES: Final = ("Normal", "Warning")
REPORTING_INSTANCE_LIMIT: Final = 128
ACTION_LIMIT: Final = 128
REASON_LIMIT: Final = 128
NOTE_LIMIT: Final = 1024
_REFERENCE_FIELDS: Final = (
    "Kind",
    "Namespace",
    "Name",
    "UID",
    "APIVersion",
    "ResourceVersion",
    "FieldPath",
)


def _too_long(field: str, value: Any, limit: int) -> list[FieldError]:
    if isinstance(value, str) and len(value.encode()) > limit:
        return [invalid(field, "", f"can have at most {limit} characters")]
    return []


def _legacy_event(obj: dict[str, Any]) -> list[FieldError]:
    """legacyValidateEvent, for an Event written through events.k8s.io/v1."""
    namespace = (obj.get("metadata") or {}).get("namespace") or ""
    regarding = obj.get("regarding") or {}
    regarding_namespace = str(regarding.get("namespace") or "")
    mismatch = invalid(
        "involvedObject.namespace", regarding_namespace, "does not match event.namespace"
    )
    if not obj.get("eventTime"):
        # An Event without eventTime is an old-style one: namespaces must agree.
        if regarding_namespace and regarding_namespace != namespace:
            return [mismatch]
        if not regarding_namespace and namespace not in ("", "default"):
            return [mismatch]
        return []
    errors: list[FieldError] = []
    # An Event about a cluster-scoped object lives in default (or kube-system).
    if not regarding_namespace and namespace not in ("default", "kube-system"):
        errors.append(mismatch)
    controller = str(obj.get("reportingController") or "")
    if not controller:
        errors.append(required("reportingController"))
    errors += [
        invalid("reportingController", controller, m) for m in labels.is_qualified_name(controller)
    ]
    for field, limit in (
        ("reportingInstance", REPORTING_INSTANCE_LIMIT),
        ("action", ACTION_LIMIT),
        ("reason", REASON_LIMIT),
    ):
        if not obj.get(field):
            errors.append(required(field))
        errors += _too_long(field, obj.get(field), limit)
    errors += _too_long("message", obj.get("note"), NOTE_LIMIT)
    return errors


def _event_series(obj: dict[str, Any]) -> list[FieldError]:
    series = obj.get("series")
    if not isinstance(series, dict):
        return []
    errors = []
    count = series.get("count")
    if not isinstance(count, int) or count < 2:
        errors.append(invalid("series.count", "", "should be at least 2"))
    if not series.get("lastObservedTime"):
        errors.append(required("series.lastObservedTime"))
    return errors


def _go_struct(value: Any, fields: tuple[str, ...], keys: tuple[str, ...]) -> Printed:
    """An internal struct as upstream prints it in an error: Go field names, zero values."""
    if not isinstance(value, dict):
        return Printed("null")
    body = {name: str(value.get(key) or "") for name, key in zip(fields, keys, strict=True)}
    return Printed(json.dumps(body, separators=(",", ":")))


def _reference(value: Any) -> Printed:
    keys = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
    return _go_struct(value, _REFERENCE_FIELDS, keys)


def _event_immutables(new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
    """ValidateEventUpdate's immutable fields, in its order (reason is checked twice)."""

    def text(obj: dict[str, Any], key: str) -> str:
        return str(obj.get(key) or "")

    def reference(obj: dict[str, Any], key: str) -> Printed:
        return _reference(obj.get(key) or {}) if key == "regarding" else _reference(obj.get(key))

    def source(obj: dict[str, Any], key: str) -> Printed:
        return _go_struct(obj.get(key) or {}, ("Component", "Host"), ("component", "host"))

    def stamp(obj: dict[str, Any], key: str) -> Any:
        value = obj.get(key)
        return value if value else Printed("null")

    def count(obj: dict[str, Any], key: str) -> Any:
        return int(obj.get(key) or 0)

    checks: tuple[tuple[str, str, Any], ...] = (
        ("regarding", "involvedObject", reference),
        ("reason", "reason", text),
        ("note", "message", text),
        ("deprecatedSource", "source", source),
        ("deprecatedFirstTimestamp", "firstTimestamp", stamp),
        ("deprecatedLastTimestamp", "lastTimestamp", stamp),
        ("deprecatedCount", "count", count),
        ("reason", "reason", text),
        ("type", "type", text),
        ("eventTime", "eventTime", stamp),
        ("action", "action", text),
        ("related", "related", reference),
        ("reportingController", "reportingController", text),
        ("reportingInstance", "reportingInstance", text),
    )
    return [
        invalid(field, get(new, key), "field is immutable")
        for key, field, get in checks
        if get(new, key) != get(old, key)
    ]


def validate_event(
    obj: dict[str, Any], old: dict[str, Any] | None, meta_errors: list[FieldError]
) -> list[FieldError]:
    """ValidateEventCreate / ValidateEventUpdate for events.k8s.io/v1 (metadata errors
    come after the legacy checks, as upstream orders them)."""
    errors = _legacy_event(obj) + meta_errors
    if old is not None:
        if obj.get("series") != old.get("series"):
            errors += _event_series(obj)
        return errors + _event_immutables(obj, old)
    errors += _event_series(obj)
    if not obj.get("eventTime"):
        errors.append(required("eventTime"))
    event_type = str(obj.get("type") or "")
    if event_type not in EVENT_TYPES:
        errors.append(invalid("type", "", f"has invalid value: {event_type}"))
    for key, field in (
        ("deprecatedFirstTimestamp", "firstTimestamp"),
        ("deprecatedLastTimestamp", "lastTimestamp"),
        ("deprecatedCount", "count"),
    ):
        if obj.get(key):
            errors.append(invalid(field, "", "needs to be unset"))
    source = obj.get("deprecatedSource") or {}
    if isinstance(source, dict) and (source.get("component") or source.get("host")):
        errors.append(invalid("source", "", "needs to be unset"))
    return errors


# --- coordination.k8s.io/v1 Lease ----------------------------------------------------------


def validate_lease_spec(spec: Any) -> list[FieldError]:
    """ValidateLeaseSpec (strategy and preferredHolder are behind a gate that is off in
    v1.36: dropped before validation, never refused)."""
    if not isinstance(spec, dict):
        return []
    errors = []
    duration = spec.get("leaseDurationSeconds")
    if isinstance(duration, int) and duration <= 0:
        errors.append(invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    transitions = spec.get("leaseTransitions")
    if isinstance(transitions, int) and transitions < 0:
        errors.append(
            invalid("spec.leaseTransitions", transitions, "must be greater than or equal to 0")
        )
    return errors
