"""`reconcile sandbox`: load a seed, serve, write a kubeconfig, run until told to stop
(or for as long as a given command runs)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from importlib import resources as package_files
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import yaml

from reconcile.diagnostics import ReconcileError
from reconcile.sandbox import Sandbox, SeedError

BUILTIN_SEEDS = ("lab", "driver-lab")


def seed_text(seed: str) -> tuple[str, str]:
    """(text, shown name) of a seed: a file path, or the name of a built-in seed."""
    path = Path(seed)
    if path.is_file():
        return path.read_text(encoding="utf-8"), str(path)
    if seed in BUILTIN_SEEDS:
        resource = package_files.files("reconcile.sandbox").joinpath("seeds", f"{seed}.yaml")
        return resource.read_text(encoding="utf-8"), f"built-in seed {seed!r}"
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


def run(
    *,
    seed: str,
    port: int,
    kubeconfig_out: Path | None,
    command: list[str],
    err: TextIO,
    fault_rate: float = 0.0,
    fault_seed: int | None = None,
    fault_retry_after: int = 1,
) -> int:
    from reconcile.sandbox.faults import RandomFaults

    objects = load_seed(seed)
    faults = (
        RandomFaults(fault_rate, fault_seed, retry_after=fault_retry_after) if fault_rate else None
    )
    try:
        sandbox = Sandbox(objects, port=port, faults=faults)
    except SeedError as e:
        raise ReconcileError(f"seed {seed}: {e}") from None
    try:
        sandbox.start()
    except OSError as e:
        raise ReconcileError(f"cannot listen on 127.0.0.1:{port}: {e.strerror}") from None
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
            kubeconfig = sandbox.write_kubeconfig(kubeconfig_out or Path(scratch) / "kubeconfig")
            err.write(
                f"sandbox: serving {len(objects)} object(s) on {sandbox.url} (kubeconfig: {kubeconfig})\n"
            )
            err.flush()
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
        for number, handler in previous.items():
            signal.signal(number, handler)
        sandbox.stop()
        err.write("sandbox: stopped\n")
