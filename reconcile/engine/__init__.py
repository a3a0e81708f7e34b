"""The reconciler: drift between desired and live (diff), the plan as a frozen value,
apply, workload objects by server-side apply, pruning by inventory, placement impact, and
the checks a plan runs. Knows nothing of GPUs and never prints: it returns values."""
