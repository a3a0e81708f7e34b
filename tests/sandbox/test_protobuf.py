"""Protobuf request bodies: the decoder on what kubectl really sends (captured in
tests/data/kubectl_protobuf.json), and the sandbox's answers to bodies it cannot take.

The HTTP tests that are not marked sandbox-only hold against a real cluster too
(RECONCILE_TEST_KUBECONFIG): their messages are kube-apiserver v1.36's, verbatim.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest

from reconcile.sandbox import protobuf
from tests.support import TestCluster

FIXTURE = json.loads(
    (Path(__file__).resolve().parents[1] / "data" / "kubectl_protobuf.json").read_text()
)
CASES: list[dict[str, Any]] = FIXTURE["cases"]
KUBECTL_ACCEPT = "application/vnd.kubernetes.protobuf,application/json"


def captured(command: str) -> bytes:
    """The body kubectl sent for `command` (the fixture's, as kubectl 1.37 sent it)."""
    case = next(c for c in CASES if c["command"] == command)
    return base64.b64decode(case["body"])


NAMESPACE = captured("kubectl create namespace team-a")


# --- a minimal encoder, to vary the real bodies ----------------------------------------------


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    return varint(number << 3 | 2) + varint(len(value)) + value


def wrap(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = field(1, api_version.encode()) + field(2, kind.encode())
    return protobuf.MAGIC + field(1, type_meta) + field(2, raw) + field(3, b"") + field(4, b"")


# --- the decoder -----------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[c["command"] for c in CASES])
def test_a_captured_body_decodes_to_the_json_kubectl_renders(case: dict[str, Any]) -> None:
    assert case["contentType"] == protobuf.MEDIA_TYPE
    assert case["accept"] == KUBECTL_ACCEPT
    assert protobuf.decode(base64.b64decode(case["body"])) == case["json"]


def test_every_table_names_types_it_knows() -> None:
    known = {*protobuf.SCALAR_TYPES, *protobuf.SPECIAL_TYPES, *protobuf.MESSAGES}
    for message, fields in protobuf.MESSAGES.items():
        for number, spec in fields.items():
            assert spec.type in known, (message, number, spec)
    assert set(protobuf.KINDS.values()) <= set(protobuf.MESSAGES)


def test_the_test_encoder_rebuilds_kubectls_bytes() -> None:
    unknown = protobuf.envelope(NAMESPACE)
    assert (unknown.api_version, unknown.kind) == ("v1", "Namespace")
    assert wrap(unknown.api_version, unknown.kind, unknown.raw) == NAMESPACE


def test_unknown_fields_holding_their_zero_value_are_skipped() -> None:
    raw = protobuf.envelope(NAMESPACE).raw + field(99, 0) + field(98, b"") + b"\x99\x06" + bytes(8)
    # (field 99 as a varint 0, field 98 empty, field 99 as a fixed64 of zeros)
    assert protobuf.decode_object("v1", "Namespace", raw) == protobuf.decode(NAMESPACE)


def test_an_unknown_field_with_a_value_is_refused_by_number_and_place() -> None:
    metadata = field(1, b"x") + field(15, b"cluster")
    with pytest.raises(protobuf.Unsupported, match=r"^field 15 of ObjectMeta at metadata$"):
        protobuf.decode_object("v1", "Namespace", field(1, metadata))
    pod_spec = field(18, field(1, b""))  # affinity, which no table decodes
    deployment = field(2, field(3, field(2, pod_spec)))
    with pytest.raises(
        protobuf.Unsupported, match=r"^field 18 of PodSpec at spec\.template\.spec$"
    ):
        protobuf.decode_object("apps/v1", "Deployment", deployment)


def test_integers_booleans_pointers_and_times() -> None:
    metadata = (
        field(1, b"web")
        + field(7, 1 << 40)  # generation, int64
        + field(8, field(1, 1_700_000_000))  # creationTimestamp
        + field(10, 0)  # deletionGracePeriodSeconds: a pointer set to 0 is kept
    )
    spec = (
        field(1, -1)  # replicas: a negative int32 is ten bytes on the wire
        + field(5, 0)  # minReadySeconds: plain and omitempty, so left out at zero
        + field(6, 0)  # revisionHistoryLimit: a pointer, kept at zero
        + field(7, 1)  # paused
        + field(3, b"")  # template: a struct, never left out
    )
    assert protobuf.decode_object("apps/v1", "Deployment", field(1, metadata) + field(2, spec)) == {
        "kind": "Deployment",
        "apiVersion": "apps/v1",
        "metadata": {
            "name": "web",
            "generation": 1 << 40,
            "creationTimestamp": "2023-11-14T22:13:20Z",
            "deletionGracePeriodSeconds": 0,
        },
        "spec": {"replicas": -1, "revisionHistoryLimit": 0, "paused": True, "template": {}},
    }


def test_a_kind_without_a_table_is_unsupported() -> None:
    with pytest.raises(protobuf.Unsupported, match=r"^Node objects$"):
        protobuf.decode_object("v1", "Node", b"")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "empty data"),
        (b"garbage", "provided data does not appear to be a protobuf message"),
        (b"k8s\x00", "empty body"),
        (NAMESPACE[:-10], "unexpected EOF"),
        (wrap("v1", "Namespace", b"\x00"), "proto: Namespace: illegal tag 0 (wire type 0)"),
        (wrap("v1", "Namespace", field(1, 5)), "proto: wrong wireType = 0 for field metadata"),
    ],
    ids=["empty", "no-prefix", "prefix-only", "truncated", "tag-0", "wrong-wire-type"],
)
def test_malformed_bodies(body: bytes, message: str) -> None:
    with pytest.raises(protobuf.ProtobufError, match="^" + re.escape(message)):
        protobuf.decode(body)


# --- through the API -------------------------------------------------------------------------


def post(cluster: TestCluster, path: str, body: bytes, accept: str = "application/json") -> Any:
    return cluster.raw("POST", path, body, protobuf.MEDIA_TYPE, accept=accept)


def test_a_protobuf_create_answers_the_object_in_json(lab: TestCluster) -> None:
    status, created = post(lab, "/api/v1/namespaces?dryRun=All", NAMESPACE)
    assert status == 201
    assert created["metadata"]["labels"] == {"kubernetes.io/metadata.name": "team-a"}
    assert created["spec"] == {"finalizers": ["kubernetes"]}
    assert lab.raw("GET", "/api/v1/namespaces/team-a")[0] == 404


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (NAMESPACE[:-10], "unexpected EOF (" + NAMESPACE[:30].hex() + " ...)"),
        (NAMESPACE[:10], "unexpected EOF (6b3873000a0f0a027631)"),
        (b"", "empty data (<empty>)"),
        (b"k8s\x00", "empty body (6b387300)"),
        (
            b"garbage",
            "provided data does not appear to be a protobuf message, expected prefix "
            "[107 56 115 0] (67617262616765)",
        ),
    ],
    ids=["truncated", "short", "empty", "prefix-only", "no-prefix"],
)
def test_an_undecodable_body_is_the_real_400(lab: TestCluster, body: bytes, problem: str) -> None:
    status, answer = post(lab, "/api/v1/namespaces?dryRun=All", body)
    assert (status, answer["reason"]) == (400, "BadRequest")
    assert answer["message"] == (
        f"the object provided is unrecognized (must be of type Namespace): {problem}"
    )


def test_a_body_of_another_kind_is_the_real_400(lab: TestCluster) -> None:
    status, answer = post(lab, "/api/v1/namespaces/default/configmaps?dryRun=All", NAMESPACE)
    assert (status, answer["reason"]) == (400, "BadRequest")
    assert answer["message"] == (
        'Namespace in version "v1" cannot be handled as a ConfigMap: '
        "converting (v1.Namespace) to (core.ConfigMap): unknown conversion"
    )
    _, answer = post(lab, "/apis/apps/v1/namespaces/default/deployments?dryRun=All", NAMESPACE)
    assert answer["message"].endswith("to (apps.Deployment): unknown conversion")


def test_a_body_in_a_media_type_not_read_is_a_415(lab: TestCluster) -> None:
    status, answer = lab.raw("POST", "/api/v1/namespaces", "x", "text/plain")
    assert (status, answer["reason"]) == (415, "UnsupportedMediaType")
    assert answer["message"].startswith(
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json, "
    )


def test_protobuf_the_sandbox_does_not_decode_is_a_415_naming_it(
    sandbox_only: TestCluster,
) -> None:
    node = wrap("v1", "Node", field(1, field(1, b"gpu-9")))
    status, answer = post(sandbox_only, "/api/v1/nodes", node)
    assert (status, answer["reason"]) == (415, "UnsupportedMediaType")
    assert answer["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json (the reconcile sandbox does not decode Node objects in "
        "application/vnd.kubernetes.protobuf; send it as application/json)"
    )
    namespace = wrap("v1", "Namespace", field(1, field(1, b"x") + field(15, b"c")))
    status, answer = post(sandbox_only, "/api/v1/namespaces", namespace)
    assert status == 415
    assert "does not decode field 15 of ObjectMeta at metadata in " in answer["message"]
    assert sandbox_only.raw("GET", "/api/v1/namespaces/x")[0] == 404


@pytest.mark.parametrize(
    ("accept", "status"),
    [
        (KUBECTL_ACCEPT, 200),
        ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json", 200),
        ("*/*", 200),
        ("", 200),
        ("application/vnd.kubernetes.protobuf", 406),
        ("application/json;q=0,text/plain", 406),
    ],
)
def test_the_answer_is_json_where_accept_allows_it(
    sandbox_only: TestCluster, accept: str, status: int
) -> None:
    code, answer = sandbox_only.raw("GET", "/api/v1/namespaces/default", accept=accept)
    assert code == status
    if status == 406:
        assert (answer["reason"], answer["message"]) == (
            "NotAcceptable",
            "406: Not Acceptable\n\nAvailable representations: application/json",
        )
