"""A watch's endpoints: /metrics in the format Prometheus scrapes, /healthz, and /readyz
answering 503 until the first full plan."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from reconcile.app.metrics import WatchMetrics, bind_address, serve
from reconcile.diagnostics import ReconcileError


@pytest.mark.parametrize(
    ("address", "bound"),
    [
        ("127.0.0.1:9090", ("127.0.0.1", 9090)),
        ("localhost:0", ("localhost", 0)),
        ("[]:9090", ("0.0.0.0", 9090)),
    ],
)
def test_an_address_is_host_and_port(address: str, bound: tuple[str, int]) -> None:
    assert bind_address(address) == bound


@pytest.mark.parametrize("address", ["nonsense", "9090", "host:", "host:http"])
def test_an_address_that_is_not_host_port_is_refused(address: str) -> None:
    with pytest.raises(ReconcileError) as refused:
        bind_address(address)
    assert str(refused.value) == (
        f"--metrics-address {address!r} is not HOST:PORT (e.g. 127.0.0.1:8397, :8397)"
    )


@pytest.fixture
def served() -> Iterator[tuple[WatchMetrics, str]]:
    metrics = WatchMetrics()
    server = serve("127.0.0.1:0", metrics)
    host, port = server.server_address[:2]
    try:
        yield metrics, f"http://{host!s}:{port}"
    finally:
        server.shutdown()
        server.server_close()


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def test_readyz_is_503_until_the_watch_is_ready(served: tuple[WatchMetrics, str]) -> None:
    metrics, url = served
    assert get(url + "/healthz") == (200, "text/plain", "ok\n")
    assert get(url + "/readyz") == (503, "text/plain", "not ready\n")
    metrics.ready.set()
    assert get(url + "/readyz?verbose") == (200, "text/plain", "ok\n")
    assert get(url + "/other")[:2] == (404, "text/plain")


def test_metrics_are_in_the_exposition_format(served: tuple[WatchMetrics, str]) -> None:
    metrics, url = served
    metrics.leader.set(1)
    metrics.drift.labels(kind="label").set(2)
    status, content_type, text = get(url + "/metrics")
    assert (status, content_type.split(";")[0]) == (200, "text/plain")
    assert "reconcile_leader 1.0\n" in text
    assert 'reconcile_drift{kind="label"} 2.0\n' in text
    assert "# TYPE reconcile_corrections_total counter\n" in text


def test_an_address_in_use_is_an_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ReconcileError, match=f"cannot serve metrics on 127.0.0.1:{port}: "):
            serve(f"127.0.0.1:{port}", WatchMetrics())


def test_prometheus_client_is_imported_only_once_a_watch_makes_its_metrics() -> None:
    script = (
        "import sys\nimport reconcile.app.watching, reconcile.cli.watching\n"
        "print('prometheus_client' in sys.modules)\n"
        "reconcile.app.metrics.WatchMetrics()\n"
        "print('prometheus_client' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["False", "True"]
