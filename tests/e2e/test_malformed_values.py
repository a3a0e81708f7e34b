"""A value of the wrong YAML type anywhere in desired/ is a diagnostic at its file:line:col,
exit 2, from `validate` and `plan` alike: never an internal error, never a value that
`validate` lets through and `plan` then trips over."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import (
    DESIRED,
    CliResult,
    TestCluster,
    lab_objects,
    run_cli,
    start_cluster,
    stop_cluster,
)

# `file:line:col: message`, as every diagnostic is printed.
POSITIONED = re.compile(r"^[^\s:]+:\d+:\d+: ")
# The last line of a command that stopped on the diagnostics.
STOPPED = re.compile(r"^error: \d+ error\(s\): nothing was changed in the cluster$")


def check_diagnostics(result: CliResult, command: str, *, positioned: bool = True) -> list[str]:
    """The error lines of a run, never an internal error; with `positioned`, exit 2 only
    with each one a diagnostic at a file:line:col (else a cluster may refuse, too)."""
    assert "internal error" not in result.stderr, (command, result.stderr)
    assert "Traceback" not in result.stderr, (command, result.stderr)
    assert result.code in (0, 1, 2), (command, result)
    errors = [
        line
        for line in result.stderr.splitlines()
        if line and "warning:" not in line and not line.startswith(" ")
    ]
    if result.code != 2 or not positioned:
        return errors
    assert errors, (command, result.stderr)
    diagnostics = [line for line in errors if not STOPPED.match(line)]
    for line in diagnostics:
        assert POSITIONED.match(line), (command, line, result.stderr)
    return diagnostics


# --- the named cases -------------------------------------------------------------------------

# (file under desired/, text written there, what replaces it, where the value is).
CASES: dict[str, tuple[str, str, str, str]] = {
    "kind: [] in a node file": (
        "nodes/lab-node-0.yaml",
        "kind: NodeFeatures",
        "kind: []",
        "desired/nodes/lab-node-0.yaml:3:7: ",
    ),
    "kind: {} in a node file": (
        "nodes/lab-node-0.yaml",
        "kind: NodeFeatures",
        "kind: {}",
        "desired/nodes/lab-node-0.yaml:3:7: ",
    ),
    "kind: [] in a workload": (
        "workloads/gpu-drv.yaml",
        "kind: Namespace",
        "kind: []",
        "desired/workloads/gpu-drv.yaml:4:7: ",
    ),
    "kind: {} in a workload": (
        "workloads/gpu-drv.yaml",
        "kind: Namespace",
        "kind: {}",
        "desired/workloads/gpu-drv.yaml:4:7: ",
    ),
    "replicas: a date": (
        "workloads/gpu-drv.yaml",
        "replicas: 4",
        "replicas: 2026-01-01",
        "desired/workloads/gpu-drv.yaml:55:13: ",
    ),
    "an integer among nodeAffinity values": (
        "workloads/gpu-drv.yaml",
        'values: ["550"]',
        "values: [0x1F]",
        "desired/workloads/gpu-drv.yaml:22:22: ",
    ),
    "metadata.name: !!timestamp": (
        "workloads/gpu-drv.yaml",
        "name: cuda12-job",
        "name: !!timestamp 2026-01-01",
        "desired/workloads/gpu-drv.yaml:12:9: ",
    ),
    "an integer among a NodeGroup's matchExpressions values": (
        "groups/pool.yaml",
        "values: [a100]",
        "values: [0x1F]",
        "desired/groups/pool.yaml:9:14: ",
    ),
    "metadata.namespace: a list": (
        "workloads/gpu-drv.yaml",
        "namespace: gpu-drv",
        "namespace: [gpu-drv]",
        "desired/workloads/gpu-drv.yaml:13:14: ",
    ),
}

GROUP = """\
apiVersion: reconcile.dev/v1alpha1
kind: NodeGroup
metadata:
  name: pool
selector:
  matchExpressions:
  - key: example.com/pool
    operator: In
    values: [a100]
labels:
  example.com/tier: gpu
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    """The lab cluster, shared by the module: `plan` only reads it."""
    started = start_cluster(lab_objects("lab"), tmp_path_factory.mktemp("cluster"))
    yield started
    stop_cluster(started)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the fuzz test writes its trees (one directory for all its examples)."""
    return tmp_path_factory.mktemp("trees")


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("command", ["validate", "plan"])
def test_a_value_of_the_wrong_type_is_a_diagnostic_at_its_position(
    case: str, command: str, cluster: TestCluster, workdir: Path
) -> None:
    file, old, new, where = CASES[case]
    (workdir / "desired" / "groups").mkdir(exist_ok=True)
    (workdir / "desired" / "groups" / "pool.yaml").write_text(GROUP)
    path = workdir / "desired" / file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))

    result = run_cli(command, cwd=workdir, kubeconfig=cluster.kubeconfig)

    assert result.code == 2, result
    diagnostics = check_diagnostics(result, command)
    assert [line for line in diagnostics if line.startswith(where)], (where, result.stderr)
    assert result.stdout == ""


# --- the fuzz test ---------------------------------------------------------------------------

# Valid documents of every kind desired/ reads, beside the lab tree's own files.
EXTRA: dict[str, str] = {
    "groups/pool.yaml": GROUP
    + """\
annotations:
  example.com/owner: ml-platform
taints:
- {key: example.com/dedicated, value: ml, effect: NoSchedule}
""",
    "disruptive/site.yaml": """\
apiVersion: reconcile.dev/v1alpha1
kind: DisruptiveFacts
metadata:
  name: site
facts:
- key: example.com/fabric
  disrupts: restarts the fabric manager
  state: {label: example.com/fabric.state, working: [pending], done: [success], failed: [failed]}
""",
    "gates/smoke.yaml": """\
apiVersion: batch/v1
kind: Job
metadata:
  name: smoke
  namespace: gpu-drv
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: smoke
        image: nvcr.io/nvidia/cuda:12.4.0-base-ubuntu22.04
        resources:
          limits: {nvidia.com/gpu: 1}
""",
    "workloads/serving.yaml": """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: serving
  namespace: gpu-drv
  labels: {app: serving}
  annotations: {example.com/note: text}
spec:
  replicas: 2
  selector:
    matchLabels: {app: serving}
    matchExpressions:
    - {key: tier, operator: In, values: [gpu]}
  template:
    metadata:
      labels: {app: serving, tier: gpu}
    spec:
      nodeSelector: {nvidia.com/gpu.present: "true"}
      priorityClassName: high
      tolerations:
      - {key: example.com/dedicated, operator: Equal, value: ml, effect: NoSchedule}
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - {key: nvidia.com/cuda.driver.major, operator: Gt, values: ["500"]}
              matchFields:
              - {key: metadata.name, operator: In, values: [lab-node-0]}
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 10
            preference:
              matchExpressions:
              - {key: nvidia.com/gpu.product, operator: In, values: [NVIDIA-A100-SXM4-40GB]}
        podAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 5
            podAffinityTerm:
              labelSelector: {matchLabels: {app: serving}}
              topologyKey: kubernetes.io/hostname
              namespaces: [gpu-drv]
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: ScheduleAnyway
        labelSelector: {matchLabels: {app: serving}}
      overhead: {cpu: 100m}
      initContainers:
      - name: warm
        image: busybox:1.36
        restartPolicy: Always
        resources: {requests: {cpu: "1", memory: 1Gi}}
      containers:
      - name: server
        image: nvcr.io/nvidia/tritonserver:24.07-py3
        ports:
        - {containerPort: 8000, protocol: TCP}
        env:
        - {name: MODE, value: gpu}
        resources:
          requests: {cpu: 2, memory: 4Gi, nvidia.com/gpu: 1}
          limits: {cpu: 2.5, memory: 4Gi, nvidia.com/gpu: 1}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: serving
  namespace: gpu-drv
spec:
  maxUnavailable: 25%
  selector:
    matchLabels: {app: serving}
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: store
  namespace: gpu-drv
spec:
  replicas: 1
  serviceName: store
  selector: {matchLabels: {app: store}}
  template:
    metadata: {labels: {app: store}}
    spec:
      containers:
      - name: store
        image: redis:7
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
  namespace: gpu-drv
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers:
      - name: agent
        image: busybox:1.36
        resources: {limits: {cpu: 100m}}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: once
  namespace: gpu-drv
spec:
  parallelism: 2
  completions: 2
  template:
    spec:
      restartPolicy: OnFailure
      containers:
      - name: once
        image: busybox:1.36
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: gpu-drv
data:
  mode: fast
---
apiVersion: v1
kind: Service
metadata:
  name: store
  namespace: gpu-drv
spec:
  selector: {app: store}
  ports:
  - {port: 6379}
""",
}
FLEET = """\
apiVersion: reconcile.dev/v1alpha1
kind: Fleet
metadata:
  name: one
clusters:
- {name: lab, context: reconcile-sandbox, wave: 1}
"""


def _tree() -> dict[str, str]:
    files = {
        path.relative_to(DESIRED).as_posix(): path.read_text()
        for path in sorted(DESIRED.rglob("*"))
        if path.is_file()
    }
    return {**files, **EXTRA}


TREE = _tree()
FILES = sorted([*TREE, "clusters.yaml"])
SENTINEL = "reconcile-fuzz-sentinel"


def _paths(value: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """Every path into `value`, the value itself first."""
    yield path
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, (*path, index))


def _replaced(value: Any, path: tuple[str | int, ...]) -> Any:
    if not path:
        return SENTINEL
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {k: _replaced(v, rest) if k == head else v for k, v in value.items()}
    return [_replaced(v, rest) if i == head else v for i, v in enumerate(value)]


_KEYS = st.sampled_from(["a", "name", "kind", "key", "values", "x/y", "1"])
# Values of every YAML type, written as YAML (flow style: they fit any place a value goes).
_SCALARS = st.one_of(
    st.sampled_from(
        [
            "null",
            "~",
            "true",
            "no",
            "0",
            "-1",
            "0x1F",
            "0o17",
            "017",
            "1_000",
            "1e3",
            "3.5",
            ".inf",
            "-.inf",
            ".nan",
            "2026-01-01",
            "2026-01-01T10:00:00Z",
            "!!timestamp 2026-01-01",
            "!!binary aGVsbG8=",
            "!!str 5",
            "!!float 1",
            "123456789012345678901234567890",
            "-9" * 40,
            "[]",
            "{}",
            '""',
            '" "',
            '"a\\u2028b"',
            '"\\0"',
            '"\\t"',
            '"$(id)"',
            '"../../etc"',
            '"%"',
            '"-5%"',
            '"é"',
            '"\\U0001F600"',
            '"' + "x" * 300 + '"',
        ]
    ),
    st.integers().map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)


def _nested(depth: int) -> st.SearchStrategy[str]:
    if depth == 0:
        return _SCALARS
    inner = _nested(depth - 1)
    return st.one_of(
        _SCALARS,
        st.lists(inner, max_size=3).map(lambda items: "[" + ", ".join(items) + "]"),
        st.dictionaries(_KEYS, inner, max_size=3).map(
            lambda items: "{" + ", ".join(f"{k}: {v}" for k, v in items.items()) + "}"
        ),
    )


_VALUES = st.one_of(
    _nested(3),
    st.integers(20, 60).map(lambda depth: "[" * depth + "1" + "]" * depth),
    st.integers(20, 60).map(lambda depth: "{a: " * depth + "1" + "}" * depth),
)


def _mutated(text: str, draw: st.DrawFn) -> str:
    documents = list(yaml.load_all(text, Loader=yaml.CSafeLoader))
    index = draw(st.integers(0, len(documents) - 1))
    paths = list(_paths(documents[index]))
    path = paths[draw(st.integers(0, len(paths) - 1))]
    documents[index] = _replaced(documents[index], path)
    dumped = yaml.safe_dump_all(documents, sort_keys=False, default_flow_style=False, width=1000)
    assert dumped.count(SENTINEL) == 1, dumped
    return dumped.replace(SENTINEL, draw(_VALUES))


@st.composite
def _broken_tree(draw: st.DrawFn) -> tuple[str, dict[str, str]]:
    """A valid tree with one value in one file replaced by one of another YAML type."""
    file = draw(st.sampled_from(FILES))
    tree = dict(TREE)
    if file == "clusters.yaml":
        tree = {
            "clusters.yaml": FLEET,
            "clusters/lab/nodes/lab-node-0.yaml": TREE["nodes/lab-node-0.yaml"],
        }
        tree.update({k: v for k, v in TREE.items() if not k.startswith("nodes/")})
    tree[file] = _mutated(tree[file], draw)
    return file, tree


@pytest.mark.slow
@settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(case=_broken_tree())
def test_no_value_of_any_type_anywhere_is_an_internal_error(
    case: tuple[str, dict[str, str]], cluster: TestCluster, scratch: Path
) -> None:
    """validate and plan on a tree with one value replaced: exit 0 or 1, or exit 2 with
    every error at a file:line:col; plan stops on exactly what validate reports."""
    _, tree = case
    work = Path(tempfile.mkdtemp(dir=scratch))
    for name, text in tree.items():
        path = work / "desired" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    validated = run_cli("validate", cwd=work, kubeconfig=cluster.kubeconfig)
    reported = check_diagnostics(validated, "validate")
    planned = run_cli("plan", cwd=work, kubeconfig=cluster.kubeconfig)
    # What validate passes, the cluster may still refuse (a context the kubeconfig lacks).
    check_diagnostics(planned, "plan", positioned=validated.code == 2)
    if validated.code == 2:
        assert planned.code == 2, (validated.stderr, planned)
        assert [line for line in planned.stderr.splitlines() if POSITIONED.match(line)] == [
            line for line in reported if POSITIONED.match(line)
        ]
