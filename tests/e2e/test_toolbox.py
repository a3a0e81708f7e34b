"""The GitOps toolbox: import, running in the cluster (manifests, RBAC, in-cluster
credentials), pre-commit, completion, verbosity and colour, kubeconfigs, the wheel."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconcile.cluster import Cluster
from reconcile.sandbox import Sandbox
from tests.conftest import ClusterFactory
from tests.support import REPO, TestCluster, lab_objects, run_cli

NODE_0 = "desired/nodes/lab-node-0.yaml"


# --- import -------------------------------------------------------------------------------


def test_import_writes_node_files_with_only_discovered_facts(
    lab: TestCluster, tmp_path: Path
) -> None:
    result = run_cli("import", cwd=tmp_path, kubeconfig=lab.kubeconfig)

    assert result.code == 0, result.stderr
    assert result.lines == [
        "desired/nodes/lab-node-0.yaml 12 label(s)",
        "desired/nodes/lab-node-1.yaml 13 label(s)",
        "desired/nodes/lab-node-2.yaml 1 label(s)",
    ]
    text = (tmp_path / NODE_0).read_text()
    assert text.startswith(
        "# yaml-language-server: $schema=../../schemas/nodefeatures.schema.json\n"
    )
    assert "kubernetes.io/hostname" not in text and "beta.kubernetes.io" not in text
    assert "nvidia.com/gpu.deploy.driver" not in text  # the operator's decision, not a fact
    assert 'nvidia.com/cuda.driver.rev: "07"' in text  # quoted: it must stay a string
    assert run_cli("validate", cwd=tmp_path).code == 0
    assert (
        run_cli("plan", cwd=tmp_path, kubeconfig=lab.kubeconfig).code == 0
    )  # git now says what is


def test_reimport_changes_only_changed_values_byte_for_byte(
    lab: TestCluster, tmp_path: Path
) -> None:
    run_cli("import", cwd=tmp_path, kubeconfig=lab.kubeconfig)
    path = tmp_path / NODE_0
    lines = path.read_text().splitlines(keepends=True)
    header, labels = lines[:6], lines[6:]
    # A person edits the file: comments, their own order, their own quoting.
    edited = "".join([*header, "  # the cards\n", *reversed(labels)]).replace(
        'nvidia.com/gpu.count: "4"', "nvidia.com/gpu.count: '4'  # per node"
    )
    path.write_text(edited)
    lab.label("lab-node-0", **{"nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81559"})

    preview = run_cli("import", "--dry-run", cwd=tmp_path, kubeconfig=lab.kubeconfig)
    assert preview.code == 0
    assert path.read_text() == edited  # a dry run writes nothing
    assert '-  nvidia.com/gpu.memory: "40537"' in preview.lines
    assert '+  nvidia.com/gpu.memory: "81559"' in preview.lines
    assert preview.lines[:2] == [f"--- {NODE_0}", f"+++ {NODE_0}"]

    result = run_cli("import", cwd=tmp_path, kubeconfig=lab.kubeconfig)
    assert result.lines == [
        "desired/nodes/lab-node-0.yaml 12 label(s)"
    ]  # the others did not change
    assert path.read_text() == edited.replace(
        "nvidia.com/gpu.count: '4'", "nvidia.com/gpu.count: '8'"
    ).replace('nvidia.com/gpu.memory: "40537"', 'nvidia.com/gpu.memory: "81559"')


def test_import_selector_and_prefixes(lab: TestCluster, tmp_path: Path) -> None:
    result = run_cli(
        "import",
        "-l",
        "!nvidia.com/gpu.present",
        "--prefix",
        "feature.node.kubernetes.io/",
        cwd=tmp_path,
        kubeconfig=lab.kubeconfig,
    )
    assert result.lines == ["desired/nodes/lab-node-2.yaml 1 label(s)"]
    refused = run_cli(
        "import", "--prefix", "node-role.kubernetes.io/", cwd=tmp_path, kubeconfig=lab.kubeconfig
    )
    assert refused.code == 2
    assert refused.stderr == (
        "error: --prefix node-role.kubernetes.io/: labels under kubernetes.io and k8s.io "
        "belong to the kubelet and the cluster, not to desired/\n"
    )
    assert not (tmp_path / "desired" / "nodes" / "lab-node-0.yaml").exists()


@pytest.mark.parametrize("prefix", ["kubernetes", "k", "", "beta.", "topology", "node"])
def test_import_never_takes_a_kubelet_key_whatever_the_prefix_says(
    prefix: str, lab: TestCluster, tmp_path: Path
) -> None:
    result = run_cli("import", "--prefix", prefix, cwd=tmp_path, kubeconfig=lab.kubeconfig)

    assert result.code == 0, result.stderr
    written = sorted((tmp_path / "desired" / "nodes").glob("*.yaml"))
    assert [p.name for p in written] == ["lab-node-0.yaml", "lab-node-1.yaml", "lab-node-2.yaml"]
    for path in written:
        keys = list(yaml.safe_load(path.read_text())["labels"] or {})
        assert not [k for k in keys if "kubernetes.io/" in k and "feature.node." not in k], path
        if prefix in ("", "k"):
            assert "kubernetes.io/hostname" not in keys
    assert run_cli("validate", cwd=tmp_path).code == 0


@pytest.mark.parametrize(
    "prefix", ["kubernetes.io/", "topology.kubernetes.io/", "kubernetes.io/os"]
)
def test_import_refuses_a_prefix_under_kubernetes_io(
    prefix: str, lab: TestCluster, tmp_path: Path
) -> None:
    result = run_cli("import", "--prefix", prefix, cwd=tmp_path, kubeconfig=lab.kubeconfig)

    assert result.code == 2
    assert result.stderr.startswith(f"error: --prefix {prefix}: labels under kubernetes.io")
    assert not (tmp_path / "desired").exists()


# --- running in the cluster ---------------------------------------------------------------


def _deploy_objects() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for path in sorted((REPO / "deploy").glob("*.yaml")):
        found.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return found


def test_deploy_manifests_validate_and_dry_run_on_the_server(
    lab: TestCluster, tmp_path: Path
) -> None:
    workloads = tmp_path / "desired" / "workloads"
    workloads.mkdir(parents=True)
    for path in (REPO / "deploy").glob("*.yaml"):
        shutil.copy(path, workloads / path.name)
    assert run_cli("validate", cwd=tmp_path).code == 0

    lab.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "reconcile-system"}})
    plan = run_cli("plan", "-o", "json", cwd=tmp_path, kubeconfig=lab.kubeconfig)
    document = json.loads(plan.stdout)
    assert document["findings"] == []  # every object passed the server's dry-run
    kinds = sorted(o["kind"] for o in document["objects"] if o["action"] == "create")
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "CronJob",
        "Role",
        "RoleBinding",
        "ServiceAccount",
    ]


def _granted() -> set[tuple[str, str, str, str]]:
    """(scope, group, resource, verb) the deploy/ roles grant; scope is a namespace or *."""
    granted = set()
    for obj in _deploy_objects():
        if obj["kind"] not in ("ClusterRole", "Role"):
            continue
        scope = obj["metadata"].get("namespace", "*")
        for rule in obj["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        granted.add((scope, group, resource, verb))
    return granted


def _tour(sandbox_cluster: TestCluster, work: Path, driver: TestCluster, driver_work: Path) -> None:
    """Every command and path that talks to the API, as the e2e tests drive them."""
    lab, kc = sandbox_cluster, sandbox_cluster.kubeconfig
    for args in (
        ["plan"],
        ["plan", "--prune"],
        ["apply"],
        ["audit"],
        ["report"],
        ["placement"],
        ["drivers", "tag", "--all"],
        ["drivers", "audit"],
        ["import", "--dry-run"],
    ):
        run_cli(*args, cwd=work, kubeconfig=kc)
    # an object in a namespace that exists but desired/ does not create
    (work / "desired" / "workloads" / "extra.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: extra, namespace: default}\nspec:\n  containers: [{name: c, image: busybox}]\n"
    )
    run_cli("apply", cwd=work, kubeconfig=kc)
    # recreate (immutable change) and prune everything
    pods = work / "desired" / "workloads" / "nfd-lab.yaml"
    pods.write_text(pods.read_text().replace("NVIDIA-A100-SXM4-40GB]", "NVIDIA-A100-SXM4-80GB]"))
    run_cli("apply", "--recreate", cwd=work, kubeconfig=kc)
    for path in (work / "desired" / "workloads").glob("*.yaml"):
        path.unlink()
    pruned = run_cli(
        "apply",
        "--prune",
        "--allow-empty-prune",
        "--prune-namespace-contents",
        cwd=work,
        kubeconfig=kc,
    )
    assert pruned.code == 0, pruned.stderr
    assert "Namespace//nfd-lab - " in pruned.lines
    # and back from nothing: namespaces, deployments, budgets and the inventory are created
    status, _ = lab.raw("DELETE", "/api/v1/namespaces/default/configmaps/reconcile-inventory")
    assert status == 200
    shutil.copytree(
        REPO / "desired" / "workloads", work / "desired" / "workloads", dirs_exist_ok=True
    )
    created = run_cli("apply", cwd=work, kubeconfig=kc)
    assert created.code == 0, created.stderr
    assert "PodDisruptionBudget/gpu-drv/trainer-pdb + " in created.lines
    # an upgrade with a drain
    status, _ = driver.raw(
        "PATCH",
        "/apis/policy/v1/namespaces/gpu-drv/poddisruptionbudgets/trainer-pdb",
        {"spec": {"minAvailable": 3}},
        "application/merge-patch+json",
    )
    assert status == 200
    result = run_cli(
        "upgrade",
        "lab-node-2",
        "--driver",
        "550.90.07",
        cwd=driver_work,
        kubeconfig=driver.kubeconfig,
    )
    assert result.code == 0, result.stderr
    assert lab.sandbox is not None


def test_the_cluster_role_covers_every_call_and_grants_nothing_more(
    make_cluster: ClusterFactory, workdir: Path, tmp_path: Path
) -> None:
    lab = make_cluster(lab_objects("lab"))
    driver = make_cluster(lab_objects("driver-lab"))
    if lab.sandbox is None or driver.sandbox is None:
        pytest.skip("records the sandbox's request log")
    driver_work = tmp_path / "drv"
    shutil.copytree(REPO / "examples" / "driver-lab", driver_work)
    lab.sandbox.clear_requests()
    driver.sandbox.clear_requests()

    _tour(lab, workdir, driver, driver_work)

    used = set()
    for record in [*lab.sandbox.requests, *driver.sandbox.requests]:
        if record.agent != "reconcile" or not record.resource:
            continue
        resource = (
            f"{record.resource}/{record.subresource}" if record.subresource else record.resource
        )
        scope = record.namespace if record.resource == "configmaps" else "*"
        used.add((scope, record.group, resource, record.verb))
        if record.created:
            used.add(
                (scope, record.group, resource, "create")
            )  # an apply that creates needs create
    granted = _granted()
    assert used - granted == set(), "calls the roles do not allow"
    assert granted - used == set(), "the roles grant what reconcile never uses"


def test_in_cluster_credentials_are_picked_when_there_is_no_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Sandbox(lab_objects("lab")) as sandbox:
        token, ca = tmp_path / "token", tmp_path / "ca.crt"
        token.write_text(sandbox.token or "")
        ca.write_bytes(sandbox.certificates.ca_pem)
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(sandbox.port))
        monkeypatch.setenv("HOME", str(tmp_path))
        monkeypatch.delenv("KUBECONFIG", raising=False)
        monkeypatch.setattr("kubernetes.config.incluster_config.SERVICE_TOKEN_FILENAME", str(token))
        monkeypatch.setattr("kubernetes.config.incluster_config.SERVICE_CERT_FILENAME", str(ca))

        cluster = Cluster.connect()

        assert [n.name for n in cluster.list_nodes()] == ["lab-node-0", "lab-node-1", "lab-node-2"]
        cluster.close()


# --- the command line ---------------------------------------------------------------------


def test_version() -> None:
    result = run_cli("--version")
    assert (result.code, result.stdout) == (0, "reconcile, version 0.1.0\n")


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts(shell: str) -> None:
    result = run_cli("completion", shell)
    assert result.code == 0
    assert "_RECONCILE_COMPLETE" in result.stdout


def test_completion_completes_commands_and_options() -> None:
    env = {
        **os.environ,
        "_RECONCILE_COMPLETE": "bash_complete",
        "COMP_WORDS": "reconcile pl",
        "COMP_CWORD": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "reconcile"], env=env, capture_output=True, text=True, check=False
    )
    assert done.stdout.splitlines() == ["plain,placement", "plain,plan"]
    env["COMP_WORDS"], env["COMP_CWORD"] = "reconcile plan --pr", "2"
    done = subprocess.run(
        [sys.executable, "-m", "reconcile"], env=env, capture_output=True, text=True, check=False
    )
    assert "plain,--prune" in done.stdout.splitlines()


def test_quiet_keeps_errors_and_verbose_counts_requests(lab: TestCluster, workdir: Path) -> None:
    nodes = workdir / "desired" / "nodes"
    (nodes / "lab-node-9.yaml").write_text(
        (nodes / "lab-node-2.yaml").read_text().replace("lab-node-2", "lab-node-9")
    )
    normal = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert 'warning: Pod "any-gpu-job"' not in normal.stderr  # gated NotIn: no warning
    assert "lab-node-9: declared in" in normal.stderr

    verbose = run_cli("plan", "-v", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert "note: " in verbose.stderr and "request(s) to https://127.0.0.1:" in verbose.stderr

    workloads = workdir / "desired" / "workloads" / "nfd-lab.yaml"
    workloads.write_text(
        workloads.read_text().replace(
            "          - key: nvidia.com/gpu.present\n            operator: Exists\n", ""
        )
    )
    warned = run_cli("validate", cwd=workdir)
    assert ": warning: " in warned.stderr
    quiet = run_cli("validate", "-q", cwd=workdir)
    assert (quiet.code, quiet.stderr) == (0, "")
    workloads.write_text(workloads.read_text().replace('values: ["3"]', 'values: ["3x"]'))
    still = run_cli("validate", "-q", cwd=workdir)
    assert still.code == 2
    assert "is not an integer" in still.stderr


def _run_on_a_terminal(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    """stderr of a run whose stderr is a terminal."""
    main, child = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "reconcile", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=child,
        stdin=subprocess.DEVNULL,
    )
    os.close(child)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    process.wait(timeout=60)
    os.close(main)
    return b"".join(chunks).decode()


def test_colour_on_a_terminal_unless_no_color(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env["TERM"] = "xterm"
    args = ["plan", "--desired", str(REPO / "desired"), "--kubeconfig", "nope.yaml"]
    coloured = _run_on_a_terminal(args, tmp_path, env)
    assert coloured == "\x1b[31merror:\x1b[0m kubeconfig not found: nope.yaml\r\n"
    plain = _run_on_a_terminal(args, tmp_path, {**env, "NO_COLOR": "1"})
    assert plain == "error: kubeconfig not found: nope.yaml\r\n"
    dumb = _run_on_a_terminal(args, tmp_path, {**env, "TERM": "dumb"})
    assert dumb == plain

    desired = tmp_path / "desired"
    shutil.copytree(REPO / "desired", desired)
    workloads = desired / "workloads" / "nfd-lab.yaml"
    workloads.write_text(
        workloads.read_text().replace(
            "          - key: nvidia.com/gpu.present\n            operator: Exists\n", ""
        )
    )
    warned = _run_on_a_terminal(["validate"], tmp_path, env)
    assert ": \x1b[33mwarning:\x1b[0m " in warned


def test_several_kubeconfig_files_and_context_as_kubectl(
    make_cluster: ClusterFactory, workdir: Path, tmp_path: Path
) -> None:
    first = make_cluster(lab_objects("lab"))
    second = make_cluster(lab_objects("lab"))
    if first.sandbox is None or second.sandbox is None:
        pytest.skip("needs two clusters")
    a = first.sandbox.write_kubeconfig(tmp_path / "a.yaml", name="lab-a")
    b = second.sandbox.write_kubeconfig(tmp_path / "b.yaml", name="lab-b")
    second.label("lab-node-0", **{"nvidia.com/gpu.count": "1"})
    joined = f"{a}{os.pathsep}{b}"

    default = run_cli("plan", cwd=workdir, env={"KUBECONFIG": joined})
    assert default.lines == [
        "lab-node-1 nvidia.com/gpu.count 2"
    ]  # the first file's current context

    chosen = run_cli("plan", "--context", "lab-b", cwd=workdir, env={"KUBECONFIG": joined})
    assert chosen.lines == [
        "lab-node-0 nvidia.com/gpu.count 4",
        "lab-node-1 nvidia.com/gpu.count 2",
    ]

    reversed_order = run_cli("plan", cwd=workdir, env={"KUBECONFIG": f"{b}{os.pathsep}{a}"})
    assert reversed_order.lines == chosen.lines
    skipped = run_cli(
        "plan", cwd=workdir, env={"KUBECONFIG": f"{tmp_path / 'gone.yaml'}{os.pathsep}{b}"}
    )
    assert skipped.lines == chosen.lines  # a missing file in the list is skipped

    flag = run_cli("plan", "--kubeconfig", str(b), cwd=workdir, env={"KUBECONFIG": str(a)})
    assert flag.lines == chosen.lines  # --kubeconfig wins over $KUBECONFIG
    joined_flag = run_cli("plan", "--kubeconfig", joined, cwd=workdir)
    assert (joined_flag.code, joined_flag.stderr) == (2, f"error: kubeconfig not found: {joined}\n")


def test_pre_commit_hook_runs_validate() -> None:
    [hook] = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "reconcile-validate"
    assert hook["entry"] == "reconcile validate"
    assert hook["pass_filenames"] is False
    assert hook["language"] == "python"


# --- the package --------------------------------------------------------------------------


def test_the_wheel_installs_a_working_reconcile(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "build",  # the sdist, then the wheel from the unpacked sdist: both must be whole
            "--no-isolation",
            "--outdir",
            str(dist),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    [wheel] = dist.glob("*.whl")
    [sdist] = dist.glob("*.tar.gz")
    assert (
        wheel.name == "reconcile-0.1.0-py3-none-any.whl" and sdist.name == "reconcile-0.1.0.tar.gz"
    )

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    # The new environment takes its dependencies from this one; reconcile only from the wheel.
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    here = subprocess.run(
        [sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "dependencies.pth").write_text(here + "\n")
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr

    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import reconcile, importlib.metadata as m, importlib.resources as r;"
            "print(reconcile.__file__);"
            "print(m.version('reconcile'));"
            "print(sorted(p.name for p in r.files('reconcile').joinpath('schemas').iterdir()));"
            "print(sorted(str(d).split(';')[0] for d in m.requires('reconcile') if 'extra' not in str(d)))",
        ],
        cwd=tmp_path,  # not the checkout: the import must come from the wheel
        capture_output=True,
        text=True,
        check=True,
    )
    location, version, schemas, requirements = probe.stdout.splitlines()
    assert location.startswith(str(venv))
    assert version == "0.1.0"
    assert (
        schemas
        == "['driversupportmatrix.schema.json', 'nodefeatures.schema.json', 'plan.schema.json']"
    )
    assert all(
        name in requirements for name in ("kubernetes", "pydantic", "ruamel.yaml", "deepdiff")
    )
    validate = subprocess.run(
        [str(venv / "bin" / "reconcile"), "validate", "--desired", str(REPO / "desired")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (validate.returncode, validate.stderr) == (0, "")


def test_import_refuses_a_bad_selector_and_an_invalid_desired_tree(
    lab: TestCluster, workdir: Path
) -> None:
    before = {p: p.read_bytes() for p in (workdir / "desired").rglob("*") if p.is_file()}
    bad = run_cli("import", "-l", "a b", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert bad.code == 2
    assert bad.stderr.startswith("error: unable to parse requirement: found 'b'")

    node_1 = workdir / "desired" / "nodes" / "lab-node-1.yaml"
    node_1.write_text(node_1.read_text() + '  nvidia.com/gpu.count: "3"\n')  # a duplicate key
    before[node_1] = node_1.read_bytes()
    if lab.sandbox is not None:
        lab.sandbox.clear_requests()
    broken = run_cli("import", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert broken.code == 2
    assert "desired/nodes/lab-node-1.yaml:" in broken.stderr
    if lab.sandbox is not None:
        assert lab.sandbox.requests == []
    assert {p: p.read_bytes() for p in (workdir / "desired").rglob("*") if p.is_file()} == before
