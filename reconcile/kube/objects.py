"""What reconcile reads from the API server, as plain values: a node as far as the plan
needs it, and a kind as discovery serves it."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

# The field manager of every write reconcile makes (server-side apply and label patches).
FIELD_MANAGER: Final = "reconcile"


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values, as Go's reflect.DeepEqual compares unstructured objects:
    `1`, `1.0` and `true` are three different values."""
    if isinstance(a, Mapping):
        return (
            isinstance(b, Mapping)
            and a.keys() == b.keys()
            and all(same_json(v, b[k]) for k, v in a.items())
        )
    if isinstance(a, list):
        return (
            isinstance(b, list)
            and len(a) == len(b)
            and all(same_json(x, y) for x, y in zip(a, b, strict=True))
        )
    return type(a) is type(b) and a == b


@dataclass(frozen=True)
class LiveNode:
    """What the cluster says about one node, as far as reconcile needs it."""

    name: str
    resource_version: str
    labels: dict[str, str]
    annotations: dict[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    taints: tuple[dict[str, Any], ...] = ()
    # label key -> the field manager that last wrote it (from metadata.managedFields;
    # worked out only when asked: most plans never ask)
    label_managers: Mapping[str, str] = field(default_factory=dict)
    # status.conditions Ready is True
    ready: bool = True
    # status.allocatable as the kubelet reports it (resource -> quantity)
    allocatable: Mapping[str, str] = field(default_factory=dict)
    # status.capacity: what the node has before the kubelet's reservations
    capacity: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeEvent:
    """One event of a watch of the nodes: ADDED, MODIFIED or DELETED with the node, or
    BOOKMARK (no node) marking how far the stream has come."""

    type: str
    resource_version: str
    node: LiveNode | None = None


@dataclass(frozen=True)
class ApiResource:
    """A kind as the API server serves it (from discovery)."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str = "", name: str = "") -> str:
        """The REST path of the collection (no name) or of one object."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


class Lazy(Mapping[str, str]):
    """A mapping worked out by `compute` on first use."""

    def __init__(self, compute: Callable[[], dict[str, str]]) -> None:
        self._compute: Callable[[], dict[str, str]] | None = compute
        self._found: dict[str, str] = {}

    def _mapping(self) -> dict[str, str]:
        if self._compute is not None:
            self._found, self._compute = self._compute(), None
        return self._found

    def __getitem__(self, key: str) -> str:
        return self._mapping()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._mapping())

    def __len__(self) -> int:
        return len(self._mapping())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._mapping())
