"""Gates between a rollout's batches (gpu/gates.py): a Prometheus query that must give no
series or zeros, asked over HTTP with the batch's nodes in it; a Job per node of the batch
that must complete; all of them in turn."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from reconcile.desired.reader import load_desired
from reconcile.diagnostics import ReconcileError
from reconcile.gpu import gates
from reconcile.gpu.rollout import Batch
from reconcile.gpu.upgrade import NodeOps
from tests.fake import FakeCluster

BATCH = Batch(2, ("gpu-0", "gpu.1"))


class _Prometheus(BaseHTTPRequestHandler):
    # An answer as JSON (200), or (status, JSON), or (301 or 302, Location).
    answers: ClassVar[list[Any]] = []
    asked: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)["query"][0]
        self.asked.append(query)
        answer = self.answers.pop(0)
        if isinstance(answer, tuple) and answer[0] in (301, 302):
            self.send_response(answer[0])
            self.send_header("Location", answer[1])
            self.end_headers()
            return
        code, answer = answer if isinstance(answer, tuple) else (200, answer)
        body = json.dumps(answer).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def prometheus() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Prometheus)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Prometheus.asked.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _vector(*values: str) -> dict[str, Any]:
    result = [
        {"metric": {"__name__": "DCGM_FI_DEV_XID_ERRORS", "Hostname": f"gpu-{i}"}, "value": [1, v]}
        for i, v in enumerate(values)
    ]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def test_a_query_with_no_series_or_zeros_lets_the_next_batch_start(prometheus: str) -> None:
    query = 'increase(DCGM_FI_DEV_XID_ERRORS{Hostname=~"$NODES"}[10m])'
    _Prometheus.answers[:] = [_vector(), _vector("0", "0")]
    gate = gates.PromGate(query, prometheus)

    assert gate(BATCH) is None
    assert gate(BATCH) is None
    assert (
        _Prometheus.asked
        == ['increase(DCGM_FI_DEV_XID_ERRORS{Hostname=~"gpu-0|gpu\\\\.1"}[10m])'] * 2
    )


def test_a_series_not_zero_a_refused_query_or_no_answer_halts(prometheus: str) -> None:
    _Prometheus.answers[:] = [
        _vector("0", "3"),
        {"status": "error", "errorType": "bad_data", "error": "parse error"},
    ]
    gate = gates.PromGate("xid", prometheus)

    assert gate(BATCH) == (
        "gate prom=xid: 1 series not zero after batch 2: "
        'DCGM_FI_DEV_XID_ERRORS{Hostname="gpu-1"} = 3'
    )
    assert gate(BATCH) == "gate prom=xid: Prometheus refused the query: parse error"
    nowhere = gates.PromGate("xid", "http://127.0.0.1:9")
    halted = nowhere(BATCH)
    assert halted is not None and halted.startswith(
        "gate prom=xid: Prometheus at http://127.0.0.1:9 did not answer:"
    )


def _answer(kind: str, result: Any) -> bytes:
    return json.dumps(
        {"status": "success", "data": {"resultType": kind, "result": result}}
    ).encode()


def _gate(*bodies: bytes) -> gates.PromGate:
    answers = list(bodies)
    return gates.PromGate("xid", "http://prometheus:9090", fetch=lambda address: answers.pop(0))


XID = {"__name__": "DCGM_FI_DEV_XID_ERRORS", "Hostname": "gpu-0"}


def test_a_range_query_halts_on_any_value_of_any_series_that_is_not_zero() -> None:
    gate = _gate(
        _answer("matrix", [{"metric": XID, "values": [[1, "0"], [2, "7"], [3, "0"]]}]),
        _answer(
            "matrix",
            [
                {"metric": XID, "values": [[1, "0"], [2, "0"]]},
                {"metric": {**XID, "Hostname": "gpu-1"}, "values": [[1, "0"]]},
            ],
        ),
        _answer("matrix", []),
    )

    assert gate(BATCH) == (
        "gate prom=xid: 1 series not zero after batch 2: "
        'DCGM_FI_DEV_XID_ERRORS{Hostname="gpu-0"} = 7'
    )
    assert gate(BATCH) is None
    assert gate(BATCH) is None


def test_a_scalar_is_judged_by_its_value_and_a_string_halts() -> None:
    gate = _gate(
        _answer("scalar", [1, "0"]),
        _answer("scalar", [1, "2"]),
        _answer("string", [1, "0"]),
    )

    assert gate(BATCH) is None
    assert gate(BATCH) == "gate prom=xid: 1 series not zero after batch 2: scalar = 2"
    halted = gate(BATCH)
    assert halted is not None
    assert halted.startswith(
        "gate prom=xid: Prometheus at http://prometheus:9090 gave an answer not understood "
        "(a string, not a number): "
    )


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (_answer("vector", [{"metric": XID, "value": [1, "NaN"]}]), "a value is NaN"),
        (_answer("matrix", [{"metric": XID, "values": [[1, "0"], [2, "NaN"]]}]), "NaN"),
        (_answer("vector", [{"metric": XID, "value": [1, "many"]}]), "is not a number"),
        (_answer("vector", [{"metric": XID, "value": [1, None]}]), "a value is not a number"),
        (_answer("vector", [{"metric": XID}]), "a series has no value"),
        (_answer("matrix", [{"metric": XID, "value": [1, "0"]}]), "a series has no values"),
        (_answer("matrix", [{"metric": XID, "values": [[1]]}]), "not [timestamp, value]"),
        (_answer("scalar", "0"), "not [timestamp, value]"),
        (_answer("vector", {"metric": XID}), "data.result is not a list"),
        (_answer("histogram", []), "resultType 'histogram'"),
        (json.dumps({"status": "success", "data": {"resultType": "vector"}}).encode(), "result"),
        (json.dumps({"status": "success"}).encode(), "no data.result"),
        (json.dumps({"status": "pending", "data": {}}).encode(), "status 'pending'"),
        (json.dumps(["success"]).encode(), "not a JSON object"),
    ],
)
def test_an_answer_not_understood_halts(body: bytes, why: str) -> None:
    halted = _gate(body)(BATCH)

    assert halted is not None
    assert halted.startswith(
        "gate prom=xid: Prometheus at http://prometheus:9090 gave an answer not understood ("
    )
    assert why in halted


def test_an_answer_not_json_halts_quoting_a_short_masked_excerpt() -> None:
    token = "glpat-" + "a1B2c3D4e5" * 8
    body = (
        f"<html>proxy login\nAuthorization: Bearer {token}\npassword=hunter2 "
        + "x" * 10_000
        + "</html>"
    ).encode()

    halted = _gate(body, b"")(BATCH)

    assert halted is not None
    assert halted.startswith(
        "gate prom=xid: Prometheus at http://prometheus:9090 answered something not JSON: "
    )
    assert "\n" not in halted
    assert token[8:20] not in halted and "hunter2" not in halted
    assert "Authorization: ***" in halted and "password=***" in halted
    quoted = halted.split("not JSON: ", 1)[1]
    assert len(quoted) <= gates.EXCERPT_CHARS + 2  # its quotes
    assert _gate(b"")(BATCH) == (
        "gate prom=xid: Prometheus at http://prometheus:9090 answered something not JSON: "
        "an empty answer"
    )


def test_a_refusal_quotes_prometheus_masked_and_short() -> None:
    said = "parse error near token=s3cr3tvalue " + "y" * 500
    body = json.dumps({"status": "error", "errorType": "bad_data", "error": said}).encode()

    halted = _gate(body)(BATCH)

    assert halted is not None
    assert halted.startswith("gate prom=xid: Prometheus refused the query: parse error near ")
    assert "s3cr3tvalue" not in halted and "token=***" in halted
    assert len(halted) < 300


def test_the_error_body_of_an_error_status_is_read_for_what_prometheus_said(
    prometheus: str,
) -> None:
    _Prometheus.answers[:] = [
        (400, {"status": "error", "errorType": "bad_data", "error": "1:5: parse error"})
    ]

    assert gates.PromGate("xid", prometheus)(BATCH) == (
        "gate prom=xid: Prometheus refused the query: 1:5: parse error"
    )


def test_a_redirect_to_another_scheme_is_not_followed(prometheus: str) -> None:
    # urllib refuses file:// itself and follows ftp://; the gate follows neither.
    _Prometheus.answers[:] = [(302, "ftp://127.0.0.1:9/x"), (301, "file:///etc/passwd")]
    gate = gates.PromGate("xid", prometheus)

    first, second = gate(BATCH), gate(BATCH)

    assert first is not None and first.endswith("did not answer: redirected to a ftp:// address")
    assert second is not None and "did not answer: HTTP Error 301" in second


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://prometheus/", "prometheus:9090", "http://", "gopher://x"]
)
def test_a_prometheus_url_other_than_http_or_https_is_refused(url: str) -> None:
    fetched: list[str] = []

    def fetch(address: str) -> bytes:
        fetched.append(address)
        return b""

    with pytest.raises(ReconcileError, match="not an address of Prometheus"):
        gates.PromGate("xid", url, fetch=fetch)(BATCH)
    with pytest.raises(ReconcileError, match="give http://HOST"):
        gates.check_prometheus_url(url)
    assert not fetched
    assert gates.check_prometheus_url("HTTPS://prometheus.example/sub") == (
        "HTTPS://prometheus.example/sub"
    )


GATE = """\
apiVersion: batch/v1
kind: Job
metadata: {name: diag, namespace: ops}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: diag, image: dcgm:4}]
"""


def _job_gate(tmp_path: Path, cluster: FakeCluster) -> gates.JobGate:
    (tmp_path / "desired" / "gates").mkdir(parents=True)
    (tmp_path / "desired" / "gates" / "diag.yaml").write_text(GATE)
    state, problems = load_desired(tmp_path / "desired")
    assert not problems
    ticks: list[float] = [0.0]

    def sleep(seconds: float) -> None:
        ticks[0] += seconds
        for job in cluster.list_objects(gates.JOBS, "ops"):  # the Job controller's part
            node = job["spec"]["template"]["spec"]["nodeName"]
            kind = "Failed" if node == "gpu-1" else "Complete"
            stored = cluster.objects[cluster._key(gates.JOBS, "ops", job["metadata"]["name"])]
            stored["status"] = {"conditions": [{"type": kind, "status": "True", "reason": "X"}]}

    ops = NodeOps(
        cluster, lambda step: None, lambda note: None, sleep=sleep, clock=lambda: ticks[0]
    )
    return gates.JobGate(state.gates[0], cluster, ops, timeout=60)


def test_a_job_gate_runs_the_job_pinned_on_each_node_and_halts_on_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cluster = FakeCluster(namespaces=("ops",))

    halted = _job_gate(tmp_path, cluster)(Batch(1, ("gpu-0", "gpu-1")))

    jobs = cluster.list_objects(gates.JOBS, "ops")
    assert sorted(j["spec"]["template"]["spec"]["nodeName"] for j in jobs) == ["gpu-0", "gpu-1"]
    assert all(j["metadata"]["labels"][gates.GATE_LABEL] == "diag" for j in jobs)
    assert all({"operator": "Exists"} in j["spec"]["template"]["spec"]["tolerations"] for j in jobs)
    assert halted is not None
    assert halted.startswith("gate job=desired/gates/diag.yaml: Job ops/diag-")
    assert halted.endswith(" on gpu-1 failed (X)")


def test_all_of_asks_each_gate_in_turn_and_stops_at_the_first_that_halts() -> None:
    asked: list[str] = []

    def passes(batch: Batch) -> str | None:
        asked.append("passes")
        return None

    def halts(batch: Batch) -> str | None:
        asked.append("halts")
        return "no"

    assert gates.all_of([]) is None
    gate = gates.all_of([passes, halts, passes])
    assert gate is not None and gate(BATCH) == "no"
    assert asked == ["passes", "halts"]
