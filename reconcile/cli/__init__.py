"""The command line: argv to a typed request, one operation, one view, one exit code.
The only package that prints or exits."""

from reconcile.cli import gpu, reconciling, toolbox, watching
from reconcile.cli.app import main

__all__ = ["gpu", "main", "reconciling", "toolbox", "watching"]
