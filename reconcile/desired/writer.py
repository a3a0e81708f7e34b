"""Writes YAML: label values of desired/ files changed in place, keeping each file as its
author wrote it (comments, key order, quoting); new node and group files; and documents
with comments for other commands' output (`reconcile rbac`)."""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml
from yaml.nodes import ScalarNode

from reconcile import files as safefiles
from reconcile.desired.models import API_VERSION, NODE_FEATURES, NODE_GROUP, DesiredNode
from reconcile.desired.reader import NFD_DEFAULT_PREFIX
from reconcile.desired.yamlpos import STR_TAG, PathT


def _needs_quotes(value: str) -> bool:
    """Whether a plain scalar would not read back as this string (07, 22.10, true, ...)."""
    resolved = yaml.resolver.Resolver().resolve(ScalarNode, value, (True, False))
    return resolved != STR_TAG or value == "" or value != value.strip()


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


def dump_documents(documents: Sequence[Any], comments: Mapping[PathT, str] | None = None) -> str:
    """The documents (mappings, or a list at the top, as `-o yaml` has one) as one YAML
    stream (`---` between them) that reads back as the same data under YAML 1.1 (kubectl's
    reading) and 1.2: mappings in block style, in their key
    order; lists of scalars in flow style (`[get, list]`), other lists in block style;
    strings double-quoted unless every reader takes them unquoted for the same string.

    `comments` puts a comment (its lines each written `# line`) before what a path names:
    `(i,)` document i, `(i, "rules", 2)` the third item of document i's `rules`,
    `(i, "metadata")` a key."""
    from ruamel.yaml import YAML

    editor = YAML(typ="rt")
    editor.width = sys.maxsize  # a flow list stays on one line, however long
    # Non-ASCII escaped: U+0085, U+2028 and U+2029 are line breaks to YAML 1.1, text to 1.2.
    editor.allow_unicode = False
    built = [_node(document) for document in documents]
    for path, text in (comments or {}).items():
        _comment(built, path, text)
    buffer = io.StringIO()
    editor.dump_all(built, buffer)
    return buffer.getvalue()


def _node(value: Any) -> Any:
    """`value` as ruamel's round-trip nodes, styled as `dump_documents` promises."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString

    if isinstance(value, Mapping):
        return CommentedMap((_node(key), _node(item)) for key, item in value.items())
    if isinstance(value, list | tuple):
        items = CommentedSeq(_node(item) for item in value)
        if not any(isinstance(item, Mapping | list | tuple) for item in value):
            items.fa.set_flow_style()
        return items
    if isinstance(value, str) and not _plain_everywhere(value):
        return DoubleQuotedScalarString(value)
    return value


# Words YAML 1.1 reads as booleans or null, in any case (kubectl reads `yes` as true).
_YAML_WORDS: Final = frozenset(["y", "yes", "n", "no", "true", "false", "on", "off", "null", "~"])
_PLAIN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")
# Anything YAML 1.1, 1.2 or go-yaml might read as a number or a date (`1e3`, `0x1F`,
# `2001-12-14`, `1_000`): more than PyYAML's resolver, which reads `1e3` as text.
_NUMBERISH: Final = re.compile(r"[-+]?(\.?[0-9][0-9_.:eE+-]*|0[xob][0-9a-fA-F_]+)")


def _plain_everywhere(text: str) -> bool:
    """Whether `text` unquoted reads back as this string to every YAML reader."""
    return bool(
        _PLAIN.fullmatch(text)
        and text.lower() not in _YAML_WORDS
        and not _NUMBERISH.fullmatch(text)
    )


def _comment(documents: list[Any], path: PathT, text: str) -> None:
    """Attach `text` before what `path` names (see `dump_documents`), at the column the
    emitter writes it (mappings indented by two, a list's dashes at its key's column)."""
    index, *rest = path
    node = documents[int(index)]
    if not rest:
        node.yaml_set_start_comment(text)
        return
    column = 0  # where the keys of a mapping, or the dashes of a list, start
    for step in rest[:-1]:
        child = node[step]
        if isinstance(node, Mapping) and isinstance(child, Mapping):
            column += 2
        elif isinstance(node, list):
            column += 2  # an item's content starts after its dash
        node = child
    node.yaml_set_comment_before_after_key(rest[-1], before=text, indent=column)
