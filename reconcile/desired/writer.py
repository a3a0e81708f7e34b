"""Writes desired/ files: label values changed in place, keeping each file as its author
wrote it (comments, key order, quoting), and new node and group files."""

from __future__ import annotations

import io
import json
from pathlib import Path

import yaml
from yaml.nodes import ScalarNode

from reconcile import files as safefiles
from reconcile.desired.models import API_VERSION, NODE_FEATURES, NODE_GROUP, DesiredNode
from reconcile.desired.reader import NFD_DEFAULT_PREFIX
from reconcile.desired.yamlpos import STR_TAG


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
