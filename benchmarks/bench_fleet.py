"""Fleet-scale figures, each as a ratio to its floor, measured in the same run:

    python benchmarks/bench_fleet.py [--sizes 1000,10000,50000] [--real-sizes 1000,10000]
                                     [--labels 20] [--drift 0.05]

| figure | floor |
| --- | --- |
| `validate` of one file per node (YAML, `.env`, and YAML in a fleet of 3 clusters' overlays) | a Python process that reads the same files |
| `validate` of the fleet declared by 5 NodeGroups | 0.4 s (process start included) |
| `plan` of the fleet in sync | a Python process: paginated LIST with http.client and json |
| pods read by the impact check (drifted nodes) | a paginated LIST of every pod with http.client |
| `apply` PATCH rate at --parallel 8 | 8 threads of raw merge PATCHes with http.client |
| peak RSS of `plan` above its imports | the bytes of JSON the server sent for the nodes |
| `plan` of a fleet of 3 sandboxes, each in its own process | `plan --cluster` of its slowest one |

Every command runs as a user runs it (a process). A figure with a floor of its own
(`validate`, `plan`) runs in turn with it, five pairs: the median of each, and the median
of the pairs' ratios, steadier on a machine whose speed drifts; the others are the best of
three. The cluster is the
embedded sandbox for every size, and, for `--real-sizes`, the real Kubernetes v1.36
control plane of ../shared/k8s as well (started and stopped here; its stand-in kubelet is
stopped, since it re-reads every node through the client's typed models, and nodes are
created by POST as a kubelet registers them). On the real server the request count is
the one `plan -v` reports. PATCH rates are the client's, from the first sent to the last
answered: the raw process's own clock, and the writing time `apply -v` reports. Reports,
never asserts: the numbers go into docs/performance.md.
"""

from __future__ import annotations

import argparse
import base64
import compileall
import http.client
import json
import os
import re
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

import reconcile as reconcile_package
from reconcile.sandbox import Sandbox

LABELS_PER_NODE = 20
PODS_PER_NODE = 5
POOLS = 5
RUNS = 3
PAIRS = 5
CONTROL_PLANE = Path(__file__).resolve().parents[2] / "shared" / "k8s" / "cluster"


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


def write_nodes(nodes: Path, indices: range, labels: int, *, env: bool) -> None:
    """One file per node into the directory `nodes`."""
    nodes.mkdir(parents=True)
    for i in indices:
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


FLEET_CLUSTERS = 3
FLEET_NAMES = [f"pool-{c}" for c in range(FLEET_CLUSTERS)]


def write_fleet(tree: Path, size: int, labels: int) -> None:
    """The same nodes as a fleet of the FLEET_NAMES clusters, each with a share of the
    node files in its overlay."""
    per = size // FLEET_CLUSTERS
    desired = tree / "desired"
    desired.mkdir(parents=True)
    (desired / "clusters.yaml").write_text(
        "apiVersion: reconcile.dev/v1alpha1\nkind: Fleet\nmetadata:\n  name: bench\nclusters:\n"
        + "".join(f"- {{name: {n}, context: {n}}}\n" for n in FLEET_NAMES)
    )
    for index, name in enumerate(FLEET_NAMES):
        share = range(index * per, (index + 1) * per)
        write_nodes(desired / "clusters" / name / "nodes", share, labels, env=False)


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


def timed(command: list[str], cwd: Path, runs: int = RUNS) -> tuple[float, str, str]:
    """Best wall time of `runs`, and that run's stdout and stderr."""
    best: tuple[float, str, str] | None = None
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - started
        if done.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(command)} failed: {done.stderr.strip()}")
        if best is None or elapsed < best[0]:
            best = (elapsed, done.stdout, done.stderr)
    assert best is not None
    return best


def medians(pairs: list[tuple[float, float]]) -> tuple[float, float, float]:
    """The median of each side of `pairs` and the median of their ratios (a pair runs at
    the same speed of a machine whose speed drifts)."""
    return (
        statistics.median(a for a, _ in pairs),
        statistics.median(b for _, b in pairs),
        statistics.median(a / b for a, b in pairs),
    )


def paired(
    command: list[str], floor: list[str], cwd: Path, pairs: int = PAIRS
) -> tuple[float, float, float]:
    """`command` and its `floor` run in turn, `pairs` times: their `medians`."""
    return medians(
        [(timed(command, cwd, runs=1)[0], timed(floor, cwd, runs=1)[0]) for _ in range(pairs)]
    )


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
    """The lowest peak RSS (KiB) of three runs of `command`."""
    peaks = []
    for _ in range(RUNS):
        done = subprocess.run(
            [sys.executable, "-c", PEAK_RSS, *command],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=False,
        )
        lines = [line for line in done.stderr.splitlines() if line.startswith("peak-rss ")]
        peaks.append(int(lines[-1].split()[1]))
    return min(peaks)


# What `plan` imports before it reads anything: its baseline memory.
IMPORTS = (
    "import reconcile.cli, reconcile.cli.reconciling, reconcile.kube.client, "
    "reconcile.engine.operations, reconcile.gpu.checks, reconcile.desired.reader, "
    "reconcile.cli.views"
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


# 8 threads of raw merge PATCHes, each with its own connection, in a process of its own
# (in the benchmark's, they would share its interpreter with the embedded sandbox): the
# body apply sends (the label and reconcile's inventory annotation, less the
# resourceVersion precondition); prints the PATCHes per second from the first sent to
# the last answered.
RAW_PATCH = """
import base64, http.client, json, ssl, sys, tempfile, threading, time
config = json.load(open(sys.argv[1]))
cluster = config["clusters"][0]["cluster"]
with tempfile.NamedTemporaryFile(delete=False) as ca:
    ca.write(base64.b64decode(cluster["certificate-authority-data"]))
host, port = cluster["server"].removeprefix("https://").split(":")
headers = {"Authorization": "Bearer " + config["users"][0]["user"]["token"],
           "Content-Type": "application/merge-patch+json"}
body = json.dumps({"metadata": {"labels": {"nvidia.com/gpu.count": sys.argv[2]},
                                "annotations": {"reconcile.dev/managed-labels": sys.argv[4]}}})
pending = sys.argv[3].split(",")
lock = threading.Lock()
def worker(connection):
    while True:
        with lock:
            if not pending:
                return
            name = pending.pop()
        connection.request("PATCH", "/api/v1/nodes/" + name, body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        assert response.status == 200, response.status
count = len(pending)
connections = []
for _ in range(8):
    connection = http.client.HTTPSConnection(host, int(port), context=ssl.create_default_context(cafile=ca.name))
    connection.connect()
    connections.append(connection)
started = time.perf_counter()
threads = [threading.Thread(target=worker, args=(c,)) for c in connections]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(count / (time.perf_counter() - started))
"""


class Raw:
    """Plain HTTP to the cluster, for the floors measured in this process."""

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

    def each(
        self, work: list[Any], parallel: int, send: Callable[[Any], tuple[str, str, Any]]
    ) -> float:
        """`send(item)` -> (method, path, body) for every item, `parallel` at a time: the
        seconds it took."""
        pending = list(work)
        lock = threading.Lock()
        failures: list[str] = []

        def worker() -> None:
            connection = self.connection()
            while True:
                with lock:
                    if not pending:
                        return
                    item = pending.pop()
                method, path, body = send(item)
                content = (
                    "application/merge-patch+json" if method == "PATCH" else "application/json"
                )
                connection.request(
                    method,
                    path,
                    body=json.dumps(body) if body is not None else None,
                    headers={**self.headers, "Content-Type": content},
                )
                response = connection.getresponse()
                answer = response.read()
                if response.status >= 300 and response.status != 404:
                    failures.append(f"{method} {path}: {response.status} {answer[:200]!r}")

        started = time.perf_counter()
        threads = [threading.Thread(target=worker) for _ in range(parallel)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            raise SystemExit(f"{len(failures)} request(s) failed, first: {failures[0]}")
        return time.perf_counter() - started

    def patch_rate(self, names: list[str], parallel: int, value: str) -> float:
        """Merge PATCHes of one label on `names` (and no inventory annotation: apply
        writes it again), `parallel` at a time: patches/s."""
        body = {
            "metadata": {
                "labels": {"nvidia.com/gpu.count": value},
                "annotations": {"reconcile.dev/managed-labels": None},
            }
        }
        elapsed = self.each(names, parallel, lambda name: ("PATCH", f"/api/v1/nodes/{name}", body))
        return len(names) / elapsed


# --- the clusters -----------------------------------------------------------------------


class SandboxTarget:
    """The embedded sandbox: its request log counts requests, its observer times PATCHes."""

    name = "sandbox"

    def __init__(self, size: int, labels: int, pods: bool) -> None:
        started = time.perf_counter()
        objects = seed_nodes(size, labels) + (seed_pods(size, PODS_PER_NODE) if pods else [])
        self.sandbox = Sandbox(objects).start()
        self.pods = pods
        print(
            f"(sandbox: seeded {len(objects):,} objects in {time.perf_counter() - started:.1f}s)",
            file=sys.stderr,
        )

    def kubeconfig(self, directory: Path) -> Path:
        return self.sandbox.write_kubeconfig(directory / "kubeconfig")

    def clear(self) -> None:
        self.sandbox.clear_requests()

    def requests(self, _stderr: str) -> str:
        counted = Counter(f"{r.verb} {r.resource}" for r in self.sandbox.requests)
        return ", ".join(f"{n} {k}" for k, n in sorted(counted.items()))

    def stop(self) -> None:
        self.sandbox.stop()


class RealTarget:
    """The real control plane of ../shared/k8s, nodes created by POST."""

    name = "kube-apiserver v1.36"

    def __init__(self, state: Path, size: int, labels: int) -> None:
        self.state = state
        subprocess.run(
            ["bash", str(CONTROL_PLANE), "up", str(state)], check=True, capture_output=True
        )
        self._stop_kubelet()
        yaml_config = state / "kubeconfig"
        self.config = state / "kubeconfig.json"
        self.config.write_text(json.dumps(_yaml_to_json(yaml_config)))
        raw = Raw(self.config)
        nodes = seed_nodes(size, labels)
        elapsed = raw.each(nodes, 8, lambda n: ("POST", "/api/v1/nodes", n))
        self.pods = False
        print(f"(kube-apiserver: created {size:,} nodes in {elapsed:.1f}s)", file=sys.stderr)

    def _stop_kubelet(self) -> None:
        pid_file = self.state / "kubelet.pid"
        if pid_file.exists():
            subprocess.run(["kill", pid_file.read_text().strip()], check=False)
            pid_file.unlink()

    def kubeconfig(self, _directory: Path) -> Path:
        return self.config

    def clear(self) -> None:
        pass

    def requests(self, stderr: str) -> str:
        found = re.search(r"note: (\d+) request\(s\)", stderr)
        return f"{found.group(1)} in all (`plan -v`)" if found else "?"

    def stop(self) -> None:
        subprocess.run(["bash", str(CONTROL_PLANE), "down", str(self.state)], check=False)


def _yaml_to_json(path: Path) -> dict[str, Any]:
    import yaml

    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


# --- the figures --------------------------------------------------------------------------


class Table:
    def __init__(self, title: str) -> None:
        self.title = title
        self.rows: list[tuple[str, str, str, str]] = []

    def add(
        self, figure: str, value: float, floor: float, unit: str = "s", ratio: float | None = None
    ) -> None:
        if ratio is None:
            ratio = value / floor if floor else float("nan")
        self.rows.append((figure, f"{value:.2f} {unit}", f"{floor:.2f} {unit}", f"{ratio:.2f}x"))

    def note(self, figure: str, value: str) -> None:
        self.rows.append((figure, value, "", ""))

    def print(self) -> None:
        print(f"\n### {self.title}\n")
        print("| figure | reconcile | floor | ratio |")
        print("| --- | --- | --- | --- |")
        for row in self.rows:
            print("| " + " | ".join(row) + " |")
        sys.stdout.flush()


def offline(size: int, labels: int, root: Path) -> Table:
    """The figures that need no cluster: validate."""
    table = Table(f"{size:,} nodes, offline")
    yaml_tree, env_tree, group_tree = root / "yaml", root / "env", root / "groups"
    write_nodes(env_tree / "desired" / "nodes", range(size), labels, env=True)
    write_groups(group_tree, labels)
    write_fleet(root / "fleet", size, labels)
    read_files = [sys.executable, "-c", READ_FILES, "desired"]
    for name, tree in (
        ("one YAML file per node", yaml_tree),
        ("one .env file per node", env_tree),
        (f"a fleet of {FLEET_CLUSTERS} clusters, one YAML file per node", root / "fleet"),
    ):
        elapsed, floor, ratio = paired(reconcile("validate"), read_files, tree)
        table.add(f"validate, {name}", elapsed, floor, ratio=ratio)
    groups = statistics.median(
        timed(reconcile("validate"), group_tree, runs=1)[0] for _ in range(PAIRS)
    )
    table.add("validate, 5 NodeGroups (median)", groups, 0.4)
    return table


def online(
    target: SandboxTarget | RealTarget, size: int, labels: int, drift: float, root: Path
) -> Table:
    """The figures against a cluster: plan, its requests and memory, pods, apply."""
    table = Table(f"{size:,} nodes, {target.name}")
    yaml_tree = root / "yaml"
    kubeconfig = target.kubeconfig(root)
    raw_list = [sys.executable, "-c", RAW_LIST, str(kubeconfig), "/api/v1/nodes"]
    json_bytes = int(timed(raw_list, root, runs=1)[1].split()[1])
    plan = reconcile("plan", "--kubeconfig", str(kubeconfig))
    plan_time, raw_time, ratio = paired(plan, raw_list, yaml_tree)
    table.add("plan, in sync (process; medians)", plan_time, raw_time, ratio=ratio)
    target.clear()
    plan_err = timed([*plan, "-v"], yaml_tree, runs=1)[2]
    table.note("plan requests (one run)", target.requests(plan_err))
    plan_rss = peak_rss(plan, yaml_tree)
    idle_rss = peak_rss([sys.executable, "-c", IMPORTS], yaml_tree)
    table.add(
        "plan peak RSS above its imports, vs the JSON sent",
        (plan_rss - idle_rss) / 1024,
        json_bytes / 1024 / 1024,
        "MiB",
    )
    table.note(
        "peak RSS: plan / its imports alone", f"{plan_rss / 1024:.0f} / {idle_rss / 1024:.0f} MiB"
    )

    raw = Raw(kubeconfig)
    drifted = [f"gpu-{i:05d}" for i in range(int(size * drift))]
    if target.pods:
        from reconcile.kube.client import Cluster

        cluster = Cluster.connect(str(kubeconfig))
        started = time.perf_counter()
        raw.list_all("/api/v1/pods")
        floor = time.perf_counter() - started
        started = time.perf_counter()
        found = cluster.pods_on_nodes(drifted)
        elapsed = time.perf_counter() - started
        table.add(
            f"impact check: pods on {len(drifted)} nodes ({len(found):,} of {size * PODS_PER_NODE:,})",
            elapsed,
            floor,
        )
        cluster.close()

    # Both rates from the first PATCH sent to the last answered, client side: the raw
    # process times its own; apply says how long it spent writing (`-v`). In turn, three
    # pairs; before each apply the nodes are drifted again, the inventory annotation
    # removed, so that apply sends the very body the raw PATCHes sent.
    inventory = ",".join(sorted(node_labels(0, labels)))
    raw_patch = [
        *(sys.executable, "-c", RAW_PATCH, str(kubeconfig)),
        *("7", ",".join(drifted), inventory),
    ]
    apply = reconcile("apply", "--parallel", "8", "-v", "--kubeconfig", str(kubeconfig))
    rates: list[tuple[float, float]] = []
    for _ in range(3):
        rate_floor = float(timed(raw_patch, root, runs=1)[1])
        raw.patch_rate(drifted, 8, "9")
        _, out, err = timed(apply, yaml_tree, runs=1)
        written = re.search(r"(\d+) node\(s\) and \d+ object\(s\) written in ([0-9.]+) s", err)
        assert written is not None, err
        nodes, seconds = int(written.group(1)), float(written.group(2))
        rates.append((nodes / seconds if seconds else 0.0, rate_floor))
    rate, rate_floor, ratio = medians(rates)
    table.add(
        f"apply: PATCH rate at --parallel 8 ({nodes} nodes; medians of 3)",
        rate,
        rate_floor,
        "/s",
        ratio=ratio,
    )
    table.note("apply lines", str(len(out.splitlines())))
    return table


def fleet(size: int, labels: int, root: Path) -> Table:
    """A fleet of clusters, each a sandbox in a process of its own holding a share of the
    nodes: `plan` of the whole fleet against the slowest cluster planned alone."""
    per = size // FLEET_CLUSTERS
    table = Table(f"a fleet of {FLEET_CLUSTERS} clusters of {per:,} nodes, sandboxes")
    tree = root / "fleet"  # offline() wrote it
    servers: list[subprocess.Popen[str]] = []
    merged: dict[str, Any] = {}
    try:
        for index, name in enumerate(FLEET_NAMES):
            nodes = seed_nodes((index + 1) * per, labels)[index * per :]
            seed = tree / f"{name}.json"
            seed.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}))
            kubeconfig = tree / f"{name}.kubeconfig"
            servers.append(
                subprocess.Popen(
                    [
                        *reconcile(
                            "sandbox", "--seed", str(seed), "--write-kubeconfig", str(kubeconfig)
                        ),
                        "--",
                        "sleep",
                        "3600",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
            )
            for _ in range(600):
                if kubeconfig.exists() and kubeconfig.stat().st_size:
                    break
                time.sleep(0.1)
            config = json.loads(kubeconfig.read_text())
            for section in ("clusters", "users", "contexts"):
                for entry in config[section]:
                    entry["name"] = name
            config["contexts"][0]["context"].update(cluster=name, user=name)
            if not merged:
                merged = config
            else:
                for section in ("clusters", "users", "contexts"):
                    merged[section] += config[section]
        kubeconfig = tree / "kubeconfig"
        kubeconfig.write_text(json.dumps(merged))
        plan = reconcile("plan", "--kubeconfig", str(kubeconfig))
        whole, _, _ = timed(plan, tree)
        alone = max(timed([*plan, "--cluster", name], tree)[0] for name in FLEET_NAMES)
        table.add("plan of the fleet, against its slowest cluster alone", whole, alone)
    finally:
        for server in servers:
            server.terminate()
            server.wait()
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000,10000,50000", help="Sandbox sizes.")
    parser.add_argument(
        "--real-sizes",
        default="1000,10000",
        help="Sizes on the real control plane of ../shared/k8s ('' for none).",
    )
    parser.add_argument("--labels", type=int, default=LABELS_PER_NODE)
    parser.add_argument(
        "--fleet-up-to", type=int, default=10000, help="The fleet figure for sizes up to this."
    )
    parser.add_argument("--drift", type=float, default=0.05)
    parser.add_argument(
        "--pods-up-to", type=int, default=10000, help="Seed pods (sandbox) for sizes up to this."
    )
    args = parser.parse_args()
    # As `pip install` leaves an installed package: compiled, so that no figure includes
    # compiling reconcile's modules (an editable install under PYTHONDONTWRITEBYTECODE
    # would compile them in every process: 10 % of a validate).
    compileall.compile_dir(Path(reconcile_package.__file__).parent, quiet=1)
    print(
        f"machine: {os.cpu_count()} cores; {args.labels} labels per node, {args.drift:.0%} drifted"
    )
    sizes = [int(s) for s in args.sizes.split(",") if s]
    real = [int(s) for s in args.real_sizes.split(",") if s] if CONTROL_PLANE.exists() else []
    for size in sorted(set(sizes) | set(real)):
        with tempfile.TemporaryDirectory() as scratch:
            root = Path(scratch)
            write_nodes(root / "yaml" / "desired" / "nodes", range(size), args.labels, env=False)
            offline(size, args.labels, root).print()
            if size in sizes:
                target: SandboxTarget | RealTarget = SandboxTarget(
                    size, args.labels, pods=size <= args.pods_up_to
                )
                try:
                    online(target, size, args.labels, args.drift, root).print()
                finally:
                    target.stop()
            if size <= args.fleet_up_to and size in sizes:
                fleet(size, args.labels, root).print()
            if size in real:
                state = root / "control-plane"
                target = RealTarget(state, size, args.labels)
                try:
                    online(target, size, args.labels, args.drift, root).print()
                finally:
                    target.stop()
                    shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
