"""A stand-in for the GPU Operator's mig-manager, for clusters with no GPUs behind their
nodes: the embedded sandbox and the clusters of the end-to-end tests.

mig-manager watches its node's `nvidia.com/mig.config`. When the value changes it sets
`nvidia.com/mig.config.state=pending`, repartitions the GPUs and restarts the device
plugin, which registers the node's `nvidia.com/gpu` and `nvidia.com/mig-<profile>`
resources anew (status.capacity and status.allocatable, per the layout and
`nvidia.com/mig.strategy`), then sets the state to `success`, or `failed`. The stand-in
does the same to every GPU node (`nvidia.com/gpu.present=true`) from what mig.py projects,
polling instead of watching. It does not pause the GPU operands
(`nvidia.com/gpu.deploy.*=paused-for-mig-change`) nor relabel the node as GPU Feature
Discovery would after a change.

What a node carries when first seen is taken as applied already: a seeded node is left
as it is. A layout mig.py finds no answer for ends in `failed`, and so does every change
on a node annotated `mig-manager.stand-in/fail: "true"`, with its status untouched. A
node annotated `mig-manager.stand-in/hold: "true"` keeps its change waiting (no state
written) until the annotation goes: a repartition that takes as long as a test needs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from reconcile.gpu.drivers import GPU_NODES
from reconcile.gpu.mig import (
    GPU_RESOURCE,
    MIG_CAPABLE,
    MIG_CONFIG,
    MIG_RESOURCE_PREFIX,
    MigProblem,
    MigTable,
)
from reconcile.kube.client import MERGE_PATCH, Cluster, RetryPolicy, node_segment

STATE: Final = "nvidia.com/mig.config.state"
PENDING: Final = "pending"
SUCCESS: Final = "success"
FAILED: Final = "failed"
FAIL_ANNOTATION: Final = "mig-manager.stand-in/fail"
HOLD_ANNOTATION: Final = "mig-manager.stand-in/hold"
# mig-manager's client-go User-Agent starts with its program name, which the API server
# records as the field manager of what it writes: the stand-in's writes show as its.
AGENT: Final = "nvidia-mig-manager"
USER_AGENT: Final = f"{AGENT}/stand-in"
DEFAULT_DELAY: Final = 0.3
POLL_INTERVAL: Final = 0.2


class MigManagerStandIn:
    """mig-manager for every GPU node of `cluster`, on a thread of its own between
    `start()` and `stop()`. `delay` is the seconds a repartition takes (the state stays
    `pending` that long); `interval` the seconds between two reads of the nodes."""

    def __init__(
        self,
        cluster: Cluster,
        table: MigTable | None = None,
        *,
        delay: float = DEFAULT_DELAY,
        interval: float = POLL_INTERVAL,
    ) -> None:
        self.cluster = cluster
        self.table = table or MigTable.default()
        self.delay = delay
        self.interval = interval
        self.last_error: Exception | None = None  # the last request that failed, retried since
        self.failures: dict[str, str] = {}  # node -> why its last change ended in `failed`
        self._applied: dict[str, str | None] = {}
        self._working: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def applied(self) -> dict[str, str | None]:
        """Every GPU node seen, with the layout it last applied (or carried when first
        seen; None for none): a later, different value is a change it acts on."""
        with self._lock:
            return dict(self._applied)

    @property
    def running(self) -> bool:
        """True between `start()` and `stop()` (a failing request never ends it)."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> MigManagerStandIn:
        """Read the nodes once (what they carry is taken as applied) and go on in the
        background. Returns at once if it runs already."""
        if self._thread is not None:
            return self
        self._stopped.clear()
        self._round()
        self._thread = threading.Thread(target=self._loop, name="mig-manager stand-in", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling and wait for the thread and every change in progress to end; a
        node whose change is cut short is left as it was (`pending`, say)."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            working = list(self._working.values())
        for worker in working:
            worker.join()

    def tick(self) -> None:
        """One read of the GPU nodes: a worker started for each node whose layout changed
        since it last applied one, unless one is at work on that node already."""
        nodes = self.cluster.list_nodes(label_selector=GPU_NODES)
        with self._lock:
            live = {node.name for node in nodes}
            for gone in set(self._applied) - live - set(self._working):
                del self._applied[gone]  # a node made again under that name is a new one
            for node in nodes:
                layout = node.labels.get(MIG_CONFIG)
                if node.name in self._working or self._stopped.is_set():
                    continue
                if node.name not in self._applied:
                    self._applied[node.name] = layout
                    continue
                if layout == self._applied[node.name]:
                    continue
                if node.annotations.get(HOLD_ANNOTATION) == "true":
                    continue  # held: the change waits until the annotation goes
                if layout is None or node.labels.get(MIG_CAPABLE) == "false":
                    # Nothing to apply, or no mig-manager runs there: no state reported.
                    self._applied[node.name] = layout
                    continue
                worker = threading.Thread(
                    target=self._change,
                    args=(node.name,),
                    name=f"mig-manager {node.name}",
                    daemon=True,
                )
                self._working[node.name] = worker
                worker.start()

    def _loop(self) -> None:
        while not self._stopped.wait(self.interval):
            self._round()

    def _round(self) -> None:
        try:
            self.tick()
        except Exception as e:  # any failure of a round: the next one reads everything again
            self.last_error = e

    def _change(self, name: str) -> None:
        """One change of `name`'s layout, from `pending` to `success` or `failed`. A
        failed request leaves it unapplied: the next round starts it over."""
        try:
            self._state(name, PENDING)
            if self._stopped.wait(self.delay):
                return
            node = self.cluster.request("GET", f"/api/v1/nodes/{node_segment(name)}")
            metadata = node.get("metadata") or {}
            labels: dict[str, str] = metadata.get("labels") or {}
            outcome = self._repartition(name, labels, metadata.get("annotations") or {}, node)
            self._state(name, outcome)
            with self._lock:
                self._applied[name] = labels.get(MIG_CONFIG)
        except Exception as e:  # as in _round: the change is tried again
            self.last_error = e
        finally:
            with self._lock:
                self._working.pop(name, None)

    def _repartition(
        self,
        name: str,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        node: Mapping[str, Any],
    ) -> str:
        """What the device plugin registers after the layout in `labels`, written to the
        node's status; the state the change ends in."""
        if annotations.get(FAIL_ANNOTATION) == "true":
            return self._failed(name, f"annotated {FAIL_ANNOTATION}=true")
        status = node.get("status") or {}
        projected = self.table.projected(
            labels, status.get("allocatable") or {}, capacity=status.get("capacity") or {}
        )
        if isinstance(projected, MigProblem):
            return self._failed(name, str(projected))
        advertised = {k: v for k, v in projected.allocatable.items() if _is_gpu(k)}
        patch = {
            "status": {
                part: _resources(status.get(part) or {}, advertised)
                for part in ("capacity", "allocatable")
            }
        }
        # The status subresource: a real API server ignores status in a PATCH of the node.
        self.cluster.request(
            "PATCH",
            f"/api/v1/nodes/{node_segment(name)}/status",
            body=patch,
            content_type=MERGE_PATCH,
        )
        with self._lock:
            self.failures.pop(name, None)
        return SUCCESS

    def _failed(self, name: str, reason: str) -> str:
        with self._lock:
            self.failures[name] = reason
        return FAILED

    def _state(self, name: str, state: str) -> None:
        self.cluster.patch_node(name, {"metadata": {"labels": {STATE: state}}})


def _is_gpu(resource: str) -> bool:
    return resource == GPU_RESOURCE or resource.startswith(MIG_RESOURCE_PREFIX)


def _resources(current: Mapping[str, str], advertised: Mapping[str, str]) -> dict[str, str | None]:
    """A merge patch of one resource list: each GPU resource `current` has and
    `advertised` lacks removed (null), every advertised one set."""
    patch: dict[str, str | None] = {k: None for k in current if _is_gpu(k) and k not in advertised}
    patch.update(advertised)
    return patch


def connect(kubeconfig: Path, context: str | None = None) -> Cluster:
    """A connection to the cluster of `kubeconfig`'s `context` (its current one for None)
    that introduces itself as mig-manager, retries little (a round that fails is tried
    again at the next) and gives up on an unanswered request after 10 s, so that `stop()`
    never waits long."""
    cluster = Cluster.connect(str(kubeconfig), context, request_timeout=10.0)
    cluster.api_client.user_agent = USER_AGENT
    cluster.retry = RetryPolicy(attempts=3, connect_attempts=1)
    return cluster


def serve(
    kubeconfig: Path, contexts: Sequence[str], *, delay: float = DEFAULT_DELAY
) -> Callable[[], None]:
    """A stand-in started for each of `contexts` of `kubeconfig`; returns what stops
    them all and closes their connections."""
    started: list[MigManagerStandIn] = []

    def stop() -> None:
        for stand_in in started:
            stand_in.stop()
            stand_in.cluster.close()

    try:
        for context in contexts:
            started.append(MigManagerStandIn(connect(kubeconfig, context), delay=delay).start())
    except BaseException:
        stop()
        raise
    return stop
