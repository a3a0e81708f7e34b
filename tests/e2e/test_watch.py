"""`reconcile watch`: drift reported as it appears, corrected only on request, never toward
an invalid tree, never in a fight with another writer; one writer among replicas.

The watcher runs in a thread against the cluster over HTTP (the official client, the
real watch stream); the command itself runs as a process where signals and the metrics
endpoint are the point."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from reconcile import diagnostics as diag
from reconcile.desired.models import DesiredState
from reconcile.desired.reader import load_desired
from reconcile.engine.diff import NodeChange
from reconcile.engine.operations import PlanRequest
from reconcile.engine.plan import ObjectPlan, PlanOptions
from reconcile.engine.watch import Watcher, WatchRequest
from reconcile.files import fingerprint
from reconcile.gpu import checks as gpu
from reconcile.kube.client import Cluster
from reconcile.sandbox import FaultInjector
from reconcile.sandbox.server import Route
from tests.conftest import ClusterFactory
from tests.e2e.test_prune_guards import snapshot
from tests.support import REPO, TestCluster, lab_objects, run_cli, wait_for

GPU_COUNT = "nvidia.com/gpu.count"


@dataclass
class Heard:
    """Everything a watch reported, in order, safe to read from the test's thread."""

    lines: list[tuple[str, str, str, str | None]] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)
    flaps: list[tuple[str, str, str]] = field(default_factory=list)
    trees: list[tuple[str, bool]] = field(default_factory=list)
    blocking: list[Sequence[str]] = field(default_factory=list)
    restarts: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    is_ready: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def drift_lines(self, event: str = "drift") -> list[str]:
        with self.lock:
            return [
                f"{node} {key} {value}" for kind, node, key, value in self.lines if kind == event
            ]

    def drift(self, node: str, changes: Sequence[NodeChange]) -> None:
        self._add("drift", node, changes)

    def corrected(self, node: str, changes: Sequence[NodeChange]) -> None:
        self._add("corrected", node, changes)

    def _add(self, kind: str, node: str, changes: Sequence[NodeChange]) -> None:
        with self.lock:
            self.lines += [(kind, node, c.shown_key, c.shown_value) for c in changes]

    def object_drift(self, objects: Sequence[ObjectPlan]) -> None:
        with self.lock:
            self.lines += [("object-drift", o.id, o.action, None) for o in objects]

    def corrected_objects(self, objects: Sequence[ObjectPlan]) -> None:
        with self.lock:
            self.lines += [("object-corrected", o.id, o.action, None) for o in objects]

    def failed(self, subject: str, message: str) -> None:
        with self.lock:
            self.failures.append((subject, message))

    def flap(self, node: str, key: str, writer: str, backoff: float) -> None:
        with self.lock:
            self.flaps.append((node, key, writer))

    def tree(self, digest: str, problems: Sequence[diag.Diagnostic]) -> None:
        with self.lock:
            self.trees.append((digest, not diag.has_errors(problems)))

    def blocked(self, findings: Sequence[str]) -> None:
        with self.lock:
            self.blocking.append(findings)

    def synced(self, drift: Any) -> None:
        with self.lock:
            self.counts = dict(drift)

    def restarted(self, reason: str) -> None:
        with self.lock:
            self.restarts.append(reason)

    def ready(self) -> None:
        self.is_ready = True


class _Tree:
    def __init__(self, root: Path) -> None:
        self.root = root

    def fingerprint(self) -> object:
        return fingerprint(self.root)

    def load(self) -> tuple[DesiredState, list[diag.Diagnostic]]:
        return load_desired(self.root)


@contextlib.contextmanager
def watching(
    cluster: TestCluster, desired: Path, **options: Any
) -> Iterator[tuple[Heard, Watcher]]:
    """A watcher following `cluster` in a thread, stopped when the block ends."""
    heard = Heard()
    connection = Cluster.connect(str(cluster.kubeconfig))
    request = WatchRequest(
        planning=PlanRequest(
            DesiredState(),
            PlanOptions(
                prune=options.pop("prune", False),
                forceConflicts=options.pop("force_conflicts", False),
            ),
        ),
        desired_interval=0.1,
        watch_timeout=30,
        **options,
    )
    watcher = Watcher(
        request,
        connection,
        _Tree(desired),
        policy_for=gpu.policy,
        checks=gpu.ALL_CHECKS,
        observer=heard,
    )
    stop = threading.Event()
    watcher.start()
    thread = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield heard, watcher
    finally:
        stop.set()
        watcher.wake()
        thread.join(timeout=5)
        connection.close()


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


def eventually(condition: Callable[[], object], what: str) -> None:
    wait_for(condition, what=what, timeout=15)


def test_reports_drift_as_it_appears_and_writes_nothing(lab: TestCluster, workdir: Path) -> None:
    before = snapshot(lab)
    with watching(lab, workdir / "desired") as (heard, _):
        assert heard.is_ready
        assert heard.drift_lines() == [f"lab-node-1 {GPU_COUNT} 2"]
        lab.label("lab-node-0", **{GPU_COUNT: "7"})
        eventually(lambda: f"lab-node-0 {GPU_COUNT} 4" in heard.drift_lines(), "lab-node-0's drift")
        # The same drift is reported once, however many events the node sends.
        lab.label("lab-node-0", **{"example.com/unrelated": "x"})
        time.sleep(0.5)
        assert heard.drift_lines().count(f"lab-node-0 {GPU_COUNT} 4") == 1
        assert heard.counts["label"] == 2
    assert changed(before, snapshot(lab)) == {"/api/v1/nodes /lab-node-0"}  # the test's write
    assert lab.labels("lab-node-1")[GPU_COUNT] == "9"


def test_correct_fixes_drift_and_records_an_event(lab: TestCluster, workdir: Path) -> None:
    with watching(lab, workdir / "desired", correct=True) as (heard, _):
        assert heard.drift_lines("corrected") == [f"lab-node-1 {GPU_COUNT} 2"]
        assert lab.labels("lab-node-1")[GPU_COUNT] == "2"
        lab.label("lab-node-0", **{GPU_COUNT: "7"})
        eventually(lambda: lab.labels("lab-node-0")[GPU_COUNT] == "4", "the correction")
        eventually(lambda: heard.counts.get("label") == 0, "no drift left")
    assert heard.drift_lines() == []  # corrected, so never left standing as drift
    status, events = lab.raw("GET", "/apis/events.k8s.io/v1/namespaces/default/events")
    assert status == 200, events
    ours = [e for e in events["items"] if e.get("reason") == "DriftCorrected"]
    notes = {(e["regarding"]["name"], e["note"]) for e in ours}
    assert ("lab-node-1", f"{GPU_COUNT}: 9 -> 2") in notes
    assert ("lab-node-0", f"{GPU_COUNT}: 7 -> 4") in notes
    assert {e["reportingController"] for e in ours} == {"reconcile"}
    assert {e["regarding"]["kind"] for e in ours} == {"Node"}


def test_a_fight_with_another_writer_is_left_alone(lab: TestCluster, workdir: Path) -> None:
    with watching(lab, workdir / "desired", correct=True, flap_limit=3) as (heard, _):
        for attempt in range(4):
            written = lab.label("lab-node-0", **{GPU_COUNT: f"{7 + attempt}"})
            eventually(lambda: lab.labels("lab-node-0")[GPU_COUNT] == "4", "a correction")
        eventually(lambda: heard.flaps, "the flap")
        # the field manager the API server recorded for the test's own write of the label
        [test_writer] = [
            m["manager"]
            for m in written["metadata"]["managedFields"]
            if f"f:{GPU_COUNT}" in m["fieldsV1"].get("f:metadata", {}).get("f:labels", {})
        ]
        assert len(heard.flaps) == 1
        assert heard.flaps[0] == ("lab-node-0", GPU_COUNT, test_writer)
        lab.label("lab-node-0", **{GPU_COUNT: "42"})
        eventually(lambda: f"lab-node-0 {GPU_COUNT} 4" in heard.drift_lines(), "the drift")
        time.sleep(0.5)
        assert lab.labels("lab-node-0")[GPU_COUNT] == "42"  # left alone while backing off
        assert len(heard.drift_lines("corrected")) == 5  # lab-node-1 and four of lab-node-0


def replace_text(path: Path, text: str) -> None:
    """`path` holds `text` at once: written beside it, then renamed over it."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    partial.replace(path)


def test_an_invalid_tree_is_reported_and_the_last_valid_one_stays(
    lab: TestCluster, workdir: Path
) -> None:
    desired = workdir / "desired"
    node_file = desired / "nodes" / "lab-node-0.yaml"
    valid = node_file.read_text()
    with watching(lab, desired, correct=True) as (heard, _):
        # Each edit lands whole (a rename): a watcher that polls mid-write sees a truncated
        # file, an invalid tree of its own that the counts below would not expect.
        replace_text(node_file, valid.replace('gpu.count: "4"', "gpu.count: [1]"))
        eventually(lambda: [ok for _, ok in heard.trees] == [True, False], "the invalid tree")
        lab.label("lab-node-0", **{GPU_COUNT: "7"})
        eventually(lambda: lab.labels("lab-node-0")[GPU_COUNT] == "4", "the last valid value")
        replace_text(node_file, valid.replace('gpu.count: "4"', 'gpu.count: "3"'))
        eventually(lambda: lab.labels("lab-node-0")[GPU_COUNT] == "3", "the new tree's value")
        assert [ok for _, ok in heard.trees] == [True, False, True]


def test_a_blocking_finding_stops_every_correction(lab: TestCluster, workdir: Path) -> None:
    desired = workdir / "desired"
    (desired / "workloads" / "broken.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: broken, namespace: nowhere}\n"
        "data: {a: b}\n"
    )
    before = snapshot(lab)
    with watching(lab, desired, correct=True) as (heard, _):
        assert heard.blocking and any("nowhere" in f for f in heard.blocking[-1])
        assert heard.drift_lines() == [f"lab-node-1 {GPU_COUNT} 2"]
        lab.label("lab-node-0", **{GPU_COUNT: "7"})
        eventually(lambda: f"lab-node-0 {GPU_COUNT} 4" in heard.drift_lines(), "the drift")
    assert changed(before, snapshot(lab)) == {"/api/v1/nodes /lab-node-0"}
    assert lab.labels("lab-node-0")[GPU_COUNT] == "7"


# --- the command ---------------------------------------------------------------------------


@contextlib.contextmanager
def command(
    cluster: TestCluster, cwd: Path, *args: str
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`reconcile watch ARGS` as a process; (process, metrics URL) once it serves."""
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "NO_COLOR": "1", "HOME": str(cwd)}
    process = subprocess.Popen(
        [sys.executable, "-m", "reconcile", "watch", "--metrics-address", "127.0.0.1:0", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        first = process.stderr.readline()
        assert "/healthz" in first, first + process.stderr.read()
        yield process, first.split(" on ", 1)[1].strip()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metric(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


def lease(cluster: TestCluster, name: str) -> dict[str, Any] | None:
    status, body = cluster.raw(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{name}"
    )
    return dict(body) if status == 200 else None


@pytest.mark.slow
def test_watch_command_serves_metrics_holds_the_lease_and_stops_on_sigterm(
    lab: TestCluster, workdir: Path
) -> None:
    name = f"holder-{uuid.uuid4().hex[:8]}"
    args = ("--correct", "--leader-elect", "--lease", f"default/{name}")
    with command(lab, workdir, *args) as (process, url):
        eventually(lambda: get(url + "/readyz")[0] == 200, "ready")
        eventually(lambda: lab.labels("lab-node-1")[GPU_COUNT] == "2", "the correction")
        text = get(url + "/metrics")[1]
        assert metric(text, 'reconcile_drift{kind="label"}') == 0
        assert metric(text, "reconcile_corrections_total") == 1
        assert metric(text, "reconcile_desired_valid") == 1
        assert metric(text, "reconcile_leader") == 1
        assert "lab-node-1" not in text  # no per-node label: the lines carry the nodes
        held = lease(lab, name)
        assert held is not None and held["spec"]["holderIdentity"]
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=15)
        assert process.returncode == 0, err
    assert out.split(" ", 1)[1] == f"lab-node-1 {GPU_COUNT} 2 (corrected)\n"
    released = lease(lab, name)
    assert released is not None and released["spec"].get("holderIdentity", "") == ""


@pytest.mark.slow
def test_a_standby_replica_reports_and_never_writes(lab: TestCluster, workdir: Path) -> None:
    name = f"standby-{uuid.uuid4().hex[:8]}"  # a real cluster keeps Leases between tests
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    status, body = lab.raw(
        "POST",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "holderIdentity": "the-other-replica",
                "leaseDurationSeconds": 3600,
                "acquireTime": now,
                "renewTime": now,
            },
        },
    )
    assert status == 201, body
    before = snapshot(lab)
    args = ("--correct", "--leader-elect", "--lease", f"default/{name}")
    with command(lab, workdir, *args) as (process, url):
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.split(" ", 1)[1] == f"lab-node-1 {GPU_COUNT} 2\n"
        assert metric(get(url + "/metrics")[1], "reconcile_leader") == 0
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=15)
        assert process.returncode == 0
    assert snapshot(lab) == before
    held = lease(lab, name)
    assert held is not None and held["spec"]["holderIdentity"] == "the-other-replica"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--prune",), "error: --prune removes labels: it needs --correct"),
        (("--lease", "nolease"), "error: --lease 'nolease' is not NAMESPACE/NAME"),
        (
            ("--metrics-address", "nonsense"),
            "error: --metrics-address 'nonsense' is not HOST:PORT (e.g. 127.0.0.1:8397, :8397)",
        ),
        (("--resync", "0"), "error: --resync must be at least 10s"),
        (("--resync", "9.5s"), "error: --resync must be at least 10s"),
        (("--desired-interval", "0"), "error: --desired-interval must be at least 1s"),
        (("--watch-timeout", "500ms"), "error: --watch-timeout must be at least 10s"),
    ],
)
def test_watch_refuses_bad_options(
    lab: TestCluster, workdir: Path, args: tuple[str, ...], message: str
) -> None:
    before = snapshot(lab)
    correct = () if args[0] == "--prune" else ("--correct",)
    result = run_cli("watch", *correct, *args, cwd=workdir, kubeconfig=lab.kubeconfig)
    assert (result.code, result.stderr.strip().splitlines()[-1]) == (2, message)
    assert snapshot(lab) == before


def test_watch_refuses_an_invalid_tree_at_start(lab: TestCluster, workdir: Path) -> None:
    node_file = workdir / "desired" / "nodes" / "lab-node-0.yaml"
    node_file.write_text(node_file.read_text().replace('gpu.count: "4"', "gpu.count: [1]"))
    before = snapshot(lab)
    result = run_cli(
        "watch",
        "--correct",
        "--metrics-address",
        "127.0.0.1:0",
        cwd=workdir,
        kubeconfig=lab.kubeconfig,
    )
    assert result.code == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: 1 error(s): nothing was changed in the cluster"
    )
    assert "lab-node-0.yaml" in result.stderr
    assert snapshot(lab) == before


def test_a_new_checkout_swapped_in_by_git_sync_is_followed(
    lab: TestCluster, workdir: Path, tmp_path: Path
) -> None:
    """git-sync checks each commit out in a new directory and swaps a link to it."""
    first = workdir / "desired"
    second = tmp_path / "commit-2"
    shutil.copytree(first, second)
    node_file = second / "nodes" / "lab-node-0.yaml"
    node_file.write_text(node_file.read_text().replace('gpu.count: "4"', 'gpu.count: "8"'))
    link = tmp_path / "repo"
    link.symlink_to(first)
    with watching(lab, link, correct=True) as (heard, _):
        assert lab.labels("lab-node-0")[GPU_COUNT] == "4"
        swap = tmp_path / "repo.new"
        swap.symlink_to(second)
        swap.replace(link)  # atomic, as git-sync does it
        eventually(lambda: lab.labels("lab-node-0")[GPU_COUNT] == "8", "the new commit's value")
        assert [ok for _, ok in heard.trees] == [True, True]


BUDGET = "/apis/policy/v1/namespaces/gpu-drv/poddisruptionbudgets/trainer-pdb"


def edit_budget(lab: TestCluster) -> None:
    """What `kubectl edit` does: another field manager takes minAvailable."""
    status, body = lab.raw(
        "PATCH", BUDGET, {"spec": {"minAvailable": 3}}, "application/merge-patch+json"
    )
    assert status == 200, body


def min_available(lab: TestCluster) -> int:
    return int(lab.raw("GET", BUDGET)[1]["spec"]["minAvailable"])


def test_workload_objects_are_corrected_on_resync_with_force_conflicts(
    lab: TestCluster, workdir: Path
) -> None:
    options = {"correct": True, "resync": 0.3, "force_conflicts": True}
    with watching(lab, workdir / "desired", **options) as (heard, _):
        edit_budget(lab)
        eventually(lambda: min_available(lab) == 4, "the resync")
        corrected = ("object-corrected", "PodDisruptionBudget/gpu-drv/trainer-pdb", "update", None)
        eventually(lambda: corrected in heard.lines, "the line it changed")


@pytest.mark.slow
def test_a_field_another_manager_took_is_reported_not_taken(
    lab: TestCluster, workdir: Path
) -> None:
    with watching(lab, workdir / "desired", correct=True, resync=0.3) as (heard, _):
        edit_budget(lab)
        eventually(lambda: heard.blocking, "the conflict")
        time.sleep(0.7)  # two resyncs or more: the same finding is said once
        [conflict] = heard.blocking
        assert "conflict with" in conflict[0] and "--force-conflicts" in conflict[0]
        assert min_available(lab) == 3
        # node drift is not corrected either while the tree's plan is blocked
        lab.label("lab-node-0", **{GPU_COUNT: "7"})
        eventually(lambda: f"lab-node-0 {GPU_COUNT} 4" in heard.drift_lines(), "the drift")
        assert lab.labels("lab-node-0")[GPU_COUNT] == "7"


def test_prune_removes_what_left_the_tree_and_never_everything(
    lab: TestCluster, workdir: Path
) -> None:
    desired = workdir / "desired"
    node_file = desired / "nodes" / "lab-node-1.yaml"
    with watching(lab, desired, correct=True, prune=True) as (heard, _):
        assert lab.labels("lab-node-1")[GPU_COUNT] == "2"  # corrected: now in its inventory
        node_file.write_text(
            "\n".join(line for line in node_file.read_text().splitlines() if GPU_COUNT not in line)
        )
        eventually(lambda: GPU_COUNT not in lab.labels("lab-node-1"), "the prune")
        # The correction is reported once its PATCH has returned, a moment after the label
        # is gone from what the cluster serves.
        eventually(
            lambda: f"lab-node-1 {GPU_COUNT} -" in heard.drift_lines("corrected"), "the report"
        )
    before = snapshot(lab)
    # lab-node-1 is the only node whose inventory holds labels: declaring none for it
    # would remove every label reconcile manages
    node_file.write_text(
        "apiVersion: reconcile.dev/v1alpha1\nkind: NodeFeatures\n"
        "metadata: {name: lab-node-1}\nlabels: {}\n"
    )
    with watching(lab, desired, correct=True, prune=True) as (heard, _):
        assert [s for s, _ in heard.failures] == ["--prune"]
        assert "--allow-empty-prune" in heard.failures[0][1]
    assert snapshot(lab) == before


# --- the stream ----------------------------------------------------------------------------


def test_with_nothing_changing_nothing_is_asked_but_the_watch(
    sandbox_only: TestCluster, workdir: Path
) -> None:
    lab = sandbox_only
    assert lab.sandbox is not None
    with watching(lab, workdir / "desired", correct=True) as (heard, _):
        assert heard.is_ready
        lab.sandbox.clear_requests()
        time.sleep(0.8)  # eight looks at desired/, no resync due
        asked = [(r.verb, r.resource) for r in lab.sandbox.requests if r.agent == "reconcile"]
        assert set(asked) <= {("watch", "nodes")}


def test_a_broken_stream_lists_the_nodes_again_and_goes_on(
    sandbox_only: TestCluster, workdir: Path
) -> None:
    lab = sandbox_only
    assert lab.sandbox is not None
    with watching(lab, workdir / "desired", correct=True) as (heard, _):
        eventually(lambda: lab.sandbox.open_watches >= 1, "the open watch")  # type: ignore[union-attr]
        assert lab.sandbox.close_watches(abrupt=True) >= 1
        eventually(lambda: heard.restarts, "the restart")
        assert "broke" in heard.restarts[0]
        lab.label("lab-node-0", **{GPU_COUNT: "7"})
        eventually(lambda: lab.labels("lab-node-0")[GPU_COUNT] == "4", "a correction after it")


def test_a_watch_from_a_version_the_server_no_longer_keeps_is_expired(
    sandbox_only: TestCluster,
) -> None:
    from reconcile.kube.client import WatchExpired

    lab = sandbox_only
    assert lab.sandbox is not None
    cluster = Cluster.connect(str(lab.kubeconfig))
    _, version = cluster.list_nodes_at()
    lab.label("lab-node-0", **{"example.com/x": "1"})
    lab.sandbox.compact()
    with pytest.raises(WatchExpired, match="too old resource version"):
        list(cluster.watch_nodes(version, timeout_seconds=2))
    cluster.close()


# --- trees that cannot be followed, and the way back -------------------------------------


def metric_of(url: str, name: str) -> float | None:
    return metric(get(url + "/metrics")[1], name)


def ended(process: subprocess.Popen[str]) -> tuple[str, str]:
    """SIGTERM, then everything the process printed: (stdout, stderr after its first line)."""
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    return out, err


@pytest.mark.slow
def test_a_corrected_line_is_marked_and_differs_from_a_reported_one(
    lab: TestCluster, workdir: Path
) -> None:
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ "
    with command(lab, workdir) as (process, url):
        eventually(lambda: get(url + "/readyz")[0] == 200, "ready")
        reported, _ = ended(process)
    with command(lab, workdir, "--correct") as (process, url):
        eventually(lambda: lab.labels("lab-node-1")[GPU_COUNT] == "2", "the correction")
        corrected, _ = ended(process)
    assert re.fullmatch(stamp + f"lab-node-1 {GPU_COUNT} 2\n", reported), reported
    assert re.fullmatch(stamp + f"lab-node-1 {GPU_COUNT} 2 \\(corrected\\)\n", corrected), corrected


@pytest.mark.slow
@pytest.mark.parametrize("becomes", ["a fleet", "an empty directory"])
def test_a_tree_that_becomes_a_fleet_or_empty_is_invalid_and_the_last_valid_one_stays(
    lab: TestCluster, workdir: Path, tmp_path: Path, becomes: str
) -> None:
    """git-sync swaps in a checkout that is a fleet, or an empty one: never "in force"."""
    first = workdir / "desired"
    other = tmp_path / "commit-2"
    if becomes == "a fleet":
        shutil.copytree(REPO / "examples" / "fleet" / "desired", other)
    else:
        other.mkdir()
    link = tmp_path / "repo"
    link.symlink_to(first)
    args = ("--correct", "--desired", str(link), "--desired-interval", "1s")
    with command(lab, workdir, *args) as (process, url):
        eventually(lambda: get(url + "/readyz")[0] == 200, "ready")
        assert metric_of(url, "reconcile_desired_valid") == 1
        swap = tmp_path / "repo.new"
        swap.symlink_to(other)
        swap.replace(link)
        eventually(lambda: metric_of(url, "reconcile_desired_valid") == 0, "the invalid tree")
        # the last valid tree is in force: drift from it is found and corrected
        lab.label("lab-node-0", **{GPU_COUNT: "7"})
        eventually(lambda: lab.labels("lab-node-0")[GPU_COUNT] == "4", "the last valid value")
        swap = tmp_path / "repo.back"
        swap.symlink_to(first)
        swap.replace(link)
        eventually(lambda: metric_of(url, "reconcile_desired_valid") == 1, "the valid tree back")
        time.sleep(1.5)  # a look at desired/ or more: each is said once
        out, err = ended(process)
    said = err.splitlines()
    reason = "declares a fleet" if becomes == "a fleet" else "declares nothing"
    assert sum(reason in line for line in said) == 1, err
    assert sum("the last valid tree stays in force" in line for line in said) == 1, err
    assert sum(line.endswith(" is in force") for line in said) == 2, err  # at start, back
    assert f"lab-node-0 {GPU_COUNT} 4" in out


@pytest.mark.slow
def test_a_reverted_bad_edit_makes_the_tree_valid_again(lab: TestCluster, workdir: Path) -> None:
    node_file = workdir / "desired" / "nodes" / "lab-node-0.yaml"
    valid = node_file.read_text()
    with command(lab, workdir, "--desired-interval", "1s") as (process, url):
        eventually(lambda: get(url + "/readyz")[0] == 200, "ready")
        node_file.write_text(valid.replace('gpu.count: "4"', "gpu.count: [1]"))
        eventually(lambda: metric_of(url, "reconcile_desired_valid") == 0, "the bad edit")
        node_file.write_text(valid)
        eventually(lambda: metric_of(url, "reconcile_desired_valid") == 1, "the revert")
        time.sleep(1.5)
        _, err = ended(process)
    said = err.splitlines()
    assert sum("the last valid tree stays in force" in line for line in said) == 1, err
    assert sum(line.endswith(" is in force") for line in said) == 2, err


def test_an_empty_tree_is_refused_at_start(lab: TestCluster, workdir: Path) -> None:
    empty = workdir / "empty"
    empty.mkdir()
    before = snapshot(lab)
    args = ("watch", "--correct", "--desired", str(empty), "--metrics-address", "127.0.0.1:0")
    result = run_cli(*args, cwd=workdir, kubeconfig=lab.kubeconfig)
    assert result.code == 2, result.stderr
    assert "desired/ declares nothing" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: 1 error(s): nothing was changed in the cluster"
    )
    assert snapshot(lab) == before


def test_a_lease_namespace_that_does_not_exist_is_an_error_at_start(
    lab: TestCluster, workdir: Path
) -> None:
    namespace = f"nosuch-{uuid.uuid4().hex[:8]}"
    before = snapshot(lab)
    if lab.sandbox is not None:
        lab.sandbox.clear_requests()
    result = run_cli(
        *("watch", "--correct", "--leader-elect", "--lease", f"{namespace}/reconcile"),
        *("--metrics-address", "127.0.0.1:0"),
        cwd=workdir,
        kubeconfig=lab.kubeconfig,
        process=True,
        timeout=30,
    )
    assert (result.code, result.stderr.strip().splitlines()[-1]) == (
        2,
        f"error: --lease {namespace}/reconcile: the namespace {namespace} does not exist: "
        "create it, or name a Lease in a namespace that exists",
    )
    assert result.stdout == ""
    assert snapshot(lab) == before
    if lab.sandbox is not None:  # the Lease was the first thing asked for, and the last
        asked = {r.resource for r in lab.sandbox.requests if r.agent == "reconcile"}
        assert asked == {"leases"}


# --- a backlog ------------------------------------------------------------------------------


BACKLOG = 24
TIER = "example.com/tier"


class InFlight(FaultInjector):
    """Holds each node write and Event a moment, counting how many are in flight at once."""

    def __init__(self, hold: float) -> None:
        self.hold = hold
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0
        self.started = 0

    def before(self, method: str, route: Route | None) -> None:
        writes = {("PATCH", "nodes"), ("POST", "events")}
        if route is not None and (method, route.resource.plural) in writes:
            with self.lock:
                self.now += 1
                self.started += 1
                self.peak = max(self.peak, self.now)
            time.sleep(self.hold)
            with self.lock:
                self.now -= 1


def backlog_cluster(make_cluster: ClusterFactory, workdir: Path) -> TestCluster:
    """The lab and BACKLOG more nodes of a pool whose group says tier gold: all bronze."""
    nodes = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": f"backlog-{i:02d}",
                "labels": {"example.com/pool": "backlog", TIER: "bronze"},
            },
        }
        for i in range(BACKLOG)
    ]
    (workdir / "desired" / "groups").mkdir(exist_ok=True)
    (workdir / "desired" / "groups" / "backlog.yaml").write_text(
        "apiVersion: reconcile.dev/v1alpha1\nkind: NodeGroup\nmetadata: {name: backlog}\n"
        "selector: {matchLabels: {example.com/pool: backlog}}\n"
        f"labels: {{{TIER}: gold}}\n"
    )
    return make_cluster(lab_objects("lab") + nodes)


def tiers(cluster: TestCluster) -> dict[str, str]:
    return {
        f"backlog-{i:02d}": cluster.labels(f"backlog-{i:02d}").get(TIER, "") for i in range(BACKLOG)
    }


@pytest.mark.slow
def test_a_backlog_is_corrected_in_parallel_each_node_once_with_its_event(
    make_cluster: ClusterFactory, workdir: Path
) -> None:
    cluster = backlog_cluster(make_cluster, workdir)
    counted = InFlight(0.05)
    if cluster.sandbox is not None:
        cluster.sandbox.set_faults(counted)
    with command(cluster, workdir, "--correct", "--parallel", "3", "-o", "json") as (process, url):
        eventually(lambda: set(tiers(cluster).values()) == {"gold"}, "the backlog corrected")
        eventually(lambda: get(url + "/readyz")[0] == 200, "ready")
        assert metric_of(url, 'reconcile_drift{kind="label"}') == 0
        assert metric_of(url, "reconcile_corrections_total") == BACKLOG + 1
        out, _ = ended(process)
    records = [json.loads(line) for line in out.splitlines()]
    corrected = sorted(r["node"] for r in records if r["event"] == "corrected")
    assert corrected == sorted(["lab-node-1", *tiers(cluster)])  # each node once
    assert all(r["event"] == "corrected" for r in records)
    status, events = cluster.raw("GET", "/apis/events.k8s.io/v1/namespaces/default/events")
    assert status == 200, events
    noted = Counter(
        e["regarding"]["name"]
        for e in events["items"]
        if e.get("reason") == "DriftCorrected" and e["note"] == f"{TIER}: bronze -> gold"
    )
    assert noted == Counter(list(tiers(cluster)))  # one Event a node
    if cluster.sandbox is not None:
        # 25 PATCHes and 25 Events, three writers: never more than three in flight
        assert counted.started == 2 * (BACKLOG + 1)
        assert counted.peak == 3


def test_sigterm_during_a_backlog_lets_the_writes_in_flight_finish(
    make_cluster: ClusterFactory, workdir: Path
) -> None:
    cluster = backlog_cluster(make_cluster, workdir)
    if cluster.sandbox is None:
        pytest.skip("holds the sandbox's answers to stop in the middle of the backlog")
    counted = InFlight(0.2)
    cluster.sandbox.set_faults(counted)
    with command(cluster, workdir, "--correct", "--parallel", "2", "-o", "json") as (process, _):
        eventually(lambda: counted.started >= 4, "the first writes")
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
        assert process.returncode == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    corrected = {r["node"] for r in records if r["event"] == "corrected"}
    now = tiers(cluster)
    done = {name for name, tier in now.items() if tier == "gold"}
    assert done == corrected - {"lab-node-1"}  # each write that started finished, and said so
    assert 1 <= len(done) < BACKLOG  # and none started after the signal
    assert {r["node"] for r in records if r["event"] == "drift"} >= set(now) - done
