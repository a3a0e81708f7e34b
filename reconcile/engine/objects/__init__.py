"""Workload objects from desired/workloads: planned by server-side dry-run (plan.py),
pruned by inventory (prune.py, inventory.py), applied by server-side apply (apply.py).

A Secret's values never reach a plan (see kube/sensitive.py): live, dry-run and desired
objects are compared with every value replaced by a digest, server messages about them
are redacted, and the plan keeps a digest of the configuration instead of the
configuration, which apply reads from desired/ again.
"""
