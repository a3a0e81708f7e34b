"""Converging through API faults, lost answers, concurrent writers and interruptions."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconcile.sandbox import FaultInjector, RequestRecord, Sandbox
from reconcile.sandbox.faults import RandomFaults
from reconcile.sandbox.server import Route
from tests.support import TestCluster, assert_no_credentials, run_cli

NODES = 500
DRIFTED = 150  # 30 %


def _fleet(tmp_path: Path, nodes: int, drifted: int) -> tuple[list[dict[str, Any]], Path]:
    """A fleet of GPU nodes, `drifted` of them off their desired labels, and its desired/."""
    objects = []
    desired = tmp_path / "desired" / "nodes"
    desired.mkdir(parents=True)
    for i in range(nodes):
        name = f"gpu-{i:04d}"
        labels = {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.count": "8",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "example.com/rack": f"r{i % 20}",
        }
        live = dict(labels)
        live["example.com/not-declared"] = "keep-me"
        if i < drifted:
            live["nvidia.com/gpu.count"] = "4"
            del live["example.com/rack"]
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": live},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }
        )
        body = "".join(f'  {k}: "{v}"\n' for k, v in labels.items())
        (desired / f"{name}.yaml").write_text(
            f"apiVersion: reconcile.dev/v1alpha1\nkind: NodeFeatures\nmetadata:\n  name: {name}\nlabels:\n{body}"
        )
    return objects, tmp_path


def _labels(sandbox: Sandbox) -> dict[str, dict[str, str]]:
    return {n["metadata"]["name"]: n["metadata"]["labels"] for n in sandbox.objects("nodes")}


def test_apply_converges_in_one_run_through_a_quarter_of_requests_failing(tmp_path: Path) -> None:
    objects, work = _fleet(tmp_path, NODES, DRIFTED)
    faults = RandomFaults(0.25, seed=7, retry_after=0)
    with Sandbox(objects, faults=faults) as sandbox:
        kubeconfig = sandbox.write_kubeconfig(tmp_path / "kubeconfig")

        apply = run_cli("apply", "-o", "json", cwd=work, kubeconfig=kubeconfig, timeout=300)

        assert apply.code == 0, apply.stderr
        document = json.loads(apply.stdout)
        assert document["converged"] is True
        assert len({c["node"] for c in document["applied"]}) == DRIFTED
        assert len(document["applied"]) == 2 * DRIFTED  # count fixed and rack added, once each
        assert document["retries"] > 0
        assert sum(faults.injected.values()) > 0
        assert {f.value for f in faults.injected} >= {"500", "503", "429", "drop-request"}

        labels = _labels(sandbox)
        assert all(node["nvidia.com/gpu.count"] == "8" for node in labels.values())
        assert all(node["example.com/not-declared"] == "keep-me" for node in labels.values())
        again = run_cli("plan", cwd=work, kubeconfig=kubeconfig, timeout=300)
        assert (again.code, again.stdout) == (0, "")


class DropAnswerOfFirstNodeWrite(FaultInjector):
    """The first label write is made, and its answer lost on the way back."""

    def __init__(self) -> None:
        self.dropped = 0

    def after_write(self, method: str, route: Route | None) -> str | None:
        if (
            route is not None
            and route.resource.plural == "nodes"
            and method == "PATCH"
            and not self.dropped
        ):
            self.dropped += 1
            return "drop"
        return None


@pytest.mark.parametrize("saved", [False, True], ids=["fresh", "saved-plan"])
def test_a_write_whose_answer_was_lost_is_neither_doubled_nor_an_error(
    lab: TestCluster, workdir: Path, saved: bool
) -> None:
    if lab.sandbox is None:
        pytest.skip("drops an answer inside the sandbox")
    args = ["apply"]
    if saved:
        run_cli("plan", "--out", str(workdir / "plan.json"), cwd=workdir, kubeconfig=lab.kubeconfig)
        args.append(str(workdir / "plan.json"))
    faults = DropAnswerOfFirstNodeWrite()
    lab.sandbox.set_faults(faults)

    result = run_cli(*args, "-o", "json", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert faults.dropped == 1
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    assert [(c["node"], c["key"], c["after"]) for c in document["applied"]] == [
        ("lab-node-1", "nvidia.com/gpu.count", "2")
    ]
    assert lab.labels("lab-node-1")["nvidia.com/gpu.count"] == "2"
    patches = [
        r
        for r in lab.sandbox.requests
        if r.resource == "nodes" and r.verb == "patch" and not r.dry_run
    ]
    assert [r.status for r in patches] == [0, 409]  # the lost one, then the guarded retry


def test_a_concurrent_writer_between_plan_and_apply_is_replanned_and_fixed(
    lab: TestCluster, workdir: Path
) -> None:
    if lab.sandbox is None:
        pytest.skip("writes from inside the sandbox, between apply's read and its write")
    written: list[bool] = []

    def race(record: RequestRecord) -> None:
        if record.resource == "nodes" and record.verb == "list" and not written:
            written.append(True)
            lab.label("lab-node-1", **{"nvidia.com/gpu.count": "7"})  # someone with kubectl

    lab.sandbox.server.observers.append(race)

    result = run_cli("apply", "-o", "json", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["conflicts"] == 1
    assert [(c["node"], c["key"], c["before"], c["after"]) for c in document["applied"]] == [
        ("lab-node-1", "nvidia.com/gpu.count", "7", "2")
    ]
    assert lab.labels("lab-node-1")["nvidia.com/gpu.count"] == "2"


def test_a_node_that_keeps_conflicting_is_reported_by_name(lab: TestCluster, workdir: Path) -> None:
    if lab.sandbox is None:
        pytest.skip("writes from inside the sandbox after every read")

    class AlwaysConflict(FaultInjector):
        def before(self, method: str, route: Route | None) -> Any:
            if method == "PATCH" and route is not None and route.resource.plural == "nodes":
                from reconcile.sandbox.errors import conflict

                return conflict(route.resource, route.name or "")
            return None

    lab.sandbox.set_faults(AlwaysConflict())

    result = run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert result.code == 2
    assert result.stdout == ""
    assert (
        "lab-node-1: not converged: kept conflicting with other writers (6 times); try again"
        in result.stderr
    )


def test_permanent_failures_are_not_retried(lab: TestCluster, workdir: Path) -> None:
    if lab.sandbox is None:
        pytest.skip("answers with a permanent failure from inside the sandbox")

    class Forbidden(FaultInjector):
        def before(self, method: str, route: Route | None) -> Any:
            if method == "PATCH" and route is not None and route.resource.plural == "nodes":
                from reconcile.sandbox.errors import ApiStatus

                return ApiStatus(
                    403,
                    "Forbidden",
                    'nodes "lab-node-1" is forbidden: User "ci" cannot patch resource "nodes"',
                    {},
                )
            return None

    lab.sandbox.set_faults(Forbidden())

    result = run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert result.code == 2
    # Found by the dry run of the node's patch, before anything was written.
    assert result.stderr.splitlines() == [
        'rejected: lab-node-1: nodes "lab-node-1" is forbidden: User "ci" cannot patch resource "nodes"',
        "error: 1 refusal(s) above: nothing was applied",
    ]
    assert [
        r.status for r in lab.sandbox.requests if r.verb == "patch" and r.resource == "nodes"
    ] == [403]


def test_a_forbidden_read_names_the_server_the_user_and_the_request(
    lab: TestCluster, workdir: Path
) -> None:
    if lab.sandbox is None:
        pytest.skip("answers 403 from inside the sandbox")
    message = 'nodes is forbidden: User "ci" cannot list resource "nodes" at the cluster scope'

    class Forbidden(FaultInjector):
        def before(self, method: str, route: Route | None) -> Any:
            if method == "GET" and route is not None and route.resource.plural == "nodes":
                from reconcile.sandbox.errors import ApiStatus

                return ApiStatus(403, "Forbidden", message, {})
            return None

    lab.sandbox.set_faults(Forbidden())
    document = yaml.safe_load(lab.kubeconfig.read_text())
    context = document["contexts"][0]

    result = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert result.code == 2
    assert result.stderr.splitlines() == [
        f"error: the API server {document['clusters'][0]['cluster']['server']} does not allow "
        f'user "{context["context"]["user"]}" (context "{context["name"]}") to GET '
        f"/api/v1/nodes: {message} (403 Forbidden)"
    ]


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_apply_stops_cleanly_and_the_next_run_finishes(
    tmp_path: Path, signum: int, code: int
) -> None:
    objects, work = _fleet(tmp_path, 120, 120)
    with Sandbox(objects) as sandbox:
        kubeconfig = sandbox.write_kubeconfig(tmp_path / "kubeconfig")
        patched: list[RequestRecord] = []
        process: subprocess.Popen[str] | None = None

        def interrupt(record: RequestRecord) -> None:
            if record.resource == "nodes" and record.verb == "patch" and not record.dry_run:
                patched.append(record)
                if len(patched) == 10 and process is not None:
                    process.send_signal(signum)

        sandbox.server.observers.append(interrupt)
        process = subprocess.Popen(
            [sys.executable, "-m", "reconcile", "apply", "--parallel", "2"],
            cwd=work,
            env={"KUBECONFIG": str(kubeconfig), "HOME": str(work), "PATH": "/usr/bin:/bin"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out, err = process.communicate(timeout=120)
        assert_no_credentials(out + err, kubeconfig)

        assert process.returncode == code, err
        assert "interrupted: what was applied is printed above" in err
        printed = {line.split()[0] for line in out.splitlines()}
        labels = _labels(sandbox)
        done = {name for name, node in labels.items() if node["nvidia.com/gpu.count"] == "8"}
        assert printed == done  # exactly what changed, no more, no less
        assert 10 <= len(done) < 120
        assert all(
            "example.com/rack" in labels[name] for name in done
        )  # each node whole: one PATCH

        sandbox.server.observers.clear()
        rest = run_cli("apply", cwd=work, kubeconfig=kubeconfig)
        assert rest.code == 0, rest.stderr
        assert {line.split()[0] for line in rest.lines} == set(labels) - done
        assert run_cli("plan", cwd=work, kubeconfig=kubeconfig).code == 0


@pytest.mark.slow
def test_the_sandbox_command_injects_faults(tmp_path: Path, workdir: Path) -> None:
    result = run_cli(
        "sandbox",
        "--seed",
        "lab",
        "--fault-rate",
        "0.3",
        "--fault-seed",
        "3",
        "--fault-retry-after",
        "0",
        "--",
        sys.executable,
        "-m",
        "reconcile",
        "apply",
        cwd=workdir,
        process=True,  # the child apply writes to the process's own stdout
    )
    assert (result.code, result.lines) == (0, ["lab-node-1 nvidia.com/gpu.count 2"]), result.stderr


def test_credentials_never_appear_in_errors_or_saved_plans(
    lab: TestCluster, workdir: Path, tmp_path: Path
) -> None:
    saved = workdir / "plan.json"
    run_cli("plan", "--out", str(saved), cwd=workdir, kubeconfig=lab.kubeconfig)
    assert_no_credentials(saved.read_text(), lab.kubeconfig)

    wrong = tmp_path / "wrong-token"
    document = yaml.safe_load(lab.kubeconfig.read_text())
    document["users"][0]["user"]["token"] = "s3cr3t-" + "x" * 30
    document["users"][0]["name"] = "alice"
    document["contexts"][0]["name"] = document["current-context"] = "lab"
    document["contexts"][0]["context"]["user"] = "alice"
    wrong.write_text(json.dumps(document))
    refused = run_cli("plan", cwd=workdir, kubeconfig=wrong)
    assert refused.code == 2
    server = document["clusters"][0]["cluster"]["server"]
    # The server and whose credentials it refused, in one line.
    assert refused.stderr.splitlines() == [
        f'error: the API server {server} refused the credentials of user "alice" '
        '(context "lab"): 401 Unauthorized'
    ]

    key = tmp_path / "client-key"
    document["users"][0]["user"] = {
        "client-certificate-data": "Y2VydGlmaWNhdGUtZGF0YS1zZWNyZXQ=",
        "client-key-data": "a2V5LWRhdGEtdGhhdC1pcy1zZWNyZXQ=",
    }
    document["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    key.write_text(json.dumps(document))
    broken = run_cli("plan", cwd=workdir, kubeconfig=key)  # run_cli checks the output for both
    assert broken.code == 2
