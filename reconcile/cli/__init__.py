"""The command line: argv to a typed request, one operation, one view, one exit code.
The only package that prints or exits. Each command's module is imported when the
command runs (app.COMMANDS)."""

from reconcile.cli.app import main, run

__all__ = ["main", "run"]
