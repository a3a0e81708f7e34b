"""What predicting NFD's labels adds to a plan (issue 47): 50 NodeFeatureRules over 5,000
nodes' NodeFeature objects, one rule changed in the tree, against the same plan with the
rules as the cluster has them (nothing to predict):

    python benchmarks/bench_nfd.py [--nodes 5000] [--rules 50] [--pairs 5]

| figure | against | target |
| --- | --- | --- |
| `plan` with one of 50 rules changed (both rule sets evaluated on every node) | `plan` with the rules unchanged | 1.5x |

The sandbox is seeded with the nodes, NFD's published CRDs (as the lab seed vendors them)
and one NodeFeature per node, in ten hardware pools; the rules are applied once by
reconcile. Every plan runs as a process, the two in turn, `--pairs` times after a warm-up:
the median of each and the median of the pairs' ratios. Reports, never asserts: the
numbers go into docs/performance.md.
"""

from __future__ import annotations

import argparse
import compileall
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import reconcile as reconcile_package
from reconcile.desired.yamlpos import parse_yaml
from reconcile.sandbox import Sandbox

REPO = Path(__file__).resolve().parent.parent
CRDS = REPO / "reconcile" / "sandbox" / "seeds" / "crds" / "nfd-api-crds.yaml"
NAMESPACE = "node-feature-discovery"
POOLS = 10
DEVICES = ("2236", "20b5", "2330", "26b9", "1eb8")


def nodes_and_features(count: int) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for i in range(count):
        name = f"gpu-{i:05d}"
        pool = i % POOLS
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"pool": f"pool-{pool}"}},
            }
        )
        objects.append(
            {
                "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
                "kind": "NodeFeature",
                "metadata": {
                    "name": name,
                    "namespace": NAMESPACE,
                    "labels": {"nfd.node.kubernetes.io/node-name": name},
                },
                "spec": {
                    "features": {
                        "flags": {
                            "kernel.loadedmodule": {"elements": {"nvidia": {}, "nvidia_uvm": {}}}
                        },
                        "attributes": {
                            "kernel.version": {
                                "elements": {
                                    "major": "5",
                                    "minor": str(10 + pool),
                                    "full": f"5.{10 + pool}.0",
                                }
                            },
                            "cpu.model": {
                                "elements": {"vendor_id": "AuthenticAMD", "family": "25"}
                            },
                        },
                        "instances": {
                            "pci.device": {
                                "elements": [
                                    {
                                        "attributes": {
                                            "vendor": "10de",
                                            "device": DEVICES[pool % len(DEVICES)],
                                            "class": "0302",
                                        }
                                    },
                                    {
                                        "attributes": {
                                            "vendor": "15b3",
                                            "device": "101b",
                                            "class": "0207",
                                        }
                                    },
                                ]
                            }
                        },
                    }
                },
            }
        )
    return objects


def rule(index: int, minor: int) -> str:
    device = DEVICES[index % len(DEVICES)]
    return f"""\
apiVersion: nfd.k8s-sigs.io/v1alpha1
kind: NodeFeatureRule
metadata:
  name: rule-{index:02d}
spec:
  rules:
  - name: pool rule
    labels:
      custom-rule-{index:02d}: "true"
    matchFeatures:
    - feature: pci.device
      matchExpressions:
        vendor: {{op: In, value: ["10de"]}}
        device: {{op: In, value: ["{device}"]}}
    - feature: kernel.version
      matchExpressions:
        minor: {{op: Gt, value: ["{minor}"]}}
    - feature: kernel.loadedmodule
      matchExpressions:
        nvidia: {{op: Exists}}
"""


def write_rules(root: Path, rules: int, changed: bool) -> None:
    workloads = root / "desired" / "workloads"
    workloads.mkdir(parents=True, exist_ok=True)
    for i in range(rules):
        minor = 16 if changed and i == 0 else 12
        (workloads / f"rule-{i:02d}.yaml").write_text(rule(i, minor))


def run(command: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--rules", type=int, default=50)
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    compileall.compile_dir(Path(reconcile_package.__file__).parent, quiet=1)
    print(
        f"machine: {os.cpu_count()} cores, {platform.python_implementation()} "
        f"{platform.python_version()}; load average {os.getloadavg()[0]:.1f}"
    )
    crds = [d.data for d in parse_yaml(CRDS.read_text(), str(CRDS))[0] if d.data]
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    sandbox = Sandbox([*crds, namespace, *nodes_and_features(args.nodes)]).start()
    try:
        with tempfile.TemporaryDirectory() as scratch:
            root = Path(scratch)
            kubeconfig = sandbox.write_kubeconfig(root / "kubeconfig")
            same, changed = root / "same", root / "changed"
            write_rules(same, args.rules, changed=False)
            write_rules(changed, args.rules, changed=True)
            plan = [sys.executable, "-m", "reconcile", "plan", "--kubeconfig", str(kubeconfig)]
            apply = [sys.executable, "-m", "reconcile", "apply", "--kubeconfig", str(kubeconfig)]
            seeded = subprocess.run(apply, cwd=same, capture_output=True, text=True, check=False)
            if seeded.returncode != 0:
                raise SystemExit(f"seeding apply exited {seeded.returncode}: {seeded.stderr}")
            predicted = subprocess.run(
                plan, cwd=changed, capture_output=True, text=True, check=False
            )
            lines = [line for line in predicted.stdout.splitlines() if line.endswith("(nfd)")]
            run(plan, changed), run(plan, same)
            times = [(run(plan, changed), run(plan, same)) for _ in range(args.pairs)]
    finally:
        sandbox.stop()
    a = statistics.median(x for x, _ in times)
    b = statistics.median(y for _, y in times)
    ratio = statistics.median(x / y for x, y in times)
    print(f"(the changed plan predicts {len(lines)} label change(s))")
    print(f"\n### {args.rules} NodeFeatureRules over {args.nodes:,} nodes' NodeFeatures, sandbox\n")
    print("| figure | with a rule changed | rules unchanged | ratio | target | |")
    print("| --- | --- | --- | --- | --- | --- |")
    verdict = "PASS" if ratio <= 1.5 else "MISS"
    print(
        f"| `plan` (medians of {args.pairs} pairs) | {a:.2f} s | {b:.2f} s | {ratio:.2f}x | 1.5x | {verdict} |"
    )


if __name__ == "__main__":
    main()
