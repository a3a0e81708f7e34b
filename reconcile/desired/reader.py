"""Reads desired/ into a validated `DesiredState`, with every problem found as a diagnostic.

YAML documents come from yamlpos.py with their positions; node files in the simple shape
are read by simple.py. The `.env` (NFD local feature file) and `.csv` (support matrix)
compat formats are read here.

Layout:
    desired/nodes/*.yaml|*.yml     NodeFeatures (several documents per file allowed)
    desired/nodes/*.env            one node's labels, NFD local-feature-file format
    desired/drivers/*.yaml|*.yml   DriverSupportMatrix
    desired/drivers/*.csv          driver_branch,kernel,os_tag
    desired/workloads/**.yaml      plain Kubernetes manifests
    desired/workloads/**/kustomization.yaml   a directory rendered by kustomize (kustomize.py)
"""

from __future__ import annotations

import csv
import hashlib
import io
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from reconcile import diagnostics as diag
from reconcile import files as safefiles
from reconcile.desired import kustomize, simple
from reconcile.desired.models import (
    ANNOTATIONS_MAX_BYTES,
    API_VERSION,
    DISRUPTIVE_FACTS,
    DRIVER_SUPPORT_MATRIX,
    KINDS,
    NODE_FEATURES,
    NODE_GROUP,
    DesiredGroup,
    DesiredNode,
    DesiredState,
    DisruptiveFact,
    DisruptiveFacts,
    DriverImage,
    DriverSupportMatrix,
    LabelSelector,
    Manifest,
    MatrixRow,
    MigConfig,
    NodeFeatures,
    NodeGroup,
    Taint,
    taint_facts,
)
from reconcile.desired.problems import field_path, mistyped_problems, model_problems, type_problem
from reconcile.desired.reserved import inventories_size
from reconcile.desired.yamlpos import PathT, YamlDocument, not_utf8, parse_yaml
from reconcile.diagnostics import Diagnostic, Source
from reconcile.kube import labels, shapes
from reconcile.kube import validation as apivalidation
from reconcile.kube.kinds import BUILTIN_NAMESPACED, ObjectId
from reconcile.kube.selector import SelectorError, from_label_selector

YAML_SUFFIXES: Final = (".yaml", ".yml")
CSV_HEADER: Final = ("driver_branch", "kernel", "os_tag")
# NFD puts unprefixed names of a local feature file under this prefix; so do we.
NFD_DEFAULT_PREFIX: Final = "feature.node.kubernetes.io/"


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


@dataclass
class _Kustomized:
    """The kustomization directories of a tree: the entries kustomize reads (never read as
    manifests of their own) and the kustomizations to render, each with whether it may be."""

    owned: set[str]
    roots: list[tuple[kustomize.Kustomization, bool]]


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
        self.gates: list[Manifest] = []
        self.disruptive: list[tuple[DisruptiveFact, Source]] = []
        self._disruptive_seen: dict[str, Source] = {}
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
        if safefiles.linked_root(self.root):
            self.problems.append(
                diag.error(
                    safefiles.ROOT_REFUSED,
                    # As given: the shown name would resolve the link into the other tree.
                    Source(str(self.root)),
                    safefiles.ROOT_ALLOWED,
                )
            )
            return DesiredState()
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
        # Only when some file is named like a kustomization: no other cost otherwise.
        kustomized = (
            self._kustomizations(entries)
            if any(e[0].rpartition("/")[2] in kustomize.KUSTOMIZATION_FILES for e in entries)
            else None
        )
        for text, refused, base in entries:
            if refused is not None:
                self._refuse(text, refused)
                continue
            parts = _parts(text, base)
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
            elif area == "disruptive" and len(parts) == 2 and suffix in YAML_SUFFIXES:
                self._yaml_file(Path(text), DISRUPTIVE_FACTS)
            elif area == "gates" and len(parts) == 2 and suffix in YAML_SUFFIXES:
                self._gate_file(Path(text))
            elif kustomized is not None and area == "workloads" and text in kustomized.owned:
                continue  # read by kustomize, not as a manifest of its own
            elif area == "workloads" and suffix in (*YAML_SUFFIXES, ".json"):
                self._manifest_file(Path(text))
            elif suffix in (*YAML_SUFFIXES, ".env", ".csv", ".json"):
                self.problems.append(
                    diag.warning(
                        "file ignored",
                        Source(self.name(text)),
                        "desired state lives in nodes/*.yaml|*.env, groups/*.yaml, "
                        "drivers/*.yaml|*.csv, workloads/**.yaml, gates/*.yaml and "
                        "disruptive/*.yaml",
                    )
                )
        if kustomized is not None:
            self._render(kustomized)
        self._selectors_on_declared_keys()
        self._annotation_budget()
        return DesiredState(
            nodes=dict(sorted(self.nodes.items())),
            groups=tuple(self._groups[name] for name in sorted(self._groups)),
            matrix=tuple(sorted(self.matrix.values(), key=lambda r: r.tag)),
            manifests=tuple(self.manifests),
            mig_configs=tuple(self._mig_configs()),
            gates=tuple(self.gates),
            disruptive=tuple(self.disruptive),
            digest="sha256:" + self._digest.hexdigest(),
        )

    def _mig_configs(self) -> Iterator[MigConfig]:
        """The ConfigMaps whose `config.yaml` is a mig-parted configuration (it names
        `mig-configs`), parsed; a config.yaml that is not YAML is an error at its key."""
        for manifest in self.manifests:
            if (manifest.api_version, manifest.kind) != ("v1", "ConfigMap"):
                continue
            text = (manifest.body.get("data") or {}).get("config.yaml")
            if not isinstance(text, str) or "mig-configs" not in text:
                continue
            name = f"ConfigMap {manifest.namespace}/{manifest.name}"
            where = manifest.at(("data", "config.yaml"))
            documents, problems = parse_yaml(text, where.file)
            if problems:
                self.problems.append(
                    diag.error(f"{name}: config.yaml is not YAML", where, problems[0].message)
                )
                continue
            data = documents[0].data if documents else None
            if isinstance(data, dict) and "mig-configs" in data:
                yield MigConfig(name, data, where)

    def _shown(self, path: Path) -> str:
        """How a path made absolute (by kustomize.py) is named in messages."""
        relative = path.relative_to(kustomize.absolute(self.root))
        return self.name(self.root / relative if relative.parts else self.root)

    def _kustomizations(self, entries: list[Entry]) -> _Kustomized:
        """Every kustomization in a workloads area and those they name, read without
        running anything; what each may not do is reported here. The ones rendered are
        those no other kustomization names (an overlay, not its base) and not components."""
        listing: dict[Path, list[str]] = {}
        candidates: set[Path] = set()
        refused: list[Path] = []
        absolutes = {text: kustomize.absolute(text) for text, _, _ in entries}
        for text, refusal, base in entries:
            path = absolutes[text]
            listing.setdefault(path.parent, []).append(path.name)
            if refusal is not None:
                refused.append(path)
            elif (
                path.name in kustomize.KUSTOMIZATION_FILES and _parts(text, base)[0] == "workloads"
            ):
                candidates.add(path.parent)
        found: dict[Path, kustomize.Kustomization] = {}
        pending = list(candidates)
        while pending:
            directory = pending.pop()
            if directory in found:
                continue
            # A directory named by a kustomization but holding none of this tree's files
            # (another cluster's overlay) is listed as it is.
            names = listing.get(directory) or _listed(directory)
            file = kustomize.kustomization_file(names)
            if file is None:
                continue  # kustomize says what is missing when it renders
            found[directory] = kustomize.read(self.root, directory, file)
            pending.extend(found[directory].directories)
        named = {d for k in found.values() for d in k.directories}
        for k in found.values():
            for message, detail in k.refusals:
                self.problems.append(diag.error(message, Source(self._shown(k.file), 1, 1), detail))
        files = {f for k in found.values() for f in k.files}
        owned = {
            text
            for text, path in absolutes.items()
            if path in files or any(path.is_relative_to(d) for d in found)
        }
        roots = []
        for directory in sorted(candidates):
            root = found.get(directory)
            if root is None or root.component or directory in named:
                continue
            closure = self._closure(directory, found)
            allowed = not any(found[d].refusals for d in closure) and not any(
                r.is_relative_to(d) for r in refused for d in closure
            )
            roots.append((root, allowed))
        return _Kustomized(owned, roots)

    @staticmethod
    def _closure(directory: Path, found: dict[Path, kustomize.Kustomization]) -> set[Path]:
        """`directory` and every kustomization directory it names, directly or not."""
        seen: set[Path] = set()
        pending = [directory]
        while pending:
            current = pending.pop()
            if current in seen or current not in found:
                continue
            seen.add(current)
            pending.extend(found[current].directories)
        return seen

    def _render(self, kustomized: _Kustomized) -> None:
        """Each kustomization that may be rendered, its objects read as manifests written
        in its kustomization file (they have no lines of their own)."""
        runnable = [k for k, allowed in kustomized.roots if allowed]
        if not runnable:
            return
        command = kustomize.renderer()
        if command is None:
            others = len(runnable) - 1
            self.problems.append(
                diag.error(
                    f"cannot render {self._shown(runnable[0].directory)}"
                    + (f" (and {others} other kustomization{'s' * (others > 1)})" if others else "")
                    + ": neither kustomize nor kubectl is on PATH",
                    Source(self._shown(runnable[0].file), 1, 1),
                    "install kustomize (or kubectl, for `kubectl kustomize`), or render the "
                    "directory and commit the manifests instead",
                )
            )
            return
        for k in runnable:
            where = Source(self._shown(k.file), 1, 1)
            try:
                text = kustomize.render(command, k.directory)
            except kustomize.RenderError as e:
                message = str(e).replace(str(kustomize.absolute(self.root)), self._names.shown_root)
                self.problems.append(
                    diag.error(
                        f"kustomize could not render {self._shown(k.directory)}", where, message
                    )
                )
                continue
            data = text.encode("utf-8")
            relative = k.file.relative_to(kustomize.absolute(self.root)).as_posix()
            self._digest.update(relative.encode() + b"\0")
            self._digest.update(len(data).to_bytes(8, "big") + data)
            documents, problems = parse_yaml(text, where.file)
            if problems:
                self.problems.append(
                    diag.error(
                        f"kustomize's output for {self._shown(k.directory)} is not YAML",
                        where,
                        problems[0].message,
                    )
                )
                continue
            in_layer = self.layer is not None and k.directory.is_relative_to(
                kustomize.absolute(self.layer.root)
            )
            for document in documents:
                found = identity(document.data)
                if (
                    self.layer is not None
                    and not in_layer
                    and found is not None
                    and found in self.layer.shadowed
                ):
                    continue
                shown = shown_identity(found) if found is not None else "a document"
                # Positions would be lines of kustomize's output: name the object instead.
                self._manifest(
                    YamlDocument(data=document.data, file=where.file, start=(1, 1)),
                    f"rendered {shown}: ",
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
        # Files are read in a stable order (sorted by walk or load_with), so the digest names
        # the tree's content.
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
                area = {
                    NODE_FEATURES: "nodes",
                    NODE_GROUP: "groups",
                    DISRUPTIVE_FACTS: "disruptive",
                }.get(expected_kind, "drivers")
                if kind is None:
                    summary = "missing required field 'kind'"
                elif not isinstance(kind, str):
                    summary = type_problem("kind", "a string", kind, doc, ("kind",)).summary
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
            elif expected_kind == DISRUPTIVE_FACTS:
                self._disruptive(doc)
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

    def _disruptive(self, doc: YamlDocument) -> None:
        try:
            model = DisruptiveFacts.model_validate(doc.data)
        except ValidationError as e:
            self.problems.extend(model_problems(e, doc, DisruptiveFacts))
            return
        for index, fact in enumerate(model.facts):
            where = doc.at(("facts", index))
            named = fact.key or f"{fact.prefix}*"
            first = self._disruptive_seen.get(named)
            if first is not None:
                self.problems.append(
                    diag.error(
                        f"disruptive fact {named} is declared twice",
                        where,
                        f"first declared at {first}",
                    )
                )
                continue
            self._disruptive_seen[named] = where
            self.disruptive.append((fact, where))

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

    def _gate_file(self, path: Path) -> None:
        """A rollout's gate: one batch/v1 Job, namespaced, not pinned (the rollout pins
        it to each node of a batch). It is run by `rollout --gate job=FILE`, never applied."""
        documents = list(self._yaml_documents(path, "Job"))
        if len(documents) > 1:
            self.problems.append(
                diag.error(
                    f"a gate file holds one Job; this one holds {len(documents)} documents",
                    documents[1].at(()),
                    "put each gate in a file of its own",
                )
            )
            return
        for doc in documents:
            body = doc.data
            where = doc.at(())
            if not isinstance(body, dict) or (body.get("apiVersion"), body.get("kind")) != (
                "batch/v1",
                "Job",
            ):
                self.problems.append(
                    diag.error(
                        "a gate is a Job (apiVersion: batch/v1, kind: Job)",
                        where,
                        "desired/gates/ holds the Jobs `reconcile rollout --gate job=FILE` runs",
                    )
                )
                continue
            mistyped = shapes.mistyped(body)
            if mistyped:
                self.problems.extend(mistyped_problems(mistyped, doc))
                continue
            pinned = (((body.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
                "nodeName"
            )
            if pinned is not None:
                self.problems.append(
                    diag.error(
                        "a gate's Job names no node: the rollout pins it to each node of a batch",
                        doc.at(("spec", "template", "spec", "nodeName")),
                        "remove spec.template.spec.nodeName",
                    )
                )
                continue
            before = len(self.problems)
            if not isinstance((body.get("metadata") or {}).get("name"), str):
                self.problems.append(
                    diag.error("missing required field metadata.name", where, "name the Job")
                )
                continue
            manifest = Manifest(body, where, doc.values, doc.keys)
            if not self._manifest_problems(manifest, doc) and len(self.problems) == before:
                self.gates.append(manifest)

    def _manifest_file(self, path: Path) -> None:
        for doc in self._yaml_documents(path, "Kubernetes object"):
            self._manifest(doc)

    def _manifest(self, doc: YamlDocument, rendered: str = "") -> None:
        """One manifest; `rendered` prefixes its problems (an object kustomize rendered)."""
        before = len(self.problems)
        self._check_manifest(doc)
        if rendered:
            for index in range(before, len(self.problems)):
                problem = self.problems[index]
                self.problems[index] = replace(problem, summary=rendered + problem.summary)

    def _check_manifest(self, doc: YamlDocument) -> None:
        where = doc.at(())
        body = doc.data
        if not isinstance(body, dict):
            self.problems.append(diag.error("expected a Kubernetes object (a mapping)", where))
            return
        if (body.get("apiVersion"), body.get("kind")) == ("v1", "Node"):
            self.problems.append(_node_manifest(doc))
            return
        # Before any rule reads a field: whatever the rules and the engine read has its type.
        mistyped = shapes.mistyped(body)
        if mistyped:
            self.problems.extend(mistyped_problems(mistyped, doc))
            return
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
            return
        manifest = Manifest(body, where, doc.values, doc.keys)
        if self._manifest_problems(manifest, doc):
            return
        key = ObjectId.of(manifest.api_version, manifest.kind, manifest.namespace, manifest.name)
        first = self._objects.get(key)
        if first is not None:
            self.problems.append(
                diag.error(f"{key} is declared twice", where, f"first declared at {first}")
            )
            return
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
        problems = [
            problem
            for problem in apivalidation.validate_object(
                group, manifest.kind, manifest.body, namespaced=bool(namespaced)
            )
            if problem.field != "metadata.namespace"  # reported above, with the table's knowledge
        ]
        if namespaced is None and manifest.namespace:
            # A kind the table does not know: its namespace, if any, is still a namespace's
            # name, which goes into the request's path.
            problems += [
                apivalidation.invalid("metadata.namespace", manifest.namespace, message)
                for message in labels.is_dns1123_label(manifest.namespace)
            ]
        for problem in problems:
            where, at_key = _written_at(manifest, problem)
            found.append(
                diag.error(
                    f"{labels.shown(manifest.kind, labels.SHOWN_NAME, quote=False)} "
                    f"{labels.shown(manifest.name, labels.SHOWN_NAME)} is invalid: "
                    + problem.shown(labels.SHOWN_NAME),
                    doc.at(where, key=at_key),
                )
            )
        self.problems.extend(found)
        return bool(found)


def _written_at(manifest: Manifest, problem: apivalidation.FieldError) -> tuple[PathT, bool]:
    """Where in the manifest the API server's field is written, and whether at its key
    (an invalid map key is the key's fault, not its value's). A Secret's key the server
    names `data[KEY]` (it merges `stringData` into `data` before validating) may be
    written under `stringData`; one the Secret's type needs and lacks, at its `type`."""
    path = field_path(problem.field)
    at_key = len(path) > 1 and problem.bad_value == path[-1]
    body = manifest.body
    if (manifest.api_version, manifest.kind) != ("v1", "Secret") or path[:1] != ("data",):
        return path, at_key
    if len(path) < 2:
        return path, False
    for section in ("stringData", "data"):
        written = body.get(section)
        if isinstance(written, dict) and path[1] in written:
            return (section, *path[1:]), at_key
    return (("type",), False) if "type" in body else (path, False)


def _listed(directory: Path) -> list[str]:
    """The names in `directory`; none when it cannot be listed (kustomize then says why)."""
    try:
        return [path.name for path in directory.iterdir()]
    except OSError:
        return []


def _parts(text: str, base: Path) -> list[str]:
    """The components of the path `text` below `base` (the directory its areas are in)."""
    base_text = str(base).rstrip("/") + "/"
    if text.startswith(base_text):
        return text[len(base_text) :].split("/")
    return list(Path(text).relative_to(base).parts)


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


def _fact_sources(
    doc: YamlDocument, annotations: dict[str, str | None], taints: list[Taint]
) -> dict[str, Source]:
    """Where each annotation and taint of a document is written, by its shown key."""
    found = {f"annotation:{k}": doc.at(("annotations", k), key=True) for k in annotations}
    found.update({f"taint:{t.identity}": doc.at(("taints", i)) for i, t in enumerate(taints)})
    return found


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
