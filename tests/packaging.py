"""What the release builds, read from the files that build it: the Dockerfile's stages and
the image tag deploy/ runs. No container runtime: the Dockerfile is parsed, not run."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.support import REPO

DOCKERFILE = REPO / "deploy" / "Dockerfile"
IMAGE = "ghcr.io/example/reconcile"


@dataclass
class Stage:
    """One FROM ... stage: its base, its name, and its instructions in order."""

    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]

    def one(self, keyword: str) -> str:
        [args] = self.all(keyword)
        return args


def dockerfile_stages(path: Path = DOCKERFILE) -> list[Stage]:
    """The stages of a Dockerfile: comments dropped, continuation lines joined."""
    logical: list[str] = []
    pending = ""
    for line in path.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        logical.append(pending + line.strip())
        pending = ""
    stages: list[Stage] = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            base, _, name = args.partition(" AS ")
            stages.append(Stage(base.strip(), name.strip()))
        else:
            stages[-1].instructions.append((keyword, args.strip()))
    return stages


def exec_form(args: str) -> list[str]:
    """An instruction's JSON (exec) form, e.g. ENTRYPOINT ["reconcile"]."""
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def build_context(stage: Stage, dest: Path) -> Path:
    """`dest` as the stage sees its WORKDIR after its COPY instructions from the build
    context (the repository: `docker build -f deploy/Dockerfile .`): only what they copy, so
    no .git. Links are copied as links, as COPY does."""
    for args in stage.all("COPY"):
        assert not args.startswith("--"), f"COPY {args}: from another stage, not the context"
        *sources, target = args.split()
        for source in sources:
            src = REPO / source
            to = dest / target / (src.name if target.endswith("/") else "")
            if src.is_dir():
                shutil.copytree(
                    src, to, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
                )
            else:
                to.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(src, to)
    return dest


def released_tag() -> str:
    """The tag of the image deploy/ runs: what the kustomize base pins for IMAGE."""
    kustomization = yaml.safe_load((REPO / "deploy" / "kustomization.yaml").read_text())
    [pinned] = [i for i in kustomization["images"] if i["name"] == IMAGE]
    tag = str(pinned["newTag"])
    assert re.fullmatch(r"v\d+\.\d+\.\d+", tag), tag
    return tag
