"""reconcile: git as the source of truth for GPU node labels, driver images and workloads."""

from typing import Any


def __getattr__(name: str) -> Any:
    # The version is looked up when asked for: importlib.metadata costs a tenth of the
    # start-up of every command.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("reconcile-gpu")
        except PackageNotFoundError:  # pragma: no cover - running from a source tree
            return "0.0.0"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
