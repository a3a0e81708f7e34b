"""Fleet-scale figures, each as a ratio to its floor, measured in the same run:

    python benchmarks/bench_fleet.py [--sizes 1000,10000,50000] [--labels 20] [--drift 0.05]

| figure | floor |
| --- | --- |
| `validate` of one file per node (YAML, and `.env`) | a Python process that reads the same files |
| `validate` of the fleet declared by 5 NodeGroups | 0.4 s (process start included) |
| `plan` of the fleet in sync | a Python process: paginated LIST with http.client and json |
| pods read by the impact check (drifted nodes) | a paginated LIST of every pod with http.client |
| `apply` PATCH rate at --parallel 8 | 8 threads of raw merge PATCHes with http.client |
| peak RSS of `plan` | the bytes of JSON the server sent for the nodes |

Every command runs as a user runs it (a process, best of three); the cluster is the
embedded sandbox. Reports, never asserts: the numbers go into the README.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

from reconcile.sandbox import Sandbox

LABELS_PER_NODE = 20
PODS_PER_NODE = 5
POOLS = 5
RUNS = 3


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


def seed_pods(total_nodes: int, per_node: int) -> list[dict[str, Any]]:
    """Running pods that select on the GPU product: a product change would strand them."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"job-{i:05d}-{j}", "namespace": "default"},
            "spec": {
                "nodeName": f"gpu-{i:05d}",
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"},
                "containers": [{"name": "c", "image": "trainer:1"}],
            },
            "status": {"phase": "Running"},
        }
        for i in range(total_nodes)
        for j in range(per_node)
    ]


def write_nodes(root: Path, total: int, labels: int, *, env: bool) -> None:
    nodes = root / "desired" / "nodes"
    nodes.mkdir(parents=True)
    for i in range(total):
        values = node_labels(i, labels)
        if env:
            text = "".join(f"{k}={v}\n" for k, v in values.items())
            (nodes / f"gpu-{i:05d}.env").write_text(text)
            continue
        body = "\n".join(f'  {k}: "{v}"' for k, v in values.items())
        (nodes / f"gpu-{i:05d}.yaml").write_text(
            "apiVersion: reconcile.dev/v1alpha1\nkind: NodeFeatures\n"
            f"metadata:\n  name: gpu-{i:05d}\nlabels:\n{body}\n"
        )


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


# --- processes --------------------------------------------------------------------------


def timed(command: list[str], cwd: Path, runs: int = RUNS) -> tuple[float, int, str]:
    """Best wall time of `runs`, the peak RSS (KiB) of that run's process, its stdout."""
    best: tuple[float, int, str] | None = None
    for _ in range(runs):
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            started = time.perf_counter()
            process = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=err, text=True)
            _, status, usage = os.wait4(process.pid, 0)
            elapsed = time.perf_counter() - started
            process.returncode = os.waitstatus_to_exitcode(status)
            out.seek(0)
            err.seek(0)
            if process.returncode not in (0, 1):
                raise SystemExit(f"{' '.join(command)} failed: {err.read().strip()}")
            if best is None or elapsed < best[0]:
                best = (elapsed, usage.ru_maxrss, out.read())
    assert best is not None
    return best


# Runs a command and prints its peak RSS (KiB): forked from this small process, not from
# the benchmark's (whose memory a forked child would count until it execs).
PEAK_RSS = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
sys.stderr.write(f"peak-rss {usage.ru_maxrss}\\n")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def peak_rss(command: list[str], cwd: Path) -> int:
    """The peak RSS (KiB) of one run of `command`."""
    done = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, *command],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith("peak-rss ")]
    return int(lines[-1].split()[1])


# What `plan` imports before it reads anything: its baseline memory.
IMPORTS = (
    "import reconcile.cli, reconcile.cli.reconciling, reconcile.kube.client, "
    "reconcile.engine.operations, reconcile.gpu.checks, reconcile.desired.loader"
)


def reconcile(*args: str) -> list[str]:
    return [sys.executable, "-m", "reconcile", *args]


READ_FILES = """
import os, sys
total = 0
for directory, _, names in os.walk(sys.argv[1]):
    for name in names:
        with open(os.path.join(directory, name), 'rb') as f:
            total += len(f.read())
print(total)
"""

RAW_LIST = """
import base64, http.client, json, ssl, sys, tempfile
from urllib.parse import quote, urlparse
config = json.load(open(sys.argv[1]))
cluster = config["clusters"][0]["cluster"]
with tempfile.NamedTemporaryFile(delete=False) as ca:
    ca.write(base64.b64decode(cluster["certificate-authority-data"]))
server = urlparse(cluster["server"])
connection = http.client.HTTPSConnection(
    server.hostname, server.port, context=ssl.create_default_context(cafile=ca.name)
)
headers = {"Authorization": "Bearer " + config["users"][0]["user"]["token"], "Accept": "application/json"}
token, items, size = None, 0, 0
while True:
    path = sys.argv[2] + "?limit=500" + ("&continue=" + quote(token) if token else "")
    connection.request("GET", path, headers=headers)
    body = connection.getresponse().read()
    size += len(body)
    page = json.loads(body)
    items += len(page["items"])
    token = page["metadata"].get("continue")
    if not token:
        break
print(items, size)
"""


class Raw:
    """Plain HTTP to the sandbox, for the floors measured in this process."""

    def __init__(self, kubeconfig: Path) -> None:
        config = json.loads(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        self.ca = Path(tempfile.mkstemp()[1])
        self.ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
        self.server = urlparse(cluster["server"])
        self.headers = {
            "Authorization": "Bearer " + config["users"][0]["user"]["token"],
            "Accept": "application/json",
        }

    def connection(self) -> http.client.HTTPSConnection:
        context = ssl.create_default_context(cafile=str(self.ca))
        return http.client.HTTPSConnection(
            str(self.server.hostname), self.server.port, context=context
        )

    def list_all(self, path: str) -> int:
        connection, token, items = self.connection(), None, 0
        while True:
            query = "?limit=500" + ("&continue=" + quote(token) if token else "")
            connection.request("GET", path + query, headers=self.headers)
            page = json.loads(connection.getresponse().read())
            items += len(page["items"])
            token = page["metadata"].get("continue")
            if not token:
                return items

    def patch_rate(self, names: list[str], parallel: int, value: str) -> float:
        """Merge PATCHes of one label on `names`, `parallel` at a time: patches/s."""
        pending = list(names)
        lock = threading.Lock()
        body = json.dumps({"metadata": {"labels": {"nvidia.com/gpu.count": value}}})
        headers = {**self.headers, "Content-Type": "application/merge-patch+json"}

        def worker() -> None:
            connection = self.connection()
            while True:
                with lock:
                    if not pending:
                        return
                    name = pending.pop()
                connection.request("PATCH", f"/api/v1/nodes/{name}", body=body, headers=headers)
                connection.getresponse().read()

        started = time.perf_counter()
        threads = [threading.Thread(target=worker) for _ in range(parallel)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return len(names) / (time.perf_counter() - started)


# --- the figures --------------------------------------------------------------------------


class Table:
    def __init__(self, size: int) -> None:
        self.size = size
        self.rows: list[tuple[str, str, str, str]] = []

    def add(self, figure: str, value: float, floor: float, unit: str = "s") -> None:
        ratio = value / floor if floor else float("nan")
        self.rows.append((figure, f"{value:.2f} {unit}", f"{floor:.2f} {unit}", f"{ratio:.2f}x"))

    def note(self, figure: str, value: str) -> None:
        self.rows.append((figure, value, "", ""))

    def print(self) -> None:
        print(f"\n### {self.size:,} nodes\n")
        print("| figure | reconcile | floor | ratio |")
        print("| --- | --- | --- | --- |")
        for row in self.rows:
            print("| " + " | ".join(row) + " |")
        sys.stdout.flush()


def _nodes_resource() -> Any:
    from reconcile.sandbox.resources import BY_PATH

    return BY_PATH[("", "v1", "nodes")]


def bench(size: int, labels: int, drift: float, pods: bool) -> None:
    table = Table(size)
    started = time.perf_counter()
    objects = seed_nodes(size, labels) + (seed_pods(size, PODS_PER_NODE) if pods else [])
    sandbox = Sandbox(objects).start()
    print(
        f"(seeded {len(objects):,} objects in {time.perf_counter() - started:.1f}s)",
        file=sys.stderr,
    )
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        kubeconfig = sandbox.write_kubeconfig(root / "kubeconfig")
        yaml_tree, env_tree, group_tree = root / "yaml", root / "env", root / "groups"
        write_nodes(yaml_tree, size, labels, env=False)
        write_nodes(env_tree, size, labels, env=True)
        write_groups(group_tree, labels)

        floor, _, _ = timed([sys.executable, "-c", READ_FILES, "desired"], yaml_tree)
        elapsed, _, _ = timed(reconcile("validate"), yaml_tree)
        table.add("validate, one YAML file per node", elapsed, floor)
        floor, _, _ = timed([sys.executable, "-c", READ_FILES, "desired"], env_tree)
        elapsed, _, _ = timed(reconcile("validate"), env_tree)
        table.add("validate, one .env file per node", elapsed, floor)
        elapsed, _, _ = timed(reconcile("validate"), group_tree)
        table.add("validate, 5 NodeGroups", elapsed, 0.4)

        raw_list = [sys.executable, "-c", RAW_LIST, str(kubeconfig), "/api/v1/nodes"]
        raw_time, _, raw_out = timed(raw_list, root)
        raw_rss = peak_rss(raw_list, root)
        json_bytes = int(raw_out.split()[1])
        sandbox.clear_requests()
        plan = reconcile("plan", "--kubeconfig", str(kubeconfig))
        plan_time, _, _ = timed(plan, yaml_tree)
        requests = Counter(f"{r.verb} {r.resource}" for r in sandbox.requests)
        plan_rss = peak_rss(plan, yaml_tree)
        idle_rss = peak_rss([sys.executable, "-c", IMPORTS], yaml_tree)
        table.add("plan, in sync (process)", plan_time, raw_time)
        table.note(
            "plan requests (3 runs)", ", ".join(f"{n} {k}" for k, n in sorted(requests.items()))
        )
        table.add(
            "plan peak RSS above its imports, vs the JSON sent",
            (plan_rss - idle_rss) / 1024,
            json_bytes / 1024 / 1024,
            "MiB",
        )
        table.note(
            "peak RSS: plan / its imports alone / raw LIST",
            f"{plan_rss / 1024:.0f} / {idle_rss / 1024:.0f} / {raw_rss / 1024:.0f} MiB",
        )

        raw = Raw(kubeconfig)
        drifted = [f"gpu-{i:05d}" for i in range(int(size * drift))]
        if pods:
            from reconcile.kube.client import Cluster

            cluster = Cluster.connect(str(kubeconfig))
            started = time.perf_counter()
            raw.list_all("/api/v1/pods")
            floor = time.perf_counter() - started
            started = time.perf_counter()
            found = cluster.pods_on_nodes(drifted)
            elapsed = time.perf_counter() - started
            table.add(
                f"impact check: pods on {len(drifted)} nodes ({len(found):,} of "
                f"{size * PODS_PER_NODE:,})",
                elapsed,
                floor,
            )
            cluster.close()

        stamps: list[float] = []

        def seen(record: Any) -> None:
            if record.verb == "patch" and record.resource == "nodes":
                stamps.append(time.perf_counter())

        def rate() -> float:
            """PATCHes per second between the first and the last, as the server saw them."""
            return (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else 0.0

        sandbox.server.observers.append(seen)
        raw.patch_rate(drifted, 8, "7")
        rate_floor = rate()
        raw.patch_rate(drifted, 8, "9")  # drifted again for apply
        stamps.clear()
        sandbox.clear_requests()
        _, _, out = timed(
            reconcile("apply", "--parallel", "8", "--kubeconfig", str(kubeconfig)),
            yaml_tree,
            runs=1,
        )
        sandbox.server.observers.remove(seen)
        table.add(
            f"apply: PATCH rate at --parallel 8 ({len(stamps)} PATCHes)", rate(), rate_floor, "/s"
        )
        table.note("apply lines", str(len(out.splitlines())))
    sandbox.stop()
    table.print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--labels", type=int, default=LABELS_PER_NODE)
    parser.add_argument("--drift", type=float, default=0.05)
    parser.add_argument(
        "--pods-up-to", type=int, default=10000, help="Seed pods for sizes up to this."
    )
    args = parser.parse_args()
    print(
        f"machine: {os.cpu_count()} cores; {args.labels} labels per node, {args.drift:.0%} drifted"
    )
    for size in (int(s) for s in args.sizes.split(",")):
        bench(size, args.labels, args.drift, pods=size <= args.pods_up_to)


if __name__ == "__main__":
    main()
