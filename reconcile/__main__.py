"""`python -m reconcile`: the same as the `reconcile` command, name and completion included."""

from reconcile.cli import run

run()
