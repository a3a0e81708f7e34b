"""Reads desired/ into a validated `DesiredState`, with every problem found as a diagnostic.

YAML is composed with libyaml (through PyYAML's C composer, some thirty times faster than
a pure-Python parser: 5,000 node files load in about a second) and turned into plain
data here, by hand, so that each value keeps its file:line:col, every duplicate key is
seen (not just the first), and aliases never expand. Scalars resolve as YAML 1.1, as
kubectl reads manifests: an unquoted `yes` is a boolean to both. The `.env` (NFD local
feature file) and `.csv` (support matrix) compat formats are read here too.

Layout:
    desired/nodes/*.yaml|*.yml     NodeFeatures (several documents per file allowed)
    desired/nodes/*.env            one node's labels, NFD local-feature-file format
    desired/drivers/*.yaml|*.yml   DriverSupportMatrix
    desired/drivers/*.csv          driver_branch,kernel,os_tag
    desired/workloads/**.yaml      plain Kubernetes manifests
"""

from __future__ import annotations

import bisect
import csv
import hashlib
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import BaseModel, ValidationError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from reconcile import diagnostics as diag
from reconcile import files as safefiles
from reconcile.desired import simple
from reconcile.desired.models import (
    ANNOTATIONS_MAX_BYTES,
    API_VERSION,
    DRIVER_SUPPORT_MATRIX,
    KINDS,
    NODE_FEATURES,
    NODE_GROUP,
    DesiredGroup,
    DesiredNode,
    DesiredState,
    DriverImage,
    DriverSupportMatrix,
    LabelSelector,
    Manifest,
    MatrixRow,
    NodeFeatures,
    NodeGroup,
    Taint,
    taint_facts,
)
from reconcile.desired.reserved import inventories_size
from reconcile.diagnostics import Diagnostic, Source
from reconcile.kube import labels, sensitive
from reconcile.kube import validation as apivalidation
from reconcile.kube.kinds import BUILTIN_NAMESPACED, ObjectId
from reconcile.kube.selector import SelectorError, from_label_selector

YAML_SUFFIXES: Final = (".yaml", ".yml")
CSV_HEADER: Final = ("driver_branch", "kernel", "os_tag")
# NFD puts unprefixed names of a local feature file under this prefix; so do we.
NFD_DEFAULT_PREFIX: Final = "feature.node.kubernetes.io/"

_STR: Final = "tag:yaml.org,2002:str"
_NULL: Final = "tag:yaml.org,2002:null"
_MERGE: Final = "tag:yaml.org,2002:merge"
_NULL_SPELLINGS: Final = frozenset({"", "~", "null", "Null", "NULL"})
_SCALAR_TAG_NAMES: Final = {
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


# --- YAML with positions ---------------------------------------------------------------


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
            if not isinstance(key_node, ScalarNode) or key_node.tag not in (_STR,):
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
        if node.tag == _STR:
            return str(node.value)
        if node.tag in _SCALAR_TAG_NAMES:
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
                        f"{_SCALAR_TAG_NAMES[node.tag]} ({_short_tag(node.tag)})",
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


# --- pydantic errors -> diagnostics --------------------------------------------------------


def model_problems(
    error: ValidationError, doc: YamlDocument, model: type[BaseModel]
) -> list[Diagnostic]:
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
                    f"{_SCALAR_TAG_NAMES[tag]} ({labels.shown(repr(item['input']), quote=False)})",
                    doc.at(loc),
                    f'quote it to keep it exactly as written: "{written}"',
                )
            )
        elif kind.startswith(("label_", "object_name")):
            found.append(diag.error(f"{shown}: {item['msg']}", doc.at(loc)))
        else:
            found.append(diag.error(f"{shown}: {item['msg']}", doc.at(loc)))
    return found


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


# --- the desired/ tree ---------------------------------------------------------------------


# A document's identity, for overlays to replace or exclude it: (API group, kind,
# namespace, name).
Identity = tuple[str, str, str, str]
# `$patch: delete` in an overlay excludes the base document of the same identity, as in
# Kustomize's strategic-merge patches.
PATCH_DIRECTIVE: Final = "$patch"


def identity(data: Any) -> Identity | None:
    """The identity of a raw document, or None when it has none to speak of."""
    if not isinstance(data, dict) or not isinstance(data.get("metadata"), dict):
        return None
    metadata = data["metadata"]
    api, kind, name = data.get("apiVersion"), data.get("kind"), metadata.get("name")
    if not (isinstance(api, str) and isinstance(kind, str) and isinstance(name, str)):
        return None
    return api.rpartition("/")[0], kind, str(metadata.get("namespace") or ""), name


def shown_identity(found: Identity) -> str:
    _, kind, namespace, name = found
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


@dataclass(frozen=True)
class Layer:
    """Files laid over the base tree (a fleet cluster's overlay): its documents replace
    base documents of the same identity; `$patch: delete` ones exclude them."""

    root: Path
    shadowed: frozenset[Identity]


# A file to read: (its path as text, why it is refused or None, the directory its areas
# are relative to: desired/, or a fleet cluster's overlay).
Entry = tuple[str, str | None, Path]


class FileNames:
    """How the files under `root` are named: in messages, relative to the working
    directory when inside it; in the digest, relative to the root. By string slicing:
    pathlib's relative_to costs more than reading a small file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.shown_root = diag.relative(root, Path.cwd().resolve())
        self._shown_prefix = "" if self.shown_root in ("", ".") else self.shown_root + "/"
        self._root_prefix = str(root).rstrip("/") + "/"

    def shown(self, path: str | Path) -> str:
        relative = self.relative(path)
        return self._shown_prefix + relative if relative != "." else self.shown_root

    def relative(self, path: str | Path) -> str:
        text = str(path)
        if text.startswith(self._root_prefix):
            return text[len(self._root_prefix) :]
        return Path(path).relative_to(self.root).as_posix()


class _Loader:
    def __init__(
        self,
        root: Path,
        entries: list[Entry] | None = None,
        layer: Layer | None = None,
    ) -> None:
        self.root = root
        self.entries = entries
        self.layer = layer
        self._names = FileNames(root)
        self.problems: list[Diagnostic] = []
        self.nodes: dict[str, DesiredNode] = {}
        self.matrix: dict[str, MatrixRow] = {}
        self.manifests: list[Manifest] = []
        self._objects: dict[ObjectId, Source] = {}
        self._groups: dict[str, DesiredGroup] = {}
        self._digest = hashlib.sha256()  # of every file read, path and content

    def name(self, path: str | Path) -> str:
        """How a file is named in messages: relative to the working directory when inside it."""
        return self._names.shown(path)

    def relative(self, path: str | Path) -> str:
        """`path` relative to the root, as text."""
        return self._names.relative(path)

    def load(self) -> DesiredState:
        if not self.root.is_dir():
            self.problems.append(
                diag.error(
                    f"desired state directory not found: {self.name(self.root)}",
                    detail="pass --desired DIR or run from the directory that holds desired/",
                )
            )
            return DesiredState()
        entries = self.entries
        if entries is None:
            entries = [(path, refused, self.root) for path, refused in safefiles.walk(self.root)]
        for text, refused, base in entries:
            if refused is not None:
                self._refuse(text, refused)
                continue
            base_text = str(base).rstrip("/") + "/"
            parts = (
                text[len(base_text) :].split("/")
                if text.startswith(base_text)
                else list(Path(text).relative_to(base).parts)
            )
            area = parts[0] if len(parts) > 1 else ""
            _, dot, extension = parts[-1].rpartition(".")
            suffix = "." + extension.lower() if dot and parts[-1][0] != "." else ""
            # Node files (thousands) stay text; the rest are few.
            if area == "nodes" and len(parts) == 2 and suffix in YAML_SUFFIXES:
                self._node_file(text)
            elif area == "nodes" and len(parts) == 2 and suffix == ".env":
                self._env_file(text)
            elif area == "groups" and len(parts) == 2 and suffix in YAML_SUFFIXES:
                self._yaml_file(Path(text), NODE_GROUP)
            elif area == "drivers" and len(parts) == 2 and suffix in YAML_SUFFIXES:
                self._yaml_file(Path(text), DRIVER_SUPPORT_MATRIX)
            elif area == "drivers" and len(parts) == 2 and suffix == ".csv":
                self._csv_file(Path(text))
            elif area == "workloads" and suffix in (*YAML_SUFFIXES, ".json"):
                self._manifest_file(Path(text))
            elif suffix in (*YAML_SUFFIXES, ".env", ".csv", ".json"):
                self.problems.append(
                    diag.warning(
                        "file ignored",
                        Source(self.name(text)),
                        "desired state lives in nodes/*.yaml|*.env, groups/*.yaml, "
                        "drivers/*.yaml|*.csv and workloads/**.yaml",
                    )
                )
        self._selectors_on_declared_keys()
        self._annotation_budget()
        return DesiredState(
            nodes=dict(sorted(self.nodes.items())),
            groups=tuple(self._groups[name] for name in sorted(self._groups)),
            matrix=tuple(sorted(self.matrix.values(), key=lambda r: r.tag)),
            manifests=tuple(self.manifests),
            digest="sha256:" + self._digest.hexdigest(),
        )

    def _refuse(self, path: str | Path, what: str) -> None:
        """A file that is not a regular file inside desired/: named, never opened."""
        self.problems.append(
            diag.error(
                f"not a regular file: {what}",
                Source(self.name(path), 1, 1),
                "desired/ holds regular files only (no links, pipes or devices); "
                "put the content itself here",
            )
        )

    def _read(self, path: str | Path) -> str | None:
        try:
            data = safefiles.read_regular(path)
            text = data.decode("utf-8")
        except safefiles.UnsafeFile as e:
            self._refuse(path, str(e))
            return None
        except UnicodeDecodeError as e:
            self.problems.append(not_utf8(data, e, self.name(path)))
            return None
        except OSError as e:
            self.problems.append(
                diag.error("cannot read file", Source(self.name(path)), e.strerror or str(e))
            )
            return None
        # Files are read in a stable order (_files), so the digest names the tree's content.
        self._digest.update(self.relative(path).encode() + b"\0")
        self._digest.update(len(data).to_bytes(8, "big") + data)
        if not text.strip():
            self.problems.append(
                diag.error(
                    "empty file",
                    Source(self.name(path), 1, 1),
                    "remove it or declare something in it",
                )
            )
            return None
        return text

    def _yaml_documents(
        self, path: str | Path, expected: str, text: str | None = None
    ) -> Iterator[YamlDocument]:
        text = self._read(path) if text is None else text
        if text is None:
            return
        documents, problems = parse_yaml(text, self.name(path))
        self.problems.extend(problems)
        if not documents and not problems:
            self.problems.append(
                diag.error(
                    "empty file", Source(self.name(path), 1, 1), f"expected a {expected} document"
                )
            )
        if problems:
            return  # positions may be off after a syntax or structure error; fix those first
        if self.layer is None:
            yield from documents
            return
        in_layer = Path(path).is_relative_to(self.layer.root)
        for doc in documents:
            if in_layer and isinstance(doc.data, dict) and PATCH_DIRECTIVE in doc.data:
                continue  # an exclusion: checked by the fleet's reader
            if not in_layer and identity(doc.data) in self.layer.shadowed:
                continue  # replaced or excluded by the layer
            yield doc

    def _node_file(self, path: str) -> None:
        """A node file: the simple shape read fast when it is that and valid (simple.py),
        else the full reader, which reports what is wrong."""
        text = self._read(path)
        if text is None:
            return
        node = simple.node(text, self.name(path))
        if node is not None:
            self._add_node(node)
            return
        self._yaml_file(path, NODE_FEATURES, text)

    def _yaml_file(self, path: str | Path, expected_kind: str, text: str | None = None) -> None:
        for doc in self._yaml_documents(path, expected_kind, text):
            if not isinstance(doc.data, dict):
                self.problems.append(
                    diag.error(f"expected a mapping (a {expected_kind} document)", doc.at(()))
                )
                continue
            kind = doc.data.get("kind")
            if kind != expected_kind:
                where = doc.at(("kind",)) if "kind" in doc.data else doc.at(())
                area = {NODE_FEATURES: "nodes", NODE_GROUP: "groups"}.get(expected_kind, "drivers")
                if kind is None:
                    summary = "missing required field 'kind'"
                elif kind in KINDS:
                    summary = f"kind {kind} does not belong in desired/{area}/"
                else:
                    summary = f"unknown kind {labels.shown(str(kind), labels.SHOWN_NAME)}"
                self.problems.append(
                    diag.error(
                        summary,
                        where,
                        f"allowed in desired/{area}/: kind {expected_kind}, apiVersion {API_VERSION}",
                    )
                )
                continue
            if expected_kind == NODE_FEATURES:
                self._node_features(doc)
            elif expected_kind == NODE_GROUP:
                self._node_group(doc)
            else:
                self._matrix_document(doc)

    def _node_features(self, doc: YamlDocument) -> None:
        try:
            model = NodeFeatures.model_validate(doc.data)
        except ValidationError as e:
            self.problems.extend(model_problems(e, doc, NodeFeatures))
            return
        label_sources = {key: doc.at(("labels", key), key=True) for key in model.labels}
        self._add_node(
            DesiredNode(
                model.metadata.name,
                dict(model.labels),
                doc.at(("metadata", "name")),
                label_sources,
                annotations=dict(model.annotations),
                taints=taint_facts(model.taints),
                fact_sources=_fact_sources(doc, model.annotations, model.taints),
                optional=model.optional,
            )
        )

    def _node_group(self, doc: YamlDocument) -> None:
        try:
            model = NodeGroup.model_validate(doc.data)
        except ValidationError as e:
            self.problems.extend(model_problems(e, doc, NodeGroup))
            return
        where = doc.at(("metadata", "name"))
        first = self._groups.get(model.metadata.name)
        if first is not None:
            self.problems.append(
                diag.error(
                    f"node group {model.metadata.name} is declared twice",
                    where,
                    f"first declared at {first.node.source}; give each group its own name",
                )
            )
            return
        selector = model.selector
        try:
            from_label_selector(selector.model_dump())
        except SelectorError as e:
            self.problems.append(diag.error(f"invalid selector: {e}", doc.at(("selector",))))
            return
        keys = {k: doc.at(("selector", "matchLabels", k), key=True) for k in selector.matchLabels}
        for index, requirement in enumerate(selector.matchExpressions):
            keys.setdefault(requirement.key, doc.at(("selector", "matchExpressions", index, "key")))
        self._groups[model.metadata.name] = DesiredGroup(
            model.metadata.name,
            selector,
            DesiredNode(
                model.metadata.name,
                dict(model.labels),
                where,
                {key: doc.at(("labels", key), key=True) for key in model.labels},
                annotations=dict(model.annotations),
                taints=taint_facts(model.taints),
                fact_sources=_fact_sources(doc, model.annotations, model.taints),
            ),
            keys,
        )

    def _selectors_on_declared_keys(self) -> None:
        """A group's membership may not hang on a label desired/ itself sets: it would
        depend on the order of applies."""
        selected = {key for group in self._groups.values() for key in group.selector_keys}
        if not selected:
            return
        declared: dict[str, Source] = {}
        for node in (*self.nodes.values(), *(g.node for g in self._groups.values())):
            for key in selected.intersection(node.labels):
                declared.setdefault(key, node.source_of(key))
        for group in self._groups.values():
            for key, where in group.selector_keys.items():
                if key in declared:
                    self.problems.append(
                        diag.error(
                            f"node group {group.name} selects on {key}, which desired/ sets",
                            where,
                            f"set at {declared[key]}: membership would depend on the order of "
                            "applies; select on a label nothing in desired/ declares",
                        )
                    )

    def _annotation_budget(self) -> None:
        """All annotations of a node together (reconcile's inventories included) within the
        API server's limit, wherever it is known offline which files declare facts for one
        node: a group with every group its selector implies (an empty selector, the same
        or fewer requirements), a node file with the groups that select every node. Other
        overlaps depend on the live labels: `plan` checks each node (engine/budget.py)."""
        groups = list(self._groups.values())
        for group in groups:
            implied = [g for g in groups if g is not group and _implies(group.selector, g.selector)]
            self._check_budget(f"a node group {group.name} selects", group.node, implied)
        everywhere = [g for g in groups if _implies(LabelSelector(), g.selector)]
        for node in self.nodes.values():
            if node.annotations or everywhere:
                self._check_budget(f"node {node.name}", node, everywhere)

    def _check_budget(self, who: str, own: DesiredNode, groups: list[DesiredGroup]) -> None:
        facts: dict[str, dict[str, str | None]] = {"labels": {}, "annotations": {}, "taints": {}}
        for declared in (*(g.node for g in groups), own):  # the node's own file wins
            facts["labels"].update(declared.labels)
            facts["annotations"].update(declared.annotations)
            facts["taints"].update(declared.taints)
        if not facts["annotations"]:
            return
        managed = [[k for k, v in values.items() if v is not None] for values in facts.values()]
        size = apivalidation.annotations_size(
            {k: v for k, v in facts["annotations"].items() if v is not None}
        ) + inventories_size(*managed)
        if size <= ANNOTATIONS_MAX_BYTES:
            return
        largest = max(own.annotations, key=lambda k: len(own.annotations[k] or ""), default=None)
        where = own.source_of(f"annotation:{largest}") if largest is not None else own.source
        also = (
            ", ".join(f"group {g.name} ({g.node.source.file})" for g in groups)
            + " (whose selectors take in every node it selects) and "
            if groups
            else ""
        )
        self.problems.append(
            diag.error(
                f"the annotations of {who} would total {size} bytes, over the API server's "
                f"limit of {ANNOTATIONS_MAX_BYTES}",
                where,
                f"counted with {also}reconcile's inventories: the API server would refuse "
                "every update of the node (metadata.annotations: Too long); declare less",
            )
        )

    def _add_node(self, node: DesiredNode) -> None:
        first = self.nodes.get(node.name)
        if first is not None:
            self.problems.append(
                diag.error(
                    f"node {node.name} is declared twice",
                    node.source,
                    f"first declared at {first.source}; declare each node in one file",
                )
            )
            return
        self.nodes[node.name] = node

    def _env_file(self, path: str) -> None:
        text = self._read(path)
        if text is None:
            return
        file = self.name(path)
        values: dict[str, str] = {}
        lines: dict[str, int] = {}
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition("=")
            key = key.strip()
            # NFD: a name without a value means "true"; a name without a prefix is a feature.
            value = value if sep else "true"
            if key and "/" not in key:
                key = NFD_DEFAULT_PREFIX + key
            if key in lines:
                self.problems.append(
                    diag.error(
                        f"duplicate key {labels.shown(key, labels.SHOWN_NAME)}",
                        Source(file, number, 1),
                        f"first defined on line {lines[key]}; a key may appear once",
                    )
                )
                continue
            lines[key] = number
            values[key] = value
        if not lines:
            self.problems.append(
                diag.error("empty file", Source(file, 1, 1), "expected key=value lines")
            )
            return
        stem = path.rpartition("/")[2].rpartition(".")[0]  # the node's name
        fast = simple.env_node(stem, values, lines, file)
        if fast is not None:
            self._add_node(fast)
            return
        document = {
            "apiVersion": API_VERSION,
            "kind": NODE_FEATURES,
            "metadata": {"name": stem},
            "labels": values,
        }
        doc = YamlDocument(data=document, file=file, start=(1, 1))
        for key, number in lines.items():
            doc.keys[("labels", key)] = (number, 1)
            doc.values[("labels", key)] = (number, len(key) + 2)
        doc.values[("metadata", "name")] = (1, 1)
        self._node_features(doc)

    def _matrix_document(self, doc: YamlDocument) -> None:
        try:
            model = DriverSupportMatrix.model_validate(doc.data)
        except ValidationError as e:
            self.problems.extend(model_problems(e, doc, DriverSupportMatrix))
            return
        for index, image in enumerate(model.rows):
            self._add_row(
                MatrixRow(image.branch, image.kernel, image.osTag, doc.at(("rows", index)))
            )

    def _add_row(self, row: MatrixRow) -> None:
        first = self.matrix.get(row.tag)
        if first is not None:
            self.problems.append(
                diag.error(
                    f"duplicate support-matrix row {row.tag}",
                    row.source,
                    f"first listed at {first.source}",
                )
            )
            return
        self.matrix[row.tag] = row

    def _csv_file(self, path: Path) -> None:
        text = self._read(path)
        if text is None:
            return
        file = self.name(path)
        reader = csv.reader(io.StringIO(text))
        try:
            header = next(reader)
        except (StopIteration, csv.Error) as e:
            self.problems.append(diag.error("malformed CSV", Source(file, 1, 1), str(e)))
            return
        if tuple(h.strip() for h in header) != CSV_HEADER:
            self.problems.append(
                diag.error(
                    f"bad CSV header "
                    f"{labels.shown(','.join(header), labels.SHOWN_NAME, quote=False)!r}",
                    Source(file, 1, 1),
                    f"the first line must be exactly {','.join(CSV_HEADER)}",
                )
            )
            return
        try:
            for cells in reader:
                line = reader.line_num
                if not any(c.strip() for c in cells):
                    continue
                self._csv_row(cells, Source(file, line, 1))
        except csv.Error as e:
            self.problems.append(
                diag.error("malformed CSV", Source(file, reader.line_num, 1), str(e))
            )

    def _csv_row(self, cells: list[str], where: Source) -> None:
        if len(cells) != len(CSV_HEADER):
            self.problems.append(
                diag.error(
                    f"expected {len(CSV_HEADER)} fields, found {len(cells)}",
                    where,
                    ",".join(CSV_HEADER),
                )
            )
            return
        row = dict(zip(CSV_HEADER, (c.strip() for c in cells), strict=True))
        blank = [name for name, value in row.items() if not value]
        if blank:
            self.problems.append(
                diag.error(f"blank field {', '.join(blank)}", where, "every column needs a value")
            )
            return
        try:
            image = DriverImage(
                branch=row["driver_branch"], kernel=row["kernel"], osTag=row["os_tag"]
            )
        except ValidationError as e:
            columns = {"branch": "driver_branch", "kernel": "kernel", "osTag": "os_tag"}
            for item in e.errors(include_url=False):
                column = columns.get(str(item["loc"][0]), str(item["loc"][0]))
                self.problems.append(diag.error(f"{column}: {item['msg']}", where))
            return
        self._add_row(MatrixRow(image.branch, image.kernel, image.osTag, where))

    def _manifest_file(self, path: Path) -> None:
        for doc in self._yaml_documents(path, "Kubernetes object"):
            where = doc.at(())
            body = doc.data
            if not isinstance(body, dict):
                self.problems.append(diag.error("expected a Kubernetes object (a mapping)", where))
                continue
            if (body.get("apiVersion"), body.get("kind")) == ("v1", "Node"):
                self.problems.append(_node_manifest(doc))
                continue
            missing = [
                name
                for name, present in (
                    ("apiVersion", isinstance(body.get("apiVersion"), str) and body["apiVersion"]),
                    ("kind", isinstance(body.get("kind"), str) and body["kind"]),
                    (
                        "metadata.name",
                        isinstance(body.get("metadata"), dict)
                        and isinstance(body["metadata"].get("name"), str)
                        and body["metadata"]["name"],
                    ),
                )
                if not present
            ]
            if missing:
                self.problems.append(
                    diag.error(
                        f"missing required field {', '.join(missing)}",
                        where,
                        "every manifest needs apiVersion, kind and metadata.name",
                    )
                )
                continue
            manifest = Manifest(body, where, doc.values)
            if self._manifest_problems(manifest, doc):
                continue
            key = ObjectId.of(
                manifest.api_version, manifest.kind, manifest.namespace, manifest.name
            )
            first = self._objects.get(key)
            if first is not None:
                self.problems.append(
                    diag.error(f"{key} is declared twice", where, f"first declared at {first}")
                )
                continue
            self._objects[key] = where
            self.manifests.append(manifest)

    def _manifest_problems(self, manifest: Manifest, doc: YamlDocument) -> bool:
        """Report what the API server would refuse, offline; True when anything was found."""
        found = []
        namespaced = BUILTIN_NAMESPACED.get((manifest.api_version, manifest.kind))
        if namespaced and not manifest.namespace:
            found.append(
                diag.error(
                    f"metadata.namespace is required: {manifest.kind} is namespaced",
                    doc.at(("metadata",)),
                    "desired state names its namespaces; nothing defaults to the context's",
                )
            )
        elif namespaced is False and manifest.namespace:
            found.append(
                diag.error(
                    f"{manifest.kind} is cluster-scoped: it has no namespace",
                    doc.at(("metadata", "namespace")),
                    "remove metadata.namespace",
                )
            )
        group = manifest.api_version.rpartition("/")[0]
        for problem in apivalidation.validate_object(
            group, manifest.kind, manifest.body, namespaced=bool(namespaced)
        ):
            if problem.field == "metadata.namespace":
                continue  # reported above, with the table's knowledge
            found.append(
                diag.error(
                    f"{labels.shown(manifest.kind, labels.SHOWN_NAME, quote=False)} "
                    f"{labels.shown(manifest.name, labels.SHOWN_NAME)} is invalid: "
                    + problem.shown(labels.SHOWN_NAME),
                    doc.at(field_path(problem.field)),
                )
            )
        self.problems.extend(found)
        return bool(found)


def _node_manifest(doc: YamlDocument) -> Diagnostic:
    """A Node among the workloads, refused at its kind: node facts have one home, the node
    files and groups. A Node manifest would escape their rules (a group selecting on a
    label only it sets, a label a group sets too, flipping on every apply) and a prune
    of it would delete the Node itself."""
    return diag.error(
        "kind Node may not be declared in desired/workloads",
        doc.at(("kind",)),
        "declare a node's labels, annotations and taints in desired/nodes/<name>.yaml "
        "(kind NodeFeatures) or a NodeGroup in desired/groups/",
    )


def _requirements(selector: LabelSelector) -> list[tuple[str, str, frozenset[str]]]:
    found = [(key, "In", frozenset({value})) for key, value in selector.matchLabels.items()]
    found += [(r.key, r.operator, frozenset(r.values)) for r in selector.matchExpressions]
    return found


def _implies(narrow: LabelSelector, wide: LabelSelector) -> bool:
    """Whether every node `narrow` selects is certainly selected by `wide` too: each of
    `wide`'s requirements follows from one of `narrow`'s (same key)."""
    have = _requirements(narrow)

    def follows(key: str, operator: str, values: frozenset[str]) -> bool:
        for k, op, vals in have:
            if k != key:
                continue
            if operator == "In" and op == "In" and vals <= values:
                return True
            if operator == "Exists" and op in ("In", "Exists"):
                return True
            if operator == "NotIn" and (
                (op == "NotIn" and values <= vals) or (op == "In" and not vals & values)
            ):
                return True
            if operator == "DoesNotExist" and op == "DoesNotExist":
                return True
        return False

    return all(follows(*requirement) for requirement in _requirements(wide))


_FIELD_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]|\[([^\]]*)\]")


def _fact_sources(
    doc: YamlDocument, annotations: dict[str, str | None], taints: list[Taint]
) -> dict[str, Source]:
    """Where each annotation and taint of a document is written, by its shown key."""
    found = {f"annotation:{k}": doc.at(("annotations", k), key=True) for k in annotations}
    found.update({f"taint:{t.identity}": doc.at(("taints", i)) for i, t in enumerate(taints)})
    return found


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


def load_desired(root: Path) -> tuple[DesiredState, list[Diagnostic]]:
    """The desired state under `root` and every problem found in it, sorted by position."""
    loader = _Loader(root)
    state = loader.load()
    return state, sorted(loader.problems, key=diag.sort_key)


def load_with(
    root: Path, entries: list[Entry], layer: Layer
) -> tuple[DesiredState, list[Diagnostic]]:
    """The desired state of the given files under `root` (each with the directory its
    areas are relative to), `layer`'s documents replacing base ones (a fleet cluster)."""
    ordered = sorted(entries, key=lambda e: e[0].split("/"))
    loader = _Loader(root, ordered, layer)
    state = loader.load()
    return state, sorted(loader.problems, key=diag.sort_key)


# --- writing back: change label values in place, keeping the file as its author wrote it ----


def _needs_quotes(value: str) -> bool:
    """Whether a plain scalar would not read back as this string (07, 22.10, true, ...)."""
    resolved = yaml.resolver.Resolver().resolve(ScalarNode, value, (True, False))
    return resolved != _STR or value == "" or value != value.strip()


def write_labels(root: Path, node: DesiredNode, values: dict[str, str]) -> list[str]:
    """Set `values` in the file under `root` (desired/) that declares `node`, in place:
    comments, key order and quoting survive (ruamel.yaml round-trip; `.env` files line by
    line). The keys whose value changed. Never writes through a link or outside `root`."""
    changed, text = render_labels(node, values)
    if changed:
        safefiles.write_inside(root, Path(node.source.file), text)
    return changed


def read_text(path: Path) -> str:
    """A file of desired/ as text, refusing anything but a regular file."""
    return safefiles.read_regular(path).decode("utf-8")


def render_labels(node: DesiredNode, values: dict[str, str]) -> tuple[list[str], str]:
    """What `write_labels` would write: (keys changed, the file's new text)."""
    path = Path(node.source.file)
    if path.suffix == ".env":
        return _render_env(path, values)
    from ruamel.yaml import YAML
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString, SingleQuotedScalarString

    editor = YAML(typ="rt")
    editor.preserve_quotes = True
    editor.width = 4096
    original = read_text(path)
    documents = list(editor.load_all(original))
    changed: list[str] = []
    for document in documents:
        if (
            not isinstance(document, dict)
            or (document.get("metadata") or {}).get("name") != node.name
        ):
            continue
        labels_map = document.setdefault("labels", {})
        for key, value in values.items():
            old = labels_map.get(key)
            if old == value:
                continue
            if isinstance(old, DoubleQuotedScalarString | SingleQuotedScalarString):
                labels_map[key] = type(old)(value)
            elif _needs_quotes(value):
                labels_map[key] = DoubleQuotedScalarString(value)
            else:
                labels_map[key] = value
            changed.append(key)
    if not changed:
        return [], original
    buffer = io.StringIO()
    editor.dump_all(documents, buffer)
    return changed, buffer.getvalue()


def new_node_file(
    name: str, values: dict[str, str], schema: str = "../../schemas/nodefeatures.schema.json"
) -> str:
    """A NodeFeatures file for a node not yet in desired/, as `reconcile import` writes it."""
    lines = [
        f"# yaml-language-server: $schema={schema}",
        f"apiVersion: {API_VERSION}",
        f"kind: {NODE_FEATURES}",
        "metadata:",
        f"  name: {name}",
        "labels:" if values else "labels: {}",
    ]
    for key in sorted(values):
        value = values[key]
        shown = json.dumps(value) if _needs_quotes(value) else value
        lines.append(f"  {key}: {shown}")
    return "\n".join(lines) + "\n"


def new_group_file(
    name: str,
    selector: dict[str, str],
    values: dict[str, str],
    schema: str = "../../schemas/nodegroup.schema.json",
) -> str:
    """A NodeGroup file, as `reconcile import --group-by` writes it."""

    def shown(value: str) -> str:
        return json.dumps(value) if _needs_quotes(value) else value

    lines = [
        f"# yaml-language-server: $schema={schema}",
        f"apiVersion: {API_VERSION}",
        f"kind: {NODE_GROUP}",
        "metadata:",
        f"  name: {name}",
        "selector:",
        "  matchLabels:",
        *(f"    {key}: {shown(value)}" for key, value in sorted(selector.items())),
        "labels:" if values else "labels: {}",
        *(f"  {key}: {shown(values[key])}" for key in sorted(values)),
    ]
    return "\n".join(lines) + "\n"


def _render_env(path: Path, values: dict[str, str]) -> tuple[list[str], str]:
    lines = read_text(path).splitlines(keepends=True)
    changed: list[str] = []
    seen: set[str] = set()
    for index, line in enumerate(lines):
        raw_key, sep, old = line.rstrip("\r\n").partition("=")
        key = raw_key.strip()
        full = key if "/" in key else NFD_DEFAULT_PREFIX + key
        if not sep or full not in values or line.lstrip().startswith("#"):
            continue
        seen.add(full)
        if old != values[full]:
            ending = line[len(line.rstrip("\r\n")) :]
            lines[index] = f"{raw_key}={values[full]}{ending}"
            changed.append(full)
    for key, value in values.items():
        if key not in seen:
            if lines and not lines[-1].endswith("\n"):
                lines[-1] += "\n"
            lines.append(f"{key}={value}\n")
            changed.append(key)
    return changed, "".join(lines)
