"""Capacity-aware placement at fleet scale, as a ratio to the reads it needs:

    python benchmarks/bench_placement.py [--nodes 10000] [--pods-per-node 5] [--workloads 200]

`reconcile placement` of `--workloads` Deployments (4 replicas each, 1 to 8 GPUs per
replica, a node selector on a pool label) over `--nodes` GPU nodes (8 GPUs, 64 cpu each,
in 5 pools) that already run `--pods-per-node` pods each (1 GPU, 2 cpu), on the embedded
sandbox, against its floor: a Python process that makes the same two paginated LISTs
(every node, every pod) with http.client and json. Both run in turn, five pairs: the
median of each and of their ratios. Then the placement alone, in this process, over the
same objects decoded once: what the simulation itself costs. Reports, never asserts.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from bench_fleet import PAIRS, Raw, paired, reconcile, seed_nodes, seed_pods

from reconcile.desired.models import DesiredState, Manifest
from reconcile.diagnostics import Source
from reconcile.engine.placement import placement
from reconcile.kube import wire
from reconcile.sandbox import Sandbox

POOLS = 5
FLOOR = """
import sys
sys.path.insert(0, {benchmarks!r})
from pathlib import Path
from bench_fleet import Raw
raw = Raw(Path({kubeconfig!r}))
raw.list_all("/api/v1/nodes")
raw.list_all("/api/v1/pods")
"""


def nodes(total: int) -> list[dict[str, Any]]:
    """bench_fleet's GPU nodes, each in one of the pools and with what it offers."""
    allocatable = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
    found = seed_nodes(total, 12)
    for i, node in enumerate(found):
        node["metadata"]["labels"]["example.com/pool"] = f"pool-{i % POOLS}"
        node["status"].update(capacity=allocatable, allocatable=allocatable)
    return found


def pods(total_nodes: int, per_node: int) -> list[dict[str, Any]]:
    """bench_fleet's running pods, each holding 2 cpu and a GPU (and no node selector:
    their selection is not what this measures)."""
    found = seed_pods(total_nodes, per_node)
    for pod in found:
        del pod["spec"]["nodeSelector"]
        pod["spec"]["containers"][0]["resources"] = {
            "requests": {"cpu": "2"},
            "limits": {"nvidia.com/gpu": 1},
        }
    return found


def deployment(index: int) -> dict[str, Any]:
    name = f"train-{index:03d}"
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 4,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"example.com/pool": f"pool-{index % POOLS}"},
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "trainer:1",
                            "resources": {
                                "requests": {"cpu": "4", "memory": "16Gi"},
                                "limits": {"nvidia.com/gpu": 1 + index % 8},
                            },
                        }
                    ],
                },
            },
        },
    }


def write_desired(root: Path, workloads: int) -> Path:
    import json

    desired = root / "desired"
    (desired / "nodes").mkdir(parents=True)
    (desired / "workloads").mkdir()
    text = "".join("---\n" + json.dumps(deployment(i), indent=1) + "\n" for i in range(workloads))
    (desired / "workloads" / "train.yaml").write_text(text)
    return desired


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--pods-per-node", type=int, default=5)
    parser.add_argument("--workloads", type=int, default=200)
    args = parser.parse_args()

    started = time.perf_counter()
    node_objects = nodes(args.nodes)
    pod_objects = pods(args.nodes, args.pods_per_node)
    sandbox = Sandbox(node_objects + pod_objects).start()
    print(f"(sandbox: seeded in {time.perf_counter() - started:.1f}s)", file=sys.stderr)
    try:
        with tempfile.TemporaryDirectory() as directory:
            root = Path(directory)
            kubeconfig = sandbox.write_kubeconfig(root / "kubeconfig")
            desired = write_desired(root, args.workloads)
            command = reconcile(
                "placement", "--desired", str(desired), "--kubeconfig", str(kubeconfig)
            )
            floor = [
                sys.executable,
                "-c",
                FLOOR.format(benchmarks=str(Path(__file__).parent), kubeconfig=str(kubeconfig)),
            ]
            ours, base, ratio = paired(command, floor, root, PAIRS)
            Raw(kubeconfig)  # the floor's client, checked to load here too

            import json

            live = [wire.node(json.dumps(n).encode()) for n in node_objects]
            state = DesiredState(
                manifests=tuple(
                    Manifest(deployment(i), Source("desired/workloads/train.yaml", 1, 1))
                    for i in range(args.workloads)
                )
            )
            began = time.perf_counter()
            results = placement(state, live, pod_objects)
            simulated = time.perf_counter() - began
    finally:
        sandbox.stop()
    pending = sum(1 for r in results if not r.ok)
    print(
        f"| figure | {args.nodes:,} nodes, {args.nodes * args.pods_per_node:,} pods, "
        f"{args.workloads} workloads |\n| --- | --- |\n"
        f"| `placement` (process) | {ours:.2f} s |\n"
        f"| floor: LIST nodes + LIST pods (process) | {base:.2f} s |\n"
        f"| ratio (median of {PAIRS} pairs) | {ratio:.2f}x |\n"
        f"| the placement alone (in process, objects decoded) | {simulated:.2f} s |\n"
        f"| workloads not placed in full | {pending} |"
    )


if __name__ == "__main__":
    main()
