"""Kustomize directories under desired/workloads: which ones there are, what each reads,
and rendering them with the `kustomize` binary (or `kubectl kustomize`) found on PATH.

The only module that runs a process. A kustomization is read here first, without
running anything: every file and directory it names must be a local path inside
desired/ (no `../../` out of the tree, no remote URL, no Helm chart, no plugin), or it is
refused before rendering. Rendering then runs with `--load-restrictor
LoadRestrictionsRootOnly`, never with Helm or exec plugins enabled, in a bounded time, with
an environment whose proxies lead nowhere, so nothing outside desired/ can reach output.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from reconcile import files as safefiles
from reconcile.desired.yamlpos import parse_yaml

# The names kustomize looks for in a directory, in its order.
KUSTOMIZATION_FILES: Final = ("kustomization.yaml", "kustomization.yml", "Kustomization")
RENDER_TIMEOUT_SECONDS: Final = 60
LOAD_RESTRICTOR: Final = ("--load-restrictor", "LoadRestrictionsRootOnly")
# Fields that hold paths: lists of paths, and lists of mappings with a `path`.
_PATH_LISTS: Final = ("resources", "bases", "components", "crds", "configurations")
_PATCH_LISTS: Final = ("patches", "patchesJson6902", "replacements")
# Fields whose entries are files or inline documents (an entry with a line break is inline).
_FILE_OR_INLINE: Final = ("patchesStrategicMerge", "generators", "transformers", "validators")
_GENERATORS: Final = ("configMapGenerator", "secretGenerator")
_HELM: Final = ("helmCharts", "helmGlobals", "helmChartInflationGenerator")
_REMOTE_PREFIXES: Final = ("git@", "git::", "github.com/", "gitlab.com/", "bitbucket.org/")
# What kustomize is given instead of the caller's environment: no credentials, no
# kubeconfig, and proxies that refuse every connection (a remote base never fetches).
_NOWHERE: Final = "http://127.0.0.1:9"


class RenderError(Exception):
    """Rendering failed: the message says why, in the renderer's words."""


@dataclass
class Kustomization:
    """A directory holding a kustomization file, as read without running anything."""

    directory: Path
    file: Path
    component: bool = False
    # Local directories and files it names (absolute, normalised).
    directories: list[Path] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    # Why it may not be rendered: (message, detail); empty when it may.
    refusals: list[tuple[str, str]] = field(default_factory=list)


def kustomization_file(names: Iterable[str]) -> str | None:
    """Of a directory's file names, the kustomization kustomize would read, or None."""
    present = set(names)
    return next((n for n in KUSTOMIZATION_FILES if n in present), None)


def is_remote(reference: str) -> bool:
    """Whether kustomize would fetch `reference` over the network rather than read it."""
    return (
        "://" in reference
        or reference.startswith(_REMOTE_PREFIXES)
        or "?ref=" in reference
        or "?version=" in reference
    )


def absolute(path: str | Path) -> Path:
    """`path` made absolute and normalised as written (links not followed)."""
    return Path(os.path.normpath(Path(path).absolute()))


def inside(root: Path, path: Path) -> bool:
    """Whether `path` lies under `root`, both as written and with links resolved."""
    return absolute(path).is_relative_to(absolute(root)) and path.resolve().is_relative_to(
        root.resolve()
    )


def read(root: Path, directory: Path, file: str) -> Kustomization:
    """The kustomization in `directory` (absolute; its file named `file`): what it names
    and why it may not be rendered. `root` is desired/: nothing it names may lie outside."""
    found = Kustomization(directory, directory / file)
    try:
        text = safefiles.read_regular(found.file).decode("utf-8")
    except (safefiles.UnsafeFile, UnicodeDecodeError, OSError) as e:
        found.refusals.append((f"cannot read {file}", str(e)))
        return found
    documents, problems = parse_yaml(text, str(found.file))
    if problems or len(documents) != 1 or not isinstance(documents[0].data, dict):
        found.refusals.append((f"{file} is not one YAML mapping", "kustomize reads one document"))
        return found
    data: dict[str, Any] = documents[0].data
    found.component = data.get("kind") == "Component"
    for key in _HELM:
        if key in data:
            found.refusals.append(
                (
                    f"{key}: Helm charts are not rendered",
                    "rendering a chart fetches it from the network; render it once and "
                    "commit the manifests, or use a kustomization of local files",
                )
            )
    for key, reference in _references(data):
        _check(root, found, key, reference)
    return found


def _references(data: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(field, path) of every local path a kustomization's fields name."""
    for key in _PATH_LISTS:
        for entry in _list(data.get(key)):
            if isinstance(entry, str):
                yield key, entry
    for key in _PATCH_LISTS:
        for entry in _list(data.get(key)):
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                yield key, entry["path"]
    for key in _FILE_OR_INLINE:
        for entry in _list(data.get(key)):
            if isinstance(entry, str) and "\n" not in entry:
                yield key, entry
    openapi = data.get("openapi")
    if isinstance(openapi, dict) and isinstance(openapi.get("path"), str):
        yield "openapi", openapi["path"]
    for key in _GENERATORS:
        for generator in _list(data.get(key)):
            if not isinstance(generator, dict):
                continue
            for entry in _list(generator.get("files")):
                if isinstance(entry, str):
                    yield key, entry.partition("=")[2] or entry
            envs = [*_list(generator.get("envs")), generator.get("env")]
            for entry in envs:
                if isinstance(entry, str):
                    yield key, entry


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _check(root: Path, found: Kustomization, key: str, reference: str) -> None:
    if is_remote(reference):
        found.refusals.append(
            (
                f"{key}: {reference} is remote",
                "kustomizations are rendered without network: vendor it into desired/ "
                "and name it by a relative path",
            )
        )
        return
    path = absolute(found.directory / reference)
    if not inside(root, path):
        found.refusals.append(
            (
                f"{key}: {reference} is outside desired/",
                "a kustomization may name only files and directories inside desired/",
            )
        )
        return
    if not path.is_symlink() and path.is_dir():
        found.directories.append(path)
    elif not path.is_symlink() and path.is_file():
        found.files.append(path)
    else:
        found.refusals.append(
            (
                f"{key}: {reference} is not a file or directory inside desired/",
                "kustomize would look for it elsewhere (a remote base); name a local path",
            )
        )


def renderer() -> list[str] | None:
    """The command that renders a kustomization directory, given as its last argument:
    `kustomize build` when on PATH, else `kubectl kustomize`, else None."""
    kustomize = shutil.which("kustomize")
    if kustomize is not None:
        return [kustomize, "build", *LOAD_RESTRICTOR]
    kubectl = shutil.which("kubectl")
    if kubectl is not None:
        return [kubectl, "kustomize", *LOAD_RESTRICTOR]
    return None


def render(command: list[str], directory: Path) -> str:
    """The YAML `command` renders from `directory`; RenderError when it fails or takes
    longer than RENDER_TIMEOUT_SECONDS."""
    with tempfile.TemporaryDirectory(prefix="reconcile-kustomize-") as home:
        environment = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": home,
            "KUBECONFIG": os.devnull,
            "HTTP_PROXY": _NOWHERE,
            "HTTPS_PROXY": _NOWHERE,
            "http_proxy": _NOWHERE,
            "https_proxy": _NOWHERE,
            "NO_PROXY": "",
            "no_proxy": "",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ALLOW_PROTOCOL": "file",
        }
        try:
            completed = subprocess.run(
                [*command, str(absolute(directory))],
                cwd=home,
                env=environment,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=RENDER_TIMEOUT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise RenderError(
                f"{Path(command[0]).name} did not finish within {RENDER_TIMEOUT_SECONDS}s"
            ) from None
        except OSError as e:
            raise RenderError(f"cannot run {command[0]}: {e.strerror or e}") from None
    if completed.returncode != 0:
        message = completed.stderr.decode("utf-8", "replace").strip()
        last = message.splitlines()[-1] if message else f"exit status {completed.returncode}"
        raise RenderError(last.removeprefix("Error: ").removeprefix("error: "))
    try:
        return completed.stdout.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RenderError(f"the rendered output is not UTF-8: {e}") from None
