"""deploy/ as kustomize renders it: the base's RBAC is what `reconcile rbac` prints, each
overlay changes what it says it changes, and everything runs the released image.

The overlays (and the Argo CD and Flux examples) point at the base by its release URL, as
they would from another repository; here that URL is replaced by a copy of this checkout's
base (kustomize refuses a base that contains its overlays)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.packaging import IMAGE, released_tag
from tests.support import REPO, run_cli

DEPLOY = REPO / "deploy"
BASE_URL = "https://github.com/example/reconcile//deploy?ref="
WORKLOADS = {"CronJob", "Deployment"}


def _kubectl() -> str:
    found = shutil.which("kubectl") or str(Path(sys.executable).parent / "kubectl")
    if not Path(found).exists():
        pytest.skip(
            "kubectl is not installed: the kustomize base is rendered by `kubectl kustomize`"
        )
    return found


def _render(tmp_path: Path, overlay: str | None = None) -> list[dict[str, Any]]:
    """`kubectl kustomize` of the base (overlay None) or of deploy/overlays/OVERLAY, whose
    base URL is replaced by a copy of deploy/ beside it."""
    if overlay is None:
        target = DEPLOY
    else:
        shutil.copytree(
            DEPLOY, tmp_path / "base", ignore=shutil.ignore_patterns("overlays", "examples")
        )
        shutil.copytree(DEPLOY / "overlays" / overlay, tmp_path / overlay)
        url = BASE_URL + released_tag()
        for kustomization in (tmp_path / overlay).rglob("kustomization.yaml"):
            text = kustomization.read_text()
            relative = os.path.relpath(tmp_path / "base", kustomization.parent)
            kustomization.write_text(text.replace(url, relative))
        target = tmp_path / overlay
    rendered = subprocess.run(
        [_kubectl(), "kustomize", str(target)], capture_output=True, text=True, check=False
    )
    assert rendered.returncode == 0, rendered.stderr
    return [d for d in yaml.safe_load_all(rendered.stdout) if d]


def _key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return "/".join(p for p in (obj["kind"], meta.get("namespace"), meta["name"]) if p)


def _rbac(*args: str) -> dict[str, dict[str, Any]]:
    printed = run_cli("rbac", "-o", "json", *args, cwd=REPO)
    assert printed.code == 0, printed.stderr
    return {_key(o): o for o in json.loads(printed.stdout)["items"]}


def _containers(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    spec = obj["spec"]
    pod = spec["jobTemplate"]["spec"]["template"]["spec"] if obj["kind"] == "CronJob" else None
    pod = pod or spec["template"]["spec"]
    return {c["name"]: c for c in pod.get("initContainers", []) + pod["containers"]}


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


def test_the_base_is_the_namespace_the_rbac_reconcile_prints_the_cronjob_and_the_watch(
    tmp_path: Path,
) -> None:
    rendered = {_key(o): o for o in _render(tmp_path)}
    workloads = {k for k, o in rendered.items() if o["kind"] in WORKLOADS}
    assert workloads == {
        "CronJob/reconcile-system/reconcile-apply",
        "Deployment/reconcile-system/reconcile-watch",
    }
    rest = {k: o for k, o in rendered.items() if k not in workloads}
    assert rest.pop("Namespace/reconcile-system")
    assert rest == _rbac(), "the base's RBAC is not what `reconcile rbac` prints for desired/"


def test_the_namespace_overlay_moves_everything_and_brings_the_rbac_printed_for_it(
    tmp_path: Path,
) -> None:
    rendered = {_key(o): o for o in _render(tmp_path, "namespace")}
    assert not [k for k in rendered if "reconcile-system" in k]
    watch = rendered.pop("Deployment/gpu-gitops/reconcile-watch")
    args = _containers(watch)["reconcile"]["args"]
    assert args[args.index("--lease") + 1] == "gpu-gitops/reconcile"
    assert rendered.pop("CronJob/gpu-gitops/reconcile-apply")
    assert rendered.pop("Namespace/gpu-gitops")
    assert rendered == _rbac("--service-account", "gpu-gitops/reconcile"), (
        "deploy/overlays/namespace/rbac.yaml is stale: regenerate it with `reconcile rbac "
        "--service-account gpu-gitops/reconcile > deploy/overlays/namespace/rbac.yaml`"
    )


def test_the_image_tag_overlay_sets_the_image_of_both_workloads(tmp_path: Path) -> None:
    images = {
        _key(o): _containers(o)["reconcile"]["image"]
        for o in _render(tmp_path, "image-tag")
        if o["kind"] in WORKLOADS
    }
    assert set(images.values()) == {f"ghcr.io/acme/reconcile:{released_tag()}"}
    assert len(images) == 2


def test_the_git_repository_overlay_sets_the_repository_branch_and_tree_of_both(
    tmp_path: Path,
) -> None:
    workloads = [o for o in _render(tmp_path, "git-repository") if o["kind"] in WORKLOADS]
    assert len(workloads) == 2
    for obj in workloads:
        containers = _containers(obj)
        env = _env(containers["git-sync"])
        assert env["GITSYNC_REPO"] == "https://github.com/acme/gpu-cluster-state.git"
        assert env["GITSYNC_REF"] == "production"
        assert env["GITSYNC_LINK"] == "repo"  # the rest of git-sync's settings stay
        args = containers["reconcile"]["args"]
        assert args[args.index("--desired") + 1] == "/git/repo/clusters/prod/desired"


def test_everything_runs_the_released_image_and_the_overlays_its_base() -> None:
    tag = released_tag()
    for path in sorted(DEPLOY.glob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            if obj and obj["kind"] in WORKLOADS:
                assert _containers(obj)["reconcile"]["image"] == f"{IMAGE}:{tag}", path
    bases = [
        line.strip().removeprefix("- ")
        for path in (DEPLOY / "overlays").rglob("kustomization.yaml")
        for line in path.read_text().splitlines()
        if "github.com/example/reconcile" in line
    ]
    assert bases and set(bases) == {BASE_URL + tag}


def _examples() -> dict[str, dict[str, Any]]:
    return {
        o["kind"]: o
        for path in sorted((DEPLOY / "examples").glob("*.yaml"))
        for o in yaml.safe_load_all(path.read_text())
        if o
    }


def test_the_argo_cd_and_flux_examples_point_at_the_base_of_the_release() -> None:
    examples = _examples()
    tag = released_tag()
    source = examples["Application"]["spec"]["source"]
    assert examples["Application"]["apiVersion"] == "argoproj.io/v1alpha1"
    assert (source["repoURL"], source["path"], source["targetRevision"]) == (
        "https://github.com/example/reconcile.git",
        "deploy",
        tag,
    )
    repository = examples["GitRepository"]
    assert repository["apiVersion"] == "source.toolkit.fluxcd.io/v1"
    assert (repository["spec"]["url"], repository["spec"]["ref"]) == (
        "https://github.com/example/reconcile",
        {"tag": tag},
    )
    flux = examples["Kustomization"]
    assert flux["apiVersion"] == "kustomize.toolkit.fluxcd.io/v1"
    assert flux["spec"]["path"] == "./deploy"
    assert flux["spec"]["sourceRef"] == {
        "kind": "GitRepository",
        "name": repository["metadata"]["name"],
    }
