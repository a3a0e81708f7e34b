"""A request body decoded into its kind's Go types, as the API server does before anything
else: a MicroTime without its six fractional digits, or a string where an int32 goes, is a
400 `Lease in version "v1" cannot be handled as a Lease: ...` (the text of Go's error).

Only the kinds whose typed fields the sandbox checks are listed (Events and Leases, the
ones with MicroTimes); others are taken as JSON, as before. A MicroTime that decodes is
stored as upstream writes it back, in UTC.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from reconcile.kube.labels import go_quote
from reconcile.sandbox import microtime
from reconcile.sandbox.errors import ApiStatus, bad_request
from reconcile.sandbox.resources import Resource

Obj = dict[str, Any]
INT32_MAX: Final = 2**31 - 1

# field -> Go type, per (group, kind) and struct: (JSON path of the struct, Go struct name).
_STRING, _INT32, _MICROTIME, _OBJECT = "string", "int32", "MicroTime", "object"
_SCHEMAS: Final[dict[tuple[str, str], list[tuple[tuple[str, ...], str, dict[str, str]]]]] = {
    ("coordination.k8s.io", "Lease"): [
        (
            ("spec",),
            "LeaseSpec",
            {
                "holderIdentity": _STRING,
                "leaseDurationSeconds": _INT32,
                "acquireTime": _MICROTIME,
                "renewTime": _MICROTIME,
                "leaseTransitions": _INT32,
                "strategy": _STRING,
                "preferredHolder": _STRING,
            },
        )
    ],
    ("events.k8s.io", "Event"): [
        (
            (),
            "Event",
            {
                "eventTime": _MICROTIME,
                "series": _OBJECT,
                "reportingController": _STRING,
                "reportingInstance": _STRING,
                "action": _STRING,
                "reason": _STRING,
                "regarding": _OBJECT,
                "related": _OBJECT,
                "note": _STRING,
                "type": _STRING,
                "deprecatedSource": _OBJECT,
                "deprecatedCount": _INT32,
            },
        ),
        (("series",), "EventSeries", {"count": _INT32, "lastObservedTime": _MICROTIME}),
    ],
}


class DecodeError(ValueError):
    pass


def _json_type(value: Any) -> str:
    """How encoding/json names a JSON value it cannot put into a Go field."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number" if isinstance(value, int) or value.is_integer() else f"number {value}"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _decoded(value: Any, go_type: str, where: str) -> Any:
    def mismatch(target: str) -> DecodeError:
        return DecodeError(
            f"json: cannot unmarshal {_json_type(value)} into Go struct field {where} of type {target}"
        )

    if value is None:
        return None
    if go_type == _MICROTIME:
        if not isinstance(value, str):
            raise mismatch("string")
        try:
            return microtime.parse(value)
        except microtime.MicroTimeError as e:
            raise DecodeError(str(e)) from None
    if go_type == _STRING and not isinstance(value, str):
        raise mismatch("string")
    if go_type == _INT32:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise mismatch("int32")
        if isinstance(value, float) and not value.is_integer():
            raise mismatch("int32")
        if not -INT32_MAX - 1 <= value <= INT32_MAX:
            raise DecodeError(
                f"json: cannot unmarshal number {value} into Go struct field {where} of type int32"
            )
        return int(value)
    if go_type == _OBJECT and not isinstance(value, dict):
        raise mismatch("object")
    return value


def _decode_fields(resource: Resource, obj: Obj) -> None:
    for path, struct, fields in _SCHEMAS.get((resource.group, resource.kind), ()):
        holder: Any = obj
        for part in path:
            holder = holder.get(part) if isinstance(holder, dict) else None
        if not isinstance(holder, dict):
            continue
        for field, go_type in fields.items():
            if field in holder:
                where = ".".join((struct, *path, field))
                holder[field] = _decoded(holder[field], go_type, where)


def decode(resource: Resource, obj: Obj) -> None:
    """Check (and normalize) the typed fields of a created or updated object: 400."""
    try:
        _decode_fields(resource, obj)
    except DecodeError as e:
        version = resource.version
        raise bad_request(
            f'{resource.kind} in version "{version}" cannot be handled as a {resource.kind}: {e}'
        ) from None


def decode_patched(resource: Resource, obj: Obj, encode: Callable[[Obj], str]) -> None:
    """The same for the result of a patch: upstream names the patched object (422)."""
    try:
        _decode_fields(resource, obj)
    except DecodeError as e:
        value = go_quote(encode(obj))
        raise ApiStatus(
            422,
            "Invalid",
            f' "" is invalid: patch: Invalid value: {value}: {e}',
            {
                "causes": [
                    {
                        "reason": "FieldValueInvalid",
                        "message": f"Invalid value: {value}: {e}",
                        "field": "patch",
                    }
                ]
            },
        ) from None
