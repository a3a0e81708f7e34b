"""The cost of the API server's verdicts (issue 45, item 8), each figure as a ratio with its
target:

    python benchmarks/bench_verdicts.py [--baseline DIR] [--configmaps 1000]
                                        [--deployments 100] [--resources 10000] [--pairs 5]

| figure | against | target |
| --- | --- | --- |
| `plan` of 1,000 ConfigMaps + 100 Deployments in sync, sandbox | the same `plan` of `--baseline` | 0.6x |
| `apply` of that tree (no drift: the staged dry runs, then nothing) | the same `apply` of `--baseline` | 1.2x |
| `validate` of 10,000 custom resources whose CRD carries 8 CEL rules | the same tree, the rules removed | 3x |

`--baseline DIR` is a checkout of the version to compare with, run as
`PYTHONPATH=DIR python -m reconcile`; for the issue's figures, the commit before the staged
apply (the first parent of the merge that brought it):

    git worktree add --detach /tmp/pre-staged c5efb7f^1
    python benchmarks/bench_verdicts.py --baseline /tmp/pre-staged
    git worktree remove /tmp/pre-staged

Without it the plan and apply figures are printed without ratios. The cluster is the
embedded sandbox (or the cluster of `--kubeconfig`, for instance the real control plane of
../shared/k8s started with `K8S_NO_KUBELET=1 cluster up DIR`), seeded by one `apply` of the
tree (so that reconcile owns every field it sets, as after any apply) and the same for both
versions. Every command runs as a user runs
it (a process, modules compiled beforehand); each pair of a figure runs in turn (this
version, then the other), `--pairs` times: the median of each and the median of the pairs'
ratios, steadier on a machine whose speed drifts. Reports, never asserts: the numbers go
into docs/performance.md.
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
from collections import Counter
from pathlib import Path

import reconcile as reconcile_package
from reconcile.sandbox import Sandbox

PAIRS = 5
RULES = 8
NAMESPACE = "default"
GROUP = "bench.reconcile.dev"


# --- the trees ------------------------------------------------------------------------------


def config_map(index: int) -> str:
    data = "".join(f'  key-{k}: "value {index}-{k}"\n' for k in range(5))
    return (
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings-{index:04d}\n"
        f"  namespace: {NAMESPACE}\n  labels: {{app.kubernetes.io/part-of: bench}}\n"
        f"data:\n{data}"
    )


def deployment(index: int) -> str:
    name = f"service-{index:03d}"
    return f"""\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: {NAMESPACE}
  labels: {{app.kubernetes.io/part-of: bench}}
spec:
  replicas: 2
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
        - name: server
          image: registry.example.com/{name}:1.{index % 10}.0
          ports: [{{containerPort: 8080}}]
          env:
            - {{name: MODE, value: production}}
          resources:
            requests: {{cpu: 100m, memory: 128Mi}}
            limits: {{memory: 256Mi}}
"""


def write_workloads(root: Path, config_maps: int, deployments: int) -> None:
    """One file per object under desired/workloads."""
    workloads = root / "desired" / "workloads"
    workloads.mkdir(parents=True)
    for i in range(config_maps):
        (workloads / f"settings-{i:04d}.yaml").write_text(config_map(i))
    for i in range(deployments):
        (workloads / f"service-{i:03d}.yaml").write_text(deployment(i))


# Eight rules of the kinds published CRDs carry (Kueue's, the GPU Operator's, Gateway
# API's): presence and exclusion, a bound across fields, list quantifiers, string
# functions, a quantity, a size.
CEL_RULES = (
    ("has(self.replicas) || !has(self.maxReplicas)", "maxReplicas needs replicas"),
    ("!has(self.maxReplicas) || self.replicas <= self.maxReplicas", "replicas above maximum"),
    ("self.mode in ['batch', 'serving', 'interactive']", "unknown mode"),
    ("self.tolerations.all(t, t.key != '' || t.operator == 'Exists')", "empty key needs Exists"),
    ("self.tolerations.exists_one(t, t.key == 'nvidia.com/gpu')", "one GPU toleration"),
    ("self.image.startsWith('registry.example.com/')", "image from the registry"),
    ("quantity(self.memory).isGreaterThan(quantity('1Mi'))", "memory above 1Mi"),
    ("size(self.name) <= 40 && self.name.matches('^[a-z][a-z0-9-]*$')", "a DNS label"),
)


def crd(rules: bool) -> str:
    validations = "".join(
        f"              - rule: {rule!r}\n                message: {message!r}\n"
        for rule, message in CEL_RULES[:RULES]
    )
    rules_block = f"              x-kubernetes-validations:\n{validations}" if rules else ""
    return f"""\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: trainers.{GROUP}
spec:
  group: {GROUP}
  scope: Namespaced
  names: {{plural: trainers, singular: trainer, kind: Trainer, listKind: TrainerList}}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              required: [mode, name, image, memory]
{rules_block}              properties:
                name: {{type: string, maxLength: 63}}
                mode: {{type: string}}
                image: {{type: string}}
                memory: {{type: string}}
                replicas: {{type: integer, minimum: 0}}
                maxReplicas: {{type: integer, minimum: 0}}
                tolerations:
                  type: array
                  maxItems: 8
                  items:
                    type: object
                    properties:
                      key: {{type: string}}
                      operator: {{type: string, enum: [Exists, Equal]}}
                      value: {{type: string}}
"""


def custom_resource(index: int) -> str:
    return f"""\
apiVersion: {GROUP}/v1
kind: Trainer
metadata:
  name: trainer-{index:05d}
  namespace: {NAMESPACE}
spec:
  name: trainer-{index:05d}
  mode: {("batch", "serving", "interactive")[index % 3]}
  image: registry.example.com/trainer:{index % 7}
  memory: {1 + index % 16}Gi
  replicas: {1 + index % 4}
  maxReplicas: 8
  tolerations:
    - {{key: nvidia.com/gpu, operator: Exists}}
    - {{key: example.com/pool, operator: Equal, value: a{index % 5}}}
"""


def write_custom(root: Path, resources: int, *, rules: bool) -> None:
    """The CRD and `resources` custom resources of it, 100 to a file."""
    workloads = root / "desired" / "workloads"
    workloads.mkdir(parents=True)
    (workloads / "crd.yaml").write_text(crd(rules))
    for start in range(0, resources, 100):
        documents = [custom_resource(i) for i in range(start, min(start + 100, resources))]
        (workloads / f"trainers-{start:05d}.yaml").write_text("---\n".join(documents))


# --- processes ------------------------------------------------------------------------------


def reconcile(*args: str) -> list[str]:
    return [sys.executable, "-m", "reconcile", *args]


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    """Wall seconds of one run; exit codes beyond 0 and 1 (drift, findings) stop here."""
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()}")
    return elapsed


def paired(
    a: list[str], b: list[str], cwd_a: Path, cwd_b: Path, pairs: int, env_b: dict[str, str] | None
) -> tuple[float, float, float]:
    """`a` then `b`, `pairs` times (after one warm-up of each): the median of each side and
    the median of the pairs' ratios a/b."""
    run(a, cwd_a), run(b, cwd_b, env_b)
    times = [(run(a, cwd_a), run(b, cwd_b, env_b)) for _ in range(pairs)]
    return (
        statistics.median(x for x, _ in times),
        statistics.median(y for _, y in times),
        statistics.median(x / y for x, y in times),
    )


def verdict(ratio: float, target: float) -> str:
    return "PASS" if ratio <= target else "MISS"


class Table:
    def __init__(self, title: str) -> None:
        self.title = title
        self.rows: list[tuple[str, ...]] = []

    def add(
        self, figure: str, value: float, against: float | None, ratio: float | None, target: float
    ) -> None:
        if against is None or ratio is None:
            self.rows.append((figure, f"{value:.2f} s", "", "", f"{target}x", ""))
            return
        self.rows.append(
            (
                figure,
                f"{value:.2f} s",
                f"{against:.2f} s",
                f"{ratio:.2f}x",
                f"{target}x",
                verdict(ratio, target),
            )
        )

    def print(self) -> None:
        print(f"\n### {self.title}\n")
        print("| figure | this version | against | ratio | target | |")
        print("| --- | --- | --- | --- | --- | --- |")
        for row in self.rows:
            print("| " + " | ".join(row) + " |")
        sys.stdout.flush()


# --- the figures ----------------------------------------------------------------------------


def in_sync(args: argparse.Namespace, root: Path) -> Table:
    """`plan` and `apply` of the workload tree against a sandbox already holding it."""
    cluster = "the cluster of --kubeconfig" if args.kubeconfig else "sandbox"
    table = Table(
        f"{args.configmaps:,} ConfigMaps + {args.deployments:,} Deployments in sync, {cluster}"
    )
    tree = root / "workloads"
    write_workloads(tree, args.configmaps, args.deployments)
    sandbox = None if args.kubeconfig else Sandbox().start()
    try:
        kubeconfig = sandbox.write_kubeconfig(root / "kubeconfig") if sandbox else args.kubeconfig
        target = ("--kubeconfig", str(kubeconfig))
        run(reconcile("apply", *target), tree)
        if sandbox is not None:
            sandbox.clear_requests()
            run(reconcile("plan", *target), tree)
            counted = Counter(f"{r.verb} {r.resource}" for r in sandbox.requests)
            requests = ", ".join(f"{n} {k}" for k, n in sorted(counted.items()))
            print(f"(plan's requests: {requests})", file=sys.stderr)
        env = None
        if args.baseline:
            env = {**os.environ, "PYTHONPATH": str(args.baseline)}
        for command, target_ratio in (("plan", 0.6), ("apply", 1.2)):
            argv = reconcile(command, *target)
            if env is None:
                alone = statistics.median(run(argv, tree) for _ in range(args.pairs))
                table.add(f"`{command}`, in sync (median)", alone, None, None, target_ratio)
                continue
            mine, theirs, ratio = paired(argv, argv, tree, tree, args.pairs, env)
            table.add(
                f"`{command}`, in sync (medians; against {args.baseline_name})",
                mine,
                theirs,
                ratio,
                target_ratio,
            )
    finally:
        if sandbox is not None:
            sandbox.stop()
    return table


def cel_rules(args: argparse.Namespace, root: Path) -> Table:
    """`validate` of custom resources whose CRD carries the CEL rules, against the same
    tree without them."""
    table = Table(
        f"`validate` of {args.resources:,} custom resources, their CRD's {RULES} CEL rules"
    )
    with_rules, without = root / "rules", root / "no-rules"
    write_custom(with_rules, args.resources, rules=True)
    write_custom(without, args.resources, rules=False)
    validate = reconcile("validate")
    checked = subprocess.run(validate, cwd=with_rules, capture_output=True, text=True, check=False)
    if checked.returncode != 0:
        raise SystemExit(f"validate refused the tree with rules: {checked.stdout}{checked.stderr}")
    mine, theirs, ratio = paired(validate, validate, with_rules, without, args.pairs, None)
    table.add("`validate`, with the rules / without (medians)", mine, theirs, ratio, 3.0)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="A checkout of the version plan and apply are compared with (PYTHONPATH).",
    )
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        help="A cluster to apply the tree to (namespace default) instead of the sandbox.",
    )
    parser.add_argument("--configmaps", type=int, default=1000)
    parser.add_argument("--deployments", type=int, default=100)
    parser.add_argument("--resources", type=int, default=10000)
    parser.add_argument("--pairs", type=int, default=PAIRS)
    parser.add_argument("--only", choices=("sync", "cel"), help="One of the two tables.")
    args = parser.parse_args()
    args.baseline_name = ""
    # As `pip install` leaves an installed package: compiled, so that no figure includes
    # compiling reconcile's modules.
    compileall.compile_dir(Path(reconcile_package.__file__).parent, quiet=1)
    if args.baseline:
        args.baseline = args.baseline.resolve()
        compileall.compile_dir(args.baseline / "reconcile", quiet=1)
        described = subprocess.run(
            ["git", "-C", str(args.baseline), "log", "-1", "--format=%h"],
            capture_output=True,
            text=True,
            check=False,
        )
        args.baseline_name = described.stdout.strip() or str(args.baseline)
    print(
        f"machine: {os.cpu_count()} cores, {platform.python_implementation()} "
        f"{platform.python_version()}; load average {os.getloadavg()[0]:.1f}"
    )
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        if args.only in (None, "sync"):
            in_sync(args, root).print()
        if args.only in (None, "cel"):
            cel_rules(args, root).print()


if __name__ == "__main__":
    main()
