"""Secrets and ConfigMaps the API server refuses are refused by `validate`, at the line of
the key, in the server's words, without a Secret's value; the sandbox refuses them too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.support import TestCluster, run_cli

PLANTED = "planted-4b2d8e6f1c"
KEY_MESSAGE = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' "
    "(e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
    "'[-._a-zA-Z0-9]+')"
)
BAD_KEY = f'Secret "creds" is invalid: data[bad key!]: Invalid value: "bad key!": {KEY_MESSAGE}'
NO_TLS_KEY = 'Secret "web-tls" is invalid: data[tls.key]: Required value'

SECRETS = f"""\
apiVersion: v1
kind: Secret
metadata:
  name: creds
  namespace: default
stringData:
  password: {PLANTED}
  bad key!: {PLANTED}
---
apiVersion: v1
kind: Secret
metadata:
  name: web-tls
  namespace: default
type: kubernetes.io/tls
data:
  tls.crt: Y2VydA==
"""


def test_validate_refuses_a_bad_secret_key_and_a_tls_secret_without_its_key(
    workdir: Path,
) -> None:
    (workdir / "desired" / "workloads" / "secrets.yaml").write_text(SECRETS)
    result = run_cli("validate", cwd=workdir)
    assert result.code == 2, result
    assert f"desired/workloads/secrets.yaml:8:3: {BAD_KEY}" in result.stderr
    assert f"desired/workloads/secrets.yaml:15:7: {NO_TLS_KEY}" in result.stderr
    assert PLANTED not in result.stdout + result.stderr


def test_validate_refuses_a_config_map_key_in_both_data_and_binary_data(workdir: Path) -> None:
    (workdir / "desired" / "workloads" / "settings.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: default\n"
        "data:\n  mode: fast\nbinaryData:\n  mode: ZmFzdA==\n"
    )
    result = run_cli("validate", cwd=workdir)
    assert result.code == 2, result
    assert (
        'desired/workloads/settings.yaml:7:3: ConfigMap "settings" is invalid: data[mode]: '
        'Invalid value: "mode": duplicate of key present in binaryData'
    ) in result.stderr


def _refused(call: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as raised:
        call()
    assert raised.value.status == 422
    return dict(json.loads(raised.value.body or "{}"))


def _secret(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "default"},
        **fields,
    }


def test_the_cluster_refuses_them_in_the_same_words(lab: TestCluster) -> None:
    core: Any = client.CoreV1Api(lab.api_client)
    bad_key = _secret("creds", stringData={"password": PLANTED, "bad key!": PLANTED})
    status = _refused(lambda: core.create_namespaced_secret("default", bad_key))
    assert status["message"] == BAD_KEY
    assert status["details"]["causes"][0]["field"] == "data[bad key!]"
    assert PLANTED not in json.dumps(status)
    tls = _secret("web-tls", type="kubernetes.io/tls", data={"tls.crt": "Y2VydA=="})
    status = _refused(lambda: core.create_namespaced_secret("default", tls, dry_run="All"))
    assert status["message"] == NO_TLS_KEY
    registry = _secret(
        "registry",
        type="kubernetes.io/dockerconfigjson",
        stringData={".dockerconfigjson": '{"auths":'},
    )
    status = _refused(lambda: core.create_namespaced_secret("default", registry))
    assert status["message"] == (
        'Secret "registry" is invalid: data[.dockerconfigjson]: Invalid value: '
        '"<secret contents redacted>": unexpected end of JSON input'
    )
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "default"},
        "data": {"mode": "fast"},
        "binaryData": {"mode": "ZmFzdA=="},
    }
    status = _refused(lambda: core.create_namespaced_config_map("default", config_map))
    assert status["message"] == (
        'ConfigMap "settings" is invalid: data[mode]: Invalid value: "mode": '
        "duplicate of key present in binaryData"
    )
    # A good one is stored, and its type stays what it was (a real cluster keeps what is
    # in default between tests: the Secret goes again at the end).
    tls["data"]["tls.key"] = "a2V5"
    core.create_namespaced_secret("default", tls)
    try:
        status = _refused(
            lambda: core.patch_namespaced_secret("web-tls", "default", {"type": "Opaque"})
        )
    finally:
        lab.raw("DELETE", "/api/v1/namespaces/default/secrets/web-tls")
    assert status["message"] == (
        'Secret "web-tls" is invalid: type: Invalid value: "Opaque": field is immutable'
    )
