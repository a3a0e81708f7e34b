"""What a user reads when something is off: one warning per run, errors that name the
server, the request and the next step, and no repeated prefixes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import yaml

from reconcile.serving import PromptHTTPServer
from tests.support import TestCluster, run_cli


def insecure_kubeconfig(cluster: TestCluster, directory: Path) -> Path:
    """The cluster's kubeconfig without its CA, with insecure-skip-tls-verify."""
    document = yaml.safe_load(cluster.kubeconfig.read_text())
    for entry in document["clusters"]:
        entry["cluster"].pop("certificate-authority-data", None)
        entry["cluster"]["insecure-skip-tls-verify"] = True
    path = directory / "insecure.kubeconfig"
    path.write_text(json.dumps(document))
    return path


def test_tls_verification_off_is_one_warning_per_run(
    lab: TestCluster, workdir: Path, tmp_path: Path
) -> None:
    kubeconfig = insecure_kubeconfig(lab, tmp_path)
    server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    # A process: in-process, the test runner records warnings instead of printing them.
    result = run_cli("plan", cwd=workdir, kubeconfig=kubeconfig, process=True)
    assert result.code == 1
    assert result.lines == ["lab-node-1 nvidia.com/gpu.count 2"]
    assert result.stderr == f"warning: TLS verification is off for {server}\n"
    quiet = run_cli("plan", "-q", cwd=workdir, kubeconfig=kubeconfig)
    assert quiet.stderr == ""


def test_a_verified_connection_prints_no_warning(lab: TestCluster, workdir: Path) -> None:
    result = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert "TLS" not in result.stderr


@pytest.fixture
def silent_server() -> Iterator[str]:
    """An address that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(32)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def kubeconfig_for(server: str, directory: Path, contexts: tuple[str, ...] = ("c",)) -> Path:
    path = directory / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [
                    {"name": n, "context": {"cluster": "c", "user": "u"}} for n in contexts
                ],
                "current-context": contexts[0],
            }
        )
    )
    return path


def test_a_slow_server_is_named_with_the_request_and_the_option(
    silent_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no backoff
    monkeypatch.setattr("reconcile.kube.client.transport.random.uniform", lambda a, b: 0.0)
    kubeconfig = kubeconfig_for(silent_server, tmp_path)
    result = run_cli("audit", "--request-timeout", "100ms", kubeconfig=kubeconfig)
    assert (result.code, result.stdout) == (2, "")
    assert result.stderr == (
        f"error: the API server {silent_server} did not answer GET /api/v1/nodes within 0.1s: "
        "if it is slow rather than down, raise --request-timeout\n"
    )


def test_a_refused_connection_names_the_server_without_user_info(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = kubeconfig_for(f"https://admin:hunter22@127.0.0.1:{port}", tmp_path)
    result = run_cli("audit", kubeconfig=kubeconfig)
    assert result.code == 2
    assert result.stderr == (
        f"error: cannot connect to the API server https://127.0.0.1:{port} (connection refused "
        "or host unreachable): check the server address in the kubeconfig and that the cluster "
        "is up\n"
    )


def test_an_unknown_context_lists_the_ones_there_are(tmp_path: Path) -> None:
    kubeconfig = kubeconfig_for("https://127.0.0.1:1", tmp_path, contexts=("a", "b"))
    result = run_cli("audit", "--context", "nope", kubeconfig=kubeconfig)
    assert (result.code, result.stdout) == (2, "")
    assert result.stderr == 'error: context "nope" not found in the kubeconfig; contexts: a, b\n'


def test_upgrading_a_node_without_a_gpu_says_so(lab: TestCluster, workdir: Path) -> None:
    assert lab.labels("lab-node-2").get("nvidia.com/gpu.present") != "true"
    result = run_cli(
        "upgrade",
        "lab-node-2",
        "--driver",
        "550.90.07",
        "--dry-run",
        cwd=workdir,
        kubeconfig=lab.kubeconfig,
    )
    assert (result.code, result.stdout) == (2, "")
    assert result.stderr.splitlines()[-1] == (
        'error: lab-node-2: not a GPU node: nvidia.com/gpu.present is not "true" '
        "(nothing was changed)"
    )


def test_a_driver_tag_finding_names_the_node_once(lab: TestCluster, workdir: Path) -> None:
    node = workdir / "desired" / "nodes" / "lab-node-0.yaml"
    text = node.read_text()
    key = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
    node.write_text(text.replace(f'{key}: "22.04"', f"{key}: null"))
    result = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert (
        f"error: lab-node-0: cannot build the driver image tag: label {key} is missing"
        in result.stderr.splitlines()
    )
    assert "lab-node-0: lab-node-0" not in result.stderr


def test_the_json_plan_names_where_each_node_is_declared(lab: TestCluster, workdir: Path) -> None:
    result = run_cli("plan", "-o", "json", cwd=workdir, kubeconfig=lab.kubeconfig)
    [node] = json.loads(result.stdout)["nodes"]
    lines = (workdir / "desired" / "nodes" / "lab-node-1.yaml").read_text().splitlines()
    assert (
        node["source"] == f"desired/nodes/lab-node-1.yaml:{lines.index('  name: lab-node-1') + 1}:9"
    )


def test_a_progress_line_shows_on_a_terminal_and_never_in_a_pipe(
    lab: TestCluster, workdir: Path
) -> None:
    """stderr a terminal (a pty): each step of the plan is shown, then cleared; stdout
    stays the drift lines. In a pipe (every other test) no such line appears."""
    import pty

    primary, secondary = pty.openpty()
    env = {**os.environ, "KUBECONFIG": str(lab.kubeconfig), "NO_COLOR": "1", "HOME": str(workdir)}
    process = subprocess.Popen(
        [sys.executable, "-m", "reconcile", "plan"],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=secondary,
    )
    os.close(secondary)
    out, _ = process.communicate(timeout=60)
    terminal = b""
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:
            break
        if not chunk:
            break
        terminal += chunk
    os.close(primary)
    assert out.decode().splitlines() == ["lab-node-1 nvidia.com/gpu.count 2"]
    assert b"reading nodes..." in terminal
    assert b"planning 11 object(s) by server-side dry-run..." in terminal
    assert terminal.endswith(b"\r\x1b[K")  # cleared when the answer is there

    piped = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert "reading nodes" not in piped.stderr


class _BadSecondPage(BaseHTTPRequestHandler):
    """Nodes in two pages, the second not in the shape of a NodeList."""

    def do_GET(self) -> None:
        if self.path.startswith("/api/v1/nodes") and "continue=next" in self.path:
            body: dict[str, object] = {
                "metadata": {},
                "items": [{"metadata": {"labels": {"a": 1}}}],
            }
        elif self.path.startswith("/api/v1/nodes"):
            node = {"metadata": {"name": "lab-node-0", "resourceVersion": "1"}}
            body = {"metadata": {"resourceVersion": "1", "continue": "next"}, "items": [node]}
        else:
            body = {"metadata": {"name": "kube-system", "uid": "u-1"}}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_page_not_in_the_shape_of_a_node_list_is_one_error_naming_the_request(
    workdir: Path, tmp_path: Path
) -> None:
    server = PromptHTTPServer(("127.0.0.1", 0), _BadSecondPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        address = f"http://127.0.0.1:{server.server_address[1]}"
        result = run_cli("plan", cwd=workdir, kubeconfig=kubeconfig_for(address, tmp_path))
    finally:
        server.shutdown()
        server.server_close()
    assert (result.code, result.stdout) == (2, "")
    [line] = result.stderr.splitlines()
    assert line.startswith(
        f"error: GET /api/v1/nodes to {address}: the answer is not what an API server sends "
        "(Expected `str`, got `int`"
    ), line
