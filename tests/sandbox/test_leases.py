"""coordination.k8s.io/v1 Leases, as a controller holding one writes them.

Every message is the one a real v1.36 API server answered; these run against one too
(RECONCILE_TEST_KUBECONFIG). What they create is labelled as the harness's own, so that a
real cluster is cleaned up even after a failure.
"""

from __future__ import annotations

import copy
import datetime
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from tests.support import SEEDED, TestCluster

LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
CONFLICT = (
    'Operation cannot be fulfilled on leases.coordination.k8s.io "{name}": the object has been '
    "modified; please apply your changes to the latest version and try again"
)


def microtime(when: datetime.datetime) -> str:
    """A MicroTime as the API server parses it: six fractional digits, always."""
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


NOW = microtime(datetime.datetime.now(datetime.UTC))


def lease(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "labels": {SEEDED: "true"}},
        "spec": {
            "holderIdentity": "reconcile-watch-0",
            "leaseDurationSeconds": 15,
            "acquireTime": NOW,
            "renewTime": NOW,
            "leaseTransitions": 0,
            **spec,
        },
    }


@pytest.fixture
def cleanup(lab: TestCluster) -> Iterator[list[str]]:
    """Paths to delete after the test (a real cluster keeps what is in `default`)."""
    paths: list[str] = []
    yield paths
    for path in paths:
        lab.raw("DELETE", path)


def test_a_lease_is_renewed_with_its_resource_version_and_a_stale_one_conflicts(
    lab: TestCluster, cleanup: list[str]
) -> None:
    leases: Any = client.CoordinationV1Api(lab.api_client)
    created = leases.create_namespaced_lease("default", lease("reconcile-watch"))
    cleanup.append(f"{LEASES}/reconcile-watch")
    assert created.spec.holder_identity == "reconcile-watch-0"
    status, current = lab.raw("GET", f"{LEASES}/reconcile-watch")
    assert status == 200

    renewed = copy.deepcopy(current)
    renewed["spec"]["renewTime"] = microtime(datetime.datetime.now(datetime.UTC))
    status, after = lab.raw("PUT", f"{LEASES}/reconcile-watch", renewed)
    assert status == 200, after
    assert int(after["metadata"]["resourceVersion"]) > int(current["metadata"]["resourceVersion"])

    # Another holder's update with what it read before: refused, the lease unchanged.
    stale = copy.deepcopy(current)
    stale["spec"]["holderIdentity"] = "someone-else"
    status, body = lab.raw("PUT", f"{LEASES}/reconcile-watch", stale)
    assert (status, body["reason"]) == (409, "Conflict")
    assert body["message"] == CONFLICT.format(name="reconcile-watch")
    assert body["details"] == {
        "name": "reconcile-watch",
        "group": "coordination.k8s.io",
        "kind": "leases",
    }
    with pytest.raises(ApiException) as raised:
        leases.replace_namespaced_lease("reconcile-watch", "default", stale)
    assert raised.value.status == 409
    assert lab.raw("GET", f"{LEASES}/reconcile-watch")[1]["spec"]["holderIdentity"] == (
        "reconcile-watch-0"
    )


def test_a_lease_update_without_resource_version_is_refused(
    lab: TestCluster, cleanup: list[str]
) -> None:
    status, created = lab.raw("POST", LEASES, lease("unconditional"))
    assert status == 201, created
    cleanup.append(f"{LEASES}/unconditional")
    status, body = lab.raw("PUT", f"{LEASES}/unconditional", lease("unconditional"))
    assert status == 422
    assert body["message"] == (
        'leases.coordination.k8s.io "unconditional" is invalid: metadata.resourceVersion: '
        "Invalid value: 0: must be specified for an update"
    )


def test_a_put_of_a_missing_lease_creates_it(lab: TestCluster, cleanup: list[str]) -> None:
    status, body = lab.raw("PUT", f"{LEASES}/put-created", lease("put-created"))
    cleanup.append(f"{LEASES}/put-created")
    assert status == 201, body
    assert body["spec"]["holderIdentity"] == "reconcile-watch-0"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"leaseDurationSeconds": 0},
            "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0",
        ),
        (
            {"leaseTransitions": -1},
            "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0",
        ),
    ],
)
def test_lease_validation_errors_are_upstreams(
    lab: TestCluster, spec: dict[str, Any], message: str
) -> None:
    status, body = lab.raw("POST", LEASES, lease("refused", **spec))
    assert status == 422, body
    assert body["message"] == f'Lease.coordination.k8s.io "refused" is invalid: {message}'


def test_lease_times_are_micro_times_stored_in_utc(lab: TestCluster, cleanup: list[str]) -> None:
    status, body = lab.raw("POST", LEASES, lease("seconds", renewTime="2026-12-01T08:00:00Z"))
    assert status == 400
    assert body["message"] == (
        'Lease in version "v1" cannot be handled as a Lease: parsing time "2026-12-01T08:00:00Z" '
        'as "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as ".000000"'
    )
    # The official client writes a datetime with isoformat(): without microseconds, it
    # has no fraction, and the API server refuses it (observed against v1.36).
    leases: Any = client.CoordinationV1Api(lab.api_client)
    whole_second = datetime.datetime(2026, 12, 1, 8, 0, 0, tzinfo=datetime.UTC)
    with pytest.raises(ApiException) as raised:
        leases.create_namespaced_lease(
            "default",
            client.V1Lease(
                metadata=client.V1ObjectMeta(name="whole-second"),
                spec=client.V1LeaseSpec(holder_identity="me", renew_time=whole_second),
            ),
        )
    assert raised.value.status == 400
    assert 'cannot parse "+00:00" as ".000000"' in json.loads(raised.value.body or "{}")["message"]

    status, body = lab.raw("POST", LEASES, lease("offset", renewTime="2026-12-01T08:00:00.5+02:00"))
    assert status == 400  # five digits short
    status, body = lab.raw(
        "POST", LEASES, lease("offset", renewTime="2026-12-01T08:00:00.500000+02:00")
    )
    cleanup.append(f"{LEASES}/offset")
    assert status == 201, body
    assert body["spec"]["renewTime"] == "2026-12-01T06:00:00.500000Z"


def test_leases_select_by_metadata_only(lab: TestCluster) -> None:
    status, body = lab.raw("GET", f"{LEASES}?fieldSelector=spec.holderIdentity%3Dme")
    assert status == 400
    assert body["message"] == (
        '"spec.holderIdentity" is not a known field selector: only "metadata.name", '
        '"metadata.namespace"'
    )


def test_a_lease_renewal_is_watched(lab: TestCluster, cleanup: list[str]) -> None:
    status, created = lab.raw("POST", LEASES, lease("watched"))
    assert status == 201, created
    cleanup.append(f"{LEASES}/watched")
    renewed = copy.deepcopy(created)
    renewed["spec"]["renewTime"] = microtime(datetime.datetime.now(datetime.UTC))
    status, after = lab.raw("PUT", f"{LEASES}/watched", renewed)
    assert status == 200, after

    leases: Any = client.CoordinationV1Api(lab.api_client)
    watcher = watch.Watch()
    stream = watcher.stream(
        leases.list_namespaced_lease,
        "default",
        field_selector="metadata.name=watched",
        resource_version=created["metadata"]["resourceVersion"],
        timeout_seconds=10,
    )
    event = next(stream)
    watcher.stop()
    stream.close()
    assert event["type"] == "MODIFIED"
    assert event["raw_object"]["spec"]["renewTime"] == renewed["spec"]["renewTime"]
