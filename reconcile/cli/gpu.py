"""The GPU facts: the label audit, driver image tags and coverage, the report, upgrades,
and sanitizing vendor strings into label values."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, TextIO

import click

from reconcile.app.session import Session
from reconcile.app.targets import one_target
from reconcile.cli.app import (
    ALL_FORMATS,
    TEXT_AND_JSON,
    check_node_name,
    common_options,
    duration,
    main,
    outputs,
    stderr,
    stdout,
)
from reconcile.cli.fleets import cluster_option, per_cluster
from reconcile.cli.output import (
    EXIT_DRIFT,
    EXIT_OK,
    EXIT_SIGINT,
    Format,
    audit_line,
    log,
    upgrade_line,
)
from reconcile.diagnostics import ReconcileError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from reconcile.app.session import Target
    from reconcile.gpu.drivers import AuditFinding, Coverage
    from reconcile.gpu.operations import Report
    from reconcile.gpu.rollout import RolloutRequest
    from reconcile.gpu.upgrade import Step
    from reconcile.kube.client import Cluster


@main.command(context_settings={"ignore_unknown_options": True})
@common_options
@outputs(*TEXT_AND_JSON)
@click.argument("values", nargs=-1, required=True)
def sanitize(session: Session, output: Format, values: tuple[str, ...]) -> int:
    """Make vendor strings valid label values: one output line per VALUE.

    \b
    Every character outside [A-Za-z0-9_.-] becomes '-', the result is cut to 63
    characters, then non-alphanumerics are trimmed from both ends:
      reconcile sanitize "NVIDIA A100-SXM4-40GB"   ->   NVIDIA-A100-SXM4-40GB
    A value with nothing left is an error (exit 2), never an empty line.
    """
    from reconcile.cli.views import write_json
    from reconcile.kube.labels import sanitize_label_value

    results = [(value, sanitize_label_value(value)) for value in values]
    failed = [value for value, sanitized in results if not sanitized]
    if output is Format.JSON:
        write_json([{"input": v, "value": s or None} for v, s in results], stdout())
    else:
        for _, sanitized in results:
            if sanitized:
                stdout().write(sanitized + "\n")
    if len(failed) == 1:
        raise ReconcileError(
            f"{failed[0]!r} has no alphanumeric character to keep: it cannot be a label value"
        )
    if failed:
        raise ReconcileError(
            f"{', '.join(repr(v) for v in failed)} have no alphanumeric character to keep: "
            "they cannot be label values"
        )
    return EXIT_OK


@main.command()
@common_options
@outputs(*ALL_FORMATS)
@cluster_option
def audit(session: Session, output: Format, clusters: tuple[str, ...]) -> int:
    """Check the GPU label conventions on every live GPU node (nvidia.com/gpu.present=true).

    One line `<node> <key> <reason>` per finding (missing, not-a-number, too-long,
    bad-format) and exit 1; otherwise the single line OK and exit 0.
    """
    from reconcile.cli.views import render_findings
    from reconcile.gpu import operations

    def show(findings: list[AuditFinding], out: TextIO, err: TextIO) -> int:
        render_findings(
            [audit_line(f) for f in findings],
            [{"node": f.node, "key": f.key, "reason": f.reason} for f in findings],
            output,
            out,
            title="GPU label audit",
        )
        return EXIT_DRIFT if findings else EXIT_OK

    return per_cluster(
        session,
        output,
        clusters,
        lambda _, cluster: operations.audit(cluster),
        show,
        needs_desired=False,
    )


@main.group("drivers")
def drivers_group() -> None:
    """Precompiled driver images: each GPU node's tag, and the support matrix's coverage."""


@drivers_group.command("tag")
@common_options
@outputs(*TEXT_AND_JSON)
@click.argument("node", required=False)
@click.option("--all", "all_nodes", is_flag=True, help="Every GPU node, as `<node> <tag>` lines.")
def drivers_tag(session: Session, output: Format, node: str | None, all_nodes: bool) -> int:
    """The precompiled driver image tag of a live node:
    `<cuda.driver.major>-<kernel-version.full>-<os_release.ID><os_release.VERSION_ID>`.

    A missing or empty part is an error (exit 2) naming the label, never an odd tag.
    """
    from reconcile.cli.views import render_tags
    from reconcile.gpu import operations

    if bool(node) == all_nodes:
        raise ReconcileError("give a NODE or --all")
    if node:
        check_node_name(node)
    found = operations.tags(session.connect(), node)
    render_tags(found, output, stdout(), with_node=all_nodes)
    if problems := [t.problem for t in found if t.problem]:
        raise ReconcileError("; ".join(problems))
    return EXIT_OK


@drivers_group.command("audit")
@common_options
@outputs(*ALL_FORMATS)
@cluster_option
def drivers_audit(session: Session, output: Format, clusters: tuple[str, ...]) -> int:
    """Every live GPU node whose driver image is not in desired/drivers/: `<node> MISSING <tag>`
    and exit 1; otherwise OK and exit 0. A node whose tag cannot be built is an error (exit 2)."""
    from reconcile.cli.views import render_image_audit
    from reconcile.gpu import operations

    broken: list[str] = []

    def show(coverage: list[Coverage], out: TextIO, err: TextIO) -> int:
        # A node whose tag cannot be built is listed too (`<node> UNKNOWN <why>`): stdout
        # never says OK while the exit code says the audit could not be completed.
        shown = render_image_audit(coverage, output, out)
        broken.extend(f"{c.node}: {c.problem}" for c in shown if c.tag is None)
        return EXIT_DRIFT if shown else EXIT_OK

    code = per_cluster(
        session,
        output,
        clusters,
        lambda target, cluster: operations.image_audit(target.state, cluster),
        show,
    )
    if broken:
        raise ReconcileError("; ".join(broken))
    return code


@main.command()
@common_options
@outputs(*TEXT_AND_JSON)
@cluster_option
def report(session: Session, output: Format, clusters: tuple[str, ...]) -> int:
    """A summary computed now from the live cluster and desired/: NODES= (GPU nodes),
    SKEW= (GPU nodes whose driver image is missing), MATRIX_ROWS=, and per GPU node its
    tag and driver upgrade state, as shell-sourceable KEY=value lines (in a fleet, each
    cluster's variables start with its name: LAB__NODES=)."""
    from reconcile.cli.views import render_report, report_clash, report_prefix
    from reconcile.gpu import operations

    def show(summary: Report, out: TextIO, err: TextIO) -> int:
        render_report(summary, output, out)
        for node in summary.nodes:
            if node.problem:
                log.warning("%s: %s", node.name, node.problem)
        return EXIT_OK

    def one_variable_each(reports: Mapping[str | None, Report]) -> None:
        if output is Format.TEXT and (clash := report_clash(reports)) is not None:
            raise ReconcileError(clash)

    return per_cluster(
        session,
        output,
        clusters,
        lambda target, cluster: operations.report(target.state, cluster),
        show,
        first=report_prefix,
        check=one_variable_each,
    )


@main.command()
@common_options
@outputs(*TEXT_AND_JSON)
@click.argument("nodes", nargs=-1)
@click.option(
    "--driver",
    "version",
    required=True,
    metavar="MAJOR.MINOR.REV",
    help="The driver version to move to, e.g. 550.90.07.",
)
@click.option("-l", "--selector", metavar="SELECTOR", help="The pool: every node it selects.")
@click.option(
    "--max-parallel",
    type=click.IntRange(1, 100),
    default=1,
    show_default=True,
    help="Nodes upgraded at once (a batch).",
)
@click.option(
    "--max-unavailable",
    default="25%",
    show_default=True,
    metavar="N|P%",
    help="Selected GPU nodes that may be cordoned or not Ready at once (percent rounds up).",
)
@click.option("--canary", metavar="NODE", help="Upgrade this node alone, first.")
@click.option(
    "--wait-for-completion",
    metavar="POD-SELECTOR",
    help="Before draining a node, wait for its pods matching this selector to finish.",
)
@click.option(
    "--wait-timeout",
    default="1h",
    show_default=True,
    callback=duration,
    metavar="DURATION",
    help="How long --wait-for-completion waits per node.",
)
@click.option(
    "--dry-run", is_flag=True, help="Run the preflight and print the steps, change nothing."
)
@click.option(
    "--timeout",
    default="300s",
    show_default=True,
    callback=duration,
    help="How long evictions may take (retried every 5 s).",
)
@click.option(
    "--ignore-daemonsets",
    is_flag=True,
    help="Leave DaemonSet pods on the node (they cannot be evicted).",
)
@click.option("--force", is_flag=True, help="Also evict pods that no controller recreates.")
@click.option(
    "--write-desired",
    is_flag=True,
    help="Update the driver labels in desired/ (the node files or the group that declares "
    "them; comments and order kept).",
)
@click.option("--cluster", metavar="NAME", help="In a fleet: the cluster the nodes are in.")
def upgrade(
    session: Session,
    output: Format,
    nodes: tuple[str, ...],
    version: str,
    selector: str | None,
    max_parallel: int,
    max_unavailable: str,
    canary: str | None,
    wait_for_completion: str | None,
    wait_timeout: float,
    dry_run: bool,
    timeout: float,
    ignore_daemonsets: bool,
    force: bool,
    write_desired: bool,
    cluster: str | None,
) -> int:
    """Move nodes to another driver the way the GPU Operator's upgrade controller does:
    image in the support matrix first, budgets second, then cordon, drain through the
    Eviction API, relabel, validate, uncordon. Each step moves the node's
    nvidia.com/gpu-driver-upgrade-state label; an interrupted run resumes from it.

    \b
    One NODE: its steps, one line each. A pool (--selector, or several NODEs): every node
    preflighted before the first write, then batches of --max-parallel, `<node> <state>`
    per state change.
    """
    from reconcile.gpu import drivers

    for node in (*nodes, *([canary] if canary else [])):
        check_node_name(node)
    # A node named twice is upgraded once: two workers on one node would race through its
    # states (and `upgrade N N` is then the one-node upgrade of N).
    repeated = sorted({node for node in nodes if nodes.count(node) > 1})
    if repeated:
        log.info("%s named more than once: upgraded once", ", ".join(repeated))
        nodes = tuple(dict.fromkeys(nodes))
    if bool(nodes) == bool(selector):
        raise ReconcileError("give the NODE(s) to upgrade, or --selector for a pool (not both)")
    try:
        drivers.split_driver_version(version)
    except ValueError as e:
        raise ReconcileError(str(e)) from None
    pool = (
        selector is not None
        or len(nodes) > 1
        or canary is not None
        or wait_for_completion is not None
        or max_parallel != 1
        or max_unavailable != "25%"
        or output is Format.JSON
    )
    target = one_target(session, cluster, "upgrade")
    if not pool:
        return _upgrade_one(
            session,
            target,
            nodes[0],
            version,
            dry_run,
            timeout,
            ignore_daemonsets,
            force,
            write_desired,
        )
    from reconcile.gpu.rollout import RolloutRequest

    request = RolloutRequest(
        version,
        target.state,
        nodes=nodes,
        selector=selector,
        max_parallel=max_parallel,
        max_unavailable=max_unavailable,
        canary=canary,
        wait_for_completion=wait_for_completion,
        wait_timeout=wait_timeout,
        timeout=timeout,
        ignore_daemonsets=ignore_daemonsets,
        force=force,
    )
    return _rollout(session, output, target, request, dry_run=dry_run, write_desired=write_desired)


def _upgrade_one(
    session: Session,
    target: Target,
    node: str,
    version: str,
    dry_run: bool,
    timeout: float,
    ignore_daemonsets: bool,
    force: bool,
    write_desired: bool,
) -> int:
    from reconcile.gpu import operations
    from reconcile.gpu.upgrade import UpgradeFailed

    marker = " (dry run)" if dry_run else ""

    def emit(step: Step) -> None:
        stdout().write(upgrade_line(step) + marker + "\n")
        stdout().flush()

    request = operations.UpgradeRequest(
        node,
        version,
        target.state,
        session.desired,
        dry_run=dry_run,
        timeout=timeout,
        ignore_daemonsets=ignore_daemonsets,
        force=force,
        write_desired=write_desired,
    )
    # Ctrl-C stops the upgrade at a state a rerun resumes from, whatever SIGINT was when
    # the command started (a shell ignores it for a job started with `&`): as apply and
    # pool rollouts install their own handlers.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        operations.upgrade(
            request, session.connect(None, target), emit, lambda line: log.info("%s", line)
        )
    except operations.UpgradeInterrupted as e:
        stderr().write(f"{e}\n")
        return EXIT_SIGINT
    except UpgradeFailed as e:
        raise ReconcileError(str(e)) from None
    finally:
        signal.signal(signal.SIGINT, previous)
    return EXIT_OK


def _rollout(
    session: Session,
    output: Format,
    target: Target,
    request: RolloutRequest,
    *,
    dry_run: bool,
    write_desired: bool,
) -> int:
    """A pool: preflight everything, print the batches (dry run) or run them."""
    import datetime
    import threading

    from reconcile.app.session import stoppable
    from reconcile.cli.app import Phases
    from reconcile.cli.views import write_json
    from reconcile.gpu import operations
    from reconcile.gpu.rollout import RolloutDocument, RolloutOutcome, StateEvent
    from reconcile.gpu.upgrade import STATE

    events: list[StateEvent] = []
    states: dict[str, str] = {}
    lock = threading.Lock()
    summary = Phases()

    def emit(step: Step) -> None:
        if step.field != STATE:
            log.debug("%s", upgrade_line(step))
            return
        with lock:
            when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            events.append(StateEvent(time=when, node=step.subject, state=step.value))
            states[step.subject] = step.value
            if output is Format.TEXT:
                summary.done()
                stdout().write(f"{step.subject} {step.value}\n")
                stdout().flush()
            finished = sum(1 for v in states.values() if v == "upgrade-done")
            summary(f"rollout: {finished} done, {len(states) - finished} started")

    cluster = session.connect(None, target)
    job, plan = operations.rollout_plan(request, cluster, emit, lambda line: log.info("%s", line))
    marker = " (dry run)" if dry_run else ""
    if dry_run or output is Format.TEXT:
        lines = [f"{node} done (already on {request.version}){marker}" for node in plan.done]
        lines += [
            f"batch {b.number}: {','.join(b.nodes)}{' (canary)' if b.canary else ''}{marker}"
            for b in plan.batches
        ]
        if output is Format.TEXT:
            stdout().write("".join(line + "\n" for line in lines))
            stdout().flush()
    planned = RolloutDocument.of(request.version, plan, dry_run=dry_run)
    if dry_run:
        if output is Format.JSON:
            write_json(planned.model_dump(mode="json"), stdout())
        _desired_after(session, request, cluster, [*plan.done, *plan.targets], write=False)
        return EXIT_OK
    with stoppable() as stopped:
        watcher = threading.Thread(
            target=lambda: _stop_when(stopped, job.stop), daemon=True, name="rollout-stop"
        )
        watcher.start()
        result = job.run(plan)
    summary.done()
    outcome = RolloutOutcome.after(planned, result, events)
    if output is Format.JSON:
        write_json(outcome.model_dump(mode="json"), stdout())
    _desired_after(session, request, cluster, [*plan.done, *result.done], write=write_desired)
    if outcome.ok:
        return EXIT_OK
    if stopped:
        stderr().write(f"interrupted: {outcome.summary}; rerun the same command to resume\n")
        return EXIT_SIGINT
    raise ReconcileError(f"rollout stopped: {outcome.summary}; rerun the same command to resume")


def _desired_after(
    session: Session,
    request: RolloutRequest,
    cluster: Cluster,
    upgraded: Sequence[str],
    *,
    write: bool,
) -> None:
    """The driver labels desired/ declares for the nodes on the target now (done before or
    in this run, or in a dry run's plan): written with `write`, else one note when desired/
    still declares the old driver (the next apply would revert them)."""
    from reconcile.gpu import operations

    if not upgraded:
        return
    # Only a group's selector needs the live labels.
    live = cluster.list_nodes() if request.desired.groups else []
    if write:
        written, notes = operations.write_driver_labels(
            request.desired, session.desired, request.version, upgraded, live
        )
        for line in written:
            log.info("%s: commit it", line)
        for line in notes:
            log.warning("%s", line)
        return
    stale = operations.stale_driver_note(request.desired, request.version, upgraded, live)
    if stale is not None:
        log.info("%s", stale)


def _stop_when(stopped: list[int], stop: Callable[[], None]) -> None:
    import time

    while not stopped:
        time.sleep(0.2)
    stop()
