"""One rollout at a time on a node: a coordination.k8s.io/v1 Lease per rollout, held and
renewed for the whole run.

Each `rollout` or `upgrade` that writes creates its own Lease, `reconcile-rollout-<id>` in
`kube-system` (where the control plane keeps its own locks), labelled
`reconcile.dev/rollout`, listing the nodes it may touch (`reconcile.dev/rollout-nodes`).
Before its first write a run lists those Leases: one that is alive (renewed within its
`leaseDurationSeconds` and not released) and lists any of the run's nodes refuses the
run, naming its holder and since when. Two runs that start together both create their
Lease, then list again: the one whose Lease was acquired later (by acquireTime, then
name) deletes its own and is refused, so at most one goes on.

The holder renews every third of the duration; a holder that cannot renew for a whole
duration stops starting nodes (another may have taken its nodes over). A holder that
died (SIGKILL) stops renewing, and once its Lease has expired the next run takes over
its nodes from their journals (gpu/journal.py). At the end the Lease is released
(holderIdentity emptied) while any node's journal still names it, so a rerun can take
that node over at once; it is deleted once none does.
"""

from __future__ import annotations

import datetime
import getpass
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from reconcile.diagnostics import Conflict, NotFound, ReconcileError
from reconcile.engine.grants import Rule
from reconcile.engine.leader import micro_time
from reconcile.gpu.journal import Binding, LeaseView, Untrusted, conflicts, journals
from reconcile.kube.api import NodeApi
from reconcile.kube.objects import LiveNode

NAMESPACE: Final = "kube-system"
PREFIX: Final = "reconcile-rollout-"
LABEL: Final = "reconcile.dev/rollout"
NODES: Final = "reconcile.dev/rollout-nodes"
WORK: Final = "reconcile.dev/rollout-work"
TARGET: Final = "reconcile.dev/rollout-target"
DURATION_SECONDS: Final = 30.0

RBAC: Final = (
    Rule(
        "coordination.k8s.io",
        ("leases",),
        ("create", "delete", "list", "update"),
        why="rollout and upgrade hold a Lease per run (one rollout at a time on a node): "
        "list to find the others, create, renew (update) and delete their own",
        where=NAMESPACE,
    ),
)


class Held(ReconcileError):
    """Another rollout holds some of the nodes."""


def identity() -> str:
    """Who holds the Lease, as a person reading it needs it: user@host and process."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()} pid {os.getpid()}"


def _parse(text: str) -> datetime.datetime | None:
    for shape in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.datetime.strptime(text, shape).replace(tzinfo=datetime.UTC)
        except ValueError:
            continue
    return None


def view(lease: Mapping[str, Any], now: datetime.datetime) -> LeaseView:
    metadata = lease.get("metadata") or {}
    spec = lease.get("spec") or {}
    annotations = metadata.get("annotations") or {}
    holder = str(spec.get("holderIdentity") or "")
    renewed = str(spec.get("renewTime") or "")
    when = _parse(renewed)
    duration = float(spec.get("leaseDurationSeconds") or 0)
    alive = bool(holder) and when is not None and (now - when).total_seconds() < duration
    nodes = frozenset(n for n in str(annotations.get(NODES) or "").split(",") if n)
    return LeaseView(
        name=str(metadata.get("name")),
        namespace=str(metadata.get("namespace") or NAMESPACE),
        rollout=str((metadata.get("labels") or {}).get(LABEL) or ""),
        holder=holder,
        acquired=str(spec.get("acquireTime") or ""),
        renewed=renewed,
        live=alive,
        nodes=nodes,
        work=str(annotations.get(WORK) or ""),
        target=str(annotations.get(TARGET) or ""),
        duration=duration,
    )


class RolloutLock:
    """A run's Lease: read the others (`leases`), refuse where one holds our nodes
    (`conflicts`), take ours (`acquire`), renew it (`renewing`), give it up (`release`)."""

    def __init__(
        self,
        cluster: NodeApi,
        *,
        namespace: str = NAMESPACE,
        duration: float = DURATION_SECONDS,
        holder: str | None = None,
        rollout: str | None = None,
        now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.duration = max(1.0, duration)
        self.holder = holder or identity()
        self.rollout = rollout or secrets.token_hex(6)
        self.name = PREFIX + self.rollout
        self.now = now
        self._lease: dict[str, Any] | None = None
        self._lost = threading.Event()

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    def leases(self) -> dict[str, LeaseView]:
        """Every rollout's Lease, by namespace/name."""
        found = self.cluster.list_leases(self.namespace, label_selector=LABEL)
        now = self.now()
        return {v.ref: v for v in (view(lease, now) for lease in found)}

    def binding(self, leases: Mapping[str, LeaseView] | None = None) -> Binding:
        return Binding(self.rollout, self.ref, leases if leases is not None else self.leases())

    def acquire(self, nodes: Sequence[str], work: str, target: str) -> Binding:
        """Our Lease created, listing `nodes`; Held (ours deleted again) when another
        live one lists some of them, or was acquired first in a race."""
        stamp = micro_time(self.now())
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {LABEL: self.rollout},
                "annotations": {NODES: ",".join(sorted(nodes)), WORK: work, TARGET: target},
            },
            "spec": {
                "holderIdentity": self.holder,
                "leaseDurationSeconds": round(self.duration),
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 0,
            },
        }
        try:
            self._lease = self.cluster.create_lease(self.namespace, body)
        except NotFound as e:
            raise ReconcileError(
                f"cannot hold the rollout's Lease: the namespace {self.namespace} does not "
                "exist (nothing was changed)"
            ) from e
        leases = self.leases()
        mine = leases.get(self.ref)
        rivals = {
            ref: lease
            for ref, lease in leases.items()
            if mine is not None
            and ref != self.ref
            and lease.live
            and lease.nodes & set(nodes)
            and (lease.acquired, lease.name) < (mine.acquired, mine.name)
        }
        problems = conflicts(Binding(self.rollout, self.ref, rivals), nodes)
        if problems or mine is None:
            self._delete()
            raise Held("; ".join(problems or ["our Lease vanished"]) + " (nothing was changed)")
        return Binding(self.rollout, self.ref, leases)

    def renew(self) -> bool:
        """One renewal of our Lease: False when it is gone or someone else wrote it."""
        lease = self._lease
        if lease is None:
            return False
        body = dict(lease)
        body["spec"] = {**(lease.get("spec") or {}), "renewTime": micro_time(self.now())}
        try:
            self._lease = self.cluster.replace_lease(self.namespace, self.name, body)
        except (Conflict, NotFound):
            self._lease = None
            return False
        return True

    def renewing(self, on_lost: Callable[[], None]) -> Callable[[], None]:
        """Renew in a thread every third of the duration until the returned function is
        called; `on_lost` once the Lease is lost (someone else wrote it, it was deleted,
        or no renewal landed for a whole duration)."""
        stop = threading.Event()
        clock = time.monotonic

        def loop() -> None:
            landed = clock()
            while not stop.wait(self.duration / 3):
                try:
                    if not self.renew():
                        break
                    landed = clock()
                except ReconcileError:
                    if clock() - landed < self.duration:
                        continue  # the API server may be restarting: retried
                    break
            else:
                return
            self._lost.set()
            on_lost()

        thread = threading.Thread(target=loop, daemon=True, name="rollout-lease")
        thread.start()

        def done() -> None:
            stop.set()
            thread.join(timeout=self.duration)

        return done

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def release(self, nodes: Sequence[LiveNode]) -> None:
        """Ours, and every Lease whose holder is gone, deleted where no node's journal
        names it any more; ours released (holderIdentity emptied) where one does."""
        named = {j.lease for j in journals(nodes).values()}
        try:
            for lease in self.leases().values():
                if lease.ref != self.ref and (lease.live or lease.ref in named):
                    continue
                if lease.ref == self.ref and lease.ref in named:
                    self._release()
                    continue
                self.cluster.delete_lease(lease.namespace, lease.name)
        except ReconcileError:
            return  # it expires by itself

    def _release(self) -> None:
        lease = self._lease
        if lease is None:
            return
        body = dict(lease)
        body["spec"] = {**(lease.get("spec") or {}), "holderIdentity": ""}
        try:
            self._lease = self.cluster.replace_lease(self.namespace, self.name, body)
        except ReconcileError:
            return

    def _delete(self) -> None:
        try:
            self.cluster.delete_lease(self.namespace, self.name)
        except ReconcileError:
            return
        self._lease = None


def adopted(nodes: Sequence[LiveNode], binding: Binding) -> dict[str, str]:
    """The nodes whose journal names another rollout's Lease whose holder is gone: the
    rollout this run takes them over from, by node."""
    found = {}
    for name, journal in journals(nodes).items():
        lease = binding.leases.get(journal.lease)
        if journal.lease != binding.lease and lease is not None and not lease.live:
            found[name] = journal.rollout
    return found


__all__ = ["Held", "RolloutLock", "Untrusted", "adopted", "identity", "view"]
