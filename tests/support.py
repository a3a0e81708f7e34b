"""Helpers shared by the tests: the real CLI in a subprocess, and a cluster to run it on.

The cluster is the embedded sandbox, or a real one when RECONCILE_TEST_KUBECONFIG names
a kubeconfig: objects are then seeded (and removed afterwards) through the API itself,
so the same end-to-end test checks the sandbox's fidelity against the real thing.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from reconcile.sandbox import Sandbox
from reconcile.sandbox.main import load_seed
from reconcile.sandbox.resources import resource_for

REPO = Path(__file__).resolve().parents[1]
DESIRED = REPO / "desired"
REAL_KUBECONFIG = os.environ.get("RECONCILE_TEST_KUBECONFIG")


@dataclass(frozen=True)
class CliResult:
    code: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()


def run_cli(
    *args: str,
    cwd: Path | None = None,
    kubeconfig: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    stdin: str | None = None,
    process: bool = False,
) -> CliResult:
    """`reconcile ARGS` as a user runs it: real argv, real exit code, stdout and stderr apart.

    In-process through click's runner (a process costs a second of imports); `process=True`
    runs the installed module in a separate process, for what only a process shows."""
    environment = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG",)}
    environment["HOME"] = str(cwd or REPO)  # never a developer's ~/.kube/config
    environment["NO_COLOR"] = "1"
    if kubeconfig is not None:
        environment["KUBECONFIG"] = str(kubeconfig)
    environment.update(env or {})
    if process:
        completed = subprocess.run(
            [sys.executable, "-m", "reconcile", *args],
            cwd=cwd,
            env=environment,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=stdin,
            check=False,
        )
        result = CliResult(completed.returncode, completed.stdout, completed.stderr)
    else:
        result = _run_in_process(list(args), cwd, environment, stdin)
    assert_no_credentials(
        result.stdout + result.stderr, kubeconfig or environment.get("KUBECONFIG")
    )
    return result


def _run_in_process(
    args: list[str], cwd: Path | None, environment: dict[str, str], stdin: str | None
) -> CliResult:
    from click.testing import CliRunner

    from reconcile.cli import main

    unset: dict[str, str | None] = {k: None for k in os.environ if k not in environment}
    runner = CliRunner()
    with contextlib.chdir(cwd or Path.cwd()):
        outcome = runner.invoke(
            main,
            args,
            input=stdin,
            env={**unset, **environment},
            prog_name="reconcile",
            catch_exceptions=True,
        )
    if outcome.exception is not None and not isinstance(outcome.exception, SystemExit):
        raise outcome.exception
    return CliResult(outcome.exit_code, outcome.stdout, outcome.stderr)


def credentials(kubeconfig: Path | str | None) -> list[str]:
    """The secrets a kubeconfig holds: tokens, passwords, client keys."""
    if kubeconfig is None or not Path(kubeconfig).exists():
        return []
    document = yaml.safe_load(Path(kubeconfig).read_text()) or {}
    found = []
    for user in document.get("users") or ():
        for key in ("token", "password", "client-key-data", "client-certificate-data"):
            value = (user.get("user") or {}).get(key)
            if value and len(str(value)) >= 8:  # shorter ones are test stand-ins, not secrets
                found.append(str(value))
    return found


def assert_no_credentials(output: str, kubeconfig: Path | str | None) -> None:
    """Every CLI run of the suite is checked: no credential of its kubeconfig is printed."""
    for secret in credentials(kubeconfig):
        assert secret not in output, "a credential from the kubeconfig appeared in the output"
        assert secret[:12] not in output, "part of a credential appeared in the output"


def lab_objects(seed: str = "lab") -> list[dict[str, Any]]:
    return load_seed(seed)


def copy_desired(target: Path, source: Path = DESIRED) -> Path:
    """A private copy of a desired/ tree that a test may change."""
    destination = target / "desired"
    shutil.copytree(source, destination)
    return destination


class TestCluster:
    """A cluster a test drives through the official client (and its kubeconfig)."""

    __test__ = False  # not a test class, despite the name

    def __init__(self, kubeconfig: Path, sandbox: Sandbox | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.sandbox = sandbox
        self.api_client = config.new_client_from_config(str(kubeconfig), persist_config=False)
        self.core = client.CoreV1Api(self.api_client)
        self._created: list[tuple[str, str, str, str]] = []

    @property
    def is_sandbox(self) -> bool:
        return self.sandbox is not None

    def raw(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        """One HTTP request through the client's connection; (status, decoded JSON body)."""
        headers = {"Accept": "application/json", "Content-Type": content_type}
        url = self.api_client.configuration.host + path
        self.api_client.update_params_for_auth(headers, None, ["BearerToken"], path, method, body)
        payload = body if isinstance(body, str | bytes) or body is None else json.dumps(body)
        response = self.api_client.rest_client.pool_manager.request(
            method, url, body=payload, headers=headers, preload_content=True
        )
        data = response.data
        try:
            decoded = json.loads(data) if data else None
        except ValueError:
            decoded = data.decode()
        return response.status, decoded

    def node(self, name: str) -> dict[str, Any]:
        status, body = self.raw("GET", f"/api/v1/nodes/{name}")
        assert status == 200, body
        return dict(body)

    def labels(self, name: str) -> dict[str, str]:
        return dict(self.node(name)["metadata"].get("labels") or {})

    def resource_versions(self) -> dict[str, str]:
        """name -> resourceVersion of every node: a cheap fingerprint of the cluster."""
        status, body = self.raw("GET", "/api/v1/nodes")
        assert status == 200, body
        return {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in body["items"]}

    def label(self, node: str, **labels: str | None) -> dict[str, Any]:
        status, body = self.raw(
            "PATCH",
            f"/api/v1/nodes/{node}",
            {"metadata": {"labels": labels}},
            "application/merge-patch+json",
        )
        assert status == 200, body
        return dict(body)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create an object through the API (status included, via the status subresource)."""
        resource = resource_for(obj["apiVersion"], obj["kind"])
        assert resource is not None, obj["kind"]
        body = copy.deepcopy(obj)
        status_part = body.pop("status", None)
        namespace = body["metadata"].get("namespace", "default") if resource.namespaced else ""
        prefix = f"/apis/{resource.group_version}" if resource.group else "/api/v1"
        collection = (
            f"{prefix}/namespaces/{namespace}/{resource.plural}"
            if resource.namespaced
            else f"{prefix}/{resource.plural}"
        )
        code, created = self.raw("POST", collection, body)
        assert code == 201, created
        name = created["metadata"]["name"]
        self._created.append((collection, name, resource.kind, namespace))
        if status_part is not None:
            created["status"] = status_part
            code, created = self.raw("PUT", f"{collection}/{name}/status", created)
            assert code == 200, created
        return dict(created)

    def seed(self, objects: Iterable[dict[str, Any]]) -> None:
        order = {"Namespace": 0, "Node": 1}
        for obj in sorted(objects, key=lambda o: order.get(o["kind"], 2)):
            if obj["kind"] == "Namespace" and self._exists(
                f"/api/v1/namespaces/{obj['metadata']['name']}"
            ):
                continue
            self.create(obj)

    def _exists(self, path: str) -> bool:
        return self.raw("GET", path)[0] == 200

    def cleanup(self) -> None:
        for collection, name, _kind, _ns in reversed(self._created):
            with contextlib.suppress(ApiException):
                self.raw("DELETE", f"{collection}/{name}")
        self.api_client.close()


def start_cluster(objects: list[dict[str, Any]], directory: Path) -> TestCluster:
    kubeconfig = directory / "kubeconfig"
    if REAL_KUBECONFIG:
        shutil.copy(REAL_KUBECONFIG, kubeconfig)
        cluster = TestCluster(kubeconfig)
        cluster.seed(objects)
        return cluster
    sandbox = Sandbox(objects).start()
    sandbox.write_kubeconfig(kubeconfig)
    return TestCluster(kubeconfig, sandbox)


def stop_cluster(cluster: TestCluster) -> None:
    if cluster.sandbox is not None:
        cluster.api_client.close()
        cluster.sandbox.stop()
    else:
        cluster.cleanup()


def _markdown_tokens(markdown: str) -> list[Any]:
    from markdown_it import MarkdownIt

    return list(MarkdownIt("commonmark", {"html": True}).enable("table").parse(markdown))


def markdown_table_rows(markdown: str) -> list[list[str]]:
    """Every table body row as GFM reads it: the text of each cell (code spans unwrapped)."""
    rows: list[list[str]] = []
    cells: list[str] | None = None
    in_body = False
    for token in _markdown_tokens(markdown):
        if token.type in ("tbody_open", "tbody_close"):
            in_body = token.type == "tbody_open"
        elif in_body and token.type == "tr_open":
            cells = []
        elif in_body and token.type == "tr_close" and cells is not None:
            rows.append(cells)
        elif in_body and token.type == "inline" and cells is not None:
            cells.append("".join(child.content for child in token.children or ()))
    return rows


def markdown_html(markdown: str) -> list[str]:
    """The raw HTML a markdown renderer would pass through: none, for safe output."""
    found = []
    for token in _markdown_tokens(markdown):
        if token.type == "html_block":
            found.append(token.content)
        found += [c.content for c in token.children or () if c.type == "html_inline"]
    return found
