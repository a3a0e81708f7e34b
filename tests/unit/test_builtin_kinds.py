"""Secrets and ConfigMaps as the API server validates them (pkg/apis/core/validation
ValidateSecret, ValidateConfigMap; IsConfigMapKey of k8s.io/apimachinery), offline."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from reconcile.kube import validation as v

KEY_MESSAGE = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' "
    "(e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
    "'[-._a-zA-Z0-9]+')"
)


def _b64(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode()


def _secret(secret_type: str | None = None, **sections: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "namespace": "default"},
    }
    if secret_type is not None:
        obj["type"] = secret_type
    obj.update(sections)
    return obj


def _errors(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    return [str(e) for e in v.validate_object("", obj["kind"], obj, namespaced=True, old=old)]


# TestIsConfigMapKey (staging/src/k8s.io/apimachinery/pkg/util/validation/validation_test.go)
@pytest.mark.parametrize(
    "key",
    ["a", "good", "good-good", "still.good", "this.is.also.good", ".so.is.this",
     "THIS_IS_GOOD", "so_is_this_17", "a" * 253],
)  # fmt: skip
def test_good_config_map_keys(key: str) -> None:
    assert v.is_config_map_key(key) == []


@pytest.mark.parametrize(
    ("key", "messages"),
    [
        ("", [KEY_MESSAGE]),
        (".", ["must not be '.'"]),
        ("..", ["must not be '..'"]),
        ("..bad", ["must not start with '..'"]),
        ("b*d", [KEY_MESSAGE]),
        ("bad!&bad", [KEY_MESSAGE]),
        ("bad key!", [KEY_MESSAGE]),
        ("ok\n", [KEY_MESSAGE]),  # Go's `$` is the end of the text
        ("a" * 254, ["must be no more than 253 characters"]),
    ],
)
def test_bad_config_map_keys(key: str, messages: list[str]) -> None:
    assert v.is_config_map_key(key) == messages


def test_a_bad_key_in_data_or_string_data_is_named_at_data_without_its_value() -> None:
    for section, value in (("data", _b64("hunter2-planted")), ("stringData", "hunter2-planted")):
        errors = _errors(_secret(None, **{section: {"bad key!": value}}))
        assert errors == [f'data[bad key!]: Invalid value: "bad key!": {KEY_MESSAGE}']
        assert "hunter2" not in " ".join(errors)


@pytest.mark.parametrize(
    ("secret_type", "sections", "expected"),
    [
        ("kubernetes.io/tls", {"data": {"tls.crt": _b64("c")}}, ["data[tls.key]: Required value"]),
        (
            "kubernetes.io/tls",
            {},
            ["data[tls.crt]: Required value", "data[tls.key]: Required value"],
        ),
        ("kubernetes.io/tls", {"stringData": {"tls.crt": "c", "tls.key": ""}}, []),
        ("kubernetes.io/dockerconfigjson", {}, ["data[.dockerconfigjson]: Required value"]),
        ("kubernetes.io/dockercfg", {"data": {"x": ""}}, ["data[.dockercfg]: Required value"]),
        ("kubernetes.io/dockerconfigjson", {"stringData": {".dockerconfigjson": "{}"}}, []),
        (
            "kubernetes.io/basic-auth",
            {"data": {"user": ""}},
            ["data[username]: Required value", "data[password]: Required value"],
        ),
        ("kubernetes.io/basic-auth", {"stringData": {"password": ""}}, []),
        (
            "kubernetes.io/ssh-auth",
            {"data": {"ssh-privatekey": ""}},
            ["data[ssh-privatekey]: Required value"],
        ),
        ("kubernetes.io/ssh-auth", {"stringData": {"ssh-privatekey": "k"}}, []),
        (
            "kubernetes.io/service-account-token",
            {},
            ["metadata.annotations[kubernetes.io/service-account.name]: Required value"],
        ),
        ("Opaque", {}, []),
        (None, {}, []),
        ("example.com/anything", {}, []),
    ],
)
def test_the_keys_each_secret_type_needs(
    secret_type: str | None, sections: dict[str, Any], expected: list[str]
) -> None:
    assert _errors(_secret(secret_type, **sections)) == expected


def test_a_service_account_token_with_its_annotation_passes() -> None:
    secret = _secret("kubernetes.io/service-account-token")
    secret["metadata"]["annotations"] = {"kubernetes.io/service-account.name": "default"}
    assert _errors(secret) == []


# json.Unmarshal(data, &map[string]interface{}{}) as Go reports it (encoding/json
# scanner.go); the character Go quotes is masked, as it is part of the Secret.
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"auths":{}}', None),
        (" null ", None),
        ("", "unexpected end of JSON input"),
        ("   ", "unexpected end of JSON input"),
        ('{"auths":', "unexpected end of JSON input"),
        ('{"a":"b', "unexpected end of JSON input"),
        ("hunter2", "invalid character '***' looking for beginning of value"),
        ('{"a":1}x', "invalid character '***' after top-level value"),
        ("{a:1}", "invalid character '***' looking for beginning of object key string"),
        ('{"a" 1}', "invalid character '***' after object key"),
        ('{"a":1 "b":2}', "invalid character '***' after object key:value pair"),
        ('{"a":[1 2]}', "invalid character '***' after array element"),
        ('{"a":"\x01"}', "invalid character '***' in string literal"),
        ('{"a":"\\x"}', "invalid character '***' in string escape code"),
        ('{"a":"\\u12g4"}', "invalid character '***' in \\u hexadecimal character escape"),
        ('{"a":-x}', "invalid character '***' in numeric literal"),
        ('{"a":1.x}', "invalid character '***' after decimal point in numeric literal"),
        ('{"a":1ex}', "invalid character '***' in exponent of numeric literal"),
        ('{"a":01}', "invalid character '***' after object key:value pair"),
        ('{"a":tru}', "invalid character '***' in literal true (expecting 'e')"),
        ('{"a":nil}', "invalid character '***' in literal null (expecting 'u')"),
        ('{"a":fals', "unexpected end of JSON input"),
        ("[]", "json: cannot unmarshal array into Go value of type map[string]interface {}"),
        ('"x"', "json: cannot unmarshal string into Go value of type map[string]interface {}"),
        ("12", "json: cannot unmarshal number into Go value of type map[string]interface {}"),
        ("true", "json: cannot unmarshal bool into Go value of type map[string]interface {}"),
    ],
)
def test_docker_config_json_errors_are_go_s(text: str, message: str | None) -> None:
    assert v.go_json_map_error(text.encode()) == message
    secret = _secret("kubernetes.io/dockerconfigjson", data={".dockerconfigjson": _b64(text)})
    expected = (
        []
        if message is None
        else ['data[.dockerconfigjson]: Invalid value: "<secret contents redacted>": ' + message]
    )
    assert _errors(secret) == expected


def test_a_secret_of_more_than_one_mebibyte_is_refused() -> None:
    half = _b64(b"x" * (512 * 1024))
    assert _errors(_secret(data={"a": half, "b": half})) == []
    over = _secret(data={"a": half, "b": half}, stringData={"c": "y"})
    assert _errors(over) == ["data: Too long: may not be more than 1048576 bytes"]
    # stringData replaces a key of data: counted once.
    assert _errors(_secret(data={"a": half, "b": half}, stringData={"b": "y"})) == []


def test_a_secret_update_keeps_its_type_and_an_immutable_secret_its_data() -> None:
    old = _secret("Opaque", data={"a": _b64("1")})
    assert _errors(_secret("kubernetes.io/basic-auth", data={"password": ""}), old) == [
        'type: Invalid value: "kubernetes.io/basic-auth": field is immutable'
    ]
    frozen = {**old, "immutable": True}
    assert _errors({**frozen, "data": {"a": _b64("2")}}, frozen) == [
        "data: Forbidden: field is immutable when `immutable` is set"
    ]
    assert _errors({**old, "immutable": False}, frozen) == [
        "immutable: Forbidden: field is immutable when `immutable` is set"
    ]


def _config_map(**sections: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "default"},
        **sections,
    }


def test_config_map_keys_duplicates_and_size() -> None:
    assert _errors(_config_map(data={"bad key!": "x"}, binaryData={"..b": _b64("y")})) == [
        f'data[bad key!]: Invalid value: "bad key!": {KEY_MESSAGE}',
        "binaryData[..b]: Invalid value: \"..b\": must not start with '..'",
    ]
    assert _errors(_config_map(data={"a": "x"}, binaryData={"a": _b64("y")})) == [
        'data[a]: Invalid value: "a": duplicate of key present in binaryData'
    ]
    big = "x" * (1024 * 1024)
    assert _errors(_config_map(data={"a": big})) == []
    assert _errors(_config_map(data={"a": big}, binaryData={"b": _b64("y")})) == [
        ": Too long: may not be more than 1048576 bytes"
    ]


def test_an_immutable_config_map_keeps_its_data() -> None:
    old = _config_map(data={"a": "1"}, immutable=True)
    assert _errors(_config_map(data={"a": "2"}, binaryData={"b": ""}, immutable=True), old) == [
        "data: Forbidden: field is immutable when `immutable` is set",
        "binaryData: Forbidden: field is immutable when `immutable` is set",
    ]


def test_a_service_name_is_a_dns_label() -> None:
    service: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web.internal", "namespace": "default"},
    }
    assert _errors(service) == [
        'metadata.name: Invalid value: "web.internal": must not contain dots'
    ]
    service["metadata"]["name"] = "1web"  # a DNS-1123 label since RelaxedServiceNameValidation
    assert _errors(service) == []
