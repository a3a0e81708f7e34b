"""Problems found in a YAML document as diagnostics at file:line:col: pydantic's
validation errors, and the API server's field paths, placed where they are written."""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ValidationError

from reconcile import diagnostics as diag
from reconcile.desired.yamlpos import SCALAR_TAG_NAMES, PathT, YamlDocument
from reconcile.diagnostics import Diagnostic
from reconcile.kube import labels, sensitive
from reconcile.kube.shapes import Mistyped


def model_problems(
    error: ValidationError, doc: YamlDocument, model: type[BaseModel]
) -> list[Diagnostic]:
    """Every error in `error` (validating `doc` as `model`) as a diagnostic where `doc`
    writes what it is about: an unknown field at its key, with the fields allowed there."""
    found = []
    for item in error.errors(include_url=False):
        loc: PathT = tuple(item["loc"])
        kind = item["type"]
        if loc and loc[-1] == "[key]":
            found.append(diag.error(item["msg"], doc.at(loc[:-1], key=True)))
            continue
        shown = labels.shown(".".join(str(p) for p in loc), labels.SHOWN_NAME, quote=False)
        if kind == "extra_forbidden":
            allowed = ", ".join(_fields_at(model, loc[:-1]))
            found.append(
                diag.error(
                    f"unknown field {shown!r}", doc.at(loc, key=True), f"allowed here: {allowed}"
                )
            )
        elif kind == "missing":
            found.append(diag.error(f"missing required field {shown!r}", doc.at(loc[:-1])))
        elif kind == "literal_error":
            expected = item.get("ctx", {}).get("expected", "")
            found.append(diag.error(f"{shown} must be {expected}", doc.at(loc)))
        elif kind == "string_type" and loc in doc.scalars:
            tag, text = doc.scalars[loc]
            written = labels.shown(text, quote=False)
            found.append(
                diag.error(
                    f"{shown}: must be a string, but YAML reads {written} as "
                    f"{SCALAR_TAG_NAMES[tag]} ({labels.shown(repr(item['input']), quote=False)})",
                    doc.at(loc),
                    f'quote it to keep it exactly as written: "{written}"',
                )
            )
        elif kind.startswith(("label_", "object_name")):
            found.append(diag.error(f"{shown}: {item['msg']}", doc.at(loc)))
        else:
            found.append(diag.error(f"{shown}: {item['msg']}", doc.at(loc)))
    return found


def type_problem(
    shown: str,
    allowed: str,
    value: Any,
    doc: YamlDocument,
    loc: PathT,
    *,
    hidden: bool = False,
) -> Diagnostic:
    """`shown` (the field at `loc`) holds `value`, of a type other than `allowed`: said at
    the value, with how YAML read it when it was written as a plain scalar; `hidden`
    (a Secret's value) never quotes it."""
    if hidden:
        kind = _what(value).partition(" (")[0]
        return diag.error(f"{shown}: must be {allowed}, not {kind}", doc.at(loc))
    if loc in doc.scalars:
        tag, text = doc.scalars[loc]
        written = labels.shown(text, quote=False)
        quote = allowed.startswith("a string") or "or a string" in allowed
        read = _read_as(value)
        return diag.error(
            f"{shown}: must be {allowed}, but YAML reads {written} as "
            f"{SCALAR_TAG_NAMES[tag]}" + (f" ({read})" if read != text else ""),
            doc.at(loc),
            f'quote it to keep it exactly as written: "{written}"' if quote else "",
        )
    return diag.error(f"{shown}: must be {allowed}, not {_what(value)}", doc.at(loc))


def mistyped_problems(found: Iterable[Mistyped], doc: YamlDocument) -> list[Diagnostic]:
    """Each value of a Kubernetes object whose type its field does not allow
    (kube/shapes.py), as a diagnostic at the value."""
    secret = isinstance(doc.data, dict) and doc.data.get("kind") == "Secret"
    return [
        type_problem(
            labels.shown(item.field, labels.SHOWN_NAME, quote=False),
            item.allowed,
            item.value,
            doc,
            item.path,
            hidden=secret and sensitive.is_sensitive_path(item.path),
        )
        for item in found
    ]


def _read_as(value: Any) -> str:
    """A value YAML read, as Python shows it (a date as written)."""
    if isinstance(value, datetime.date):
        return value.isoformat()
    return labels.shown(repr(value), quote=False)


def _what(value: Any) -> str:
    """What a YAML value is, for "must be a string, not a list"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int):
        return f"an integer ({labels.shown(str(value), quote=False)})"
    if isinstance(value, float):
        return f"a number ({labels.shown(repr(value), quote=False)})"
    if isinstance(value, datetime.date):
        return f"a date ({value.isoformat()})"
    if isinstance(value, bytes):
        return "binary data (!!binary)"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, str):
        return f"a string ({labels.shown(value)})"
    return type(value).__name__


def _fields_at(model: type[BaseModel], loc: PathT) -> list[str]:
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        info = getattr(current, "model_fields", {}).get(part)
        if info is None:
            return []
        annotation = info.annotation
        args = getattr(annotation, "__args__", ())
        current = next((a for a in (annotation, *args) if hasattr(a, "model_fields")), None)
        if current is None:
            return []
    return list(getattr(current, "model_fields", {}))


_FIELD_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]|\[([^\]]*)\]")


def field_path(field: str) -> PathT:
    """`spec.containers[0].image` -> ("spec", "containers", 0, "image")."""
    path: list[str | int] = []
    for name, index, key in _FIELD_PART.findall(field):
        if name:
            path.append(name)
        elif index:
            path.append(int(index))
        else:
            path.append(key)
    return tuple(path)


# One key of a list item as server-side apply names it: `name="web"`, `containerPort=80`.
_ITEM_KEY = re.compile(r'([^=,]+)=("(?:[^"\\]|\\.)*"|[^,]*)')


def manifest_path(field: str, body: Any) -> PathT:
    """An API server's field path as a path into `body`, as far as `body` has it:
    `spec.containers[0].image` (validation), `metadata.labels[nvidia.com/gpu.product]`
    (a map's key), `.spec.containers[name="web"].image` (server-side apply names a list
    item by its keys) -> ("spec", "containers", 0, "image")."""
    path: list[str | int] = []
    current = body
    for part in field_path(field.strip().lstrip(".")):
        step: str | int | None = part
        if isinstance(current, dict):
            step = str(part)
            if step not in current:
                break
        elif isinstance(current, list):
            step = _item_index(current, part)
            if step is None or step >= len(current):
                break
        else:
            break
        path.append(step)
        current = current.get(step) if isinstance(current, dict) else current[int(step)]
    return tuple(path)


def _item_index(items: list[Any], part: str | int) -> int | None:
    """The index `part` names in `items`: an index, or the item with the keys given."""
    if isinstance(part, int):
        return part
    wanted = {}
    for key, value in _ITEM_KEY.findall(part):
        try:
            wanted[key.strip()] = str(json.loads(value)) if value.startswith('"') else value
        except ValueError:
            return None
    if not wanted:
        return None
    for index, item in enumerate(items):
        if isinstance(item, dict) and all(str(item.get(k)) == v for k, v in wanted.items()):
            return index
    return None
