"""Drift between desired and live state, as our own `Change` records.

Label drift is left-scoped: only keys the desired side declares are compared, so labels
that other writers own are never part of a plan. Node labels are a flat map, so a direct
comparison is both exact and fastest at fleet scale; deepdiff is used where structure
is nested (workload objects).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict


class Action(enum.StrEnum):
    """What a change does; the glyph is what the views draw for it."""

    ADD = "add"
    UPDATE = "update"
    REMOVE = "remove"

    @property
    def glyph(self) -> str:
        return {"add": "+", "update": "~", "remove": "-"}[self.value]


class LabelChange(BaseModel):
    """One label to set or remove on one node."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    action: Action
    before: str | None
    after: str | None
    owner: str | None = None

    @property
    def shown_value(self) -> str:
        """The desired value as drift lines print it: `""` when empty, `-` when absent."""
        if self.after is None:
            return "-"
        return self.after if self.after else '""'


def label_drift(
    desired: Mapping[str, str | None],
    live: Mapping[str, str],
    prune: Iterable[str] = (),
) -> list[LabelChange]:
    """Changes that make `live` carry `desired`; keys in `prune` are removed if present.

    A missing label and an empty one are different facts: `None` (absent) never equals "".
    """
    changes = []
    for key, want in desired.items():
        have = live.get(key)
        if want == have:
            continue
        if want is None:
            changes.append(LabelChange(key=key, action=Action.REMOVE, before=have, after=None))
        elif have is None:
            changes.append(LabelChange(key=key, action=Action.ADD, before=None, after=want))
        else:
            changes.append(LabelChange(key=key, action=Action.UPDATE, before=have, after=want))
    for key in prune:
        if key not in desired and key in live:
            changes.append(LabelChange(key=key, action=Action.REMOVE, before=live[key], after=None))
    return sorted(changes, key=lambda change: change.key)


class FieldChange(BaseModel):
    """One field of a workload object whose live value differs from the manifest."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: tuple[str | int, ...]
    before: Any = None
    after: Any = None
    present_before: bool = True


def object_drift(desired: Any, live: Any) -> list[FieldChange]:
    """Fields set in `desired` whose value in `live` differs (left-scoped, nested)."""
    from deepdiff import DeepDiff  # imported here: commands without workloads skip its cost

    diff = DeepDiff(live, desired, view="tree", ignore_order=False, verbose_level=2)
    changes: dict[tuple[str | int, ...], FieldChange] = {}
    for kind in ("values_changed", "type_changes", "dictionary_item_added", "iterable_item_added"):
        for level in diff.get(kind, []):
            path = tuple(level.path(output_format="list"))
            changes[path] = FieldChange(
                path=path,
                before=None if kind.endswith("added") else level.t1,
                after=level.t2,
                present_before=not kind.endswith("added"),
            )
    for level in diff.get("iterable_item_removed", []):
        # A list in the manifest is owned whole: a shorter list is a change of the list.
        path = tuple(level.path(output_format="list"))[:-1]
        changes[path] = FieldChange(path=path, before=_get(live, path), after=_get(desired, path))
    return [changes[path] for path in sorted(changes, key=lambda p: tuple(map(str, p)))]


def _get(data: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        data = data[part]
    return data
