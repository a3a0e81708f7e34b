"""One desired/ tree for several clusters: overlays that add, replace and exclude, plans
prefixed by cluster, apply in waves that stop at the first wave that fails, saved fleet
plans bound to every cluster. Each cluster is its own sandbox (a real control plane is
one cluster: these tests need several)."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest

from reconcile.engine.plan import Plan
from reconcile.sandbox import Sandbox
from reconcile.sandbox.main import merged_kubeconfig
from tests.e2e.test_prune_guards import snapshot
from tests.support import REPO, TestCluster, lab_objects, markdown_table_rows, run_cli

EXAMPLE = REPO / "examples" / "fleet"


@pytest.fixture
def sandboxes() -> Any:
    started: list[Sandbox] = []

    def start(*seeds: str) -> list[Sandbox]:
        for seed in seeds:
            started.append(Sandbox(lab_objects(seed)).start())
        return started[-len(seeds) :]

    yield start
    for sandbox in started:
        sandbox.stop()


def kubeconfig(path: Path, clusters: dict[str, Sandbox]) -> Path:
    path.write_text(json.dumps(merged_kubeconfig(list(clusters.values()), list(clusters))))
    return path


def cluster(sandbox: Sandbox, tmp_path: Path, name: str) -> TestCluster:
    single = tmp_path / f"{name}.kubeconfig"
    sandbox.write_kubeconfig(single)
    return TestCluster(single, sandbox)


@pytest.fixture
def fleet(tmp_path: Path, sandboxes: Any) -> tuple[Path, Path, dict[str, TestCluster]]:
    """The example fleet (lab, then driver-lab in wave 2) on two sandboxes: (work
    directory, kubeconfig with a context per cluster, the clusters)."""
    if not hasattr(Sandbox, "start"):
        pytest.skip("sandbox only")
    lab, driver_lab = sandboxes("lab", "driver-lab")
    work = tmp_path / "work"
    shutil.copytree(EXAMPLE, work)
    config = kubeconfig(tmp_path / "kubeconfig", {"lab": lab, "driver-lab": driver_lab})
    clusters = {
        "lab": cluster(lab, tmp_path, "lab"),
        "driver-lab": cluster(driver_lab, tmp_path, "driver-lab"),
    }
    return work, config, clusters


LAB_LINE = "lab lab-node-1 nvidia.com/gpu.count 2"
DRIVER_LAB_LINES = [
    'driver-lab Namespace/gpu-drv metadata.labels["app.kubernetes.io/managed-by"] reconcile',
    "driver-lab PodDisruptionBudget/gpu-drv/trainer-pdb metadata.labels "
    '{"app.kubernetes.io/managed-by":"reconcile","example.com/team":"driver-lab"}',
    "driver-lab Deployment/gpu-drv/trainer metadata.labels "
    '{"app.kubernetes.io/managed-by":"reconcile"}',
]


def test_the_example_fleet_plans_applies_and_converges(fleet: Any) -> None:
    work, config, clusters = fleet
    planned = run_cli("plan", cwd=work, kubeconfig=config)
    assert (planned.code, planned.lines) == (1, [LAB_LINE, *DRIVER_LAB_LINES]), planned.stderr
    applied = run_cli("apply", cwd=work, kubeconfig=config)
    assert (applied.code, applied.lines) == (0, [LAB_LINE, *DRIVER_LAB_LINES]), applied.stderr
    again = run_cli("plan", cwd=work, kubeconfig=config)
    assert (again.code, again.stdout) == (0, "")
    assert clusters["lab"].labels("lab-node-1")["nvidia.com/gpu.count"] == "2"
    # the overlay's replacement reached its cluster, and only it
    budget = clusters["driver-lab"].raw(
        "GET", "/apis/policy/v1/namespaces/gpu-drv/poddisruptionbudgets/trainer-pdb"
    )[1]
    assert budget["metadata"]["labels"]["example.com/team"] == "driver-lab"
    lab_budget = clusters["lab"].raw(
        "GET", "/apis/policy/v1/namespaces/gpu-drv/poddisruptionbudgets/trainer-pdb"
    )[1]
    assert "example.com/team" not in (lab_budget["metadata"].get("labels") or {})
    # the excluded Pods were not created on driver-lab; the base's are on lab
    assert clusters["driver-lab"].raw("GET", "/api/v1/namespaces/gpu-drv/pods/cuda12-job")[0] == 404
    assert clusters["lab"].raw("GET", "/api/v1/namespaces/gpu-drv/pods/cuda12-job")[0] == 200


def test_one_cluster_prints_todays_lines_and_json_is_a_fleet_plan(fleet: Any) -> None:
    work, config, _ = fleet
    one = run_cli("plan", "--cluster", "lab", cwd=work, kubeconfig=config)
    assert (one.code, one.lines) == (1, ["lab-node-1 nvidia.com/gpu.count 2"])
    as_json = run_cli("plan", "-o", "json", cwd=work, kubeconfig=config)
    document = json.loads(as_json.stdout)
    assert (document["kind"], document["fleet"], list(document["plans"])) == (
        "FleetPlan",
        "lab-fleet",
        ["lab", "driver-lab"],
    )
    assert document["errors"] == {}
    assert document["plans"]["lab"]["nodes"][0]["name"] == "lab-node-1"
    markdown = run_cli("plan", "-o", "markdown", cwd=work, kubeconfig=config)
    rows = markdown_table_rows(markdown.stdout)
    assert rows[:2] == [
        ["lab", "1", "0", "0 error(s), 0 warning(s)"],
        ["driver-lab", "0", "3", "0 error(s), 0 warning(s)"],
    ]
    assert "##### `lab`" in markdown.stdout and "##### `driver-lab`" in markdown.stdout


def test_an_unreachable_cluster_is_named_and_hides_no_other_plan(
    fleet: Any, tmp_path: Path
) -> None:
    work, _, clusters = fleet
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    config = json.loads(
        json.dumps(
            merged_kubeconfig(
                [clusters["lab"].sandbox, clusters["driver-lab"].sandbox], ["lab", "driver-lab"]
            )
        )
    )
    config["clusters"][1]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    path = tmp_path / "half-down"
    path.write_text(json.dumps(config))
    result = run_cli("plan", "--request-timeout", "2s", cwd=work, kubeconfig=path)
    assert result.code == 2
    assert result.lines == [LAB_LINE]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "error: 1 of 2 cluster(s) failed: driver-lab: cannot connect to the API server https://127.0.0.1:"
    )


def test_a_wave_that_fails_stops_every_later_wave(fleet: Any) -> None:
    work, config, clusters = fleet
    # lab (wave 1) gets an object its API server refuses: nothing applies there
    (work / "desired" / "clusters" / "lab" / "workloads" / "broken.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: broken, namespace: nowhere}\n"
        "data: {a: b}\n"
    )
    before = {name: snapshot(c) for name, c in clusters.items()}
    result = run_cli("apply", cwd=work, kubeconfig=config)
    assert result.code == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: wave 1 did not converge (lab: not converged)")
    assert last.endswith("applied: none; not applied: driver-lab")
    assert {name: snapshot(c) for name, c in clusters.items()} == before
    # --cluster applies the named ones only
    only = run_cli("apply", "--cluster", "driver-lab", cwd=work, kubeconfig=config)
    assert (only.code, only.lines) == (0, [line.split(" ", 1)[1] for line in DRIVER_LAB_LINES])
    assert snapshot(clusters["lab"]) == before["lab"]


def test_a_saved_fleet_plan_applies_only_to_the_clusters_it_was_made_for(
    fleet: Any, tmp_path: Path
) -> None:
    work, config, clusters = fleet
    saved = tmp_path / "fleet-plan.json"
    planned = run_cli("plan", "--out", str(saved), cwd=work, kubeconfig=config)
    assert planned.code == 1
    assert json.loads(saved.read_text())["kind"] == "FleetPlan"
    # the contexts swapped: each plan meets the other cluster
    swapped = json.loads(config.read_text())
    for context in swapped["contexts"]:
        context["name"] = {"lab": "driver-lab", "driver-lab": "lab"}[context["name"]]
    other = tmp_path / "swapped"
    other.write_text(json.dumps(swapped))
    before = {name: snapshot(c) for name, c in clusters.items()}
    refused = run_cli("apply", str(saved), cwd=work, kubeconfig=other)
    assert refused.code == 2
    assert "was made for another cluster" in refused.stderr
    assert {name: snapshot(c) for name, c in clusters.items()} == before
    applied = run_cli("apply", str(saved), cwd=work, kubeconfig=config)
    assert (applied.code, applied.lines) == (0, [LAB_LINE, *DRIVER_LAB_LINES]), applied.stderr


def test_ten_clusters_plan_in_one_run(tmp_path: Path) -> None:
    nodes = [o for o in lab_objects("lab") if o["kind"] == "Node"]  # nodes alone: fast
    started = [Sandbox(nodes).start() for _ in range(10)]
    try:
        _ten_clusters(tmp_path, started)
    finally:
        for sandbox in started:
            sandbox.stop()


def _ten_clusters(tmp_path: Path, started: list[Sandbox]) -> None:
    names = [f"c{i}" for i in range(10)]
    config = kubeconfig(tmp_path / "kubeconfig", dict(zip(names, started, strict=True)))
    desired = tmp_path / "desired"
    shutil.copytree(REPO / "desired" / "drivers", desired / "drivers")
    for name in names:
        shutil.copytree(REPO / "desired" / "nodes", desired / "clusters" / name / "nodes")
    (desired / "clusters.yaml").write_text(
        "apiVersion: reconcile.dev/v1alpha1\nkind: Fleet\nmetadata: {name: ten}\nclusters:\n"
        + "".join(f"- {{name: {n}, context: {n}, wave: {i % 3}}}\n" for i, n in enumerate(names))
    )
    result = run_cli("plan", cwd=tmp_path, kubeconfig=config)
    assert (result.code, result.lines) == (
        1,
        [f"{n} lab-node-1 nvidia.com/gpu.count 2" for n in names],
    )
    applied = run_cli("apply", cwd=tmp_path, kubeconfig=config)
    assert applied.code == 0, applied.stderr
    assert sorted(applied.lines) == sorted(result.lines)
    assert run_cli("plan", cwd=tmp_path, kubeconfig=config).code == 0


# --- the tree ------------------------------------------------------------------------------


def validate(work: Path) -> tuple[int, list[str]]:
    result = run_cli("validate", cwd=work)
    return result.code, result.stderr.strip().splitlines()


def test_the_example_fleet_validates(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "work")
    assert validate(tmp_path / "work") == (
        0,
        [
            "note: desired is valid: 2 cluster(s), 7 node(s), 0 group(s), 14 object(s), "
            "7 support-matrix row(s)"
        ],
    )


@pytest.mark.parametrize(
    ("path", "text", "message"),
    [
        (
            "nodes/lab-node-9.yaml",
            "apiVersion: reconcile.dev/v1alpha1\nkind: NodeFeatures\nmetadata: {name: lab-node-9}\n",
            "desired/nodes/lab-node-9.yaml:1:1: node files do not belong in the base of "
            "a fleet: node names belong to a cluster: move it to desired/clusters/<cluster>/nodes/",
        ),
        (
            "clusters/prod/nodes/x.yaml",
            "apiVersion: reconcile.dev/v1alpha1\nkind: NodeFeatures\nmetadata: {name: x}\n",
            "desired/clusters/prod/nodes/x.yaml:1:1: an overlay for cluster prod, which "
            "clusters.yaml does not name: the fleet's clusters: lab, driver-lab; add it to "
            "desired/clusters.yaml or move the directory",
        ),
        (
            "clusters/lab/workloads/gone.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: nope, namespace: gpu-drv}\n$patch: delete\n",
            "desired/clusters/lab/workloads/gone.yaml:1:1: excludes Pod/gpu-drv/nope, "
            "which the base does not declare: an overlay excludes base documents only; remove "
            "this one",
        ),
        (
            "clusters/lab/workloads/merge.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: cuda12-job, namespace: gpu-drv}\n$patch: merge\n",
            "desired/clusters/lab/workloads/merge.yaml:1:1: unknown directive $patch: "
            "merge: `$patch: delete` excludes the base document of the same apiVersion, kind, "
            "namespace and name for this cluster",
        ),
        # A node file is read for its directive too: written out, or spelled by an escape.
        (
            "clusters/lab/nodes/gone.yaml",
            "apiVersion: reconcile.dev/v1alpha1\nkind: NodeFeatures\nmetadata: {name: gone}\n"
            "$patch: delete\n",
            "desired/clusters/lab/nodes/gone.yaml:1:1: excludes NodeFeatures/gone, which the "
            "base does not declare: an overlay excludes base documents only; remove this one",
        ),
        (
            "clusters/lab/nodes/merge.yaml",
            "apiVersion: reconcile.dev/v1alpha1\nkind: NodeFeatures\nmetadata: {name: merge}\n"
            '"\\x24patch": merge\n',
            "desired/clusters/lab/nodes/merge.yaml:1:1: unknown directive $patch: "
            "merge: `$patch: delete` excludes the base document of the same apiVersion, kind, "
            "namespace and name for this cluster",
        ),
    ],
)
def test_validate_refuses_what_a_fleet_cannot_mean(
    tmp_path: Path, path: str, text: str, message: str
) -> None:
    work = tmp_path / "work"
    shutil.copytree(EXAMPLE, work)
    target = work / "desired" / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    code, lines = validate(work)
    assert code == 2
    assert message in lines, lines


@pytest.mark.parametrize(
    ("clusters", "message"),
    [
        (
            "- {name: a, context: a, inCluster: true}\n",
            "desired/clusters.yaml:5:3: clusters.0: give exactly one of context and "
            "inCluster: true",
        ),
        (
            "- {name: a, context: a}\n- {name: a, context: b}\n",
            "desired/clusters.yaml:5:1: clusters: cluster a is listed twice",
        ),
        (
            "- {name: Prod_1, context: a}\n",
            'desired/clusters.yaml:5:10: clusters.0.name: "Prod_1": a cluster name is a DNS label',
        ),
    ],
)
def test_validate_refuses_a_bad_fleet_file(tmp_path: Path, clusters: str, message: str) -> None:
    (tmp_path / "desired").mkdir()
    (tmp_path / "desired" / "clusters.yaml").write_text(
        "apiVersion: reconcile.dev/v1alpha1\nkind: Fleet\nmetadata: {name: f}\nclusters:\n"
        + clusters
    )
    code, lines = validate(tmp_path)
    assert code == 2
    assert any(line.startswith(message) for line in lines), lines


def test_commands_without_fleet_support_refuse_a_fleet_and_cluster_needs_one(
    fleet: Any,
) -> None:
    work, config, clusters = fleet
    before = snapshot(clusters["lab"])
    unknown = run_cli("plan", "--cluster", "prod", cwd=work, kubeconfig=config)
    assert (unknown.code, unknown.stderr.strip()) == (
        2,
        "error: --cluster prod: the fleet has no such cluster (it has: lab, driver-lab)",
    )
    context = run_cli("plan", "--context", "lab", cwd=work, kubeconfig=config)
    assert context.code == 2
    assert context.stderr.strip().endswith("each cluster names its context in clusters.yaml")
    no_fleet = run_cli("plan", "--cluster", "lab", cwd=REPO, kubeconfig=config)
    assert (
        no_fleet.stderr.strip() == "error: --cluster needs a fleet: desired/clusters.yaml not found"
    )
    assert snapshot(clusters["lab"]) == before


def test_the_commands_that_read_a_cluster_run_on_each_and_prefix_their_lines(
    fleet: Any,
) -> None:
    work, config, _clusters = fleet
    audit = run_cli("audit", cwd=work, kubeconfig=config)
    assert audit.code == 1  # driver-lab's nodes carry no GFD labels
    assert audit.lines[0] == "lab lab-node-1 nvidia.com/gpu.count allocatable=2"
    assert all(line.startswith("driver-lab lab-node-") for line in audit.lines[1:])
    as_json = json.loads(run_cli("audit", "-o", "json", cwd=work, kubeconfig=config).stdout)
    assert (as_json["kind"], list(as_json["clusters"])) == ("FleetResult", ["lab", "driver-lab"])
    assert as_json["clusters"]["lab"] == {
        "ok": False,
        "findings": [
            {"node": "lab-node-1", "key": "nvidia.com/gpu.count", "reason": "allocatable=2"}
        ],
    }
    drivers = run_cli("drivers", "audit", cwd=work, kubeconfig=config)
    assert (drivers.code, drivers.lines) == (0, ["lab OK", "driver-lab OK"])
    report = run_cli("report", "--cluster", "driver-lab", cwd=work, kubeconfig=config)
    assert report.code == 0 and "NODES=4" in report.lines
    placement = run_cli("placement", cwd=work, kubeconfig=config)
    assert (
        "driver-lab Deployment/gpu-drv/trainer 4/4 -> lab-node-0 (1), lab-node-1 (1), "
        "lab-node-2 (1), lab-node-3 (1); candidates: lab-node-0,lab-node-1,lab-node-2,lab-node-3"
        in (placement.lines)
    )
    assert not any(line.startswith("driver-lab Pod/gpu-drv/cuda12") for line in placement.lines)


def test_a_fleets_report_names_each_cluster_in_its_variables_and_sources_cleanly(
    fleet: Any, tmp_path: Path
) -> None:
    import subprocess

    work, config, _clusters = fleet
    report = run_cli("report", cwd=work, kubeconfig=config)
    assert report.code == 0, report.stderr
    assert report.lines[:3] == ["LAB__NODES=2", "LAB__SKEW=0", "LAB__MATRIX_ROWS=3"]
    assert "LAB__LAB_NODE_1_TAG=535-5.15.0-107-generic-ubuntu22.04" in report.lines
    assert "DRIVER_LAB__NODES=4" in report.lines
    # Commands named like the clusters leave a mark if sourcing the report runs one.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("lab", "driver-lab"):
        command = bin_dir / name
        command.write_text(f"#!/bin/sh\ntouch '{tmp_path}/ran-{name}'\n")
        command.chmod(0o755)
    (tmp_path / "report.env").write_text(report.stdout)
    sourced = subprocess.run(
        ["sh", "-c", '. ./report.env; echo "$LAB__NODES $DRIVER_LAB__NODES $LAB__LAB_NODE_1_TAG"'],
        cwd=tmp_path,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (sourced.returncode, sourced.stderr) == (0, "")
    assert sourced.stdout == "2 4 535-5.15.0-107-generic-ubuntu22.04\n"
    assert not list(tmp_path.glob("ran-*"))
    one = run_cli("report", "--cluster", "lab", cwd=work, kubeconfig=config)
    assert one.lines[0] == "NODES=2"  # one cluster: its lines as they are


def test_one_cluster_commands_need_cluster_in_a_fleet(fleet: Any) -> None:
    work, config, clusters = fleet
    before = {name: snapshot(c) for name, c in clusters.items()}
    for args in (
        ("upgrade", "lab-node-2", "--driver", "550.90.07"),
        ("import", "--dry-run"),
        ("rbac",),
    ):
        result = run_cli(*args, cwd=work, kubeconfig=config)
        assert (result.code, result.stderr.strip()) == (
            2,
            f"error: {args[0]} works on one cluster of the fleet: give --cluster NAME (one "
            "of: lab, driver-lab)",
        )
    watch = run_cli("watch", cwd=work, kubeconfig=config)
    assert watch.code == 2 and "watch follows one cluster" in watch.stderr
    imported = run_cli("import", "--dry-run", "--cluster", "lab", cwd=work, kubeconfig=config)
    assert imported.code == 0
    assert "+++ desired/clusters/lab/nodes/lab-node-1.yaml" in imported.lines
    assert {name: snapshot(c) for name, c in clusters.items()} == before


@pytest.mark.slow
def test_the_docs_fleet_example_runs_as_written(tmp_path: Path) -> None:
    import re
    import subprocess
    import sys

    page = (REPO / "docs" / "concepts" / "fleets.md").read_text()
    [line] = [
        block.strip()
        for block in re.findall(r"```sh\n(.*?)```", page, flags=re.DOTALL)
        if "--seed driver-lab" in block
    ]
    work = tmp_path / "repo"
    shutil.copytree(EXAMPLE, work / "examples" / "fleet")
    bin_dir = Path(sys.executable).parent
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "NO_COLOR": "1"}
    done = subprocess.run(
        ["sh", "-c", line],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [LAB_LINE, *DRIVER_LAB_LINES] * 2


def _driver_lab_namespace_recreated(document: dict[str, Any], *, reseal: bool) -> None:
    plan = document["plans"]["driver-lab"]
    [namespace] = [o for o in plan["objects"] if o["kind"] == "Namespace"]
    assert namespace["action"] == "update"
    namespace["action"] = "recreate"
    if reseal:
        plan["digest"] = None
        plan["digest"] = Plan.model_validate(plan).body_digest()


@pytest.mark.parametrize(
    ("reseal", "named"),
    [
        (False, "(cluster driver-lab) was changed after `reconcile plan` wrote it"),
        (
            True,
            "the fleet plan was refused (driver-lab: the plan is not what planning gives now: "
            "Namespace/gpu-drv action recreate (planning gives update)",
        ),
    ],
    ids=["edited", "resealed"],
)
def test_an_edited_fleet_plan_is_refused_on_every_cluster(
    fleet: Any, tmp_path: Path, reseal: bool, named: str
) -> None:
    """The fleet path checks each cluster's plan as a single-cluster plan is checked, and
    every cluster before any is written to: lab (wave 1) is not applied either."""
    work, config, clusters = fleet
    saved = tmp_path / "fleet-plan.json"
    assert run_cli("plan", "--out", str(saved), cwd=work, kubeconfig=config).code == 1
    document = json.loads(saved.read_text())
    _driver_lab_namespace_recreated(document, reseal=reseal)
    saved.write_text(json.dumps(document))
    namespace = clusters["driver-lab"].raw("GET", "/api/v1/namespaces/gpu-drv")[1]
    before = {name: snapshot(c) for name, c in clusters.items()}

    refused = run_cli("apply", str(saved), cwd=work, kubeconfig=config)

    assert (refused.code, refused.stdout) == (2, ""), refused.stderr
    [line] = refused.stderr.splitlines()
    assert named in line and line.startswith("error: ")
    assert {name: snapshot(c) for name, c in clusters.items()} == before
    after = clusters["driver-lab"].raw("GET", "/api/v1/namespaces/gpu-drv")[1]
    assert after["metadata"]["uid"] == namespace["metadata"]["uid"]


def test_a_fleet_plan_file_that_is_not_utf8_is_one_error_line(fleet: Any, tmp_path: Path) -> None:
    work, config, clusters = fleet
    saved = tmp_path / "fleet-plan.json"
    saved.write_bytes(b'{"kind": "FleetPlan", "fleet": "\xff"}')
    before = {name: snapshot(c) for name, c in clusters.items()}
    refused = run_cli("apply", str(saved), cwd=work, kubeconfig=config)
    assert (refused.code, refused.stdout) == (2, "")
    [line] = refused.stderr.splitlines()
    assert line.startswith(f"error: {saved} is not a saved fleet plan: ")
    assert {name: snapshot(c) for name, c in clusters.items()} == before


def test_a_signed_fleet_plan_applies_with_its_key(fleet: Any, tmp_path: Path) -> None:
    work, config, _ = fleet
    key = {"RECONCILE_PLAN_KEY": "fleet-pipeline"}
    saved = tmp_path / "fleet-plan.json"
    assert run_cli("plan", "--out", str(saved), cwd=work, kubeconfig=config, env=key).code == 1
    plans = json.loads(saved.read_text())["plans"]
    assert all(p["signature"].startswith("hmac-sha256:") for p in plans.values())
    unkeyed = run_cli("apply", str(saved), cwd=work, kubeconfig=config)
    assert unkeyed.code == 2
    assert "is signed, but RECONCILE_PLAN_KEY is not set" in unkeyed.stderr
    applied = run_cli("apply", str(saved), cwd=work, kubeconfig=config, env=key)
    assert (applied.code, applied.lines) == (0, [LAB_LINE, *DRIVER_LAB_LINES]), applied.stderr
