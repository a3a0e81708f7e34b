"""`reconcile sandbox`: load a seed, serve, write a kubeconfig, run until told to stop
(or for as long as a given command runs)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from importlib import resources as package_files
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import yaml

from reconcile.diagnostics import ReconcileError
from reconcile.sandbox import Sandbox, SeedError

BUILTIN_SEEDS = ("lab", "driver-lab")
# What a built-in seed serves besides its own file: vendored upstream manifests (under
# seeds/, each naming its source and commit), as a cluster holds the CRDs its operators
# installed.
_INCLUDED: dict[str, tuple[str, ...]] = {"lab": ("crds/nfd-api-crds.yaml",)}

# Called with the kubeconfig and its contexts once the sandboxes serve; what it returns is
# called before they stop (a controller run beside them, say).
OnStarted = Callable[[Path, list[str]], Callable[[], None]]


def seed_text(seed: str) -> tuple[str, str]:
    """(text, shown name) of a seed: a file path, or the name of a built-in seed."""
    path = Path(seed)
    if path.is_file():
        return path.read_text(encoding="utf-8"), str(path)
    if seed in BUILTIN_SEEDS:
        seeds = package_files.files("reconcile.sandbox").joinpath("seeds")
        parts = [seeds.joinpath(f"{seed}.yaml").read_text(encoding="utf-8")]
        for included in _INCLUDED.get(seed, ()):
            parts.append(seeds.joinpath(*included.split("/")).read_text(encoding="utf-8"))
        return "\n---\n".join(parts), f"built-in seed {seed!r}"
    raise ReconcileError(
        f"seed not found: {seed} (a YAML file, or one of: {', '.join(BUILTIN_SEEDS)})"
    )


def parse_seed(text: str, shown: str) -> list[dict[str, Any]]:
    """Objects of a `kind: List` or a multi-document YAML stream, as kubectl writes them."""
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        documents = [d for d in yaml.load_all(text, Loader=loader) if d is not None]
    except yaml.YAMLError as e:
        raise ReconcileError(f"{shown}: malformed YAML: {e}") from None
    objects: list[dict[str, Any]] = []
    for document in documents:
        if not isinstance(document, dict):
            raise ReconcileError(f"{shown}: every document must be a Kubernetes object")
        if document.get("kind") == "List" or str(document.get("kind", "")).endswith("List"):
            objects.extend(document.get("items") or ())
        else:
            objects.append(document)
    # Timestamps and other YAML-only types become the strings the API would hold.
    return list(json.loads(json.dumps(objects, default=str)))


def load_seed(seed: str) -> list[dict[str, Any]]:
    return parse_seed(*seed_text(seed))


def context_names(seeds: list[str]) -> list[str]:
    """One kubeconfig context per seed: `reconcile-sandbox` for a single seed (as ever);
    with several, the seed's name (a built-in's, or the file's stem), `-2`, `-3` for
    repeats."""
    if len(seeds) == 1:
        return ["reconcile-sandbox"]
    names: list[str] = []
    for seed in seeds:
        base = seed if seed in BUILTIN_SEEDS else Path(seed).stem
        name, count = base, 1
        while name in names:
            count += 1
            name = f"{base}-{count}"
        names.append(name)
    return names


def merged_kubeconfig(sandboxes: list[Sandbox], names: list[str]) -> dict[str, Any]:
    """One kubeconfig with a cluster, user and context per sandbox; the first is current."""
    merged: dict[str, Any] = {}
    for sandbox, name in zip(sandboxes, names, strict=True):
        config = sandbox.kubeconfig(name)
        if not merged:
            merged = config
            continue
        for section in ("clusters", "users", "contexts"):
            merged[section] += config[section]
    return merged


def run(
    *,
    seeds: list[str],
    port: int,
    kubeconfig_out: Path | None,
    command: list[str],
    err: TextIO,
    fault_rate: float = 0.0,
    fault_seed: int | None = None,
    fault_retry_after: int = 1,
    on_started: OnStarted | None = None,
) -> int:
    """Serve one API server per seed (ports from `port` up, or free ones for 0).
    `on_started` is called once the kubeconfig is written, its stop function before the
    sandboxes stop."""
    from reconcile.sandbox.faults import RandomFaults

    names = context_names(seeds)
    sandboxes: list[Sandbox] = []
    counts: list[int] = []
    try:
        for index, seed in enumerate(seeds):
            objects = load_seed(seed)
            faults = (
                RandomFaults(fault_rate, fault_seed, retry_after=fault_retry_after)
                if fault_rate
                else None
            )
            where = port + index if port else 0
            try:
                sandbox = Sandbox(objects, port=where, faults=faults)
            except SeedError as e:
                raise ReconcileError(f"seed {seed}: {e}") from None
            try:
                sandbox.start()
            except OSError as e:
                raise ReconcileError(f"cannot listen on 127.0.0.1:{where}: {e.strerror}") from None
            sandboxes.append(sandbox)
            counts.append(len(objects))
        return _serve(sandboxes, names, counts, kubeconfig_out, command, err, on_started)
    finally:
        for sandbox in sandboxes:
            sandbox.stop()
        if sandboxes:
            err.write("sandbox: stopped\n")


def _serve(
    sandboxes: list[Sandbox],
    names: list[str],
    counts: list[int],
    kubeconfig_out: Path | None,
    command: list[str],
    err: TextIO,
    on_started: OnStarted | None,
) -> int:
    from reconcile.files import write_private

    # The handler only flips a flag: taking a lock there (Event.set) can deadlock with the
    # main thread holding that same lock at the moment the signal lands. It is installed
    # before the kubeconfig appears, so whoever waits for that file may signal at once.
    stopping = [False]
    child: subprocess.Popen[bytes] | None = None

    def on_signal(number: int, frame: FrameType | None) -> None:
        if child is not None and child.poll() is None:
            child.send_signal(number)
        stopping[0] = True

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with tempfile.TemporaryDirectory(prefix="reconcile-sandbox-") as scratch:
            # JSON is YAML: kubectl and the client read it as a kubeconfig.
            text = json.dumps(merged_kubeconfig(sandboxes, names), indent=2) + "\n"
            private = Path(scratch) / "kubeconfig"
            write_private(private, text)
            # Started before anyone else can learn the kubeconfig: what they change later
            # is a change to whatever it runs, never part of the seed.
            stop = on_started(private, names) if on_started is not None else None
            try:
                if kubeconfig_out is not None:
                    write_private(kubeconfig_out, text)
                kubeconfig = kubeconfig_out or private
                _say_serving(sandboxes, names, counts, kubeconfig, err)
                if command:
                    if command[0] == "--":
                        command = command[1:]
                    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
                    try:
                        child = subprocess.Popen(command, env=env)
                    except OSError as e:
                        raise ReconcileError(f"cannot run {command[0]}: {e.strerror}") from None
                    return child.wait()
                while not stopping[0]:
                    time.sleep(0.1)
                return 0
            finally:
                if stop is not None:
                    stop()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _say_serving(
    sandboxes: list[Sandbox], names: list[str], counts: list[int], kubeconfig: Path, err: TextIO
) -> None:
    if len(sandboxes) == 1:
        err.write(
            f"sandbox: serving {counts[0]} object(s) on {sandboxes[0].url} "
            f"(kubeconfig: {kubeconfig})\n"
        )
    else:
        for sandbox, name, count in zip(sandboxes, names, counts, strict=True):
            err.write(f"sandbox: serving {count} object(s) on {sandbox.url} (context {name})\n")
        err.write(f"sandbox: kubeconfig: {kubeconfig}\n")
    err.flush()
