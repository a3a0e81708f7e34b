"""The application layer: what a command does, without the command line.

A `Session` (session.py) is what every command is given: desired/ and how to reach its
clusters. targets.py reads desired/ into the clusters a command works on (one cluster is
a fleet of one); reconciling.py plans and applies them, the saved and the fresh plan
written once; rollouts.py moves one node, or a pool in batches, to another driver;
watching.py follows one cluster until a signal, serving its metrics and endpoints
(metrics.py) meanwhile. Functions here return results or raise `ReconcileError`: the
command line renders the one and maps the other to its exit code.
"""
