"""One desired/ tree for many clusters: `desired/clusters.yaml` (kind Fleet) names them;
`desired/{groups,drivers,workloads}` is the base every cluster gets and
`desired/clusters/<name>/{nodes,groups,drivers,workloads}` is laid over it for one cluster.

A document in an overlay with the identity (API group, kind, namespace, name) of a base
document replaces it for that cluster; an overlay document carrying `$patch: delete`
(Kustomize's directive) excludes it. Node files live only in overlays: node names belong
to a cluster. Without clusters.yaml nothing here applies and the tree is one cluster's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pydantic import ValidationError

from reconcile import diagnostics as diag
from reconcile import files as safefiles
from reconcile.desired import reader
from reconcile.desired.models import FLEET, NODE_FEATURES, DesiredState, Fleet, FleetCluster
from reconcile.desired.problems import model_problems
from reconcile.desired.yamlpos import not_utf8, parse_yaml
from reconcile.diagnostics import Diagnostic, Source

FLEET_FILE: Final = "clusters.yaml"
OVERLAYS: Final = "clusters"
BASE_AREAS: Final = ("groups", "drivers", "workloads")


@dataclass(frozen=True)
class DesiredFleet:
    """The clusters and, for each, its merged desired state."""

    name: str
    clusters: tuple[FleetCluster, ...]
    trees: dict[str, DesiredState]
    source: Source

    def cluster(self, name: str) -> FleetCluster:
        return next(c for c in self.clusters if c.name == name)

    @property
    def waves(self) -> list[list[FleetCluster]]:
        """The clusters by wave, ascending; each wave in the order the fleet lists them."""
        numbers = sorted({c.wave for c in self.clusters})
        return [[c for c in self.clusters if c.wave == n] for n in numbers]


def is_fleet(root: Path) -> bool:
    return (root / FLEET_FILE).is_file()


def load(root: Path) -> tuple[DesiredFleet | None, DesiredState, list[Diagnostic]]:
    """Without desired/clusters.yaml: (None, the tree, its problems), as load_desired.
    With it: (the fleet, an empty state, the problems of every cluster's tree, each once)."""
    if safefiles.linked_root(root) or not is_fleet(root):
        # A root that is a link is refused by the tree's reader, its clusters.yaml unread.
        state, problems = reader.load_desired(root)
        return None, state, problems
    fleet_reader = _FleetReader(root)
    fleet = fleet_reader.read()
    problems = sorted(dict.fromkeys(fleet_reader.problems), key=diag.sort_key)
    return fleet, DesiredState(), problems


def clusters(root: Path) -> tuple[FleetCluster, ...] | None:
    """The clusters `root`/clusters.yaml names, when that file reads and validates on its
    own (the rest of the tree unread); None otherwise (`load` says why)."""
    model, _ = _FleetReader(root)._fleet(root / FLEET_FILE)
    return None if model is None else tuple(model.clusters)


class _FleetReader:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.names = reader.FileNames(root)
        self.shown_root = self.names.shown_root
        self.problems: list[Diagnostic] = []

    def name(self, path: str | Path) -> str:
        return self.names.shown(path)

    def read(self) -> DesiredFleet | None:
        fleet_path = self.root / FLEET_FILE
        model, where = self._fleet(fleet_path)
        if model is None:
            return None
        names = [c.name for c in model.clusters]
        base: list[reader.Entry] = []
        overlays: dict[str, list[reader.Entry]] = {n: [] for n in names}
        overlay_roots = {n: self.root / OVERLAYS / n for n in names}
        for text, refused in safefiles.walk(self.root):
            parts = self.names.relative(text).split("/")
            top = parts[0]
            if parts == [FLEET_FILE]:
                continue
            if top == OVERLAYS and len(parts) > 2:
                cluster = parts[1]
                if cluster in overlays:
                    overlays[cluster].append((text, refused, overlay_roots[cluster]))
                else:
                    self.problems.append(
                        diag.error(
                            f"an overlay for cluster {cluster}, which {FLEET_FILE} does not name",
                            Source(self.name(text), 1, 1),
                            f"the fleet's clusters: {', '.join(names)}; add it to "
                            f"{self.name(fleet_path)} or move the directory",
                        )
                    )
            elif top == "nodes":
                self.problems.append(
                    diag.error(
                        "node files do not belong in the base of a fleet",
                        Source(self.name(text), 1, 1),
                        "node names belong to a cluster: move it to "
                        f"{self.shown_root}/{OVERLAYS}/<cluster>/nodes/",
                    )
                )
            else:
                base.append((text, refused, self.root))
        base_ids = {found for found, _, _ in self._identities(base)}
        # An overlay's node files are most of a fleet's files. One shadows nothing unless
        # the base declares nodes (which is an error of its own) or it holds a directive:
        # the others are not parsed here, only by the tree's reader.
        nodes_shadow = any(kind == NODE_FEATURES for _, kind, _, _ in base_ids)
        trees = {}
        for name in names:
            trees[name] = self._tree(name, base, overlays[name], base_ids, nodes_shadow)
        return DesiredFleet(model.metadata.name, tuple(model.clusters), trees, where)

    def _fleet(self, path: Path) -> tuple[Fleet | None, Source]:
        where = Source(self.name(path), 1, 1)
        try:
            data = safefiles.read_regular(path)
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            self.problems.append(not_utf8(data, e, self.name(path)))
            return None, where
        except (safefiles.UnsafeFile, OSError) as e:
            self.problems.append(diag.error(f"cannot read {FLEET_FILE}", where, str(e)))
            return None, where
        documents, problems = parse_yaml(text, self.name(path))
        self.problems.extend(problems)
        if problems:
            return None, where
        if len(documents) != 1 or not isinstance(documents[0].data, dict):
            self.problems.append(
                diag.error(f"{FLEET_FILE} holds exactly one {FLEET} document", where)
            )
            return None, where
        doc = documents[0]
        try:
            return Fleet.model_validate(doc.data), doc.at(())
        except ValidationError as e:
            self.problems.extend(model_problems(e, doc, Fleet))
            return None, where

    def _identities(
        self, entries: list[reader.Entry], *, node_files: bool = True
    ) -> Iterator[tuple[reader.Identity, object, Source]]:
        """(identity, its `$patch` directive or None, where) of every YAML document in
        `entries`; files that cannot be read or parsed are skipped (the tree's reader
        reports them). Without `node_files`, a node file is skipped unless it may hold a
        directive: the key `$patch` written out, or a backslash (an escape could spell it)."""
        for path, refused, _ in entries:
            if refused is not None or not path.lower().endswith(reader.YAML_SUFFIXES):
                continue
            try:
                text = safefiles.read_regular(path).decode("utf-8")
            except (safefiles.UnsafeFile, UnicodeDecodeError, OSError):
                continue
            if (
                not node_files
                and self._is_node_file(path)
                and reader.PATCH_DIRECTIVE not in text
                and "\\" not in text
            ):
                continue
            documents, problems = parse_yaml(text, self.name(path))
            if problems:
                continue
            for doc in documents:
                found = reader.identity(doc.data)
                if found is not None:
                    assert isinstance(doc.data, dict)  # identity() found one
                    yield found, doc.data.get(reader.PATCH_DIRECTIVE), doc.at(())

    def _is_node_file(self, path: str) -> bool:
        """An overlay's nodes/<file>."""
        parts = self.names.relative(path).split("/")
        return len(parts) == 4 and parts[0] == OVERLAYS and parts[2] == "nodes"

    def _tree(
        self,
        name: str,
        base: list[reader.Entry],
        overlay: list[reader.Entry],
        base_ids: set[reader.Identity],
        nodes_shadow: bool,
    ) -> DesiredState:
        shadowed: set[reader.Identity] = set()
        for found, directive, where in self._identities(overlay, node_files=nodes_shadow):
            if directive is not None and directive != "delete":
                self.problems.append(
                    diag.error(
                        f"unknown directive {reader.PATCH_DIRECTIVE}: {directive}",
                        where,
                        f"`{reader.PATCH_DIRECTIVE}: delete` excludes the base document of "
                        "the same apiVersion, kind, namespace and name for this cluster",
                    )
                )
            elif directive is not None and found not in base_ids:
                self.problems.append(
                    diag.error(
                        f"excludes {reader.shown_identity(found)}, which the base does not declare",
                        where,
                        "an overlay excludes base documents only; remove this one",
                    )
                )
            if found in base_ids:
                shadowed.add(found)
        layer = reader.Layer(self.root / OVERLAYS / name, frozenset(shadowed))
        state, problems = reader.load_with(self.root, [*base, *overlay], layer)
        self.problems.extend(problems)
        return state
