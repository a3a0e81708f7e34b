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
from reconcile.desired import loader
from reconcile.desired.models import FLEET, DesiredState, Fleet, FleetCluster
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
    if not is_fleet(root):
        state, problems = loader.load_desired(root)
        return None, state, problems
    reader = _FleetReader(root)
    fleet = reader.read()
    problems = sorted(dict.fromkeys(reader.problems), key=diag.sort_key)
    return fleet, DesiredState(), problems


class _FleetReader:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.shown_root = diag.relative(root, Path.cwd().resolve())
        self.problems: list[Diagnostic] = []

    def name(self, path: Path) -> str:
        return str(Path(self.shown_root) / path.relative_to(self.root))

    def read(self) -> DesiredFleet | None:
        fleet_path = self.root / FLEET_FILE
        model, where = self._fleet(fleet_path)
        if model is None:
            return None
        names = [c.name for c in model.clusters]
        base: list[tuple[Path, str | None, Path]] = []
        overlays: dict[str, list[tuple[Path, str | None, Path]]] = {n: [] for n in names}
        for text, refused in safefiles.walk(self.root):
            path = Path(text)
            relative = path.relative_to(self.root)
            top = relative.parts[0]
            if path == fleet_path:
                continue
            if top == OVERLAYS and len(relative.parts) > 2:
                cluster = relative.parts[1]
                if cluster in overlays:
                    overlays[cluster].append((path, refused, self.root / OVERLAYS / cluster))
                else:
                    self.problems.append(
                        diag.error(
                            f"an overlay for cluster {cluster}, which {FLEET_FILE} does not name",
                            Source(self.name(path), 1, 1),
                            f"the fleet's clusters: {', '.join(names)}; add it to "
                            f"{self.name(fleet_path)} or move the directory",
                        )
                    )
            elif top == "nodes":
                self.problems.append(
                    diag.error(
                        "node files do not belong in the base of a fleet",
                        Source(self.name(path), 1, 1),
                        "node names belong to a cluster: move it to "
                        f"{self.shown_root}/{OVERLAYS}/<cluster>/nodes/",
                    )
                )
            else:
                base.append((path, refused, self.root))
        base_ids = {found for found, _, _ in self._identities(base)}
        trees = {}
        for name in names:
            trees[name] = self._tree(name, base, overlays[name], base_ids)
        return DesiredFleet(model.metadata.name, tuple(model.clusters), trees, where)

    def _fleet(self, path: Path) -> tuple[Fleet | None, Source]:
        where = Source(self.name(path), 1, 1)
        try:
            text = safefiles.read_regular(path).decode("utf-8")
        except (safefiles.UnsafeFile, UnicodeDecodeError, OSError) as e:
            self.problems.append(diag.error(f"cannot read {FLEET_FILE}", where, str(e)))
            return None, where
        documents, problems = loader.parse_yaml(text, self.name(path))
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
            self.problems.extend(loader.model_problems(e, doc, Fleet))
            return None, where

    def _identities(
        self, entries: list[tuple[Path, str | None, Path]]
    ) -> Iterator[tuple[loader.Identity, object, Source]]:
        """(identity, its `$patch` directive or None, where) of every YAML document in
        `entries`; files that cannot be read or parsed are skipped (the tree's reader
        reports them)."""
        for path, refused, _ in entries:
            if refused is not None or path.suffix.lower() not in loader.YAML_SUFFIXES:
                continue
            try:
                text = safefiles.read_regular(path).decode("utf-8")
            except (safefiles.UnsafeFile, UnicodeDecodeError, OSError):
                continue
            documents, problems = loader.parse_yaml(text, self.name(path))
            if problems:
                continue
            for doc in documents:
                found = loader.identity(doc.data)
                if found is not None:
                    assert isinstance(doc.data, dict)  # identity() found one
                    yield found, doc.data.get(loader.PATCH_DIRECTIVE), doc.at(())

    def _tree(
        self,
        name: str,
        base: list[tuple[Path, str | None, Path]],
        overlay: list[tuple[Path, str | None, Path]],
        base_ids: set[loader.Identity],
    ) -> DesiredState:
        shadowed: set[loader.Identity] = set()
        for found, directive, where in self._identities(overlay):
            if directive is not None and directive != "delete":
                self.problems.append(
                    diag.error(
                        f"unknown directive {loader.PATCH_DIRECTIVE}: {directive}",
                        where,
                        f"`{loader.PATCH_DIRECTIVE}: delete` excludes the base document of "
                        "the same apiVersion, kind, namespace and name for this cluster",
                    )
                )
            elif directive is not None and found not in base_ids:
                self.problems.append(
                    diag.error(
                        f"excludes {loader.shown_identity(found)}, which the base does not declare",
                        where,
                        "an overlay excludes base documents only; remove this one",
                    )
                )
            if found in base_ids:
                shadowed.add(found)
        layer = loader.Layer(self.root / OVERLAYS / name, frozenset(shadowed))
        state, problems = loader.load_with(self.root, [*base, *overlay], layer)
        self.problems.extend(problems)
        return state
