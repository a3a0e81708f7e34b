"""CustomResourceDefinitions read from manifests, and the API server's validation of a
custom resource against its served version's `openAPIV3Schema`, offline.

Ported from what k8s.io/apiextensions-apiserver does on create and update: defaults
first (structural defaulting), then the schema (types, `nullable`, `required`, `enum`,
the formats the server checks, bounds, `x-kubernetes-int-or-string`,
`x-kubernetes-preserve-unknown-fields`). Errors are field errors with the server's
wording (`spec.x in body must be of type integer: "string"`). A field the schema does not
declare is not an error: the server drops it (pruning), which `unknown_fields` names.
"""

from __future__ import annotations

import base64
import copy
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Final

from reconcile.kube.validation import FieldError, invalid, required

CRD_API_VERSION: Final = "apiextensions.k8s.io/v1"
CRD_KIND: Final = "CustomResourceDefinition"


@dataclass(frozen=True)
class CustomKind:
    """One served version of a kind a CRD defines."""

    crd: str  # the CRD's name, `<plural>.<group>`
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    schema: Mapping[str, Any]

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


def is_crd(api_version: str, kind: str) -> bool:
    return (api_version, kind) == (CRD_API_VERSION, CRD_KIND)


def custom_kinds(crds: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], CustomKind]:
    """(apiVersion, kind) -> what each CRD serves, for every served version."""
    found: dict[tuple[str, str], CustomKind] = {}
    for crd in crds:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        group, kind, plural = spec.get("group"), names.get("kind"), names.get("plural")
        if not (isinstance(group, str) and isinstance(kind, str) and isinstance(plural, str)):
            continue
        name = str((crd.get("metadata") or {}).get("name") or f"{plural}.{group}")
        for version in spec.get("versions") or ():
            if not isinstance(version, Mapping) or not version.get("served"):
                continue
            schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
            custom = CustomKind(
                name,
                group,
                str(version.get("name")),
                plural,
                kind,
                spec.get("scope") != "Cluster",
                schema if isinstance(schema, Mapping) else {},
            )
            found[(custom.api_version, kind)] = custom
    return found


def is_established(crd: Mapping[str, Any]) -> bool:
    """Whether the API server says the CRD's names are accepted and its kind is served."""
    for condition in (crd.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Established":
            return bool(condition.get("status") == "True")
    return False


# --- defaulting ----------------------------------------------------------------------------


def defaulted(schema: Mapping[str, Any], obj: Mapping[str, Any]) -> dict[str, Any]:
    """`obj` with the schema's defaults filled in where a field is absent, as the API
    server stores it (the defaults of a defaulted object's own fields too)."""
    result = copy.deepcopy(dict(obj))
    _default(schema, result)
    return result


def _default(schema: Mapping[str, Any], value: Any) -> None:
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for name, sub in properties.items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                _default(sub, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            for name, item in value.items():
                if name not in properties:
                    _default(extra, item)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for item in value:
            _default(schema["items"], item)


# --- validation ----------------------------------------------------------------------------

_TYPE_NAMES: Final = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
}


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def _is_type(value: Any, wanted: str) -> bool:
    if wanted == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if wanted == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return _type_of(value) == wanted


def _date_time(text: str) -> bool:
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    return "T" in text or "t" in text or " " in text


def _date(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _byte(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except ValueError:
        return False
    return True


def _uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


# The string formats the API server checks (apiextensions' supported formats); others
# (`email`, `hostname`, ...) are checked too upstream, but these are the ones CRDs use.
STRING_FORMATS: Final = {"date-time": _date_time, "date": _date, "byte": _byte, "uuid": _uuid}
INT_RANGES: Final = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def validate_custom(custom: CustomKind, obj: Mapping[str, Any]) -> list[FieldError]:
    """Every error the API server reports for the custom resource `obj` against its
    schema, after defaulting (metadata, apiVersion and kind are checked elsewhere)."""
    schema = custom.schema
    value = defaulted(schema, obj)
    errors: list[FieldError] = []
    properties = schema.get("properties") or {}
    for name, sub in properties.items():
        if name in ("metadata", "apiVersion", "kind") or name not in value:
            continue
        errors += _validate(sub, value[name], name)
    for name in schema.get("required") or ():
        if name not in value:
            errors.append(required(name, ""))
    return errors


def _validate(schema: Mapping[str, Any], value: Any, path: str) -> list[FieldError]:
    if value is None:
        if schema.get("nullable"):
            return []
        if schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("type"):
            return []
        wanted = schema.get("type")
        if wanted:
            return [invalid(path, "null", f'{path} in body must be of type {wanted}: "null"')]
        return []
    if schema.get("x-kubernetes-int-or-string"):
        if not (_is_type(value, "integer") or isinstance(value, str)):
            return [
                invalid(
                    path,
                    _type_of(value),
                    f'{path} in body must be of type integer,string: "{_type_of(value)}"',
                )
            ]
        return []
    wanted = schema.get("type")
    if wanted and not _is_type(value, wanted):
        return [
            invalid(
                path,
                _type_of(value),
                f'{path} in body must be of type {wanted}: "{_type_of(value)}"',
            )
        ]
    errors: list[FieldError] = []
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        errors.append(
            FieldError(
                "Unsupported value",
                path,
                value,
                "supported values: " + ", ".join(_quoted(e) for e in enum),
            )
        )
    if isinstance(value, str):
        errors += _string(schema, value, path)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        errors += _number(schema, value, path)
    elif isinstance(value, list):
        errors += _array(schema, value, path)
    elif isinstance(value, dict):
        errors += _object(schema, value, path)
    return errors


def _quoted(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)


def _string(schema: Mapping[str, Any], value: str, path: str) -> list[FieldError]:
    errors = []
    check = STRING_FORMATS.get(str(schema.get("format") or ""))
    if check is not None and not check(value):
        errors.append(
            invalid(path, value, f'{path} in body must be of type {schema["format"]}: "{value}"')
        )
    if "maxLength" in schema and len(value) > int(schema["maxLength"]):
        errors.append(
            FieldError("Too long", path, value, f"may not be longer than {schema['maxLength']}")
        )
    if "minLength" in schema and len(value) < int(schema["minLength"]):
        errors.append(
            invalid(
                path,
                value,
                f"{path} in body should be at least {schema['minLength']} chars long",
            )
        )
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and re.search(pattern, value) is None:
        errors.append(invalid(path, value, f"{path} in body should match '{pattern}'"))
    return errors


def _number(schema: Mapping[str, Any], value: float, path: str) -> list[FieldError]:
    errors = []
    bounds = INT_RANGES.get(str(schema.get("format") or ""))
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        errors.append(
            invalid(path, value, f'{path} in body must be of type {schema["format"]}: "{value}"')
        )
    if "maximum" in schema:
        limit = schema["maximum"]
        if value > limit or (schema.get("exclusiveMaximum") and value == limit):
            word = "less than" if schema.get("exclusiveMaximum") else "less than or equal to"
            errors.append(invalid(path, value, f"{path} in body should be {word} {limit}"))
    if "minimum" in schema:
        limit = schema["minimum"]
        if value < limit or (schema.get("exclusiveMinimum") and value == limit):
            word = "greater than" if schema.get("exclusiveMinimum") else "greater than or equal to"
            errors.append(invalid(path, value, f"{path} in body should be {word} {limit}"))
    return errors


def _array(schema: Mapping[str, Any], value: list[Any], path: str) -> list[FieldError]:
    errors = []
    if "maxItems" in schema and len(value) > int(schema["maxItems"]):
        errors.append(
            FieldError(
                "Too many", path, len(value), f"must have at most {schema['maxItems']} items"
            )
        )
    if "minItems" in schema and len(value) < int(schema["minItems"]):
        errors.append(
            invalid(
                path, len(value), f"{path} in body should have at least {schema['minItems']} items"
            )
        )
    items = schema.get("items")
    if isinstance(items, Mapping):
        for index, item in enumerate(value):
            errors += _validate(items, item, f"{path}[{index}]")
    return errors


def _object(schema: Mapping[str, Any], value: dict[str, Any], path: str) -> list[FieldError]:
    errors = []
    properties = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    for name, item in value.items():
        if name in properties:
            errors += _validate(properties[name], item, f"{path}.{name}")
        elif isinstance(extra, Mapping):
            errors += _validate(extra, item, f"{path}[{name}]" if "." in name else f"{path}.{name}")
    for name in schema.get("required") or ():
        if name not in value:
            errors.append(required(f"{path}.{name}", ""))
    return errors


def unknown_fields(
    schema: Mapping[str, Any], obj: Mapping[str, Any]
) -> list[tuple[str | int, ...]]:
    """Paths of fields the schema does not declare and the server would drop (pruning);
    none below `x-kubernetes-preserve-unknown-fields` or embedded resources."""
    found: list[tuple[str | int, ...]] = []
    top = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    _unknown(schema, top, (), found)
    return found


def _unknown(
    schema: Mapping[str, Any],
    value: Any,
    path: tuple[str | int, ...],
    found: list[tuple[str | int, ...]],
) -> None:
    if schema.get("x-kubernetes-preserve-unknown-fields") or schema.get(
        "x-kubernetes-embedded-resource"
    ):
        return
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for name, item in value.items():
            if name in properties:
                _unknown(properties[name], item, (*path, name), found)
            elif isinstance(extra, Mapping):
                _unknown(extra, item, (*path, name), found)
            elif extra is not True:
                found.append((*path, name))
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            _unknown(schema["items"], item, (*path, index), found)
