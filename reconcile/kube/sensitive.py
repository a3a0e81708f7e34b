"""Values that never leave the process: the `data` and `stringData` of a Secret.

As `kubectl diff` masks a Secret before showing it (k8s.io/kubectl/pkg/cmd/diff, Masker),
reconcile replaces every such value with a digest before comparing live and desired
objects, so a plan, its JSON, its markdown and a saved plan file can say that a value
changes without carrying it. A digest is salted with the live object's UID: equal values
give equal digests within one object, and a digest copied from a public pull-request
comment cannot be checked against guessed passwords without reading the cluster.

Server messages can quote what they were sent (a hostile server or proxy, or a future
validation message): `Redactor` learns every sensitive value that goes to or comes from
the API server and strikes it out of error messages.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Final

# (apiVersion, kind) whose fields below are sensitive: what kubectl masks.
SENSITIVE_KINDS: Final = frozenset({("v1", "Secret")})
SENSITIVE_FIELDS: Final = ("data", "stringData")
# `kubectl apply` (client-side) keeps the whole applied object, values included, here.
LAST_APPLIED: Final = "kubectl.kubernetes.io/last-applied-configuration"
MASK: Final = "***"
# Values shorter than this are struck out only where a message quotes them whole: a
# three-letter value struck everywhere would garble every message it happens to occur in.
_MIN_BARE: Final = 4


def is_sensitive(api_version: str, kind: str) -> bool:
    return (api_version, kind) in SENSITIVE_KINDS


def is_sensitive_path(path: tuple[str | int, ...]) -> bool:
    """Whether a field path of a sensitive object holds (or lies inside) a sensitive value."""
    if not path:
        return False
    return path[0] in SENSITIVE_FIELDS or path[:3] == ("metadata", "annotations", LAST_APPLIED)


def digest(value: Any, salt: str = "") -> str:
    """`sha256:<hex>` of salt and value, never the value."""
    text = (
        value
        if isinstance(value, str)
        else json.dumps(value, sort_keys=True, separators=(",", ":"))
    )
    hashed = hashlib.sha256()
    hashed.update(salt.encode())
    hashed.update(b"\0")
    hashed.update(text.encode())
    return f"sha256:{hashed.hexdigest()}"


def manifest_digest(config: Mapping[str, Any]) -> str:
    """The digest a saved plan keeps in place of a sensitive object's configuration: at
    apply time the configuration is read again from desired/ and must match it."""
    return digest(dict(config))


def masked(obj: Mapping[str, Any], salt: str) -> dict[str, Any]:
    """A shallow copy of `obj` with every sensitive value replaced by its digest."""
    result = dict(obj)
    for name in SENSITIVE_FIELDS:
        section = obj.get(name)
        if isinstance(section, Mapping):
            result[name] = {key: digest(value, salt) for key, value in section.items()}
        elif section is not None:
            result[name] = digest(section, salt)
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if (
        isinstance(metadata, Mapping)
        and isinstance(annotations, Mapping)
        and LAST_APPLIED in annotations
    ):
        result["metadata"] = {
            **metadata,
            "annotations": {**annotations, LAST_APPLIED: digest(annotations[LAST_APPLIED], salt)},
        }
    return result


def secret_scope(config: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a Secret's configuration sets, as the stored object shows them: the API
    server merges `stringData` into `data` (base64) and never stores `stringData`, so a
    key set under `stringData` is a key of `data` too."""
    string_data = config.get("stringData")
    if not isinstance(string_data, Mapping) or not string_data:
        return dict(config)
    data = config.get("data")
    merged = dict(data) if isinstance(data, Mapping) else {}
    merged.update(string_data)
    return {**config, "data": merged}


def values(obj: Mapping[str, Any]) -> set[str]:
    """Every sensitive string `obj` holds, in each form a message could quote it:
    as written, base64-decoded (`data`) or encoded (`stringData`), and JSON-escaped."""
    found: set[str] = set()

    def add(value: str) -> None:
        if value:
            found.add(value)
            found.add(json.dumps(value)[1:-1])

    for name in SENSITIVE_FIELDS:
        section = obj.get(name)
        if not isinstance(section, Mapping):
            continue
        for value in section.values():
            if not isinstance(value, str):
                # Not a valid value, and the API server quotes it in its refusal
                # (`expected string, got &value.valueUnstructured{Value:12345}`).
                add(str(value))
                add(json.dumps(value, sort_keys=True, separators=(",", ":")))
                continue
            add(value)
            if name == "stringData":
                add(base64.b64encode(value.encode()).decode())
                continue
            with contextlib.suppress(binascii.Error, UnicodeDecodeError, ValueError):
                add(base64.b64decode(value, validate=True).decode("utf-8"))
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    last = annotations.get(LAST_APPLIED) if isinstance(annotations, Mapping) else None
    if isinstance(last, str):
        add(last)
        try:
            applied = json.loads(last)
        except ValueError:
            applied = None
        if isinstance(applied, Mapping):
            found |= values(applied)
    return found


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret struck out as `***`, longest first."""
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= _MIN_BARE:
            text = text.replace(secret, MASK)
        else:
            text = text.replace(f'"{secret}"', f'"{MASK}"')
    return text


class Redactor:
    """The sensitive values seen so far (sent or received), struck out of any text."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._lock = threading.Lock()

    def learn(self, document: Any) -> None:
        """Remember the sensitive values of an object, or of every item of a list."""
        if not isinstance(document, Mapping):
            return
        kind = str(document.get("kind") or "")
        api_version = str(document.get("apiVersion") or "")
        if kind.endswith("List") and is_sensitive(api_version, kind[: -len("List")]):
            for item in document.get("items") or ():
                if isinstance(item, Mapping):
                    self._add(values(item))
        elif is_sensitive(api_version, kind):
            self._add(values(document))

    def _add(self, found: set[str]) -> None:
        if found:
            with self._lock:
                self._values |= found

    def __call__(self, text: str) -> str:
        with self._lock:
            known = set(self._values)
        return redact(text, known) if known else text
