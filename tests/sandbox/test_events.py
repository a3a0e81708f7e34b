"""events.k8s.io/v1 Events, as a controller reports with them, and core v1 reading them.

Every message is the one a real v1.36 API server answered; these run against one too
(RECONCILE_TEST_KUBECONFIG). What they create is labelled as the harness's own, so that a
real cluster is cleaned up even after a failure.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch

from tests.support import SEEDED, TestCluster

EVENTS = "/apis/events.k8s.io/v1/namespaces/default/events"
NAME_PART = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


def microtime(when: datetime.datetime) -> str:
    """A MicroTime as the API server parses it: six fractional digits, always."""
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


NOW = microtime(datetime.datetime.now(datetime.UTC))


def drift_event(name: str, **changes: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "labels": {SEEDED: "true"}},
        "eventTime": NOW,
        "reportingController": "reconcile.io/watch",
        "reportingInstance": "reconcile-watch-0",
        "action": "Reconcile",
        "reason": "LabelDrift",
        "regarding": {"kind": "Node", "name": "lab-node-1", "apiVersion": "v1"},
        "note": "nvidia.com/gpu.count drifted from 8 to 9",
        "type": "Warning",
    }
    for key, value in changes.items():
        if value is None:
            event.pop(key, None)
        else:
            event[key] = value
    return event


@pytest.fixture
def cleanup(lab: TestCluster) -> Iterator[list[str]]:
    """Paths to delete after the test (a real cluster keeps what is in `default`)."""
    paths: list[str] = []
    yield paths
    for path in paths:
        lab.raw("DELETE", path)


def test_an_event_about_a_node_is_listed_and_read_through_core_v1(
    lab: TestCluster, cleanup: list[str]
) -> None:
    node = lab.node("lab-node-1")
    uid = node["metadata"]["uid"]
    body = drift_event(
        "gpu-drift",
        regarding={"kind": "Node", "name": "lab-node-1", "uid": uid, "apiVersion": "v1"},
    )
    events: Any = client.EventsV1Api(lab.api_client)
    created = events.create_namespaced_event("default", body)
    cleanup.append(f"{EVENTS}/gpu-drift")
    assert created.event_time is not None and created.note == body["note"]

    found = events.list_namespaced_event("default", field_selector="regarding.name=lab-node-1")
    assert [e.metadata.name for e in found.items] == ["gpu-drift"]
    status, stored = lab.raw("GET", f"{EVENTS}/gpu-drift")
    assert status == 200
    assert stored["deprecatedSource"] == {}
    assert stored["deprecatedFirstTimestamp"] is None

    # What `kubectl describe node` asks for (checked against v1.36), and what it gets.
    selector = (
        "involvedObject.name=lab-node-1,involvedObject.namespace=,"
        f"involvedObject.kind=Node,involvedObject.uid={uid}"
    )
    status, core = lab.raw("GET", f"/api/v1/events?fieldSelector={selector}&limit=500")
    assert status == 200, core
    [item] = core["items"]
    assert core["apiVersion"] == "v1" and core["kind"] == "EventList"
    assert {k: item[k] for k in ("involvedObject", "reason", "message", "type", "source")} == {
        "involvedObject": {"kind": "Node", "name": "lab-node-1", "uid": uid, "apiVersion": "v1"},
        "reason": "LabelDrift",
        "message": body["note"],
        "type": "Warning",
        "source": {},
    }
    assert (item["reportingComponent"], item["reportingInstance"]) == (
        "reconcile.io/watch",
        "reconcile-watch-0",
    )
    status, deleted = lab.raw("DELETE", f"{EVENTS}/gpu-drift")
    assert (status, deleted["status"], deleted["details"]["kind"]) == (200, "Success", "events")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"eventTime": None}, "eventTime: Required value"),
        (
            {"reportingController": None},
            f'[reportingController: Required value, reportingController: Invalid value: "": '
            f'name part must be non-empty, reportingController: Invalid value: "": {NAME_PART}]',
        ),
        (
            {"reportingController": "not a name"},
            f'reportingController: Invalid value: "not a name": {NAME_PART}',
        ),
        ({"reportingInstance": None}, "reportingInstance: Required value"),
        ({"action": None}, "action: Required value"),
        ({"reason": None}, "reason: Required value"),
        (
            {"note": "n" * 1025},
            'message: Invalid value: "": can have at most 1024 characters',
        ),
        ({"type": "Error"}, 'type: Invalid value: "": has invalid value: Error'),
        (
            {"eventTime": None, "type": None},
            '[eventTime: Required value, type: Invalid value: "": has invalid value: ]',
        ),
        ({"deprecatedCount": 3}, 'count: Invalid value: "": needs to be unset'),
        (
            {"series": {"count": 1}},
            '[series.count: Invalid value: "": should be at least 2, '
            "series.lastObservedTime: Required value]",
        ),
    ],
)
def test_event_validation_errors_are_upstreams(
    lab: TestCluster, changes: dict[str, Any], message: str
) -> None:
    status, body = lab.raw("POST", EVENTS, drift_event("refused", **changes))
    assert status == 422, body
    assert body["message"] == f'Event "refused" is invalid: {message}'
    assert body["details"]["kind"] == "Event" and "group" not in body["details"]


def test_an_event_about_a_node_belongs_in_default(lab: TestCluster) -> None:
    """A cluster-scoped object's Events go in `default` (or kube-system), as the kubelet's."""
    status, body = lab.raw(
        "POST", "/apis/events.k8s.io/v1/namespaces/nfd-lab/events", drift_event("elsewhere")
    )
    assert status == 422
    assert body["message"] == (
        'Event "elsewhere" is invalid: involvedObject.namespace: Invalid value: "": '
        "does not match event.namespace"
    )


def test_event_time_must_be_a_micro_time(lab: TestCluster) -> None:
    status, body = lab.raw("POST", EVENTS, drift_event("seconds", eventTime="2026-12-01T08:00:00Z"))
    assert (status, body["reason"]) == (400, "BadRequest")
    assert body["message"] == (
        'Event in version "v1" cannot be handled as a Event: parsing time '
        '"2026-12-01T08:00:00Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as ".000000"'
    )


def test_what_an_event_says_cannot_change_but_its_series_can(
    lab: TestCluster, cleanup: list[str]
) -> None:
    status, created = lab.raw("POST", EVENTS, drift_event("repeated"))
    assert status == 201, created
    cleanup.append(f"{EVENTS}/repeated")
    merge = "application/merge-patch+json"
    status, body = lab.raw("PATCH", f"{EVENTS}/repeated", {"note": "changed"}, merge)
    assert status == 422
    assert body["message"] == (
        'Event "repeated" is invalid: message: Invalid value: "changed": field is immutable'
    )
    status, body = lab.raw("PATCH", f"{EVENTS}/repeated", {"regarding": {"name": "x"}}, merge)
    assert body["message"] == (
        'Event "repeated" is invalid: involvedObject: Invalid value: {"Kind":"Node",'
        '"Namespace":"","Name":"x","UID":"","APIVersion":"v1","ResourceVersion":"",'
        '"FieldPath":""}: field is immutable'
    )
    series = {"count": 2, "lastObservedTime": NOW}
    status, body = lab.raw("PATCH", f"{EVENTS}/repeated", {"series": series}, merge)
    assert status == 200, body
    assert body["series"] == series


def test_core_v1_watch_sees_a_new_event_about_the_node(
    lab: TestCluster, cleanup: list[str]
) -> None:
    core: Any = client.CoreV1Api(lab.api_client)
    selector = "involvedObject.kind=Node,involvedObject.name=lab-node-1"
    listed = core.list_namespaced_event("default", field_selector=selector)
    status, created = lab.raw("POST", EVENTS, drift_event("watched-drift"))
    assert status == 201, created
    cleanup.append(f"{EVENTS}/watched-drift")

    watcher = watch.Watch()
    stream = watcher.stream(
        core.list_namespaced_event,
        "default",
        field_selector=selector,
        resource_version=listed.metadata.resource_version,
        timeout_seconds=10,
    )
    event = next(stream)
    watcher.stop()
    stream.close()
    assert event["type"] == "ADDED"
    obj = event["raw_object"]
    assert (obj["kind"], obj["apiVersion"]) == ("Event", "v1")
    assert obj["message"] == created["note"]
    assert obj["involvedObject"]["name"] == "lab-node-1"


def test_core_v1_events_are_listed_not_written(lab: TestCluster) -> None:
    if lab.sandbox is None:
        pytest.skip("a real API server also writes core v1 Events")
    status, body = lab.raw(
        "POST",
        "/api/v1/namespaces/default/events",
        {"metadata": {"name": "old-style"}, "involvedObject": {"kind": "Node", "name": "n"}},
    )
    assert status == 405
    assert "events.k8s.io/v1" in body["message"]
