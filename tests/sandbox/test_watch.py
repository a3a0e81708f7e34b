"""WATCH through the official client's `Watch().stream`, as a controller uses it.

These run against a real cluster too (RECONCILE_TEST_KUBECONFIG); what only the sandbox
can do (compact its history, break its streams, stop) is skipped there. The test control
plane's etcd (3.5.1) lacks RequestWatchProgress, so against it no test watches with
resourceVersion unset, nor with "0" and bookmarks: v1.36 serves those as watch-list.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from reconcile.sandbox import Sandbox
from reconcile.sandbox import watch as sandbox_watch
from tests.support import TestCluster, lab_objects, wait_for

Event = dict[str, Any]
GPU = "nvidia.com/gpu.present=true"


@pytest.fixture
def core(lab: TestCluster) -> Any:
    return client.CoreV1Api(lab.api_client)


@pytest.fixture
def sandbox(lab: TestCluster) -> Sandbox:
    if lab.sandbox is None:
        pytest.skip("drives the sandbox itself")
    return lab.sandbox


def stream(
    func: Callable[..., Any], done: Callable[[list[Event]], bool], **kwargs: Any
) -> list[Event]:
    """Raw events ({type, object}) until `done` says so or the server ends the stream
    (timeoutSeconds, 10 unless given: a failing test never hangs)."""
    kwargs.setdefault("timeout_seconds", 10)
    seen: list[Event] = []
    watcher = watch.Watch()
    for event in watcher.stream(func, **kwargs):
        seen.append({"type": event["type"], "object": event["raw_object"]})
        if done(seen):
            watcher.stop()
            break
    return seen


def about(name: str) -> Callable[[Event], bool]:
    return lambda e: e["type"] != "BOOKMARK" and e["object"]["metadata"]["name"] == name


def list_version(core: Any, **kwargs: Any) -> str:
    return str(core.list_node(**kwargs).metadata.resource_version)


# --- what a watch from a LIST's resourceVersion sees ---------------------------------------


def test_a_label_patch_after_the_list_arrives_as_modified(lab: TestCluster, core: Any) -> None:
    version = list_version(core)
    patched = lab.label("lab-node-1", **{"example.com/drift": "yes"})

    events = stream(
        core.list_node,
        lambda seen: any(about("lab-node-1")(e) for e in seen),
        resource_version=version,
    )

    [event] = [e for e in events if about("lab-node-1")(e)]
    assert event["type"] == "MODIFIED"
    assert event["object"]["metadata"]["labels"]["example.com/drift"] == "yes"
    assert event["object"]["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]


def test_a_write_wakes_an_open_watch_at_once(lab: TestCluster, core: Any) -> None:
    version = list_version(core)
    later = threading.Timer(0.2, lambda: lab.label("lab-node-2", **{"example.com/tick": "1"}))
    later.start()
    started = time.monotonic()
    try:
        events = stream(
            core.list_node,
            lambda seen: any(about("lab-node-2")(e) for e in seen),
            resource_version=version,
        )
    finally:
        later.join()
    assert [e["type"] for e in events if about("lab-node-2")(e)] == ["MODIFIED"]
    assert time.monotonic() - started < 2  # woken by the write, not by a poll or a timeout


def test_leaving_then_entering_the_label_selector_is_deleted_then_added(
    lab: TestCluster, core: Any
) -> None:
    """Checked against v1.36: the DELETED object is the one the watcher last saw (still
    matching), at the resourceVersion of the write that made it leave."""
    version = list_version(core, label_selector=GPU)
    left = lab.label("lab-node-1", **{"nvidia.com/gpu.present": "false"})
    back = lab.label("lab-node-1", **{"nvidia.com/gpu.present": "true"})

    events = stream(
        core.list_node,
        lambda seen: len([e for e in seen if about("lab-node-1")(e)]) == 2,
        label_selector=GPU,
        resource_version=version,
    )

    deleted, added = [e for e in events if about("lab-node-1")(e)]
    assert deleted["type"] == "DELETED"
    assert deleted["object"]["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"
    assert deleted["object"]["metadata"]["resourceVersion"] == left["metadata"]["resourceVersion"]
    assert added["type"] == "ADDED"
    assert added["object"]["metadata"]["resourceVersion"] == back["metadata"]["resourceVersion"]


def test_field_selector_and_deletion(lab: TestCluster, core: Any) -> None:
    lab.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "lab-node-9"}})
    version = list_version(core)
    lab.label("lab-node-0", **{"example.com/other": "1"})  # not selected
    status, deleted = lab.raw("DELETE", "/api/v1/nodes/lab-node-9")
    assert status == 200, deleted
    _, after = lab.raw("GET", "/api/v1/nodes")

    events = stream(
        core.list_node,
        lambda seen: any(e["type"] == "DELETED" for e in seen),
        field_selector="metadata.name=lab-node-9",
        resource_version=version,
    )

    [event] = [e for e in events if e["type"] != "BOOKMARK"]
    assert event["type"] == "DELETED"
    assert event["object"]["metadata"]["name"] == "lab-node-9"
    # The deletion is a write of its own: its resourceVersion is newer than the object's.
    deleted_at = int(event["object"]["metadata"]["resourceVersion"])
    assert int(version) < deleted_at <= int(after["metadata"]["resourceVersion"])


def test_resource_version_zero_starts_with_every_object_added(core: Any) -> None:
    events = stream(core.list_node, lambda seen: len(seen) == 3, resource_version="0")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "lab-node-0"),
        ("ADDED", "lab-node-1"),
        ("ADDED", "lab-node-2"),
    ]


def test_namespaced_watch_of_pods(lab: TestCluster) -> None:
    core: Any = client.CoreV1Api(lab.api_client)
    version = str(core.list_namespaced_pod("default").metadata.resource_version)
    status, created = lab.raw(
        "POST",
        "/api/v1/namespaces/default/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "watched", "labels": {"reconcile.test/seeded": "true"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        },
    )
    assert status == 201, created
    events = stream(
        core.list_namespaced_pod,
        lambda seen: any(about("watched")(e) for e in seen),
        namespace="default",
        resource_version=version,
    )
    [event] = [e for e in events if about("watched")(e)][:1]
    assert event["type"] == "ADDED"
    assert event["object"]["metadata"]["namespace"] == "default"


# --- bookmarks -------------------------------------------------------------------------------


def test_bookmarks_carry_the_resource_version_and_nothing_of_an_object(
    lab: TestCluster, core: Any
) -> None:
    """Upstream sends one every minute and 2 s before timeoutSeconds runs out, once
    something was written while the watch was open; the sandbox's interval is settable."""
    if lab.sandbox is not None:
        lab.sandbox.bookmark_interval = 0.1
    version = list_version(core)
    written: list[dict[str, Any]] = []
    # Outside the watch's selector: no event, but the resourceVersion moves on.
    later = threading.Timer(
        0.2, lambda: written.append(lab.label("lab-node-2", **{"example.com/tick": "2"}))
    )
    later.start()
    try:
        events = stream(
            core.list_node,
            lambda seen: seen[-1]["type"] == "BOOKMARK",
            label_selector="example.com/none=1",
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=4,
        )
    finally:
        later.join()

    [bookmark] = events
    assert bookmark["type"] == "BOOKMARK"
    obj = bookmark["object"]
    assert (obj["kind"], obj["apiVersion"]) == ("Node", "v1")
    assert list(obj["metadata"]) == ["resourceVersion"]
    assert int(obj["metadata"]["resourceVersion"]) >= int(written[0]["metadata"]["resourceVersion"])


def test_initial_events_end_with_an_annotated_bookmark(sandbox: Sandbox, core: Any) -> None:
    """resourceVersion "0" with bookmarks is a watch-list in v1.36 (sendInitialEvents
    defaults to true): the initial ADDED events end with a bookmark annotated
    k8s.io/initial-events-end. (Not checked live: the test etcd cannot serve it.)"""
    version = list_version(core)
    events = stream(
        core.list_node,
        lambda seen: seen[-1]["type"] == "BOOKMARK",
        resource_version="0",
        allow_watch_bookmarks=True,
    )
    assert [e["type"] for e in events] == ["ADDED", "ADDED", "ADDED", "BOOKMARK"]
    assert events[-1]["object"]["metadata"] == {
        "resourceVersion": version,
        "annotations": {"k8s.io/initial-events-end": "true"},
    }


# --- how a stream ends -----------------------------------------------------------------------


def test_timeout_seconds_ends_the_stream_with_no_bookmark_if_nothing_was_written(
    lab: TestCluster, core: Any
) -> None:
    if lab.sandbox is not None:
        lab.sandbox.bookmark_interval = 0.05
    version = list_version(core, label_selector="example.com/none=1")
    started = time.monotonic()
    events = list(
        watch.Watch().stream(
            core.list_node,
            label_selector="example.com/none=1",
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=1,
        )
    )
    assert events == []
    assert 0.9 < time.monotonic() - started < 3


def test_the_stream_is_chunked_json_lines(lab: TestCluster, core: Any) -> None:
    version = list_version(core)
    lab.label("lab-node-0", **{"example.com/a": "1"})
    lab.label("lab-node-0", **{"example.com/a": "2"})
    path = (
        f"/api/v1/nodes?watch=1&resourceVersion={version}&fieldSelector=metadata.name%3Dlab-node-0"
    )
    headers = {"Accept": "application/json"}
    lab.api_client.update_params_for_auth(headers, None, ["BearerToken"], path, "GET", None)
    response = lab.api_client.rest_client.pool_manager.request(
        "GET", lab.api_client.configuration.host + path, headers=headers, preload_content=False
    )
    try:
        assert response.status == 200
        assert response.headers["Transfer-Encoding"] == "chunked"
        assert response.headers["Content-Type"] == "application/json"
        lines: list[dict[str, Any]] = []
        for line in watch.watch.iter_resp_lines(response):
            lines.append(json.loads(line))
            if len(lines) == 2:
                break
    finally:
        response.close()
    assert [e["type"] for e in lines] == ["MODIFIED", "MODIFIED"]
    assert [list(e) for e in lines] == [["type", "object"]] * 2


def test_an_expired_resource_version_is_a_410_error_event(
    sandbox: Sandbox, lab: TestCluster, core: Any
) -> None:
    """As v1.36 answered a watch from before its watch cache's window (observed live):
    one ERROR event, a 410 Expired Status, and the end of the stream."""
    version = list_version(core)
    lab.label("lab-node-1", **{"example.com/drift": "yes"})
    sandbox.compact()  # what etcd compaction (or a full watch cache) does
    horizon = sandbox.store.horizon

    status, event = lab.raw("GET", f"/api/v1/nodes?watch=1&resourceVersion={version}")

    assert status == 200
    assert event == {
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f"too old resource version: {version} ({horizon})",
            "reason": "Expired",
            "code": 410,
        },
    }
    with pytest.raises(ApiException) as raised:
        list(watch.Watch().stream(core.list_node, resource_version=version, timeout_seconds=5))
    assert raised.value.status == 410
    assert raised.value.reason == f"Expired: too old resource version: {version} ({horizon})"
    # From a fresh LIST's resourceVersion, the client watches again.
    fresh = list_version(core)
    lab.label("lab-node-1", **{"example.com/drift": "again"})
    events = stream(core.list_node, lambda seen: True, resource_version=fresh)
    assert events[0]["type"] == "MODIFIED"


@pytest.fixture
def short_history(tmp_path: Path) -> Iterator[TestCluster]:
    """A sandbox whose watches can resume across its last 3 writes only."""
    with Sandbox(lab_objects("lab"), watch_history=3) as sandbox:
        cluster = TestCluster(sandbox.write_kubeconfig(tmp_path / "kubeconfig"), sandbox)
        yield cluster
        cluster.api_client.close()


def test_the_history_window_is_bounded(short_history: TestCluster) -> None:
    core = client.CoreV1Api(short_history.api_client)
    version = list_version(core)
    for value in ("1", "2", "3"):
        short_history.label("lab-node-0", **{"example.com/n": value})
    assert [
        e["type"]
        for e in stream(core.list_node, lambda seen: len(seen) == 3, resource_version=version)
    ] == ["MODIFIED"] * 3
    short_history.label("lab-node-0", **{"example.com/n": "4"})  # the first write falls out
    with pytest.raises(ApiException) as raised:
        list(watch.Watch().stream(core.list_node, resource_version=version, timeout_seconds=5))
    assert raised.value.status == 410
    assert f"too old resource version: {version} ({int(version) + 1})" in str(raised.value.reason)


def test_a_future_resource_version_times_out_as_upstream(
    sandbox: Sandbox, lab: TestCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox_watch, "TOO_LARGE_WAIT", 0.05)  # upstream waits 3 s
    current = int(sandbox.store.resource_version)
    status, event = lab.raw("GET", f"/api/v1/nodes?watch=1&resourceVersion={current + 100}")
    assert status == 200
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 504
    assert event["object"]["reason"] == "Timeout"
    assert event["object"]["message"] == (
        f"Timeout: Too large resource version: {current + 100}, current: {current}"
    )
    assert event["object"]["details"] == {
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        "retryAfterSeconds": 1,
    }


def _consume(
    watcher: watch.Watch, func: Callable[..., Any], sink: list[Any], **kwargs: Any
) -> threading.Thread:
    """Stream in a thread, as a controller does, into `sink` (events, or the exception)."""

    def run() -> None:
        try:
            for event in watcher.stream(func, **kwargs):
                sink.append(event["raw_object"])
        except Exception as e:  # the test inspects what the client raised
            sink.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_cleanly_closed_stream_is_resumed_by_the_client(
    sandbox: Sandbox, lab: TestCluster, core: Any
) -> None:
    """close_watches() ends every stream as an API server restart does: the client
    watches again from the last resourceVersion it saw, and misses nothing."""
    seen: list[Any] = []
    watcher = watch.Watch()
    thread = _consume(watcher, core.list_node, seen, resource_version=list_version(core))
    wait_for(lambda: sandbox.open_watches == 1, what="the watch to open", timeout=5)
    first = lab.label("lab-node-1", **{"example.com/n": "1"})
    wait_for(lambda: len(seen) == 1, what="the first event", timeout=5)

    assert sandbox.close_watches() == 1
    second = lab.label("lab-node-1", **{"example.com/n": "2"})  # while no stream is open
    wait_for(lambda: len(seen) == 2, what="the event written during the reconnect", timeout=5)
    watcher.stop()
    sandbox.close_watches()
    thread.join(5)

    events = [o for o in seen if isinstance(o, dict)]  # (stop() makes the client's read fail)
    assert [o["metadata"]["resourceVersion"] for o in events] == [
        first["metadata"]["resourceVersion"],
        second["metadata"]["resourceVersion"],
    ]
    watches = [r for r in sandbox.requests if r.verb == "watch"]
    assert len(watches) >= 2
    assert f"resourceVersion={first['metadata']['resourceVersion']}" in watches[1].query


def test_an_abruptly_cut_stream_fails_the_clients_read(sandbox: Sandbox, core: Any) -> None:
    seen: list[Any] = []
    thread = _consume(watch.Watch(), core.list_node, seen, resource_version=list_version(core))
    wait_for(lambda: sandbox.open_watches == 1, what="the watch to open", timeout=5)
    assert sandbox.close_watches(abrupt=True) == 1
    thread.join(5)
    assert not thread.is_alive()
    [error] = seen
    assert isinstance(error, urllib3.exceptions.ProtocolError), repr(error)


def test_stopping_the_sandbox_ends_open_streams(tmp_path: Path) -> None:
    sandbox = Sandbox(lab_objects("lab")).start()
    cluster = TestCluster(sandbox.write_kubeconfig(tmp_path / "kubeconfig"), sandbox)
    core = client.CoreV1Api(cluster.api_client)
    seen: list[Any] = []
    thread = _consume(watch.Watch(), core.list_node, seen, resource_version=list_version(core))
    wait_for(lambda: sandbox.open_watches == 1, what="the watch to open", timeout=5)

    started = time.monotonic()
    sandbox.stop()
    assert time.monotonic() - started < 1
    thread.join(5)
    assert not thread.is_alive()
    cluster.api_client.close()


# --- refusals --------------------------------------------------------------------------------


def test_watch_options_are_validated_as_upstream(lab: TestCluster) -> None:
    status, body = lab.raw("GET", "/api/v1/nodes?watch=1&sendInitialEvents=true")
    assert status == 422
    assert body["message"] == (
        'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
    )
    assert body["details"]["kind"] == "ListOptions"
    status, body = lab.raw("GET", "/api/v1/nodes?watch=1&resourceVersion=abc")
    assert status == 500
    assert body["message"] == (
        'resourceVersion: Invalid value: "abc": strconv.ParseUint: parsing "abc": invalid syntax'
    )
    status, body = lab.raw("GET", "/api/v1/nodes?watch=1&labelSelector=a+in+(b")
    assert (status, body["reason"]) == (400, "BadRequest")


def test_discovery_says_watch_is_served(lab: TestCluster) -> None:
    resources = {r["name"]: r for r in lab.raw("GET", "/api/v1")[1]["resources"]}
    for name in ("nodes", "pods", "events"):
        assert "watch" in resources[name]["verbs"], name
