"""Kustomize directories under desired/workloads: which are rendered, what is refused
before anything runs, and where their problems are reported."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from reconcile.desired import fleet, kustomize
from reconcile.desired.reader import load_desired

DATA = Path(__file__).parent.parent / "data" / "kustomize"
KUSTOMIZATION = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
NAMESPACE = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n"

needs_renderer = pytest.mark.skipif(
    kustomize.renderer() is None, reason="neither kustomize nor kubectl on PATH"
)


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "desired"
    shutil.copytree(DATA, root)
    return root


def _write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _never_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object) -> str:
        raise AssertionError("nothing may be rendered")

    monkeypatch.setattr(kustomize, "render", refuse)


@needs_renderer
def test_the_overlay_is_rendered_not_its_base_or_component(tmp_path: Path) -> None:
    state, problems = load_desired(_tree(tmp_path))
    assert problems == []
    shown = [(m.kind, m.namespace, m.name) for m in state.manifests]
    assert shown == [
        ("Namespace", "", "kust-demo"),
        ("ConfigMap", "kust-demo", "gpu-settings"),
        ("Deployment", "kust-demo", "web"),
    ]
    web = state.manifests[2]
    assert web.body["spec"]["replicas"] == 2  # the overlay's patch
    assert web.body["spec"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.present": "true"  # the component's
    }
    assert str(web.source).endswith("workloads/demo/overlays/lab/kustomization.yaml:1:1")


@needs_renderer
def test_the_digest_follows_what_kustomize_reads(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    before, _ = load_desired(root)
    patch = root / "workloads/demo/overlays/lab/replicas.yaml"
    patch.write_text(patch.read_text().replace("replicas: 2", "replicas: 3"))
    after, _ = load_desired(root)
    assert before.digest != after.digest


def test_no_kustomization_looks_up_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def which(*_: object) -> str:
        raise AssertionError("no PATH lookup without a kustomization")

    monkeypatch.setattr(shutil, "which", which)
    root = tmp_path / "desired"
    _write(root, "workloads/ns.yaml", NAMESPACE)
    state, problems = load_desired(root)
    assert problems == [] and len(state.manifests) == 1


def test_without_kustomize_or_kubectl_one_error_names_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    root = _tree(tmp_path)
    _write(root, "workloads/other/kustomization.yaml", KUSTOMIZATION + "resources: [ns.yaml]\n")
    _write(root, "workloads/other/ns.yaml", NAMESPACE)
    state, problems = load_desired(root)
    assert state.manifests == ()
    assert [p.summary for p in problems] == [
        f"cannot render {root}/workloads/demo/overlays/lab (and 1 other kustomization): "
        "neither kustomize nor kubectl is on PATH"
    ]
    assert "install kustomize (or kubectl" in problems[0].detail


@pytest.mark.parametrize(
    ("body", "summary"),
    [
        ("resources: [../../../outside]\n", "resources: ../../../outside is outside desired/"),
        ("resources: [/etc]\n", "resources: /etc is outside desired/"),
        (
            "resources: [https://github.com/example/repo//deploy?ref=v1]\n",
            "resources: https://github.com/example/repo//deploy?ref=v1 is remote",
        ),
        (
            "resources: [github.com/example/repo/deploy]\n",
            "resources: github.com/example/repo/deploy is remote",
        ),
        (
            "configMapGenerator:\n- name: x\n  files: [key=../../../secret.txt]\n",
            "configMapGenerator: ../../../secret.txt is outside desired/",
        ),
        (
            "patches:\n- path: ../../../patch.yaml\n",
            "patches: ../../../patch.yaml is outside desired/",
        ),
        (
            "helmCharts:\n- name: gpu-operator\n  repo: https://helm.ngc.nvidia.com/nvidia\n",
            "helmCharts: Helm charts are not rendered",
        ),
        ("resources: [missing]\n", "resources: missing is not a file or directory inside desired/"),
    ],
)
def test_a_kustomization_reaching_outside_is_refused_before_rendering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, summary: str
) -> None:
    _never_run(monkeypatch)
    (tmp_path / "outside").mkdir()
    (tmp_path / "secret.txt").write_text("token\n")
    (tmp_path / "patch.yaml").write_text(NAMESPACE)
    root = tmp_path / "desired"
    _write(root, "workloads/app/kustomization.yaml", KUSTOMIZATION + body)
    state, problems = load_desired(root)
    assert state.manifests == ()
    assert [(p.summary, str(p.source)) for p in problems] == [
        (summary, f"{root}/workloads/app/kustomization.yaml:1:1")
    ]


def test_a_base_reaching_outside_stops_its_overlay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _never_run(monkeypatch)
    root = tmp_path / "desired"
    _write(
        root,
        "workloads/app/base/kustomization.yaml",
        KUSTOMIZATION + "resources: [../../../../x]\n",
    )
    _write(
        root, "workloads/app/overlay/kustomization.yaml", KUSTOMIZATION + "resources: [../base]\n"
    )
    _, problems = load_desired(root)
    assert [str(p.source) for p in problems] == [
        f"{root}/workloads/app/base/kustomization.yaml:1:1"
    ]


def test_a_link_inside_a_kustomization_is_refused_and_nothing_is_rendered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _never_run(monkeypatch)
    (tmp_path / "kubeconfig").write_text("secret\n")
    root = tmp_path / "desired"
    _write(root, "workloads/app/kustomization.yaml", KUSTOMIZATION + "resources: [ns.yaml]\n")
    (root / "workloads/app/ns.yaml").symlink_to(tmp_path / "kubeconfig")
    _, problems = load_desired(root)
    assert [p.summary for p in problems] == [
        "resources: ns.yaml is outside desired/",
        "not a regular file: a symbolic link",
    ]


@needs_renderer
def test_a_rendered_objects_problem_names_the_kustomization_and_the_object(
    tmp_path: Path,
) -> None:
    root = tmp_path / "desired"
    _write(root, "workloads/app/kustomization.yaml", KUSTOMIZATION + "resources: [cm.yaml]\n")
    _write(root, "workloads/app/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n")
    _, problems = load_desired(root)
    assert [(str(p.source), p.summary) for p in problems] == [
        (
            f"{root}/workloads/app/kustomization.yaml:1:1",
            "rendered ConfigMap/x: metadata.namespace is required: ConfigMap is namespaced",
        )
    ]


@needs_renderer
def test_kustomizes_own_error_is_reported_at_the_kustomization(tmp_path: Path) -> None:
    root = tmp_path / "desired"
    _write(root, "workloads/app/kustomization.yaml", KUSTOMIZATION + "resources: [cm.yaml]\n")
    _write(root, "workloads/app/cm.yaml", "not: [a, kubernetes, object\n")
    _, problems = load_desired(root)
    assert [p.summary for p in problems] == [f"kustomize could not render {root}/workloads/app"]
    assert str(tmp_path) not in problems[0].detail.replace(str(root), "")


@needs_renderer
def test_a_fleet_overlay_builds_on_the_rendered_base(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    _write(
        root,
        "clusters.yaml",
        "apiVersion: reconcile.dev/v1alpha1\nkind: Fleet\nmetadata:\n  name: f\n"
        "clusters:\n- name: a\n  context: a\n- name: b\n  context: b\n",
    )
    _write(
        root,
        "clusters/a/workloads/demo/kustomization.yaml",
        KUSTOMIZATION
        + "resources: [../../../../workloads/demo/overlays/lab]\n"
        + "patches:\n- path: replicas.yaml\n",
    )
    patch = (DATA / "workloads/demo/overlays/lab/replicas.yaml").read_text()
    _write(root, "clusters/a/workloads/demo/replicas.yaml", patch.replace("2", "4"))
    desired, _, problems = fleet.load(root)
    assert problems == []
    assert desired is not None
    replicas = {
        name: [m.body["spec"]["replicas"] for m in tree.manifests if m.kind == "Deployment"]
        for name, tree in desired.trees.items()
    }
    assert replicas == {"a": [4], "b": [2]}


@needs_renderer
def test_a_fleet_overlay_document_replaces_or_excludes_a_rendered_object(
    tmp_path: Path,
) -> None:
    root = _tree(tmp_path)
    _write(
        root,
        "clusters.yaml",
        "apiVersion: reconcile.dev/v1alpha1\nkind: Fleet\nmetadata:\n  name: f\n"
        "clusters:\n- name: a\n  context: a\n- name: b\n  context: b\n",
    )
    deployment = (DATA / "workloads/demo/base/deployment.yaml").read_text()
    _write(root, "clusters/a/workloads/web.yaml", deployment.replace("replicas: 1", "replicas: 5"))
    _write(
        root,
        "clusters/b/workloads/no-settings.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: gpu-settings\n"
        "  namespace: kust-demo\n$patch: delete\n",
    )
    desired, _, problems = fleet.load(root)
    assert problems == []
    assert desired is not None
    a, b = desired.trees["a"], desired.trees["b"]
    assert [m.body["spec"]["replicas"] for m in a.manifests if m.kind == "Deployment"] == [5]
    assert [m.kind for m in b.manifests] == ["Namespace", "Deployment"]
