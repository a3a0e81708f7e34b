"""Fleet-scale figures: requests and time for plan/apply, and the sandbox's list cost.

    python benchmarks/bench_fleet.py [--nodes 5000] [--labels 20] [--drift 0.1]

Reports, never asserts: the numbers go into the README. Request counts are exact (the
sandbox logs every request); times are wall-clock on this machine and given as ratios too.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from reconcile.sandbox import Sandbox

LABELS_PER_NODE = 20


def node_labels(index: int, count: int) -> dict[str, str]:
    labels = {
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "feature.node.kubernetes.io/kernel-version.full": "5.15.0-119-generic",
        "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.memory": "40537",
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "90",
        "nvidia.com/cuda.driver.rev": "07",
    }
    for extra in range(count - len(labels)):
        labels[f"example.com/fact-{extra:02d}"] = f"v{index % 7}-{extra}"
    return labels


def seed_nodes(total: int, labels: int) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"gpu-{i:05d}", "labels": node_labels(i, labels)},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
        for i in range(total)
    ]


def write_desired(root: Path, total: int, labels: int) -> None:
    nodes = root / "desired" / "nodes"
    nodes.mkdir(parents=True)
    for i in range(total):
        body = "\n".join(f'  {k}: "{v}"' for k, v in node_labels(i, labels).items())
        (nodes / f"gpu-{i:05d}.yaml").write_text(
            "apiVersion: reconcile.dev/v1alpha1\nkind: NodeFeatures\n"
            f"metadata:\n  name: gpu-{i:05d}\nlabels:\n{body}\n"
        )


def run(
    command: list[str], cwd: Path, kubeconfig: Path
) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "reconcile", *command, "--kubeconfig", str(kubeconfig)],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    return time.perf_counter() - started, result


def requests_by_verb(sandbox: Sandbox) -> Counter[str]:
    return Counter(f"{r.verb} {r.resource}" for r in sandbox.requests)


def validate_and_plan(root: Path, kubeconfig: Path, sandbox: Sandbox, total: int) -> None:
    """`validate` (offline), then `plan` of a cluster in sync, with its requests."""
    elapsed, result = run(["validate"], root, kubeconfig)
    print(f"validate: {elapsed:.2f}s (exit {result.returncode}, no requests)")
    sandbox.clear_requests()
    elapsed, result = run(["plan"], root, kubeconfig)
    counts = requests_by_verb(sandbox)
    print(
        f"plan (in sync): {elapsed:.2f}s, exit {result.returncode}, requests {dict(counts)} "
        f"(target: {math.ceil(total / 500)} LISTs)"
    )


def bench_plan_apply(total: int, labels: int, drift: float) -> None:
    print(f"## plan/apply: {total} nodes x {labels} declared labels, {drift:.0%} drifted")
    started = time.perf_counter()
    sandbox = Sandbox(seed_nodes(total, labels)).start()
    print(f"seeded the sandbox in {time.perf_counter() - started:.1f}s")
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        write_desired(root, total, labels)
        kubeconfig = sandbox.write_kubeconfig(root / "kubeconfig")

        validate_and_plan(root, kubeconfig, sandbox, total)

        drifted = int(total * drift)
        for i in range(drifted):
            sandbox.api.patch(
                _nodes(),
                "",
                f"gpu-{i:05d}",
                "application/merge-patch+json",
                b'{"metadata":{"labels":{"nvidia.com/gpu.count":"9"}}}',
                manager="kubectl-label",
                dry_run=False,
                force=False,
            )
        sandbox.clear_requests()
        elapsed, result = run(["plan"], root, kubeconfig)
        print(
            f"plan ({drifted} drifted): {elapsed:.2f}s, exit {result.returncode}, {len(result.stdout.splitlines())} lines"
        )

        sandbox.clear_requests()
        elapsed, result = run(["apply", "--parallel", "8"], root, kubeconfig)
        counts = requests_by_verb(sandbox)
        print(
            f"apply: {elapsed:.2f}s, exit {result.returncode}, requests {dict(counts)} "
            f"(target: {math.ceil(total / 500)} LISTs + {drifted} PATCHes)"
        )
    sandbox.stop()


POOLS = 5


def write_groups(root: Path, labels: int) -> None:
    """The same fleet declared by pools: one NodeGroup per pool, no per-node files."""
    groups = root / "desired" / "groups"
    groups.mkdir(parents=True)
    for pool in range(POOLS):
        body = "\n".join(f'  {k}: "{v}"' for k, v in node_labels(pool, labels).items())
        (groups / f"pool-{pool}.yaml").write_text(
            "apiVersion: reconcile.dev/v1alpha1\nkind: NodeGroup\n"
            f"metadata:\n  name: pool-{pool}\n"
            f'selector:\n  matchLabels: {{example.com/pool: "{pool}"}}\n'
            f"labels:\n{body}\n"
        )


def bench_groups(total: int, labels: int) -> None:
    print(f"## pooled fleet: {total} nodes in {POOLS} NodeGroups x {labels} labels")
    nodes = seed_nodes(total, labels)
    for i, node in enumerate(nodes):
        node["metadata"]["labels"] = {
            **node_labels(i % POOLS, labels),
            "example.com/pool": str(i % POOLS),
        }
    sandbox = Sandbox(nodes).start()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        write_groups(root, labels)
        kubeconfig = sandbox.write_kubeconfig(root / "kubeconfig")
        validate_and_plan(root, kubeconfig, sandbox, total)
    sandbox.stop()


def _nodes() -> Any:
    from reconcile.sandbox.resources import BY_PATH

    return BY_PATH[("", "v1", "nodes")]


def bench_sandbox_lists(sizes: list[int], labels: int) -> None:
    print("## sandbox: LIST page time (limit=500), official client over HTTPS")
    from reconcile.kube.client import Cluster

    for total in sizes:
        sandbox = Sandbox(seed_nodes(total, labels)).start()
        with tempfile.TemporaryDirectory() as scratch:
            cluster = Cluster.connect(str(sandbox.write_kubeconfig(Path(scratch) / "kubeconfig")))
            cluster.list_nodes()  # warm the connection
            sandbox.clear_requests()
            started = time.perf_counter()
            nodes = cluster.list_nodes()
            elapsed = time.perf_counter() - started
            pages = len(sandbox.requests)
            print(
                f"{total:>6} nodes: {pages} pages, {elapsed * 1000 / pages:.1f} ms/page, {elapsed:.2f}s total ({len(nodes)} nodes read)"
            )
            cluster.close()
        sandbox.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--labels", type=int, default=LABELS_PER_NODE)
    parser.add_argument("--drift", type=float, default=0.1)
    parser.add_argument("--list-sizes", default="1000,10000")
    args = parser.parse_args()
    bench_plan_apply(args.nodes, args.labels, args.drift)
    bench_groups(args.nodes, args.labels)
    bench_sandbox_lists([int(s) for s in args.list_sizes.split(",")], args.labels)


if __name__ == "__main__":
    main()
