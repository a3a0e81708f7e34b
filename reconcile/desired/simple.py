"""The common case read fast: a node file that is a plain, valid NodeFeatures.

A fleet of 10,000 nodes is 10,000 small files written by `reconcile import` or by hand
in one shape: `apiVersion`, `kind`, `metadata.name`, `labels` (and perhaps `optional`),
block mappings indented by two, one scalar per line, full-line comments. Composing each
with libyaml and validating it with pydantic costs some 300 microseconds; reading that
shape line by line and checking the keys and values with the API server's own rules
costs a tenth of it.

This reader is only a shortcut: it accepts a file when it is sure the full reader would
read the same data and find no problem, and says None otherwise (anything it does not
recognise: flow collections, anchors, tags, trailing comments, multi-line or escaped
scalars, annotations, taints, a value that is not a valid label value, any character
but printable ASCII...). The full reader then reads that file and reports what is wrong,
with its own messages. A differential test over generated files holds it to
that: tests/unit/test_simple_reader.py.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Final, cast

import yaml
from yaml.nodes import ScalarNode

from reconcile.desired.models import (
    API_VERSION,
    NODE_FEATURES,
    DesiredNode,
    _check_label_key,
    _check_label_value,
    _check_object_name,
)
from reconcile.diagnostics import Source

_TOP: Final = frozenset({"apiVersion", "kind", "metadata", "labels", "optional"})
# A plain scalar this reader takes as written: no indicator first, nothing YAML would
# read as anything but text once the resolver says "str".
_PLAIN: Final = re.compile(r"[A-Za-z0-9_./][A-Za-z0-9_./:=+-]*")
_STR: Final = "tag:yaml.org,2002:str"
_NULL: Final = "tag:yaml.org,2002:null"
_BOOL: Final = "tag:yaml.org,2002:bool"
_RESOLVER: Final = yaml.resolver.Resolver()
_NULLS: Final = frozenset({"~", "null", "Null", "NULL"})


class _Unsure(Exception):
    """Not the simple shape: the full reader decides."""


class Positions(Mapping[str, Source]):
    """label key -> where it is written, found in the file only when asked for (a
    diagnostic about the node; most runs never ask, and 10,000 files' text is not kept)."""

    def __init__(self, file: str, keys: Collection[str]) -> None:
        self.file = file
        self._keys = keys  # the node's labels themselves: nothing copied per file
        self._at: dict[str, tuple[int, int]] | None = None

    def _positions(self) -> dict[str, tuple[int, int]]:
        if self._at is None:
            self._at = {}
            try:  # the file as named (relative to the working directory, as read)
                text = Path(self.file).read_text(encoding="utf-8")
            except OSError:
                text = ""
            for number, line in enumerate(text.split("\n"), start=1):
                if line.startswith("  ") and not line.startswith("   "):
                    self._at.setdefault(line[2:].partition(":")[0], (number, 3))
        return self._at

    def __getitem__(self, key: str) -> Source:
        if key not in self._keys:
            raise KeyError(key)
        line, column = self._positions().get(key, (0, 0))
        return Source(self.file, line, column)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"Positions({self.file!r}, {len(self._keys)} keys)"


_resolved: dict[str, str] = {}


def _tag(text: str) -> str:
    tag = _resolved.get(text)
    if tag is None:
        tag = _RESOLVER.resolve(ScalarNode, text, (True, False))
        if len(_resolved) < 100_000:
            _resolved[text] = tag
    return tag


def _scalar(text: str) -> str | bool | None:
    """A scalar as YAML 1.1 reads it, when it is text, null or a boolean; else _Unsure."""
    if not text:
        return None
    first = text[0]
    if first == '"':
        if len(text) < 2 or text[-1] != '"' or '"' in text[1:-1] or "\\" in text:
            raise _Unsure
        return text[1:-1]
    if first == "'":
        if len(text) < 2 or text[-1] != "'" or "'" in text[1:-1]:
            raise _Unsure
        return text[1:-1]
    if not _PLAIN.fullmatch(text):
        raise _Unsure
    tag = _tag(text)
    if tag == _STR:
        return text
    if tag == _NULL:
        return None
    if tag == _BOOL and text in ("true", "false"):
        return text == "true"
    raise _Unsure  # numbers, timestamps, yes/no...: the full reader says how to quote them


def _key(text: str) -> str:
    if not _PLAIN.fullmatch(text) or _tag(text) != _STR:
        raise _Unsure
    return text


# A comment as this reader takes it: printable ASCII only. YAML reads U+2028, U+2029 and
# U+0085 as line breaks (the comment would end there, and the rest of its line be read)
# and refuses control characters and DEL: such a comment is the full reader's to judge.
_COMMENT: Final = r"#[\x20-\x7e]*"
_GAP: Final = rf"(?:[ ]*(?:{_COMMENT})?\n)*"
_TOKEN: Final = r"(\"[^\"\\\n]*\"|'[^'\n]*'|[A-Za-z0-9_./][A-Za-z0-9_./:=+-]*)"
_KEY: Final = r"[A-Za-z0-9_./-]+"
_LABEL: Final = rf"  {_KEY}:(?:[ ]+{_TOKEN[1:-1]})?[ ]*"
# The shape `reconcile import` writes, in its order, matched whole by one expression: a
# file that matches holds nothing but these keys and `  key: scalar` label lines.
_CANONICAL: Final = re.compile(
    _GAP
    + rf"apiVersion:[ ]+{_TOKEN}[ ]*\n"
    + _GAP
    + rf"kind:[ ]+{_TOKEN}[ ]*\n"
    + _GAP
    + r"metadata:[ ]*\n"
    + _GAP
    + rf"  name:[ ]+{_TOKEN}[ ]*\n"
    + _GAP
    + rf"labels:[ ]*\n(?P<labels>(?:(?:{_LABEL}|[ ]*(?:{_COMMENT})?)\n)*(?:{_LABEL}|[ ]*(?:{_COMMENT})?)?)"
)
# A label line of a block _CANONICAL matched: its key, and the rest of the line (the
# token, or nothing; a token with spaces after it is not one a cache knows, and falls to
# the general reader). Simpler than the line's own expression, and faster.
_PAIR: Final = re.compile(rf"\n  ({_KEY}):[ ]*([^\n]*)")
_BAD: Final = object()
# key -> the one string every file's node holds for it (None: not a valid key); token ->
# the value it reads as, when valid. Labels repeat across a fleet's files: checked once,
# and held once in memory however many nodes carry them.
_label_keys: dict[str, str | None] = {}
_label_values: dict[str, object] = {}


def _label_key(key: str) -> str | None:
    if key in _label_keys:
        return _label_keys[key]
    try:
        _checked_key(_key(key))
        shared: str | None = key
    except Exception:
        shared = None
    if len(_label_keys) < 100_000:
        _label_keys[key] = shared
    return shared


def _label_value(token: str) -> object:
    """The label value a token reads as (None: must be absent), or _BAD."""
    if token in _label_values:
        return _label_values[token]
    value: object
    try:
        value = _scalar(token)
        if isinstance(value, bool):
            value = _BAD
        elif value is not None:
            value = _checked_value(value)
    except Exception:
        value = _BAD
    if len(_label_values) < 100_000:
        _label_values[token] = value
    return value


@functools.lru_cache(maxsize=64)
def _header(token: str) -> str | bool | None:
    """`apiVersion` and `kind` as read: the same tokens in every file."""
    return _scalar(token)


def _canonical(text: str, file: str) -> DesiredNode:
    found = _CANONICAL.fullmatch(text)
    if found is None or "\t" in text or "\r" in text:
        raise _Unsure
    api, kind, name = found.group(1, 2, 3)
    if _header(api) != API_VERSION or _header(kind) != NODE_FEATURES:
        raise _Unsure
    node_name = _scalar(name)
    if not isinstance(node_name, str):
        raise _Unsure
    _check_object_name(node_name)
    pairs = _PAIR.findall("\n" + found.group("labels"))
    values, keys = _label_values, _label_keys
    found_labels: dict[str | None, object]
    try:  # every key and token seen in an earlier file, as in a fleet: one comprehension
        found_labels = {keys[key]: values[token] for key, token in pairs}
    except KeyError:
        found_labels = {_label_key(key): _label_value(token) for key, token in pairs}
    # A key twice, a key or value that is not valid: the full reader says what is wrong.
    if len(found_labels) != len(pairs) or None in found_labels or _BAD in found_labels.values():
        raise _Unsure
    if not found_labels:
        raise _Unsure  # `labels:` with nothing under it is null: the full reader says so
    labels = cast("dict[str, str | None]", found_labels)
    at = found.start(3)
    line = text.count("\n", 0, at) + 1
    column = at - text.rfind("\n", 0, at)
    return DesiredNode(node_name, labels, Source(file, line, column), Positions(file, labels))


# Larger than the biggest object etcd stores (its 1.5 MiB request limit): not the common
# case. The full reader decides at once, where this reader's expressions would first spend
# seconds giving back a huge token character by character before saying None.
_LARGEST: Final = 3 * 2**19


def node(text: str, file: str) -> DesiredNode | None:
    """The node the file declares, when it is the simple shape and valid; else None."""
    if len(text) > _LARGEST:
        return None
    if not text.isascii():
        # Names, keys and values are ASCII: anything else is in a comment or a mistake,
        # and YAML has rules of its own for some of it (line breaks, a byte-order mark).
        return None
    try:
        return _canonical(text, file)
    except Exception:  # not the canonical order: the general simple shape
        pass
    try:
        return _node(text, file)
    except Exception:  # any doubt at all: the full reader decides, and explains
        return None


# One line of the simple shape: blank or a comment, a top-level key (with a scalar, or
# opening a block), or a two-space-indented `key: scalar`. Scalars are checked by _scalar.
_LINE: Final = re.compile(
    rf"(?:[ ]*(?:{_COMMENT})?"
    r"|(?P<top>[A-Za-z]+):(?:[ ]+(?P<topvalue>[^ \n#][^\n]*?))?[ ]*"
    r"|[ ][ ](?P<key>[^ \n:#][^ \n:]*):(?:(?P<gap>[ ]+)(?P<value>[^ \n][^\n]*?))?[ ]*"
    r")(?:\n|\Z)"
)
_valid_keys: set[str] = set()
_valid_values: dict[str, str] = {}  # each valid value checked: the one string held for it


def _checked_key(key: str) -> None:
    if key not in _valid_keys:
        _check_label_key(key)
        if len(_valid_keys) < 100_000:
            _valid_keys.add(key)


def _checked_value(value: str) -> str:
    """`value` when it is a valid label value (else the API server's error): the one
    string held for it."""
    shared = _valid_values.get(value)
    if shared is None:
        _check_label_value(value)
        shared = _valid_values.setdefault(value, value) if len(_valid_values) < 100_000 else value
    return shared


def _node(text: str, file: str) -> DesiredNode:
    if "\t" in text or "\r" in text or text.startswith("\ufeff"):
        raise _Unsure
    top: dict[str, str | bool | None] = {}
    name: str | None = None
    name_at = (0, 0)
    labels: dict[str, str | None] = {}
    section: str | None = None
    position = 0
    number = 0
    size = len(text)
    match = _LINE.match
    while position < size:
        found = match(text, position)
        if found is None or found.end() == position:
            raise _Unsure
        position = found.end()
        number += 1
        key = found.group("key")
        if key is not None:
            value = found.group("value") or ""
            if section == "labels":
                checked = _label_value(value)  # the same cached checks as the canonical path
                shared = _label_key(key)
                if checked is _BAD or shared is None or shared in labels:
                    raise _Unsure
                labels[shared] = checked  # type: ignore[assignment]
            elif section == "metadata" and key == "name" and name is None:
                scalar = _scalar(value)
                if not isinstance(scalar, str):
                    raise _Unsure
                name, name_at = scalar, (number, 4 + len(key) + len(found.group("gap") or " "))
            else:
                raise _Unsure
            continue
        head = found.group("top")
        if head is None:
            continue  # blank or a comment
        if head not in _TOP or head in top:
            raise _Unsure
        value = found.group("topvalue") or ""
        top[head] = None
        section = None
        if head in ("metadata", "labels"):
            if value == "{}" and head == "labels":
                top["labels"] = {}  # type: ignore[assignment]
                continue
            if value:
                raise _Unsure
            section = head
            continue
        top[head] = _scalar(value)
    if top.get("apiVersion") != API_VERSION or top.get("kind") != NODE_FEATURES:
        raise _Unsure
    if name is None or (top.get("labels") is None and not labels):
        raise _Unsure  # a `labels:` with nothing under it is null: the full reader says so
    optional = top.get("optional", False)
    if not isinstance(optional, bool):
        raise _Unsure
    _check_object_name(name)
    return DesiredNode(
        name,
        labels,
        Source(file, *name_at),
        Positions(file, labels),
        optional=optional,
    )


class Lines(Mapping[str, Source]):
    """label key -> its line of a `.env` file (column 1), made into a Source when asked."""

    def __init__(self, file: str, lines: dict[str, int]) -> None:
        self.file = file
        self._lines = lines

    def __getitem__(self, key: str) -> Source:
        return Source(self.file, self._lines[key], 1)

    def __iter__(self) -> Iterator[str]:
        return iter(self._lines)

    def __len__(self) -> int:
        return len(self._lines)


def env_node(
    name: str, values: dict[str, str], lines: dict[str, int], file: str
) -> DesiredNode | None:
    """A `.env` node file's node when its name, keys and values are all valid, else None
    (the full reader reports what is wrong)."""
    labels: dict[str, str | None] = {}
    keys, known = _label_keys, _valid_values
    try:
        _check_object_name(name)
        for key, value in values.items():
            shared = keys[key] if key in keys else _label_key(key)
            if shared is None:
                return None
            labels[shared] = known.get(value) or _checked_value(value)
    except Exception:
        return None
    return DesiredNode(name, labels, Source(file, 1, 1), Lines(file, lines))
