"""What predicting NFD's labels adds to a plan (issue 47): 50 NodeFeatureRules over 5,000
nodes' NodeFeature objects, one rule changed in the tree, against the same plan with the
rules as the cluster has them (nothing to predict):

    python benchmarks/bench_nfd.py [--nodes 5000] [--rules 50] [--pairs 5] [--kubeconfig F]

| figure | against | target |
| --- | --- | --- |
| `plan` with one of 50 rules changed (both rule sets evaluated on every node) | `plan` with the rules unchanged | 1.5x |

The sandbox (or the cluster of `--kubeconfig`, for instance the real control plane of
../shared/k8s started with `K8S_NO_KUBELET=1 cluster up DIR`) is seeded with the nodes,
NFD's published CRDs (as the lab seed vendors them) and one NodeFeature per node, in ten
hardware pools; the rules are applied once by reconcile. A cluster of `--kubeconfig` gets
them through its API (16 requests at a time) and loses them again when the run ends. Every plan runs as a process, the two in turn, `--pairs` times after a warm-up:
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


class Seeded:
    """The benchmark's objects created through the API of a cluster (its kubeconfig), and
    deleted again by `remove`: the nodes, the NodeFeatures and their namespace, the rules
    reconcile applied, and NFD's CRDs when the cluster did not have them."""

    def __init__(self, kubeconfig: str) -> None:
        from kubernetes import config

        self.client = config.new_client_from_config(kubeconfig, persist_config=False)
        self.made_crds: list[str] = []

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One request through the client's connection: (status, decoded JSON answer)."""
        import json

        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        self.client.update_params_for_auth(headers, None, ["BearerToken"], path, method, body)
        response = self.client.rest_client.pool_manager.request(
            method,
            self.client.configuration.host + path,
            body=None if body is None else json.dumps(body),
            headers=headers,
        )
        return response.status, json.loads(response.data) if response.data else None

    def seed(self, crds: list[dict[str, Any]], objects: list[dict[str, Any]]) -> None:
        from concurrent.futures import ThreadPoolExecutor

        collection = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        for crd in crds:
            name = crd["metadata"]["name"]
            if self.call("GET", f"{collection}/{name}")[0] == 404:
                status, answer = self.call("POST", collection, crd)
                if status != 201:
                    raise SystemExit(f"creating CRD {name}: {status} {answer}")
                self.made_crds.append(name)
        for crd in crds:
            name = crd["metadata"]["name"]
            while not any(
                c["type"] == "Established" and c["status"] == "True"
                for c in (self.call("GET", f"{collection}/{name}")[1].get("status") or {}).get(
                    "conditions"
                )
                or ()
            ):
                time.sleep(0.2)
        self.call("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})

        def create(obj: dict[str, Any]) -> None:
            if obj["kind"] == "Node":
                path = "/api/v1/nodes"
            else:
                path = f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NAMESPACE}/nodefeatures"
            status, answer = self.call("POST", path, obj)
            if status not in (201, 409):
                raise SystemExit(f"creating {obj['kind']} {obj['metadata']['name']}: {answer}")

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(create, objects))

    def remove(self, rules: int) -> None:
        group = "/apis/nfd.k8s-sigs.io/v1alpha1"
        self.call("DELETE", f"{group}/namespaces/{NAMESPACE}/nodefeatures")
        self.call("DELETE", "/api/v1/nodes?labelSelector=pool")
        for i in range(rules):
            self.call("DELETE", f"{group}/nodefeaturerules/rule-{i:02d}")
        self.call("DELETE", f"/api/v1/namespaces/{NAMESPACE}")
        for name in self.made_crds:
            self.call("DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        self.client.close()


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
    parser.add_argument(
        "--kubeconfig", help="A cluster to seed through its API instead of the sandbox."
    )
    args = parser.parse_args()
    compileall.compile_dir(Path(reconcile_package.__file__).parent, quiet=1)
    print(
        f"machine: {os.cpu_count()} cores, {platform.python_implementation()} "
        f"{platform.python_version()}; load average {os.getloadavg()[0]:.1f}"
    )
    crds = [d.data for d in parse_yaml(CRDS.read_text(), str(CRDS))[0] if d.data]
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    seeded = Seeded(args.kubeconfig) if args.kubeconfig else None
    if seeded is not None:
        started = time.perf_counter()
        seeded.seed(crds, nodes_and_features(args.nodes))
        print(f"(seeded the cluster in {time.perf_counter() - started:.0f} s)")
        sandbox = None
    else:
        sandbox = Sandbox([*crds, namespace, *nodes_and_features(args.nodes)]).start()
    try:
        with tempfile.TemporaryDirectory() as scratch:
            root = Path(scratch)
            kubeconfig = (
                sandbox.write_kubeconfig(root / "kubeconfig")
                if sandbox is not None
                else Path(args.kubeconfig)
            )
            same, changed = root / "same", root / "changed"
            write_rules(same, args.rules, changed=False)
            write_rules(changed, args.rules, changed=True)
            plan = [sys.executable, "-m", "reconcile", "plan", "--kubeconfig", str(kubeconfig)]
            apply = [sys.executable, "-m", "reconcile", "apply", "--kubeconfig", str(kubeconfig)]
            applied = subprocess.run(apply, cwd=same, capture_output=True, text=True, check=False)
            if applied.returncode != 0:
                raise SystemExit(f"seeding apply exited {applied.returncode}: {applied.stderr}")
            predicted = subprocess.run(
                plan, cwd=changed, capture_output=True, text=True, check=False
            )
            lines = [line for line in predicted.stdout.splitlines() if line.endswith("(nfd)")]
            run(plan, changed), run(plan, same)
            times = [(run(plan, changed), run(plan, same)) for _ in range(args.pairs)]
    finally:
        if sandbox is not None:
            sandbox.stop()
        if seeded is not None:
            seeded.remove(args.rules)
    a = statistics.median(x for x, _ in times)
    b = statistics.median(y for _, y in times)
    ratio = statistics.median(x / y for x, y in times)
    print(f"(the changed plan predicts {len(lines)} label change(s))")
    where = "the cluster of --kubeconfig" if args.kubeconfig else "sandbox"
    print(f"\n### {args.rules} NodeFeatureRules over {args.nodes:,} nodes' NodeFeatures, {where}\n")
    print("| figure | with a rule changed | rules unchanged | ratio | target | |")
    print("| --- | --- | --- | --- | --- | --- |")
    verdict = "PASS" if ratio <= 1.5 else "MISS"
    print(
        f"| `plan` (medians of {args.pairs} pairs) | {a:.2f} s | {b:.2f} s | {ratio:.2f}x | 1.5x | {verdict} |"
    )


if __name__ == "__main__":
    main()
