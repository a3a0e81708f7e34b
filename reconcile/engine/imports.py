"""Bringing live nodes under git: `desired/nodes/<node>.yaml` from the labels the nodes
carry, and (on request) the cluster's NodeFeatureRule objects as manifests under
`desired/workloads/nodefeaturerules/`, as file changes to show or write.

Which label keys come in is the caller's policy (the GPU domain's discovered prefixes by
default); keys under kubernetes.io and k8s.io (the kubelet's, the cloud provider's,
node-role) never do, whatever the prefixes say. Existing files are edited in place with
the round-trip writer, so comments, key order and quoting survive.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from reconcile.desired.models import DesiredGroup, DesiredState, json_schemas
from reconcile.desired.writer import (
    dump_documents,
    new_group_file,
    new_node_file,
    read_text,
    render_labels,
)
from reconcile.diagnostics import ReconcileError
from reconcile.files import write_inside
from reconcile.kube import labels
from reconcile.kube.api import NodeApi, ObjectApi
from reconcile.kube.objects import LiveNode
from reconcile.nfd.live import NODE_FEATURE_RULE, node_feature_rules
from reconcile.nfd.model import API_VERSION as NFD_API_VERSION

# Where imported NodeFeatureRule objects go, one file each, under desired/workloads/.
RULES_DIRECTORY = "nodefeaturerules"
# What the API server or a client adds to an object: never part of what git declares.
_SERVER_METADATA = (
    "creationTimestamp",
    "deletionGracePeriodSeconds",
    "deletionTimestamp",
    "generation",
    "managedFields",
    "resourceVersion",
    "selfLink",
    "uid",
)
_CLIENT_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)


@dataclass(frozen=True)
class ImportRequest:
    root: Path  # the desired/ directory
    desired: DesiredState | None  # what it declares now (None: no tree yet)
    keep: tuple[str, ...]  # label key prefixes to bring in
    excluded: tuple[str, ...] = ()
    selector: str | None = None
    # Bootstrap a pooled fleet: one NodeGroup per value of this label (the labels all its
    # nodes share), per-node files only for what differs.
    group_by: str | None = None


@dataclass(frozen=True)
class FileChange:
    """One file import writes: its text before ("" when new) and after."""

    path: Path
    before: str
    after: str
    labels: int
    note: str | None = None  # for the person running it: why the file has the name it has
    # What the file holds when it is not a node's labels (`NodeFeatureRule/<name>`).
    holds: str | None = None


def refused_prefix(prefix: str) -> str | None:
    """Why `--prefix` may not name `prefix`, whatever its spelling."""
    if labels.is_kubernetes_reserved(prefix):
        return (
            f"--prefix {prefix}: labels under kubernetes.io and k8s.io belong to the "
            "kubelet and the cluster, not to desired/"
        )
    return None


def plan_import(request: ImportRequest, cluster: NodeApi) -> list[FileChange]:
    """The files import would write, in node order; nothing is written."""
    nodes = sorted(cluster.list_nodes(label_selector=request.selector), key=lambda n: n.name)
    imported = {node.name: _kept(node, request) for node in nodes}
    # The names become file names and the labels YAML: whatever answered is checked with
    # the API server's rules before anything is written.
    for name, values in imported.items():
        _check_imported(name, values)
    changes: list[FileChange] = []
    if request.group_by is not None:
        imported, changes = _groups(request, request.group_by, nodes, imported)
    for name, values in imported.items():
        if request.group_by is not None and not values:
            continue  # its group says it all
        declared = request.desired.nodes.get(name) if request.desired is not None else None
        if declared is not None:
            path = Path(declared.source.file)
            changed, after = render_labels(declared, values)
            if changed:
                changes.append(FileChange(path, read_text(path), after, len(values)))
        else:
            path = request.root / "nodes" / f"{name}.yaml"
            changes.append(FileChange(path, "", new_node_file(name, values), len(values)))
    return changes


def _groups(
    request: ImportRequest,
    key: str,
    nodes: Sequence[LiveNode],
    imported: dict[str, dict[str, str]],
) -> tuple[dict[str, dict[str, str]], list[FileChange]]:
    """One NodeGroup per value of `key` with the labels all its nodes share; what remains
    per node. The key itself is never declared (a selector may not use a key desired/
    sets)."""
    members: dict[str, list[str]] = {}
    for node in nodes:
        if key in node.labels:
            members.setdefault(node.labels[key], []).append(node.name)
    remaining = {
        name: {k: v for k, v in values.items() if k != key} for name, values in imported.items()
    }
    changes = []
    names_of = _group_names(key, sorted(members))
    for value, names in sorted(members.items()):
        shared = dict(remaining[names[0]])
        for name in names[1:]:
            shared = {k: v for k, v in shared.items() if remaining[name].get(k) == v}
        group, note = names_of[value]
        path = request.root / "groups" / f"{group}.yaml"
        if path.exists() or any(g.name == group for g in _groups_of(request)):
            raise ReconcileError(f"{path}: node group {group} exists already: nothing was written")
        changes.append(
            FileChange(
                path, "", new_group_file(group, {key: value}, shared), len(shared), note=note
            )
        )
        for name in names:
            remaining[name] = {k: v for k, v in remaining[name].items() if k not in shared}
    return remaining, changes


def _groups_of(request: ImportRequest) -> tuple[DesiredGroup, ...]:
    return request.desired.groups if request.desired is not None else ()


def _group_name(key: str, value: str, suffix: str = "") -> str:
    """`nvidia.com/gpu.product`=`NVIDIA-A100` -> `gpu-product-nvidia-a100`: a valid name
    (with `suffix`, cut to leave it room)."""
    raw = f"{key.rpartition('/')[2]}-{value}".lower()
    name = re.sub(r"[^a-z0-9-]+", "-", raw).strip("-")[: 63 - len(suffix)].strip("-")
    return (name or "group") + suffix


def _group_names(key: str, values: Sequence[str]) -> dict[str, tuple[str, str | None]]:
    """A name per value, each a different file: values that make one name (`A100_x` and
    `a100-x`, or two long values cut to one) are numbered in sorted order of the value,
    the first keeping the plain name, as a file manager numbers a copy. Deterministic for
    a set of values; a note for each value whose name was numbered."""
    plain = {value: _group_name(key, value) for value in values}
    taken: set[str] = set()
    named: dict[str, tuple[str, str | None]] = {}
    for value in sorted(values):
        name, number = plain[value], 1
        while name in taken or (number > 1 and name in plain.values()):
            number += 1
            name = _group_name(key, value, f"-{number}")
        taken.add(name)
        note = None
        if number > 1:
            alike = " and ".join(v for v in sorted(values) if plain[v] == plain[value])
            note = (
                f"the {key} values {alike} make one group name, {plain[value]}: the group "
                f"of {value} is {name}"
            )
        named[value] = (name, note)
    return named


def plan_rule_import(
    root: Path, desired: DesiredState | None, cluster: ObjectApi
) -> list[FileChange]:
    """A new file `<root>/workloads/nodefeaturerules/<name>.yaml` per NodeFeatureRule the
    cluster holds, stripped of status and of what the server adds, in name order.
    ReconcileError, with nothing written, when the CRD is absent, when a rule's name is
    not one the API server holds, or when desired/ declares that rule or the file exists:
    import never overwrites a manifest."""
    declared = {
        str(m.body.get("metadata", {}).get("name")): m.source.file
        for m in (desired.manifests if desired is not None else ())
        if (m.body.get("apiVersion"), m.body.get("kind")) == (NFD_API_VERSION, NODE_FEATURE_RULE)
    }
    changes = []
    for obj in node_feature_rules(cluster):
        body = declared_rule(obj)
        name = str(body["metadata"].get("name", ""))
        problems = labels.is_dns1123_subdomain(name)
        if problems:
            raise ReconcileError(
                f"the cluster returned NodeFeatureRule name {labels.go_quote(name)}, which is "
                f"not a valid name ({'; '.join(problems)}): nothing was written"
            )
        path = root / "workloads" / RULES_DIRECTORY / f"{name}.yaml"
        if name in declared:
            raise ReconcileError(
                f"{declared[name]}: declares NodeFeatureRule {name} already: nothing was written"
            )
        if path.exists() or path.is_symlink():
            raise ReconcileError(f"{path}: exists already: nothing was written")
        changes.append(
            FileChange(path, "", dump_documents([body]), 0, holds=f"{NODE_FEATURE_RULE}/{name}")
        )
    return changes


def declared_rule(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A live object as desired/ declares it: apiVersion, kind, metadata without what the
    server and kubectl add, spec; no status."""
    metadata: dict[str, Any] = dict(obj.get("metadata") or {})
    for key in _SERVER_METADATA:
        metadata.pop(key, None)
    annotations = {
        k: v for k, v in (metadata.get("annotations") or {}).items() if k not in _CLIENT_ANNOTATIONS
    }
    if annotations:
        metadata["annotations"] = annotations
    else:
        metadata.pop("annotations", None)
    body: dict[str, Any] = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": metadata,
    }
    if "spec" in obj:
        body["spec"] = obj["spec"]
    return body


_SCHEMA_REF: Final = re.compile(r"^# yaml-language-server: \$schema=(\S+)$", re.MULTILINE)


def write_import(root: Path, changes: Sequence[FileChange]) -> None:
    """Write the files, never through a link or outside `root`. A new file's `$schema`
    points at `schemas/` beside desired/ (where `reconcile schemas` writes), and the
    schema it names is written there when it is missing, so that the reference holds."""
    schemas = root.parent / "schemas"
    published = json_schemas()
    for change in changes:
        after = change.after
        found = _SCHEMA_REF.search(after) if not change.before else None
        if found is not None and (name := Path(found[1]).name) in published:
            ref = os.path.relpath(schemas / name, change.path.parent)
            after = after[: found.start(1)] + ref + after[found.end(1) :]
            target = schemas / name
            if not target.exists():
                schemas.mkdir(exist_ok=True)
                target.write_text(json.dumps(published[name], indent=2, sort_keys=True) + "\n")
        write_inside(root, change.path, after)


def _kept(node: LiveNode, request: ImportRequest) -> dict[str, str]:
    return {
        k: v
        for k, v in node.labels.items()
        if k.startswith(request.keep)
        and not k.startswith(request.excluded)
        and not labels.is_kubernetes_reserved(k)
    }


def _check_imported(name: str, values: dict[str, str]) -> None:
    """Refuse a node name or label the API server would not hold (from a proxy or a server
    that does not validate): it would become a path outside desired/ or broken YAML."""
    problems = labels.is_dns1123_subdomain(name)
    if problems:
        raise ReconcileError(
            f"the cluster returned node name {labels.go_quote(name)}, which is not a valid "
            f"node name ({'; '.join(problems)}): nothing was written"
        )
    for key, value in values.items():
        for problem in labels.label_errors({key: value}):
            raise ReconcileError(
                f"node {name}: the cluster returned label {labels.go_quote(key)}="
                f"{labels.go_quote(value)}, which the API server's rules refuse "
                f"({problem[1]}): nothing was written"
            )
