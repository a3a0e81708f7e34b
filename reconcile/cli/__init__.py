"""The command line: argv to a typed request, one operation, one view, one exit code.
The only package that prints or exits."""

from reconcile.cli.commands import main

__all__ = ["main"]
