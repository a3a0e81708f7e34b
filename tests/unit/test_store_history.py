"""The sandbox store's history of writes, which watches are served from."""

from __future__ import annotations

from typing import Any

from reconcile.sandbox.store import Store


def _put(store: Store, name: str, **labels: str) -> dict[str, Any]:
    obj = {
        "metadata": {
            "name": name,
            "labels": labels,
            "resourceVersion": store.next_resource_version(),
        }
    }
    store.put("/nodes", ("", name), obj)
    return obj


def test_every_write_is_one_event_with_its_own_resource_version() -> None:
    store = Store()
    first = _put(store, "a", x="1")
    _put(store, "a", x="2")
    store.delete("/nodes", ("", "a"))

    events = store.events_after(0)

    assert events is not None
    assert [(e.resource_version, e.type) for e in events] == [
        (1, "ADDED"),
        (2, "MODIFIED"),
        (3, "DELETED"),
    ]
    assert events[1].previous is first
    # The DELETED object is the last state, at the deletion's resourceVersion.
    assert events[2].obj["metadata"] == {"name": "a", "labels": {"x": "2"}, "resourceVersion": "3"}
    assert store.resource_version == "3"
    assert [e.resource_version for e in store.events_after(2) or ()] == [3]


def test_the_history_is_bounded_and_compaction_forgets_it() -> None:
    store = Store(history=2)
    for value in "123":
        _put(store, "a", x=value)
    assert store.horizon == 1
    assert store.events_after(0) is None  # what came after 0 is partly gone
    assert [e.resource_version for e in store.events_after(1) or ()] == [2, 3]

    store.compact()

    assert store.horizon == 3
    assert store.events_after(2) is None
    assert store.events_after(3) == []
