"""The toolbox: import live nodes into desired/, the RBAC desired/ needs, placement, the
JSON Schemas, shell completion, and the sandbox cluster."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TextIO, cast

import click

from reconcile.app.session import Session
from reconcile.app.targets import load_targets, one_target
from reconcile.cli.app import TEXT_AND_JSON, common_options, main, outputs, stderr, stdout
from reconcile.cli.fleets import cluster_option
from reconcile.cli.output import (
    EXIT_DRIFT,
    EXIT_OK,
    Format,
    Prefixed,
)
from reconcile.diagnostics import ReconcileError

if TYPE_CHECKING:
    pass


@main.command("placement")
@common_options
@outputs(*TEXT_AND_JSON)
@click.option(
    "--nodes",
    "source",
    type=click.Choice(["cluster", "desired"]),
    default="cluster",
    show_default=True,
    help="Evaluate against the live nodes with desired/ laid over, or desired/nodes alone.",
)
@cluster_option
def placement_command(
    session: Session, output: Format, source: str, clusters: tuple[str, ...]
) -> int:
    """Where every Pod and pod template in desired/workloads lands after apply, replica by
    replica, each taking its requests (GPUs, MIG slices, DRA devices) out of a node's room:
    `<kind>/<namespace>/<name> <placed>/<wanted> <node>,<node>...` or
    `<kind>/<namespace>/<name> <placed>/<wanted> PENDING <n>: <the scheduler's reason>`.
    Exit 1 if anything cannot be placed in full."""
    from reconcile.app.placing import place_on
    from reconcile.cli.fleets import per_cluster
    from reconcile.cli.views import View, view_for
    from reconcile.engine.capacity import Placement
    from reconcile.engine.placement import placement

    view = view_for(output)

    def show(shown: View, results: list[Placement]) -> int:
        shown.placement(results)
        return EXIT_OK if all(r.ok for r in results) else EXIT_DRIFT

    if source == "desired":  # offline: desired/nodes alone, per cluster of a fleet
        targets = load_targets(session, clusters).targets
        code = EXIT_OK
        for target in targets:
            target_view = view
            if len(targets) > 1:
                prefixed = cast(TextIO, Prefixed(view.out, f"{target.name} "))
                target_view = view.to(prefixed, view.err)
            code = max(code, show(target_view, placement(target.state, None)))
        return code
    return per_cluster(
        session,
        view,
        clusters,
        lambda target, cluster: place_on(target.state, cluster),
        show,
    )


@main.command("import")
@common_options
@outputs(*TEXT_AND_JSON)
@click.option(
    "-l",
    "--selector",
    metavar="LABELSELECTOR",
    help="Only the nodes it selects (kubectl's -l syntax).",
)
@click.option(
    "--prefix",
    "prefixes",
    multiple=True,
    metavar="P",
    help="Keep label keys starting with P (repeatable); default the NFD and GPU prefixes.",
)
@click.option(
    "--group-by",
    metavar="KEY",
    help="One NodeGroup per value of label KEY (the labels its nodes share); per-node files "
    "only for what differs.",
)
@click.option(
    "--nfd-rules",
    is_flag=True,
    help="Also the cluster's NodeFeatureRule objects, one new file each under "
    "workloads/nodefeaturerules/ (never over an existing file or a rule desired/ declares).",
)
@click.option("--dry-run", is_flag=True, help="Print the changes as a diff instead of writing.")
@click.option(
    "--cluster",
    metavar="NAME",
    help="In a fleet: the cluster to import from (new files go to desired/clusters/NAME/).",
)
def import_command(
    session: Session,
    output: Format,
    selector: str | None,
    prefixes: tuple[str, ...],
    group_by: str | None,
    nfd_rules: bool,
    dry_run: bool,
    cluster: str | None,
) -> int:
    """Bring live nodes under git: write desired/nodes/<node>.yaml from their labels.

    Files that exist are updated in place (comments, key order and quoting kept; only
    changed values change); new nodes get a new file. With --nfd-rules, the
    NodeFeatureRule objects too, stripped of status and server fields. Prints one line
    per file written.
    """
    from reconcile.app.importing import import_nodes
    from reconcile.cli.views import view_for

    changes = import_nodes(
        session,
        cluster=cluster,
        selector=selector,
        prefixes=prefixes,
        group_by=group_by,
        dry_run=dry_run,
        nfd_rules=nfd_rules,
    )
    view_for(output).imports(changes, dry_run=dry_run)
    return EXIT_OK


@main.command("rbac")
@common_options
@outputs(*TEXT_AND_JSON)
@click.option(
    "--service-account",
    default="reconcile-system/reconcile",
    show_default=True,
    metavar="NAMESPACE/NAME",
    help="The ServiceAccount reconcile runs as.",
)
@click.option("--cluster", metavar="NAME", help="In a fleet: the cluster whose tree it is for.")
def rbac_command(
    session: Session, output: Format, service_account: str, cluster: str | None
) -> int:
    """Print the ServiceAccount, ClusterRole, Roles and bindings reconcile needs for
    desired/, and nothing more: workload verbs only in the namespaces desired/ declares
    objects in, for the kinds it declares there. Offline; `kubectl apply -f` the output.
    """
    from reconcile.cli.views import view_for
    from reconcile.engine import rbac
    from reconcile.gpu import operations as gpu

    problem = rbac.service_account_problem(service_account)
    if problem:
        raise ReconcileError(f"--service-account {problem}")
    state = one_target(session, cluster, "rbac").state
    view_for(output).rbac(rbac.objects(state, service_account, gpu.RBAC))
    return EXIT_OK


@main.command()
@common_options
@outputs(Format.TEXT)
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("schemas"),
    show_default=True,
)
@click.option(
    "--check",
    is_flag=True,
    help="Exit 1 if the files differ from the models instead of writing them.",
)
def schemas(session: Session, output: Format, directory: Path, check: bool) -> int:
    """Write the JSON Schema of every desired-state kind (generated from the models)."""
    import json

    from reconcile.engine.plan import all_schemas

    stale = []
    for name, schema in all_schemas().items():
        text = json.dumps(schema, indent=2, sort_keys=True) + "\n"
        path = directory / name
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(path)
        if not check:
            directory.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for path in stale:
        stderr().write(f"{'out of date' if check else 'wrote'}: {path}\n")
    return EXIT_DRIFT if check and stale else EXIT_OK


@main.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script: `source <(reconcile completion bash)`."""
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)
    if completer is None:  # pragma: no cover - the choice above lists only supported shells
        raise ReconcileError(f"no completion for {shell}")
    script = completer(main, {}, "reconcile", "_RECONCILE_COMPLETE").source()
    stdout().write(script if script.endswith("\n") else script + "\n")


@main.command(context_settings={"ignore_unknown_options": True})
@click.option(
    "--seed",
    "seeds",
    required=True,
    multiple=True,
    metavar="FILE",
    help="Objects to start with (a List or multi-document YAML); `lab` or `driver-lab` for a "
    "built-in cluster. Repeat it for several clusters: one API server each, one kubeconfig "
    "with a context per seed (named after it).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="Port on 127.0.0.1 (0 picks a free one).",
)
@click.option(
    "--write-kubeconfig",
    "kubeconfig_out",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Where to write a kubeconfig for it.",
)
@click.option(
    "--fault-rate",
    type=click.FloatRange(0, 1),
    default=0.0,
    help="Answer this share of requests with a fault (500, 503, 429, 409, dropped).",
)
@click.option("--fault-seed", type=int, help="Seed the faults, to replay a run.")
@click.option(
    "--fault-retry-after",
    type=click.IntRange(0, 60),
    default=1,
    show_default=True,
    help="Retry-After seconds of injected 429s.",
)
@click.option(
    "--mig-manager/--no-mig-manager",
    default=True,
    help="Run a stand-in for the GPU Operator's mig-manager beside each sandbox (on by "
    "default; see below).",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def sandbox(
    seeds: tuple[str, ...],
    port: int,
    kubeconfig_out: Path | None,
    fault_rate: float,
    fault_seed: int | None,
    fault_retry_after: int,
    mig_manager: bool,
    command: tuple[str, ...],
) -> int:
    """Serve a Kubernetes-compatible API on 127.0.0.1 until SIGINT/SIGTERM.

    \b
    With a COMMAND after `--`, run it with KUBECONFIG pointing at the sandbox, then stop
    and exit with its exit code:
      reconcile sandbox --seed lab -- sh -c 'reconcile plan; reconcile apply'

    A stand-in for the GPU Operator's mig-manager runs beside it: a change of a GPU node's
    nvidia.com/mig.config goes through nvidia.com/mig.config.state pending to success (its
    nvidia.com/gpu and nvidia.com/mig-* capacity rewritten per the layout) or failed (a
    layout the GPU lacks, or the node annotated mig-manager.stand-in/fail=true).
    """
    from reconcile.sandbox.main import OnStarted, run

    on_started: OnStarted | None = None
    if mig_manager:
        from reconcile.gpu import standin

        on_started = standin.serve

    return run(
        seeds=list(seeds),
        port=port,
        kubeconfig_out=kubeconfig_out,
        command=list(command),
        err=stderr(),
        fault_rate=fault_rate,
        fault_seed=fault_seed,
        fault_retry_after=fault_retry_after,
        on_started=on_started,
    )
