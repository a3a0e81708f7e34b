"""Secrets stay secret: a Secret's values never appear in any output, error or saved plan,
and a change to one is still reported (masked, as kubectl diff masks it)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from reconcile.sandbox.api import SandboxApi
from reconcile.sandbox.errors import ApiStatus
from tests.conftest import ClusterFactory
from tests.support import CliResult, TestCluster, lab_objects, run_cli

LIVE = "live-planted-7f3c9a1e0d"
DESIRED = "desired-planted-4b2d8e6f1c"
LATER = "later-planted-93ac51e07b"
SECRET_PATH = "/api/v1/namespaces/kube-system/secrets/cloud-creds"
ID = "Secret/kube-system/cloud-creds"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _forms(*values: str) -> list[str]:
    """Every way output could carry a planted value: as is, in base64, in part."""
    return [form for v in values for form in (v, _b64(v), _b64(v).rstrip("="), v[:14])]


def _secret(key: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "cloud-creds", "namespace": "kube-system"},
        "type": "Opaque",
        key: {"password": value},
    }


@pytest.fixture
def creds(make_cluster: ClusterFactory) -> TestCluster:
    """The lab with an existing Secret kube-system/cloud-creds holding a planted value, and
    the same value in kubectl's last-applied-configuration annotation, as client-side
    `kubectl apply` leaves it."""
    secret = _secret("data", _b64(LIVE))
    secret["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": json.dumps(secret)
    }
    return make_cluster([*lab_objects("lab"), secret])


def _declare(workdir: Path, key: str, value: str) -> None:
    """desired/ declares the Secret with another value, in `data` or in `stringData`."""
    written = value if key == "stringData" else _b64(value)
    (workdir / "desired" / "workloads" / "creds.yaml").write_text(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-creds\n  namespace: kube-system\n"
        f"type: Opaque\n{key}:\n  password: {written}\n"
    )


def _assert_hidden(runs: list[CliResult], files: list[Path], *values: str) -> None:
    texts = [r.stdout for r in runs] + [r.stderr for r in runs] + [p.read_text() for p in files]
    for form in _forms(*values):
        for text in texts:
            assert form not in text, f"{form!r} leaked into: {text[:2000]}"


def _stored(cluster: TestCluster) -> str:
    status, body = cluster.raw("GET", SECRET_PATH)
    assert status == 200, body
    return base64.b64decode(body["data"]["password"]).decode()


@pytest.mark.parametrize("key", ["data", "stringData"])
def test_secret_values_never_appear_and_the_change_is_still_reported(
    creds: TestCluster, workdir: Path, key: str
) -> None:
    _declare(workdir, key, DESIRED)
    kc = creds.kubeconfig
    line = f"{ID} data.password (sensitive value changed)"
    runs = []

    plan = run_cli("plan", cwd=workdir, kubeconfig=kc)
    runs.append(plan)
    # data: the seed's manager owns .data.password, a conflict (an error finding, exit 2)
    assert plan.code == (2 if key == "data" else 1), plan.stderr
    assert line in plan.lines

    as_json = run_cli("plan", "-o", "json", cwd=workdir, kubeconfig=kc)
    runs.append(as_json)
    [secret] = [o for o in json.loads(as_json.stdout)["objects"] if o["kind"] == "Secret"]
    assert secret["manifest"] is None
    assert secret["manifestDigest"].startswith("sha256:")
    [change] = [c for c in secret["changes"] if c["path"] == ["data", "password"]]
    assert change["sensitive"] is True
    assert change["before"].startswith("sha256:") and change["after"].startswith("sha256:")
    assert change["before"] != change["after"]

    markdown = run_cli("plan", "-o", "markdown", cwd=workdir, kubeconfig=kc)
    runs.append(markdown)
    assert (
        f"| `{ID}` | `data.password` | *(sensitive value)* | *(sensitive value changed)* |"
        in markdown.lines
    )

    saved = workdir / "plan.json"
    runs.append(
        run_cli("plan", "--force-conflicts", "--out", str(saved), cwd=workdir, kubeconfig=kc)
    )
    applied = run_cli("apply", "--force-conflicts", str(saved), cwd=workdir, kubeconfig=kc)
    runs.append(applied)
    assert applied.code == 0, applied.stderr
    assert line in applied.lines
    assert _stored(creds) == DESIRED  # the values came from desired/, not from the plan

    # Someone changes it in the cluster; apply puts it back (after a conflict, with `data`).
    status, _ = creds.raw(
        "PATCH",
        SECRET_PATH,
        {"data": {"password": _b64(LATER)}},
        "application/merge-patch+json",
    )
    assert status == 200
    text = run_cli("apply", cwd=workdir, kubeconfig=kc)
    runs.append(text)
    if key == "data":  # the data field is the cluster writer's now: a conflict, nothing applied
        assert text.code == 2
        assert f"rejected: {ID}: Apply failed with 1 conflict" in text.stderr
    as_json_apply = run_cli("apply", "-o", "json", "--force-conflicts", cwd=workdir, kubeconfig=kc)
    runs.append(as_json_apply)
    assert as_json_apply.code == 0, as_json_apply.stderr
    if key == "data":
        objects = json.loads(as_json_apply.stdout)["objects"]
        assert {"object": ID, "lines": [line], "error": None, "note": None} in objects
    assert _stored(creds) == DESIRED

    _assert_hidden(runs, [saved], LIVE, DESIRED, LATER)


def test_a_saved_plan_takes_secrets_from_desired_and_refuses_a_changed_one(
    creds: TestCluster, workdir: Path
) -> None:
    _declare(workdir, "stringData", DESIRED)
    kc = creds.kubeconfig
    saved = workdir / "plan.json"
    planned = run_cli("plan", "--out", str(saved), cwd=workdir, kubeconfig=kc)
    assert planned.code == 1, planned.stderr

    _declare(workdir, "stringData", LATER)  # desired/ moved on after the review
    stale = run_cli("apply", str(saved), cwd=workdir, kubeconfig=kc)
    assert stale.code == 2
    assert stale.stderr == (
        f"error: plan is stale: {ID} (changed in desired/) changed since the plan was made; "
        "nothing was applied. Run `reconcile plan` again.\n"
    )

    elsewhere = workdir / "elsewhere"
    elsewhere.mkdir()
    if creds.sandbox is not None:
        creds.sandbox.clear_requests()
    missing = run_cli("apply", str(saved), cwd=elsewhere, kubeconfig=kc)
    assert missing.code == 2
    assert missing.stderr == (
        "error: a saved plan is applied from the desired/ tree it was planned from, and there "
        "is none here: nothing was applied. Apply it from that checkout (--desired DIR)\n"
    )
    if creds.sandbox is not None:
        assert creds.sandbox.requests == []  # refused before anything was sent
    assert _stored(creds) == LIVE
    _assert_hidden([planned, stale, missing], [saved], LIVE, DESIRED, LATER)


def test_server_messages_that_quote_a_value_are_redacted(
    creds: TestCluster, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hostile server (or proxy) echoes what it was sent and what it holds."""
    if creds.sandbox is None:
        pytest.skip("makes the sandbox misbehave")
    original = SandboxApi._validate

    def echoing(self: SandboxApi, resource: Any, obj: dict[str, Any], old: Any) -> None:
        if resource.kind == "Secret" and old is not None:
            sent = json.dumps(obj.get("data"))
            held = json.dumps(old.get("data"))
            message = f'Secret "cloud-creds" is invalid: data: Invalid value: {sent} (was {held})'
            raise ApiStatus(
                422,
                "Invalid",
                message,
                {"name": "cloud-creds", "kind": "Secret", "causes": [{"message": message}]},
            )
        original(self, resource, obj, old)

    monkeypatch.setattr(SandboxApi, "_validate", echoing)
    _declare(workdir, "stringData", DESIRED)
    runs = [
        run_cli(*args, cwd=workdir, kubeconfig=creds.kubeconfig)
        for args in (["plan"], ["plan", "-o", "markdown"], ["plan", "-o", "json"], ["apply"])
    ]
    assert runs[0].code == 2
    assert f"error: {ID}: Secret " in runs[0].stderr
    assert "Invalid value: {" in runs[0].stderr and "***" in runs[0].stderr
    assert runs[3].code == 2
    _assert_hidden(runs, [], LIVE, DESIRED)


# What follows a Secret's metadata.namespace: a tagged value in each place a Secret's
# bytes live (data, stringData, kubectl's last-applied annotation).
TAGGED = [
    f"stringData:\n  password: !!int {DESIRED}\n",
    f"data:\n  password: !!bool {DESIRED}\n",
    f"stringData:\n  password: !!timestamp {DESIRED}\n",
    f"stringData:\n  password: !!null {DESIRED}\n",
    f"stringData: !!float {DESIRED}\n",
    f"  annotations:\n    kubectl.kubernetes.io/last-applied-configuration: !!int {DESIRED}\n",
]


@pytest.mark.parametrize("tagged", TAGGED)
def test_validate_never_quotes_a_secret_value_its_tag_cannot_hold(
    workdir: Path, tagged: str
) -> None:
    """A tag on a Secret's value is an error at its place, in every format, and the
    value is not in it: the markdown goes to a public pull-request comment."""
    (workdir / "desired" / "workloads" / "creds.yaml").write_text(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-creds\n"
        f"  namespace: kube-system\n{tagged}"
    )
    runs = [
        run_cli("validate", *output, cwd=workdir)
        for output in ([], ["-o", "json"], ["-o", "markdown"], ["-o", "wide"])
    ]
    for run in runs:
        assert run.code == 2, run
    assert "desired/workloads/creds.yaml:" in runs[0].stderr
    assert "YAML cannot read the value as " in runs[0].stderr
    _assert_hidden(runs, [], DESIRED)


def test_a_tag_on_another_kind_still_quotes_the_value(workdir: Path) -> None:
    (workdir / "desired" / "workloads" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: kube-system\n"
        "data:\n  port: !!int eighty\n"
    )
    run = run_cli("validate", cwd=workdir)
    assert run.code == 2
    assert 'cm.yaml:7:9: YAML cannot read "eighty" as an integer (!!int)' in run.stderr


def test_verbose_traces_a_secrets_requests_by_path_only(creds: TestCluster, workdir: Path) -> None:
    _declare(workdir, "stringData", DESIRED)
    applied = run_cli("apply", "-v", "--force-conflicts", cwd=workdir, kubeconfig=creds.kubeconfig)
    assert applied.code == 0, applied.stderr
    server = creds.api_client.configuration.host
    assert (
        f"PATCH {server}{SECRET_PATH}?fieldManager=reconcile&force=true 200 OK in "
        in applied.stderr
    )
    assert "Authorization" not in applied.stderr and "Bearer" not in applied.stderr
    _assert_hidden([applied], [], LIVE, DESIRED)
