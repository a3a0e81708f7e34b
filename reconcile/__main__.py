"""`python -m reconcile`: the same as the `reconcile` command."""

from reconcile.cli import main

main()
