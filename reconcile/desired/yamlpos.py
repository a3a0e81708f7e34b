"""YAML as plain data that keeps every value's file:line:col, with each problem found
as a diagnostic.

YAML is composed with libyaml (through PyYAML's C composer, far faster than a pure-Python
parser) and turned into plain data here, by hand, so that each value keeps
its file:line:col, every duplicate key is seen (not just the first), and aliases never
expand. Scalars resolve as YAML 1.1, as kubectl reads manifests: an unquoted `yes` is a
boolean to both.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import Any, Final

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from reconcile import diagnostics as diag
from reconcile.diagnostics import Diagnostic, Source
from reconcile.kube import labels, sensitive

STR_TAG: Final = "tag:yaml.org,2002:str"
_NULL: Final = "tag:yaml.org,2002:null"
_MERGE: Final = "tag:yaml.org,2002:merge"
_NULL_SPELLINGS: Final = frozenset({"", "~", "null", "Null", "NULL"})
SCALAR_TAG_NAMES: Final = {
    "tag:yaml.org,2002:int": "an integer",
    "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:bool": "a boolean",
    "tag:yaml.org,2002:timestamp": "a date",
    _NULL: "null",
}

PathT = tuple[str | int, ...]

# Deeper than any manifest a person writes (a pod template's affinity is about a dozen
# levels; a CRD's schema a few dozen), and shallow enough that building the data never
# comes near Python's recursion limit. libyaml itself stops at 1,000 levels.
MAX_DEPTH: Final = 100


@dataclass
class YamlDocument:
    """One YAML document as plain data, with the position of every key and value."""

    data: Any
    file: str
    start: tuple[int, int]
    values: dict[PathT, tuple[int, int]] = field(default_factory=dict)
    keys: dict[PathT, tuple[int, int]] = field(default_factory=dict)
    # Non-string scalars as written, for "quote it" hints: path -> (tag, source text).
    scalars: dict[PathT, tuple[str, str]] = field(default_factory=dict)

    def at(self, path: PathT, *, key: bool = False) -> Source:
        """Where `path` is written; the nearest enclosing value when it is not."""
        if key and path in self.keys:
            return Source(self.file, *self.keys[path])
        return diag.nearest(self.file, self.values, path, Source(self.file, *self.start))


# libyaml's composer when PyYAML was built with it (its wheels are), else the Python one.
_COMPOSER: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# Line breaks to YAML 1.1 (libyaml counts lines by them) that editors show inside a line.
_YAML_ONLY_BREAKS: Final = ("\x85", "\u2028", "\u2029")
_BREAK = re.compile(r"\r\n|\r|\n")


class Lines:
    """A text's (line, column) as an editor counts them, from libyaml's marks: libyaml's
    own line and column, unless the text holds a line break only YAML sees (U+2028,
    U+2029, U+0085), after which they would be off; then from the mark's index."""

    def __init__(self, text: str) -> None:
        self._starts: list[int] | None = None
        if any(c in text for c in _YAML_ONLY_BREAKS):
            self._starts = [0, *(m.end() for m in _BREAK.finditer(text))]

    def at(self, mark: yaml.Mark) -> tuple[int, int]:
        if self._starts is None:
            return mark.line + 1, mark.column + 1
        line = bisect.bisect_right(self._starts, mark.index)
        return line, mark.index - self._starts[line - 1] + 1


def position(text: str, index: int) -> tuple[int, int]:
    """The (line, column) of the character at `index`, as an editor counts them."""
    starts = [0, *(m.end() for m in _BREAK.finditer(text, 0, index))]
    return len(starts), index - starts[-1] + 1


class _Composer:
    """Builds plain data from composed YAML nodes, collecting problems instead of raising."""

    def __init__(self, file: str, lines: Lines) -> None:
        self.file = file
        self.problems: list[Diagnostic] = []
        self._scalars = yaml.SafeLoader("")
        self._lines = lines
        # The document being composed is a Secret: its values are never quoted.
        self._secret = False

    def document(self, root: Node) -> YamlDocument:
        doc = YamlDocument(data=None, file=self.file, start=self._lines.at(root.start_mark))
        self._secret = _is_secret(root)
        doc.data = self._value(root, (), doc, set())
        return doc

    def _where(self, node: Node) -> Source:
        return Source(self.file, *self._lines.at(node.start_mark))

    def _value(self, node: Node, path: PathT, doc: YamlDocument, seen: set[int]) -> Any:
        doc.values[path] = self._lines.at(node.start_mark)
        if len(path) > MAX_DEPTH:
            self.problems.append(
                diag.error(
                    f"nested deeper than {MAX_DEPTH} levels",
                    self._where(node),
                    "desired state is never nested this deep; flatten it",
                )
            )
            return None
        if id(node) in seen:
            # Refusing anchors and aliases outright keeps every value reviewable in a
            # diff and makes "billion laughs" documents harmless: nothing is expanded.
            self.problems.append(
                diag.error(
                    "YAML anchors and aliases are not allowed",
                    self._where(node),
                    "write the value out in full (desired state is reviewed line by line)",
                )
            )
            return None
        seen.add(id(node))
        if isinstance(node, MappingNode):
            return self._mapping(node, path, doc, seen)
        if isinstance(node, SequenceNode):
            return [self._value(item, (*path, i), doc, seen) for i, item in enumerate(node.value)]
        if isinstance(node, ScalarNode):
            return self._scalar(node, path, doc)
        return None

    def _mapping(
        self, node: MappingNode, path: PathT, doc: YamlDocument, seen: set[int]
    ) -> dict[str, Any]:
        result: dict[str, Any] = {}
        first_seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                self.problems.append(
                    diag.error(
                        "YAML merge keys (<<) are not allowed",
                        self._where(key_node),
                        "write the keys out in full",
                    )
                )
                continue
            if not isinstance(key_node, ScalarNode) or key_node.tag not in (STR_TAG,):
                shown = (
                    labels.shown(str(key_node.value), labels.SHOWN_NAME, quote=False)
                    if isinstance(key_node, ScalarNode)
                    else "a collection"
                )
                self.problems.append(
                    diag.error(
                        f"mapping keys must be strings, not {shown}",
                        self._where(key_node),
                        "quote the key",
                    )
                )
                continue
            key = str(key_node.value)
            line, column = self._lines.at(key_node.start_mark)
            if key in first_seen:
                self.problems.append(
                    diag.error(
                        f"duplicate key {labels.shown(key, labels.SHOWN_NAME)}",
                        self._where(key_node),
                        f"first defined on line {first_seen[key]}; a key may appear once",
                    )
                )
                continue
            first_seen[key] = line
            child = (*path, key)
            doc.keys[child] = (line, column)
            result[key] = self._value(value_node, child, doc, seen)
        return result

    def _scalar(self, node: ScalarNode, path: PathT, doc: YamlDocument) -> Any:
        if node.tag == STR_TAG:
            return str(node.value)
        if node.tag in SCALAR_TAG_NAMES:
            try:
                value = self._scalars.construct_object(node)
                # PyYAML reads `!!null anything` as null: a hidden "must be absent".
                if node.tag == _NULL and str(node.value) not in _NULL_SPELLINGS:
                    raise ValueError(node.value)
            except (yaml.YAMLError, ValueError, LookupError, AttributeError, TypeError):
                # An explicit tag on text it cannot hold (`!!int abc`, `!!bool x`), or an
                # integer too long for Python to convert.
                shown = (
                    "the value"  # a Secret's value is never quoted, in any message
                    if self._secret and sensitive.is_sensitive_path(path)
                    else _shown(str(node.value))
                )
                self.problems.append(
                    diag.error(
                        f"YAML cannot read {shown} as "
                        f"{SCALAR_TAG_NAMES[node.tag]} ({_short_tag(node.tag)})",
                        self._where(node),
                        "quote it to keep it as text; an explicit tag must fit its value",
                    )
                )
                return None
            if node.tag != _NULL:
                doc.scalars[path] = (node.tag, str(node.value))
            return value
        self.problems.append(
            diag.error(
                f"unsupported YAML tag {node.tag}",
                self._where(node),
                "only the standard tags (!!str, !!int, ...) are understood",
            )
        )
        return None


def _is_secret(root: Node) -> bool:
    """Whether a document declares a Secret (whatever its apiVersion says: a typo there
    does not make its values any less secret), read from its nodes before composing it."""
    if not isinstance(root, MappingNode):
        return False
    return any(
        isinstance(key, ScalarNode)
        and key.value == "kind"
        and isinstance(value, ScalarNode)
        and value.value == "Secret"
        for key, value in root.value
    )


def _shown(text: str) -> str:
    """A scalar quoted for a message, cut when long (a 5,000-digit number, say)."""
    return labels.shown(text)


def _short_tag(tag: str) -> str:
    """tag:yaml.org,2002:int -> !!int, as it is written."""
    prefix = "tag:yaml.org,2002:"
    return "!!" + tag[len(prefix) :] if tag.startswith(prefix) else tag


# What YAML 1.1 refuses in a stream: characters outside its printable set (tab, LF, CR
# and NEL aside), such as NUL, the other C0 controls, DEL and C1 controls.
_NOT_YAML = re.compile("[^\t\n\r\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def parse_yaml(text: str, file: str) -> tuple[list[YamlDocument], list[Diagnostic]]:
    """Every non-empty document of a YAML stream, or the syntax error that stops it."""
    lines = Lines(text)
    composer = _Composer(file, lines)
    documents: list[YamlDocument] = []
    try:
        for root in yaml.compose_all(text, Loader=_COMPOSER):
            if root is None or (isinstance(root, ScalarNode) and root.tag == _NULL):
                continue  # an empty document (`---` followed by nothing), as kubectl skips it
            documents.append(composer.document(root))
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = Source(file, *lines.at(mark)) if mark else Source(file)
        problem = " ".join(p for p in (e.context, e.problem) if p)
        composer.problems.append(diag.error("malformed YAML", where, problem or str(e)))
    except yaml.reader.ReaderError as e:
        # libyaml names a byte offset; the character itself is found here, where an
        # editor shows it.
        bad = _NOT_YAML.search(text)
        if bad is None:
            composer.problems.append(diag.error("malformed YAML", Source(file), e.reason))
        else:
            composer.problems.append(
                diag.error(
                    f"character U+{ord(bad.group()):04X} is not allowed in YAML",
                    Source(file, *position(text, bad.start())),
                    "YAML refuses control characters (NUL, DEL, ...) anywhere in a file, "
                    "quoted or not: remove it",
                )
            )
    except yaml.YAMLError as e:
        composer.problems.append(diag.error("malformed YAML", Source(file), str(e)))
    return documents, composer.problems


def not_utf8(data: bytes, error: UnicodeDecodeError, file: str) -> Diagnostic:
    """A file that is not UTF-8, at the first byte that is not (never quoting bytes: the
    file may hold a Secret)."""
    start = error.start
    line_start = data.rfind(b"\n", 0, start) + 1
    column = len(data[line_start:start].decode("utf-8", "replace")) + 1
    return diag.error(
        "file is not UTF-8 text",
        Source(file, data.count(b"\n", 0, start) + 1, column),
        f"the byte here is not UTF-8 ({error.reason}): save the file as UTF-8",
    )
