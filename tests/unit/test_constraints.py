"""constraints.txt, the resolved runtime environment each release ships and the GitHub
Action installs with (`pip install -c`): every runtime dependency of pyproject.toml pinned,
each pin inside pyproject's range, and everything they pull in pinned too."""

from __future__ import annotations

import tomllib
from importlib import metadata

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.version import Version

from tests.support import REPO
from tools.constraints import CONSTRAINTS, PROJECT, canonical, pins


def _dependencies() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [Requirement(line) for line in project["dependencies"]]


def test_every_runtime_dependency_is_pinned_inside_pyprojects_range() -> None:
    pinned = pins(CONSTRAINTS.read_text())
    assert _dependencies()
    for requirement in _dependencies():
        name = canonical(requirement.name)
        assert name in pinned, f"{requirement.name} is not pinned in constraints.txt"
        version = Version(pinned[name])
        assert requirement.specifier.contains(version, prereleases=True), (
            f"constraints.txt pins {requirement.name}=={version}, outside {requirement}"
        )


def test_the_pins_are_exact_and_leave_the_project_out() -> None:
    lines = [
        line.strip()
        for line in CONSTRAINTS.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert all("==" in line and ";" not in line and "@" not in line for line in lines)
    assert canonical(PROJECT) not in pins(CONSTRAINTS.read_text())
    assert len(lines) == len(pins(CONSTRAINTS.read_text())), "a package is pinned twice"


def test_what_the_dependencies_pull_in_is_pinned_too() -> None:
    """The closure, walked through the installed distributions' own metadata (this
    environment has them all: the test extra installs the project): a transitive
    dependency missing from the file would install unpinned."""
    pinned = pins(CONSTRAINTS.read_text())
    environment = {key: str(value) for key, value in default_environment().items()}
    environment["extra"] = ""
    seen: set[str] = set()
    todo = [(r, "pyproject.toml") for r in _dependencies()]
    while todo:
        requirement, wanted_by = todo.pop()
        name = canonical(requirement.name)
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        assert name in pinned, f"{requirement.name} (wanted by {wanted_by}) is not pinned"
        if name in seen:
            continue
        seen.add(name)
        try:
            distribution = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            pytest.fail(f"{requirement.name} is not installed: install the test extra")
        for extra in sorted(requirement.extras):
            environment_with: dict[str, str] = {**environment, "extra": extra}
            for line in distribution.requires or ():
                sub = Requirement(line)
                if sub.marker is not None and sub.marker.evaluate(environment_with):
                    todo.append((sub, requirement.name))
        todo.extend((Requirement(line), requirement.name) for line in distribution.requires or ())
    assert len(seen) > len(_dependencies())
