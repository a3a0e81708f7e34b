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
from reconcile.gpu import gates
from reconcile.gpu.rollout import Batch
from reconcile.gpu.upgrade import NodeOps
from tests.fake import FakeCluster

BATCH = Batch(2, ("gpu-0", "gpu.1"))


class _Prometheus(BaseHTTPRequestHandler):
    answers: ClassVar[list[dict[str, Any]]] = []
    asked: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)["query"][0]
        self.asked.append(query)
        body = json.dumps(self.answers.pop(0)).encode()
        self.send_response(200)
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
