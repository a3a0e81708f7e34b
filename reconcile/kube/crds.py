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
import ipaddress
import json
import math
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any, Final

from reconcile.kube import regexp
from reconcile.kube.validation import (
    NAME_DNS_SUBDOMAIN,
    FieldError,
    Printed,
    duplicate,
    invalid,
    not_supported,
    required,
    validate_annotations,
    validate_labels,
    validate_object_meta,
)

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
# apiextensions-apiserver pkg/apiserver/schema/defaulting/algorithm.go: a property absent,
# or `null` where the schema is not nullable, takes the property's default (so such a null is
# accepted); the same for array items and additionalProperties values; then defaults inside.


def defaulted(schema: Mapping[str, Any], obj: Mapping[str, Any]) -> dict[str, Any]:
    """`obj` with the schema's defaults filled in where a field is absent (or a non-nullable
    `null`), as the API server stores it (the defaults of a defaulted object's own fields
    too)."""
    result = copy.deepcopy(dict(obj))
    _default(schema, result)
    return result


def _takes_default(sub: Mapping[str, Any], value: Any) -> bool:
    return "default" in sub and value is None and not sub.get("nullable")


def _default(schema: Mapping[str, Any], value: Any) -> None:
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for name, sub in properties.items():
            if not isinstance(sub, Mapping):
                continue
            if "default" in sub and (name not in value or _takes_default(sub, value[name])):
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                _default(sub, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            for name in list(value):
                if name not in properties:
                    if _takes_default(extra, value[name]):
                        value[name] = copy.deepcopy(extra["default"])
                    _default(extra, value[name])
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        items = schema["items"]
        for index, item in enumerate(value):
            if _takes_default(items, item):
                value[index] = copy.deepcopy(items["default"])
            _default(items, value[index])


# --- the schema validator ------------------------------------------------------------------
# kube-openapi pkg/validation/validate/ (schema.go, type.go, validator.go, values.go,
# object_validator.go, formats.go; errors/schema.go for the wording), as
# apiextensions-apiserver's pkg/apiserver/validation/validation.go converts its errors to
# field errors. Ported from kubernetes/kube-openapi d427ff9ee9ad05f5da435abbb7c5929cb713ac56;
# the messages were checked against a v1.36 kube-apiserver.

Path = tuple[str | int, ...]
Located = tuple[FieldError, Path]

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


def _types(schema: Mapping[str, Any]) -> tuple[str, ...]:
    """The schema's types as the validator sees them: int-or-string is both."""
    if schema.get("x-kubernetes-int-or-string"):
        return ("integer", "string")
    wanted = schema.get("type")
    return (str(wanted),) if wanted else ()


def _is_json_integer(value: float) -> bool:
    """swag.IsFloat64AJSONInteger: integral within ±2^53, or within a relative 1e-9."""
    if math.isnan(value) or math.isinf(value) or not -(2**53) <= value <= 2**53:
        return False
    whole = float(math.trunc(value))
    if value == whole:
        return True
    diff = abs(value - whole)
    if whole == 0:
        return diff < 1e-9 * 5e-324
    return diff / min(abs(value) + abs(whole), sys.float_info.max) < 1e-9


def _type_ok(value: Any, types: tuple[str, ...]) -> bool:
    kind = _type_of(value)
    if kind in types:
        return True
    if kind == "number" and "integer" in types and _is_json_integer(value):
        return True  # isFloatInt
    return kind == "integer" and "number" in types  # isIntFloat


def go_number(value: float) -> str:
    """A number as Go's %v prints an int64 or a float64."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return repr(value)


# Formats the validator checks (apiextensions-apiserver pkg/apiserver/validation/formats.go,
# kube-openapi pkg/validation/strfmt/default.go and kubernetes-extensions.go). Names are
# looked up with their dashes stripped; any other format is ignored. `quantity` is listed
# upstream but a v1.36 server warns it is unrecognized and accepts "lots": not checked.
_HOSTNAME: Final = r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9-\p{S}\p{L}]{0,61}[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}([a-zA-Z\p{L}]){2,63})$"
_UUIDS: Final = {
    "uuid": r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
    "uuid3": r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
    "uuid4": r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
    "uuid5": r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
}
_BYTE255: Final = r"\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*"
_DURATION_UNITS: Final = (
    "ns|nanoseconds?|us|µs|μs|mcs|microseconds?|ms|milliseconds?|s|sec|seconds?|m|min|minutes?"
    "|h|hr|hours?|d|days?|w|wk|weeks?"
)
_SIMPLE: Final = {
    "bsonobjectid": r"^[0-9a-fA-F]{24}$",
    "hostname": _HOSTNAME,
    "ssn": r"^\d{3}[- ]?\d{2}[- ]?\d{4}$",
    "hexcolor": r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$",
    "rgbcolor": rf"^rgb\({_BYTE255},{_BYTE255},{_BYTE255}\)$",
    "mac": r"^([0-9A-Fa-f]{2}([:-])(?:[0-9A-Fa-f]{2}[:-]){4}[0-9A-Fa-f]{2}(?:[:-][0-9A-Fa-f]{2}){0,14}"
    r"|[0-9A-Fa-f]{4}\.[0-9A-Fa-f]{4}\.[0-9A-Fa-f]{4}(?:\.[0-9A-Fa-f]{4}){0,7})$",
    "email": r"^(?:[^@\s<>]+@[^@\s<>]+|[^<>]*<[^@\s<>]+@[^@\s<>]+>)$",
    "uri": r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:|/)[^\s]*$",
    "date": r"^\d{4}-\d{2}-\d{2}$",
    "datetime": r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$",
    "duration": rf"^(?:[-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+|0|\d+\s*(?:{_DURATION_UNITS}))$",
    "k8sshortname": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    "k8slongname": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    **_UUIDS,
}
_LIMITS: Final = {"k8sshortname": 63, "k8slongname": 253}


def _luhn(digits: str) -> bool:
    total = 0
    for i, d in enumerate(reversed(digits)):
        n = int(d) * (2 if i % 2 else 1)
        total += n - 9 if n > 9 else n
    return total % 10 == 0


def _isbn10(text: str) -> bool:
    text = text.replace(" ", "").replace("-", "")
    if not regexp.search(r"^(?:[0-9]{9}X|[0-9]{10})$", text):
        return False
    total = sum((10 - i) * (10 if c == "X" else int(c)) for i, c in enumerate(text))
    return total % 11 == 0


def _isbn13(text: str) -> bool:
    text = text.replace(" ", "").replace("-", "")
    if not regexp.search(r"^[0-9]{13}$", text):
        return False
    total = sum(int(c) * (3 if i % 2 else 1) for i, c in enumerate(text[:12]))
    return (10 - total % 10) % 10 == int(text[12])


def _creditcard(text: str) -> bool:
    digits = "".join(c for c in text if c.isdigit() and c.isascii())
    pattern = (
        r"^(?:4[0-9]{12}(?:[0-9]{3})?|5[1-5][0-9]{14}|(222[1-9]|22[3-9][0-9]|2[3-6][0-9]{2}"
        r"|27[01][0-9]|2720)[0-9]{12}|6(?:011|5[0-9][0-9])[0-9]{12}|3[47][0-9]{13}"
        r"|3(?:0[0-5]|[68][0-9])[0-9]{11}|(?:2131|1800|35\d{3})\d{11}|6[27][0-9]{14})$"
    )
    return bool(regexp.search(pattern, digits)) and _luhn(digits)


def _ip(text: str, version: int) -> bool:
    if "%" in text:
        return False
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    # Go's ParseIP: an IPv4 address (dots) or IPv6 (colons), an IPv4-mapped one is both.
    return ("." in text) if version == 4 else (":" in text and address is not None)


def _cidr(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return "/" in text and "%" not in text


def _byte(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except ValueError:
        return False
    return True


def _calendar(text: str) -> bool:
    try:
        date.fromisoformat(text[:10])
    except ValueError:
        return False
    return True


def _format_ok(name: str, text: str) -> bool:
    if name in _SIMPLE and not regexp.search(_SIMPLE[name], text):
        return False
    if name in _LIMITS and len(text) > _LIMITS[name]:
        return False
    if name in ("date", "datetime"):
        return _calendar(text)
    checks: dict[str, Any] = {
        "ipv4": lambda t: _ip(t, 4),
        "ipv6": lambda t: _ip(t, 6),
        "cidr": _cidr,
        "byte": _byte,
        "isbn10": _isbn10,
        "isbn13": _isbn13,
        "isbn": lambda t: _isbn10(t) or _isbn13(t),
        "creditcard": _creditcard,
    }
    check = checks.get(name)
    return check is None or bool(check(text))


STRING_FORMATS: Final = frozenset(
    {*_SIMPLE, "ipv4", "ipv6", "cidr", "byte", "isbn", "isbn10", "isbn13", "creditcard"}
    | {"password"}
)
INT_RANGES: Final = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
FLOAT_LIMIT: Final = 3.4028234663852886e38


def validate_custom(custom: CustomKind, obj: Mapping[str, Any]) -> list[FieldError]:
    """Every error the API server reports for the custom resource `obj` against its
    schema, after defaulting, in the server's order (strategy.go): the schema, the
    embedded resources' metadata, then the list types (metadata.name and namespace are
    checked elsewhere: `metadata_errors`)."""
    return [error for error, _ in located_errors(custom, obj)]


def located_errors(custom: CustomKind, obj: Mapping[str, Any]) -> list[Located]:
    """As `validate_custom`, each error with the path of the field it is about (the
    `<nil>` field of a format-range error has one too)."""
    schema = custom.schema
    value = defaulted(schema, obj)
    errors: list[Located] = []
    _validate(schema, value, (), errors)
    _embedded(schema, value, (), errors, root=True)
    _list_types(schema, value, (), errors)
    return errors


def _dotted(path: Path) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _validate(schema: Mapping[str, Any], value: Any, path: Path, errors: list[Located]) -> None:
    name = _dotted(path)
    types = _types(schema)
    if value is None:
        if types and not schema.get("nullable"):
            errors.append(
                (
                    invalid(
                        name, "null", f'{name} in body must be of type {",".join(types)}: "null"'
                    ),
                    path,
                )
            )
        _enum(schema, value, name, path, errors)
        return
    if types and not _type_ok(value, types):
        kind = _type_of(value)
        errors.append(
            (
                invalid(name, kind, f'{name} in body must be of type {",".join(types)}: "{kind}"'),
                path,
            )
        )
    if isinstance(value, str):
        _string(schema, value, name, path, errors)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _number(schema, value, name, path, errors)
    elif isinstance(value, list):
        _array(schema, value, path, errors)
    _enum(schema, value, name, path, errors)
    if isinstance(value, dict):
        _object(schema, value, path, errors)


def _converted(value: Any, like: Any) -> Any:
    """reflect's Convert of a JSON value to the type of an enum member, or a marker when
    Go cannot convert it (an int64 converts to a string as a rune)."""
    if type(value) is type(like) or (isinstance(value, (dict, list)) and type(value) is type(like)):
        return value
    if isinstance(value, bool) or isinstance(like, bool):
        return _NO
    if isinstance(like, str) and isinstance(value, int):
        return chr(value) if 0 <= value <= 0x10FFFF and not 0xD800 <= value <= 0xDFFF else "\ufffd"
    if isinstance(like, int) and isinstance(value, float):
        return int(value) if math.isfinite(value) else _NO
    if isinstance(like, float) and isinstance(value, int):
        return float(value)
    return _NO


_NO: Final = object()


def _enum(
    schema: Mapping[str, Any], value: Any, name: str, path: Path, errors: list[Located]
) -> None:
    enum = schema.get("enum")
    if not enum:
        return
    for member in enum:
        if member is None:
            continue
        if value is not None and _converted(value, member) == member:
            return
    supported = [m if isinstance(m, str) else json.dumps(m, separators=(",", ":")) for m in enum]
    errors.append((not_supported(name, value, supported), path))


def _string(
    schema: Mapping[str, Any], value: str, name: str, path: Path, errors: list[Located]
) -> None:
    runes = len(value)  # utf8.RuneCount: a Python str counts code points
    pattern = schema.get("pattern")
    if "maxLength" in schema and runes > int(schema["maxLength"]):
        errors.append(
            (
                FieldError(
                    "Too long",
                    name,
                    value,
                    f"may not be more than {int(schema['maxLength'])} bytes",
                ),
                path,
            )
        )
    elif "minLength" in schema and runes < int(schema["minLength"]):
        errors.append(
            (
                invalid(
                    name,
                    value,
                    f"{name} in body should be at least {int(schema['minLength'])} chars long",
                ),
                path,
            )
        )
    elif isinstance(pattern, str) and pattern:
        try:
            matched = regexp.search(pattern, value)
        except regexp.PatternError as e:
            detail = f"{name} in body should match '{pattern}, but pattern is invalid: {e}'"
            errors.append((invalid(name, value, detail), path))
        else:
            if not matched:
                detail = f"{name} in body should match '{pattern}'"
                errors.append((invalid(name, value, detail), path))
    wanted = str(schema.get("format") or "")
    normalized = wanted.replace("-", "")
    types = _types(schema)
    if (
        normalized in STRING_FORMATS
        and (len(types) != 1 or types == ("string",))
        and not _format_ok(normalized, value)
    ):
        errors.append(
            (invalid(name, value, f'{name} in body must be of type {wanted}: "{value}"'), path)
        )


def _number(
    schema: Mapping[str, Any], value: float, name: str, path: Path, errors: list[Located]
) -> None:
    types = _types(schema)
    kind = types[0] if len(types) == 1 else ""
    wanted = str(schema.get("format") or "")
    if kind == "integer" and wanted in INT_RANGES:
        low, high = INT_RANGES[wanted]
        if not (_is_json_integer(float(value)) and low <= value <= high):
            detail = f"Checked value must be of type integer with format {wanted} in {name}"
            errors.append((invalid("<nil>", "", detail), path))
    elif kind == "number" and wanted == "float" and abs(value) > FLOAT_LIMIT:
        detail = f"Checked value must be of type number with format float in {name}"
        errors.append((invalid("<nil>", "", detail), path))
    factor = schema.get("multipleOf")
    if isinstance(factor, (int, float)) and not isinstance(factor, bool):
        native = not (kind == "integer" and not float(factor).is_integer())
        if factor <= 0 or (native and isinstance(value, int) and int(factor) <= 0):
            shown = go_number(int(factor) if native and isinstance(value, int) else factor)
            detail = f"factor MultipleOf declared for {name} must be positive: {shown}"
            errors.append((invalid(name, value, detail), path))
        elif native and isinstance(value, int):
            if value % int(factor):
                detail = f"{name} in body should be a multiple of {go_number(int(factor))}"
                errors.append((invalid(name, value, detail), path))
        else:
            multiple = (1 / factor * value) if factor < 1 else (value / factor)
            if not _is_json_integer(float(multiple)):
                detail = f"{name} in body should be a multiple of {go_number(float(factor))}"
                errors.append((invalid(name, value, detail), path))
    for bound, exclusive, words in (
        ("maximum", "exclusiveMaximum", ("less than", "less than or equal to")),
        ("minimum", "exclusiveMinimum", ("greater than", "greater than or equal to")),
    ):
        limit = schema.get(bound)
        if not isinstance(limit, (int, float)) or isinstance(limit, bool):
            continue
        strict = bool(schema.get(exclusive))
        beyond = (value > limit) if bound == "maximum" else (value < limit)
        if beyond or (strict and value == limit):
            shown = go_number(int(limit) if isinstance(value, int) else float(limit))
            word = words[0] if strict else words[1]
            errors.append((invalid(name, value, f"{name} in body should be {word} {shown}"), path))


def _array(schema: Mapping[str, Any], value: list[Any], path: Path, errors: list[Located]) -> None:
    name = _dotted(path)
    if "maxItems" in schema and len(value) > int(schema["maxItems"]):
        errors.append(
            (
                FieldError(
                    "Too many",
                    name,
                    len(value),
                    f"must have at most {int(schema['maxItems'])} items",
                ),
                path,
            )
        )
    if "minItems" in schema and len(value) < int(schema["minItems"]):
        detail = f"{name} in body should have at least {int(schema['minItems'])} items"
        errors.append((invalid(name, len(value), detail), path))
    items = schema.get("items")
    if isinstance(items, Mapping):
        for index, item in enumerate(value):
            _validate(items, item, (*path, index), errors)


def _object(
    schema: Mapping[str, Any], value: dict[str, Any], path: Path, errors: list[Located]
) -> None:
    name = _dotted(path)
    if "minProperties" in schema and len(value) < int(schema["minProperties"]):
        detail = f"{name} in body should have at least {int(schema['minProperties'])} properties"
        errors.append((invalid(name, len(value), detail), path))
    if "maxProperties" in schema and len(value) > int(schema["maxProperties"]):
        detail = f"must have at most {int(schema['maxProperties'])} items"
        errors.append((FieldError("Too many", name, len(value), detail), path))
    properties = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    for key, item in value.items():
        if key in properties:
            _validate(properties[key], item, (*path, key), errors)
        elif isinstance(extra, Mapping):
            _validate(extra, item, (*path, key), errors)
    for key in schema.get("required") or ():
        if key not in value:
            errors.append((required(_dotted((*path, key)), ""), (*path,)))


# --- embedded resources (schema/objectmeta/validation.go) -----------------------------------


def _embedded(
    schema: Mapping[str, Any], value: Any, path: Path, errors: list[Located], *, root: bool = False
) -> None:
    if isinstance(value, dict):
        if schema.get("x-kubernetes-embedded-resource") and not root:
            for key in ("apiVersion", "kind"):
                if not value.get(key):
                    errors.append((required(_dotted((*path, key)), ""), path))
            metadata = value.get("metadata")
            if isinstance(metadata, dict):
                for key, check in (
                    ("labels", validate_labels),
                    ("annotations", validate_annotations),
                ):
                    if metadata.get(key) is not None:
                        for error in check(metadata[key], _dotted((*path, "metadata", key))):
                            errors.append((error, (*path, "metadata", key)))
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if root and key == "metadata":
                continue
            if key in properties:
                _embedded(properties[key], item, (*path, key), errors)
            elif isinstance(extra, Mapping):
                _embedded(extra, item, (*path, key), errors)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            _embedded(schema["items"], item, (*path, index), errors)


# --- list types (schema/listtype/validation.go) --------------------------------------------


class _Unspecified:
    """unspecifiedKeyValue{}: a map-list item without the key; all such are equal."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Unspecified)

    def __hash__(self) -> int:
        return 0


def _identity(item: Any) -> Any:
    """What validateListSet compares: compound values by their JSON encoding (Go's
    json.Marshal sorts map keys), scalars by Go `==` (an int64 1 is not a float64 1)."""
    if isinstance(item, _Unspecified):
        return ("unspecified",)
    if isinstance(item, (dict, list)):
        return ("json", json.dumps(item, sort_keys=True, separators=(",", ":")))
    return (type(item).__name__, item)


def _non_unique(items: list[Any]) -> list[int]:
    seen: dict[Any, int] = {}
    found = []
    for index, item in enumerate(items):
        key = _identity(item)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] == 2:
            found.append(index)
    return found


def _shown(value: Any) -> Any:
    if isinstance(value, (dict, list)):
        return Printed(json.dumps(value, sort_keys=True, separators=(",", ":")))
    return value


def _list_types(schema: Mapping[str, Any], value: Any, path: Path, errors: list[Located]) -> None:
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if key in properties:
                _list_types(properties[key], item, (*path, key), errors)
            elif isinstance(extra, Mapping):
                _list_types(extra, item, (*path, key), errors)
        return
    if not isinstance(value, list):
        return
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "set":
        for index in _non_unique(value):
            errors.append(
                (duplicate(_dotted((*path, index)), _shown(value[index])), (*path, index))
            )
    elif list_type == "map":
        _list_map(schema, value, path, errors)
    items = schema.get("items")
    if isinstance(items, Mapping):
        for index, item in enumerate(value):
            _list_types(items, item, (*path, index), errors)


def _list_map(
    schema: Mapping[str, Any], value: list[Any], path: Path, errors: list[Located]
) -> None:
    for index, item in enumerate(value):
        if item is not None and not isinstance(item, dict):
            detail = "must be an object for an array of list-type map"
            errors.append((invalid(_dotted((*path, index)), item, detail), (*path, index)))
            return
    if len(value) <= 1:
        return
    names = [str(k) for k in schema.get("x-kubernetes-list-map-keys") or ()]
    keys: list[Any] = []
    for item in value:
        if len(names) == 1:
            if item is None or names[0] not in item:
                keys.append(_Unspecified())
            else:
                keys.append(item[names[0]])
        else:
            keys.append({k: item[k] for k in names if item is not None and k in item})
    for index in _non_unique(keys):
        key = keys[index]
        if len(names) == 1:
            key = {} if isinstance(key, _Unspecified) else {names[0]: key}
        errors.append((duplicate(_dotted((*path, index)), _shown(key)), (*path, index)))


# --- metadata (validator.go: ValidateObjectMetaAccessor with NameIsDNSSubdomain) -----------


def metadata_errors(custom: CustomKind, obj: Mapping[str, Any]) -> list[Located]:
    """metadata.name (a DNS-1123 subdomain) and metadata.namespace per the CRD's scope,
    as the custom resource validator words them."""
    found = validate_object_meta(
        dict(obj), namespaced=custom.namespaced, name_rule=NAME_DNS_SUBDOMAIN
    )
    return [(e, tuple(e.field.split("."))) for e in found]


# --- unknown fields: server-side apply's typed patch (structured-merge-diff) ---------------

# ObjectMeta's fields: what the typed patch accepts under metadata (the root's and an
# embedded resource's).
OBJECT_META_FIELDS: Final = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)


def unknown_fields(schema: Mapping[str, Any], obj: Mapping[str, Any]) -> list[Path]:
    """Paths of fields the schema does not declare: server-side apply refuses them
    (`field not declared in schema`), a plain create drops them (pruning,
    schema/pruning/algorithm.go). None below `x-kubernetes-preserve-unknown-fields`
    (whose declared properties are still checked); an `x-kubernetes-embedded-resource`
    object has apiVersion, kind and ObjectMeta's metadata besides its own properties."""
    found: list[Path] = []
    top = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    _unknown(schema, top, (), found)
    return found


def _unknown(schema: Mapping[str, Any], value: Any, path: Path, found: list[Path]) -> None:
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        embedded = bool(schema.get("x-kubernetes-embedded-resource")) and path != ()
        for name, item in value.items():
            if name in properties:
                _unknown(properties[name], item, (*path, name), found)
            elif isinstance(extra, Mapping):
                _unknown(extra, item, (*path, name), found)
            elif embedded and name in ("apiVersion", "kind"):
                continue
            elif embedded and name == "metadata":
                if isinstance(item, dict):
                    found.extend((*path, name, k) for k in item if k not in OBJECT_META_FIELDS)
            elif not preserve and extra is not True:
                found.append((*path, name))
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            _unknown(schema["items"], item, (*path, index), found)


def unknown_field_message(path: Path) -> str:
    """How the typed patch names one unknown field: `.spec.foo: field not declared in schema`."""
    return f".{_dotted(path)}: field not declared in schema"


def apply_error(custom: CustomKind, obj: Mapping[str, Any]) -> str | None:
    """The server-side apply refusal of an apply configuration with unknown fields (a 500
    without a reason: fieldmanager's `failed to create typed patch object`), or None. The
    server names the first field it meets, and the namespace as the patch gives it."""
    found = unknown_fields(custom.schema, obj)
    if not found:
        return None
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace") or ""  # as the patch says it, even if absent
    return (
        f"failed to create typed patch object ({namespace}/{metadata.get('name') or ''}; "
        f"{custom.api_version}, Kind={custom.kind}): {unknown_field_message(found[0])}"
    )


# --- the CRD's own schema: patterns Go compiles -------------------------------------------


def crd_schema_errors(crd: Mapping[str, Any]) -> list[Located]:
    """A `pattern` Go's regexp does not compile makes the server refuse the CRD
    (apiextensions validation: `must be a valid regular expression, but isn't: ...`); each
    with the path of the pattern in the CRD. One version, or all with the same schema, is
    named `spec.validation` as the server names it."""
    spec = crd.get("spec") or {}
    versions = [v for v in spec.get("versions") or () if isinstance(v, Mapping)]
    schemas = [(v.get("schema") or {}).get("openAPIV3Schema") for v in versions]
    shared = len(schemas) >= 1 and all(s == schemas[0] for s in schemas)
    errors: list[Located] = []
    for index, schema in enumerate(schemas):
        if not isinstance(schema, Mapping):
            continue
        if shared and index > 0:
            break
        shown = (
            "spec.validation.openAPIV3Schema"
            if shared
            else f"spec.versions[{index}].schema.openAPIV3Schema"
        )
        _patterns(schema, shown, ("spec", "versions", index, "schema", "openAPIV3Schema"), errors)
    return errors


def _patterns(schema: Mapping[str, Any], shown: str, path: Path, errors: list[Located]) -> None:
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        problem = regexp.compile_error(pattern)
        if problem is not None:
            detail = f"must be a valid regular expression, but isn't: {problem}"
            errors.append((invalid(f"{shown}.pattern", pattern, detail), (*path, "pattern")))
    for key, sub in (schema.get("properties") or {}).items():
        if isinstance(sub, Mapping):
            _patterns(sub, f"{shown}.properties[{key}]", (*path, "properties", key), errors)
    for key in ("items", "additionalProperties", "not"):
        sub = schema.get(key)
        if isinstance(sub, Mapping):
            _patterns(sub, f"{shown}.{key}", (*path, key), errors)
    for key in ("allOf", "anyOf", "oneOf"):
        for index, sub in enumerate(schema.get(key) or ()):
            if isinstance(sub, Mapping):
                _patterns(sub, f"{shown}.{key}[{index}]", (*path, key, index), errors)
