"""`watch --correct` started on a backlog of drifted nodes, against `apply` on the same:

    python benchmarks/bench_watch.py [--sizes 1000,10000] [--real-sizes 2000] [--labels 20]
                                     [--parallel 8] [--serial-up-to 2000] [--events 50]

| figure | floor |
| --- | --- |
| `watch --correct --parallel 8`: from its start to the last node corrected | `apply --parallel 8` of the same backlog (process) |
| the same at `--parallel 1` (one node at a time: each PATCH, then its Event) | the same |
| an event's correction in the steady state (another writer changes one label) | none: seconds from the other write answered to the line printed |

Every node drifted on one label (desired/: one file per node), on the embedded sandbox
and, for `--real-sizes`, on the real Kubernetes v1.36 control plane of ../shared/k8s
(started and stopped here, its stand-in kubelet stopped, nodes created by POST);
before each run the backlog is made again (the label set back, reconcile's inventory
annotation removed), so each command finds the same drift. `watch` corrects each node
with one PATCH and records one Event, where `apply` sends the PATCH alone: the requests
are counted from the sandbox's log. Times are wall clock of a process as a user runs
it, one run each. Reports, never asserts: the numbers go into docs/performance.md.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import queue
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from bench_fleet import (
    CONTROL_PLANE,
    LABELS_PER_NODE,
    Raw,
    RealTarget,
    SandboxTarget,
    Table,
    reconcile,
    write_nodes,
)

import reconcile as reconcile_package
from reconcile.sandbox import Sandbox

DRIFTED = "9"  # nvidia.com/gpu.count on every node; desired/ says 8


def requests(sandbox: Sandbox) -> str:
    counted = Counter(
        f"{r.verb} {r.resource}" for r in sandbox.requests if r.verb in ("patch", "create")
    )
    return ", ".join(f"{n} {k}" for k, n in sorted(counted.items()))


def events_recorded(sandbox: Sandbox, count: int) -> None:
    """Until `count` Events are recorded: each is sent after its node's line is printed."""
    for _ in range(300):
        if sum(r.verb == "create" and r.resource == "events" for r in sandbox.requests) >= count:
            return
        time.sleep(0.1)


def backlog(raw: Raw, target: SandboxTarget | RealTarget, names: list[str]) -> None:
    """Every node drifted again, its inventory annotation gone: the same work each run."""
    raw.patch_rate(names, 8, DRIFTED)
    target.clear()


def apply_time(tree: Path, kubeconfig: Path, parallel: int) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [*reconcile("apply", "--parallel", str(parallel)), "--kubeconfig", str(kubeconfig)],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"apply failed: {done.stderr.strip()}")
    return elapsed


class Watching:
    """`reconcile watch --correct -o json` as a process; its lines read as they come."""

    def __init__(self, tree: Path, kubeconfig: Path, parallel: int) -> None:
        self.started = time.perf_counter()
        self.process = subprocess.Popen(
            [
                *reconcile("watch", "--correct", "--parallel", str(parallel), "-o", "json"),
                *("--metrics-address", "127.0.0.1:0", "--kubeconfig", str(kubeconfig)),
            ],
            cwd=tree,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.corrected: queue.Queue[tuple[float, str]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            record = json.loads(line)
            if record["event"] == "corrected":
                self.corrected.put((time.perf_counter(), record["node"]))

    def until_corrected(self, count: int) -> float:
        """Seconds from the start to the `count`th node corrected."""
        last = self.started
        for _ in range(count):
            last, _ = self.corrected.get(timeout=600)
        return last - self.started

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=120)


def steady_state(watching: Watching, raw: Raw, names: list[str], events: int) -> list[float]:
    """Another writer changes one node's label, `events` times, one after another: the
    seconds from its PATCH answered to watch's line saying it was put back."""
    latencies = []
    for name in names[:events]:
        raw.each([name], 1, lambda n: ("PATCH", f"/api/v1/nodes/{n}", _drift_body()))
        answered = time.perf_counter()
        when, node = watching.corrected.get(timeout=60)
        assert node == name, (node, name)
        latencies.append(when - answered)
    return latencies


def _drift_body() -> dict[str, object]:
    return {"metadata": {"labels": {"nvidia.com/gpu.count": DRIFTED}}}


def figures(
    target: SandboxTarget | RealTarget,
    size: int,
    root: Path,
    parallel: int,
    serial: bool,
    events: int,
) -> Table:
    table = Table(f"{size:,} drifted nodes, {target.name}")
    sandbox = target.sandbox if isinstance(target, SandboxTarget) else None
    kubeconfig = target.kubeconfig(root)
    raw = Raw(kubeconfig)
    names = [f"gpu-{i:05d}" for i in range(size)]

    backlog(raw, target, names)
    applied = apply_time(root, kubeconfig, parallel)
    if sandbox is not None:
        table.note(f"apply --parallel {parallel}: requests", requests(sandbox))

    backlog(raw, target, names)
    watching = Watching(root, kubeconfig, parallel)
    try:
        corrected = watching.until_corrected(size)
        table.add(
            f"watch --correct --parallel {parallel}: start to the last node corrected",
            corrected,
            applied,
        )
        if sandbox is not None:
            events_recorded(sandbox, size)
            table.note(f"watch --parallel {parallel}: requests", requests(sandbox))
        if events:
            latencies = steady_state(watching, raw, names, events)
            table.note(
                f"steady state: {events} changes by another writer, each put back in",
                f"median {statistics.median(latencies):.3f} s, max {max(latencies):.3f} s",
            )
    finally:
        watching.stop()

    if serial:
        backlog(raw, target, names)
        watching = Watching(root, kubeconfig, 1)
        try:
            corrected = watching.until_corrected(size)
        finally:
            watching.stop()
        table.add(
            "watch --correct --parallel 1: start to the last node corrected", corrected, applied
        )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000,10000", help="Sandbox sizes.")
    parser.add_argument(
        "--real-sizes",
        default="2000",
        help="Sizes on the real control plane of ../shared/k8s ('' for none).",
    )
    parser.add_argument("--labels", type=int, default=LABELS_PER_NODE)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument(
        "--serial-up-to",
        type=int,
        default=2000,
        help="Also watch at --parallel 1 for sizes up to this.",
    )
    parser.add_argument(
        "--events", type=int, default=50, help="Steady-state changes timed after the backlog."
    )
    args = parser.parse_args()
    compileall.compile_dir(Path(reconcile_package.__file__).parent, quiet=1)
    print(f"machine: {os.cpu_count()} cores; {args.labels} labels per node, every node drifted")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    real = [int(s) for s in args.real_sizes.split(",") if s] if CONTROL_PLANE.exists() else []
    for size in sorted(set(sizes) | set(real)):
        with tempfile.TemporaryDirectory() as scratch:
            root = Path(scratch)
            write_nodes(root / "desired" / "nodes", range(size), args.labels, env=False)
            options = (args.parallel, size <= args.serial_up_to, min(args.events, size))
            if size in sizes:
                target: SandboxTarget | RealTarget = SandboxTarget(size, args.labels, pods=False)
                try:
                    figures(target, size, root, *options).print()
                finally:
                    target.stop()
            if size in real:
                target = RealTarget(root / "control-plane", size, args.labels)
                try:
                    figures(target, size, root, *options).print()
                finally:
                    target.stop()


if __name__ == "__main__":
    main()
