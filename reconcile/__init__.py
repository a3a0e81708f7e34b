"""reconcile: git as the source of truth for GPU node labels, driver images and workloads."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("reconcile-gpu")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"
