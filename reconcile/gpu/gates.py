"""Gates between a rollout's batches: what must hold before the next batch starts.

- `bake`: the batch stays healthy for a while (each node Ready, not recorded failed, no
  operator state label at a failed value);
- `job`: a Job from desired/gates/ run on each node of the batch, pinned to it by
  `spec.template.spec.nodeName`, must complete (the place for a `dcgmi diag` run);
- `prom`: an instant Prometheus query, `$NODES` replaced by the batch's node names as a
  regular expression (`n1|n2`), must return no series, or only zeros.

A gate that cannot tell (the query fails, the Job is not done in time) halts the rollout:
it fails closed. Each gate says why it halted in one line.
"""

from __future__ import annotations

import copy
import json
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from reconcile.desired.models import Manifest
from reconcile.desired.reserved import ROLLOUT_FAILED
from reconcile.diagnostics import ReconcileError
from reconcile.gpu import disruptive
from reconcile.gpu.rollout import Batch, Gate
from reconcile.gpu.upgrade import NodeOps, poll_intervals
from reconcile.kube.api import ObjectApi
from reconcile.kube.objects import ApiResource, LiveNode

BAKE_POLL_SECONDS: Final = 2.0
JOB_POLL_SECONDS: Final = 2.0
PROMETHEUS_TIMEOUT_SECONDS: Final = 30.0
GATE_LABEL: Final = "reconcile.dev/rollout-gate"
JOBS: Final = ApiResource("batch", "v1", "jobs", "Job", True)


def all_of(gates: Sequence[Gate]) -> Gate | None:
    """One gate asking each in turn, halting at the first that halts (None: no gate)."""
    if not gates:
        return None

    def gate(batch: Batch) -> str | None:
        for one in gates:
            if (halted := one(batch)) is not None:
                return halted
        return None

    return gate


def bake(seconds: float, ops: NodeOps, catalogue: disruptive.Catalogue | None = None) -> Gate:
    """The batch watched for `seconds`: it halts when one of its nodes stops being Ready,
    is recorded failed, or has an operator state label turn to a failed value."""

    states = (catalogue or disruptive.Catalogue.packaged()).states()

    def gate(batch: Batch) -> str | None:
        deadline = ops.clock() + seconds
        ops.note(f"baking: batch {batch.number} ({', '.join(batch.nodes)}) for {seconds:g}s")
        while True:
            for name in batch.nodes:
                if problem := _unhealthy(ops.cluster.get_node(name), states):
                    return f"{name} {problem} during the {seconds:g}s bake of batch {batch.number}"
            if ops.clock() >= deadline:
                return None
            ops.sleep(min(BAKE_POLL_SECONDS, max(0.0, deadline - ops.clock())))

    return gate


def _unhealthy(live: LiveNode, states: Sequence[disruptive.StateLabel]) -> str | None:
    if not live.ready:
        return "is not Ready"
    if ROLLOUT_FAILED in live.annotations:
        return f"failed ({live.annotations[ROLLOUT_FAILED]})"
    for state in states:
        if live.labels.get(state.label) in state.failed:
            return f"reports {state.label}={live.labels[state.label]}"
    return None


@dataclass(frozen=True)
class JobGate:
    """A Job from desired/gates/ (`manifest`) created on each node of a batch and waited
    for up to `timeout` seconds: every one must complete."""

    manifest: Manifest
    cluster: ObjectApi
    ops: NodeOps
    timeout: float

    @property
    def shown(self) -> str:
        return f"gate job={self.manifest.source.file}"

    def __call__(self, batch: Batch) -> str | None:
        created = []
        for node in batch.nodes:
            try:
                job = self.cluster.create_object(JOBS, self._pinned(node, batch))
            except ReconcileError as e:
                return f"{self.shown}: could not create its Job on {node}: {e}"
            created.append((node, str(job["metadata"]["name"])))
            self.ops.note(f"{self.shown}: Job {self.manifest.namespace}/{created[-1][1]} on {node}")
        deadline = self.ops.clock() + self.timeout
        waiting = list(created)
        pauses = poll_intervals(JOB_POLL_SECONDS)
        while waiting:
            for node, name in list(waiting):
                outcome = _finished(self.cluster.get_object(JOBS, self.manifest.namespace, name))
                if outcome == "Complete":
                    waiting.remove((node, name))
                elif outcome is not None:
                    return (
                        f"{self.shown}: Job {self.manifest.namespace}/{name} on {node} failed "
                        f"({outcome})"
                    )
            if not waiting:
                return None
            if self.ops.clock() >= deadline:
                names = ", ".join(f"{name} on {node}" for node, name in waiting)
                return (
                    f"{self.shown}: not complete after {self.timeout:g}s (--gate-timeout): {names}"
                )
            self.ops.sleep(next(pauses))
        return None

    def _pinned(self, node: str, batch: Batch) -> dict[str, Any]:
        """The Job for `node`: named after the file's Job (`<name>-` and a suffix the
        server picks), pinned to the node, labelled with the gate and the batch."""
        body = copy.deepcopy(self.manifest.body)
        metadata = body.setdefault("metadata", {})
        metadata["generateName"] = f"{str(metadata.pop('name'))[:40]}-"
        metadata.pop("resourceVersion", None)
        metadata["labels"] = {
            **(metadata.get("labels") or {}),
            GATE_LABEL: str(metadata["generateName"]).rstrip("-"),
            "reconcile.dev/rollout-batch": str(batch.number),
        }
        pod = body.setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {})
        pod["nodeName"] = node
        # The node may still carry the rollout's cordon or a GPU taint: the gate runs there.
        pod.setdefault("tolerations", []).append({"operator": "Exists"})
        return body


def _finished(job: dict[str, Any] | None) -> str | None:
    """`Complete`, the reason it failed, or None while it runs (a Job gone is a failure)."""
    if job is None:
        return "it was deleted"
    for condition in (job.get("status") or {}).get("conditions") or ():
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return "Complete"
        if condition.get("type") == "Failed":
            return str(condition.get("message") or condition.get("reason") or "Failed")
    return None


def nodes_pattern(nodes: Sequence[str]) -> str:
    """The batch's node names as a PromQL regular expression in a double-quoted string
    (`n1|n2`; a dot escaped as `\\\\.`, which the string reads as `\\.`)."""
    return "|".join(name.replace(".", "\\\\.") for name in nodes)


@dataclass(frozen=True)
class PromGate:
    """An instant query on the Prometheus at `url` after each batch: no series, or only
    zeros, lets the next batch start."""

    query: str
    url: str
    fetch: Callable[[str], bytes] | None = None

    def __call__(self, batch: Batch) -> str | None:
        query = self.query.replace("$NODES", nodes_pattern(batch.nodes))
        address = f"{self.url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        shown = f"gate prom={self.query}"
        try:
            answer = json.loads((self.fetch or _get)(address))
        except (OSError, ValueError) as e:
            return f"{shown}: Prometheus at {self.url} did not answer: {e}"
        if answer.get("status") != "success":
            return f"{shown}: Prometheus refused the query: {answer.get('error', answer)}"
        data = answer.get("data") or {}
        result = data.get("result") or []
        if data.get("resultType") == "scalar":
            result = [{"metric": {}, "value": result}]
        nonzero = []
        for series in result:
            value = (series.get("value") or [None, "0"])[1]
            try:
                if float(value) != 0:
                    nonzero.append(f"{_series(series.get('metric') or {})} = {value}")
            except (TypeError, ValueError):
                nonzero.append(f"{_series(series.get('metric') or {})} = {value}")
        if nonzero:
            return f"{shown}: {len(nonzero)} series not zero after batch {batch.number}: " + (
                "; ".join(nonzero[:5]) + (" ..." if len(nonzero) > 5 else "")
            )
        return None


def _series(metric: dict[str, Any]) -> str:
    name = metric.get("__name__", "")
    labels = ",".join(f'{k}="{v}"' for k, v in sorted(metric.items()) if k != "__name__")
    return f"{name}{{{labels}}}"


def _get(address: str) -> bytes:
    with urllib.request.urlopen(address, timeout=PROMETHEUS_TIMEOUT_SECONDS) as response:
        return bytes(response.read())
