"""Releases: the version from git (or 0.0.0 without it), the notes from CHANGELOG.md, and a
release workflow that publishes what it built for the tag."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tests.support import REPO

WORKFLOW = REPO / ".github" / "workflows" / "release.yml"


def _notes() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "release_notes", REPO / ".ci" / "release_notes.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHANGELOG = """# Changelog

## [Unreleased]

### Added

- next

## [1.2.0] - 2026-12-31

### Fixed

- a thing

## [1.1.0]

- undated

[1.2.0]: https://github.com/example/reconcile/releases/tag/v1.2.0
"""


def test_the_notes_are_the_versions_section() -> None:
    notes = _notes()
    assert notes.section(CHANGELOG, "1.2.0") == "### Fixed\n\n- a thing\n"
    assert notes.section(CHANGELOG, "Unreleased") == "### Added\n\n- next\n"
    with pytest.raises(ValueError, match=r"no section `## \[1.3.0\]"):
        notes.section(CHANGELOG, "1.3.0")
    with pytest.raises(ValueError, match="has no date"):
        notes.section(CHANGELOG, "1.1.0")
    with pytest.raises(ValueError, match="is empty"):
        notes.section("## [2.0.0] - 2027-01-01\n\n## [1.0.0] - 2026-01-01\n- x\n", "2.0.0")


def test_the_changelog_keeps_its_format_and_releases_only_what_has_notes() -> None:
    notes = _notes()
    text = (REPO / "CHANGELOG.md").read_text()
    headings = [notes.HEADING.match(line) for line in text.splitlines() if line.startswith("## ")]
    assert headings and all(headings), "every `## ` heading is `## [VERSION] - DATE`"
    assert headings[0] is not None and headings[0]["version"] == "Unreleased"
    for heading in headings:
        assert heading is not None
        assert notes.section(text, heading["version"])
    untagged = subprocess.run(
        [sys.executable, str(REPO / ".ci" / "release_notes.py"), "v99.0.0"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert untagged.returncode == 1
    assert untagged.stderr == "error: CHANGELOG.md has no section `## [99.0.0] - YYYY-MM-DD`\n"


def test_the_release_workflow_publishes_what_it_built_for_the_tag() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    assert workflow[True]["push"]["tags"] == ["v*"]  # YAML 1.1 reads `on` as true
    jobs = workflow["jobs"]
    notes = " ".join(s.get("run", "") for s in jobs["notes"]["steps"])
    assert ".ci/release_notes.py" in notes
    uses = {j: [s.get("uses", "").split("@")[0] for s in jobs[j]["steps"]] for j in jobs}
    assert "pypa/gh-action-pypi-publish" in uses["pypi"]
    assert "actions/attest-build-provenance" in uses["pypi"]
    assert jobs["pypi"]["permissions"]["id-token"] == "write"
    assert {
        "docker/setup-qemu-action",
        "docker/setup-buildx-action",
        "docker/build-push-action",
        "actions/attest-build-provenance",
    } <= set(uses["image"])
    [push] = [s for s in jobs["image"]["steps"] if "build-push-action" in s.get("uses", "")]
    assert push["with"]["platforms"] == "linux/amd64,linux/arm64"
    assert push["with"]["tags"].endswith(":${{ github.ref_name }}")  # the git tag itself
    assert jobs["image"]["permissions"]["packages"] == "write"
    # nothing is published before the notes exist; the release only after both
    assert jobs["dist"]["needs"] == "notes" and jobs["image"]["needs"] == "notes"
    assert set(jobs["release"]["needs"]) == {"pypi", "image"}


def test_the_release_checks_constraints_txt_against_the_wheel_and_attaches_it() -> None:
    """constraints.txt (tests/unit/test_constraints.py) is checked to pin exactly what the
    built wheel installs before anything is published, and ships with the release."""
    jobs = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    steps = jobs["dist"]["steps"]
    [check] = [i for i, s in enumerate(steps) if "tools/constraints.py" in s.get("run", "")]
    assert steps[check]["run"].split() == [
        "python",
        "tools/constraints.py",
        "--check",
        '"dist/reconcile_gpu-$VERSION-py3-none-any.whl"',
    ]
    # before the distributions are handed on: a failed check publishes nothing
    [handed_on] = [i for i, s in enumerate(steps) if s.get("with", {}).get("name") == "dist"]
    assert check < handed_on
    uploads = [s["with"] for s in steps if "upload-artifact" in s.get("uses", "")]
    assert {"name": "constraints", "path": "constraints.txt"} in uploads
    release = jobs["release"]["steps"]
    downloaded = [s["with"]["name"] for s in release if "download-artifact" in s.get("uses", "")]
    assert "constraints" in downloaded
    [create] = [s["run"] for s in release if "gh release create" in s.get("run", "")]
    assert create.split()[-2:] == ["dist/*", "constraints.txt"]
    assert "include constraints.txt" in (REPO / "MANIFEST.in").read_text().splitlines()


def _scm_version(root: Path) -> str:
    said = subprocess.run(
        [sys.executable, "-m", "setuptools_scm", "--root", str(root)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert said.returncode == 0, said.stderr
    return said.stdout.strip()


def _git(*args: str | Path, cwd: Path) -> bytes:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        check=True,
    ).stdout


@pytest.fixture(scope="module")
def tagged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository with this one's version configuration, tagged v1.2.3."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path_factory.mktemp("tagged")
    for name in ("pyproject.toml", ".git_archival.txt", ".gitattributes"):
        shutil.copy(REPO / name, repo)
    _git("init", "-q", cwd=repo)
    _git("add", ".", cwd=repo)
    _git("commit", "-qm", "one", cwd=repo)
    _git("tag", "v1.2.3", cwd=repo)
    return repo


def test_a_tree_without_git_metadata_installs_as_0_0_0(tmp_path: Path) -> None:
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    assert _scm_version(tmp_path) == "0.0.0"


def test_a_git_archive_of_a_tag_is_its_version(tagged: Path, tmp_path: Path) -> None:
    subprocess.run(
        ["tar", "-x", "-C", str(tmp_path)], input=_git("archive", "v1.2.3", cwd=tagged), check=True
    )
    assert not (tmp_path / ".git").exists()
    assert _scm_version(tmp_path) == "1.2.3"


def test_a_shallow_clone_is_the_tags_version(tagged: Path, tmp_path: Path) -> None:
    _git("clone", "-q", "--depth", "1", f"file://{tagged}", tmp_path / "clone", cwd=tmp_path)
    assert _scm_version(tmp_path / "clone") == "1.2.3"
