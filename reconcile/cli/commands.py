"""Command line: argv -> typed options -> one pipeline call -> a view -> an exit code.

Exit codes follow `kubectl diff` and `argocd app diff`: 0 in sync, 1 drift or findings,
2 error (bad input, unreachable cluster, refused request). Only this module prints or
exits. Modules that need the `kubernetes` client are imported inside the commands that
talk to a cluster, so `validate`, `sanitize` and `schemas` start fast.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Final, NoReturn, TextIO, TypeVar

import click

from reconcile import diagnostics as diag
from reconcile.cli.output import (
    EXIT_DRIFT,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_SIGINT,
    Format,
    audit_line,
    configure_logging,
    log,
    severity_prefix,
    upgrade_line,
)
from reconcile.diagnostics import Diagnostic, InvalidInput, ReconcileError

if TYPE_CHECKING:
    from reconcile.desired.models import DesiredState
    from reconcile.engine.operations import PlanRequest
    from reconcile.engine.plan import Plan
    from reconcile.gpu.upgrade import Step
    from reconcile.kube.client import Cluster


F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Globals:
    desired: Path
    kubeconfig: str | None
    context: str | None
    output: Format
    request_timeout: float = 30.0
    connected: list[Cluster] = dataclasses.field(default_factory=list)

    def connect(self, timeout: float | None = None) -> Cluster:
        """The cluster; transient failures are retried until `timeout` (overall) runs out."""
        from reconcile.kube.client import Cluster

        cluster = Cluster.connect(
            self.kubeconfig, self.context, request_timeout=self.request_timeout, timeout=timeout
        )
        if not cluster.tls_verified and all(c.server != cluster.server for c in self.connected):
            log.warning("TLS verification is off for %s", cluster.server)
        self.connected.append(cluster)
        return cluster


_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _duration(ctx: click.Context, param: click.Parameter, value: str) -> float:
    """A Go-style duration (300s, 5m, 1h30m) or plain seconds."""
    import re

    text = value.strip()
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", text):
        return float(text)
    parts = re.findall(r"([0-9]+(?:\.[0-9]+)?)(ms|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise click.BadParameter(f"{value!r} is not a duration (e.g. 300s, 5m, 1h30m)")
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)


def common_options(command: F) -> F:
    """The options every command takes, gathered into one `Globals` argument `g`."""

    @click.option(
        "--desired",
        type=click.Path(path_type=Path, file_okay=False),
        default=Path("desired"),
        show_default=True,
        help="Directory holding the desired state.",
    )
    @click.option(
        "--kubeconfig",
        metavar="PATH",
        help="Kubeconfig file; default $KUBECONFIG (files joined by ':'), ~/.kube/config.",
    )
    @click.option("--context", metavar="NAME", help="Kubeconfig context to use.")
    @click.option(
        "-o",
        "--output",
        type=click.Choice([f.value for f in Format]),
        default=Format.TEXT.value,
        show_default=True,
        help="Output format.",
    )
    @click.option(
        "--request-timeout",
        default="30s",
        show_default=True,
        callback=_duration,
        metavar="DURATION",
        help="Longest wait for one API request.",
    )
    @click.option("-v", "--verbose", count=True, help="Also say what was asked of the API server.")
    @click.option(
        "-q", "--quiet", is_flag=True, help="Only errors on stderr: no notes, no warnings."
    )
    @functools.wraps(command)
    def wrapper(
        *args: Any,
        desired: Path,
        kubeconfig: str | None,
        context: str | None,
        output: str,
        request_timeout: float,
        verbose: int,
        quiet: bool,
        **kwargs: Any,
    ) -> Any:
        configure_logging(verbose=verbose, quiet=quiet)
        g = Globals(desired, kubeconfig, context, Format(output), request_timeout)
        try:
            return command(*args, g=g, **kwargs)
        finally:
            for cluster in g.connected:
                log.debug(
                    "%d request(s) to %s, %d retried",
                    cluster.requests,
                    cluster.server,
                    cluster.retries,
                )
                cluster.close()

    return wrapper  # type: ignore[return-value]


def outputs(*allowed: Format) -> Callable[[F], F]:
    """The `-o` formats a command renders; any other is refused with exit 2 before the
    command runs, never silently ignored. Goes under @common_options."""

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def wrapper(*args: Any, g: Globals, **kwargs: Any) -> Any:
            if g.output not in allowed:
                name = click.get_current_context().command_path
                shown = ", ".join(f.value for f in allowed)
                fail(f"{name} does not render -o {g.output.value}: use {shown}")
            return command(*args, g=g, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


TEXT_AND_JSON: Final = (Format.TEXT, Format.JSON)
ALL_FORMATS: Final = tuple(Format)


@contextmanager
def _stoppable() -> Iterator[list[int]]:
    """While applying, SIGINT and SIGTERM only ask to stop: requests in flight finish,
    nothing new starts, and what was applied is still reported. The list receives the
    signal's number. (The handler just appends: a lock taken in a handler can deadlock.)"""
    received: list[int] = []

    def on_signal(number: int, frame: FrameType | None) -> None:
        received.append(number)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _progress_bar(noun: str) -> Callable[[int, int], None] | None:
    """A one-line counter on stderr, when stderr is a terminal."""
    err = sys.stderr
    if not err.isatty():
        return None

    def show(done: int, total: int) -> None:
        err.write(f"\rapplying: {done}/{total} {noun}" + ("\n" if done == total else ""))
        err.flush()

    return show


def _out() -> TextIO:
    return sys.stdout


def _err() -> TextIO:
    """Where errors go: always shown, whatever -q says (notes and warnings are logged)."""
    return sys.stderr


def fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    """One `error:` line (whatever the message holds), then exit. A URL in it loses its
    user info: a password embedded in the server URL is never printed."""
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    _err().write(f"{severity_prefix('error', sys.stderr)} {diag.without_userinfo(line)}\n")
    sys.exit(code)


@contextmanager
def _errors_to_exit_codes() -> Iterator[None]:
    """Turn our exceptions into messages on stderr and exit code 2; Ctrl-C into 130."""
    try:
        yield
    except InvalidInput as e:
        from reconcile.cli.views import render_diagnostics

        render_diagnostics(e.diagnostics, _err())
        fail(f"{e}: nothing was sent to the cluster")
    except ReconcileError as e:
        fail(str(e))
    except KeyboardInterrupt:
        _err().write("interrupted\n")
        sys.exit(EXIT_SIGINT)


def _check_node_name(node: str) -> None:
    """A NODE argument that is not a valid node name never reaches a request path."""
    from reconcile.kube.validation import name_problem

    problem = name_problem(node, "node")
    if problem:
        fail(problem)


def desired_problems(g: Globals, *, coverage_check: bool) -> tuple[DesiredState, list[Diagnostic]]:
    """desired/ loaded, and every problem with it: the files, then (when they load) the
    GPU label conventions and what can never schedule. `coverage_check` adds the
    support-matrix check that `plan` makes against the cluster instead."""
    from reconcile.desired.loader import load_desired
    from reconcile.engine import placement, workloads
    from reconcile.gpu import drivers

    state, problems = load_desired(g.desired)
    if not diag.has_errors(problems):
        found = [
            *drivers.desired_diagnostics(state, coverage_check=coverage_check),
            *placement.desired_diagnostics(state),
            *workloads.desired_diagnostics(state),
        ]
        problems = sorted([*problems, *found], key=diag.sort_key)
    return state, problems


def load_or_fail(g: Globals) -> DesiredState:
    """The validated desired state; every problem printed and exit 2 if there is one."""
    from reconcile.cli.views import render_diagnostics

    state, problems = desired_problems(g, coverage_check=False)
    if diag.has_errors(problems):
        raise InvalidInput(problems)
    render_diagnostics(problems, _err())
    return state


class _Main(click.Group):
    """The command group, with the last-resort handler: a bug is still exit 2 and one
    `error:` line (never exit 1, which a pipeline reads as "drift"); the traceback
    only with -v."""

    def invoke(self, ctx: click.Context) -> Any:
        configure_logging(verbose=0, quiet=False)  # set again by the command's -v/-q
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:
            raise  # stdout went away (`| head`): click handles it
        except Exception as e:
            if log.isEnabledFor(logging.DEBUG):
                import traceback

                traceback.print_exc(file=sys.stderr)
                hint = ""
            else:
                hint = " (run with -v for the traceback)"
            text = str(e).splitlines()[0][:300] if str(e) else ""
            fail(f"internal error: {type(e).__name__}: {text}{hint}")


@click.group(
    cls=_Main,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="reconcile", prog_name="reconcile")
def main() -> None:
    """Git as the source of truth for GPU node labels, driver images and workloads.

    \b
    reconcile validate    check desired/ offline (exit 0 clean, 2 on errors)
    reconcile plan        print drift as `<node> <key> <value>` (exit 0 in sync, 1 drift, 2 error)
    reconcile apply       fix the drift (exit 0 converged, 2 anything failed)
    reconcile sandbox     a local Kubernetes-compatible API server to try it on
    """


@main.command()
@common_options
@outputs(*ALL_FORMATS)
def validate(g: Globals) -> None:
    """Check every file under desired/ without a cluster; print every problem as file:line:col."""
    from reconcile.cli.views import render_validation

    _, problems = desired_problems(g, coverage_check=True)
    render_validation(problems, g.output, _out(), _err())
    sys.exit(EXIT_ERROR if diag.has_errors(problems) else EXIT_OK)


def _plan_request(
    state: DesiredState,
    *,
    prune: bool,
    allow_empty_prune: bool,
    prune_namespace_contents: bool,
    force_conflicts: bool,
    recreate: bool,
) -> PlanRequest:
    from reconcile.engine.operations import PlanRequest

    return PlanRequest(
        state,
        prune=prune,
        allow_empty_prune=allow_empty_prune,
        prune_namespace_contents=prune_namespace_contents,
        force_conflicts=force_conflicts,
        recreate=recreate,
    )


def gpu_plan(cluster: Cluster, request: PlanRequest) -> Plan:
    """The plan operation with the GPU domain's policy and checks: what `plan` and
    `apply` run."""
    from reconcile.engine import operations
    from reconcile.gpu import checks as gpu

    return operations.plan(
        request, cluster, policy=gpu.policy(request.desired), checks=gpu.ALL_CHECKS
    )


def _prune_options(command: F) -> F:
    command = click.option(
        "--prune-namespace-contents",
        is_flag=True,
        help="With --prune: delete a Namespace even when it holds objects reconcile does not manage.",
    )(command)
    command = click.option(
        "--allow-empty-prune",
        is_flag=True,
        help="With --prune: allow deleting every object and label reconcile manages (an empty desired/).",
    )(command)
    return click.option(
        "--prune",
        is_flag=True,
        help="Also remove labels and objects reconcile applied earlier that are no longer declared.",
    )(command)


def _check_writable(path: Path) -> None:
    """Fail now, before the cluster is asked anything, when `path` cannot be written."""
    import os

    directory = path.parent
    if not directory.is_dir():
        fail(f"cannot write the plan to {path}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK) or (
        path.exists() and not os.access(path, os.W_OK)
    ):
        fail(f"cannot write the plan to {path}: permission denied")


def _object_options(command: F) -> F:
    command = click.option(
        "--timeout",
        default="5m",
        show_default=True,
        callback=_duration,
        metavar="DURATION",
        help="Overall bound: transient failures (429, 5xx, dropped connections) are retried until then.",
    )(command)
    command = click.option(
        "--recreate",
        is_flag=True,
        help="Delete and create objects whose changed fields cannot be updated in place.",
    )(command)
    return click.option(
        "--force-conflicts",
        is_flag=True,
        help="Take ownership of fields another field manager owns (server-side apply force).",
    )(command)


@main.command()
@common_options
@outputs(*ALL_FORMATS)
@click.option(
    "--out",
    "out_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Save the plan (JSON) for `apply PLAN`.",
)
@_prune_options
@click.option("--show-owner", is_flag=True, help="Add the writer of each label as a fourth column.")
@_object_options
def plan(
    g: Globals,
    out_file: Path | None,
    prune: bool,
    allow_empty_prune: bool,
    prune_namespace_contents: bool,
    show_owner: bool,
    force_conflicts: bool,
    recreate: bool,
    timeout: float,
) -> None:
    """Compare desired/ with the live cluster and print each drift as `<node> <key> <value>`
    (and `<kind>/<namespace>/<name> <field> <value>` for workload objects)."""
    from reconcile.cli.views import render_plan

    if out_file is not None:
        _check_writable(out_file)
    with _errors_to_exit_codes():
        state = load_or_fail(g)
        cluster = g.connect(timeout)
        the_plan = gpu_plan(
            cluster,
            _plan_request(
                state,
                prune=prune,
                allow_empty_prune=allow_empty_prune,
                prune_namespace_contents=prune_namespace_contents,
                force_conflicts=force_conflicts,
                recreate=recreate,
            ),
        )
        if out_file is not None:
            try:
                the_plan.save(out_file)
            except OSError as e:
                fail(f"cannot write the plan to {out_file}: {e.strerror or e}")
        render_plan(the_plan, g.output, _out(), _err(), show_owner=show_owner)
    sys.exit(EXIT_DRIFT if the_plan.needs_attention else EXIT_OK)


@main.command()
@common_options
@outputs(*ALL_FORMATS)
@click.argument(
    "plan_file", required=False, type=click.Path(path_type=Path, dir_okay=False, exists=True)
)
@_prune_options
@click.option(
    "--allow-missing-image",
    is_flag=True,
    help="Converge nodes onto driver images the support matrix does not list.",
)
@click.option(
    "--parallel",
    type=click.IntRange(1, 64),
    default=8,
    show_default=True,
    help="Nodes written at once: never more requests than this in flight.",
)
@_object_options
def apply(
    g: Globals,
    plan_file: Path | None,
    prune: bool,
    allow_empty_prune: bool,
    prune_namespace_contents: bool,
    allow_missing_image: bool,
    parallel: int,
    force_conflicts: bool,
    recreate: bool,
    timeout: float,
) -> None:
    """Fix the drift: one PATCH per drifted node, then server-side apply of the workload
    objects in kind order. Prints exactly the lines it changed.

    With PLAN_FILE (from `plan --out`), applies that plan and nothing else, refusing it
    as stale if any of its nodes or objects changed since. When the API server would
    reject any object (a conflict, an immutable field, an invalid manifest), nothing at
    all is applied.
    """
    from reconcile.cli.views import render_apply
    from reconcile.engine import operations
    from reconcile.engine.workloads import desired_configs
    from reconcile.gpu import checks as gpu

    with _errors_to_exit_codes():
        if plan_file is not None:
            if (
                prune
                or allow_empty_prune
                or prune_namespace_contents
                or recreate
                or force_conflicts
            ):
                fail(
                    "--prune, --allow-empty-prune, --prune-namespace-contents, --recreate and "
                    "--force-conflicts are decided when planning: use `reconcile plan ... --out FILE`"
                )
            state = load_or_fail(g) if g.desired.is_dir() else None
            saved = operations.open_saved(plan_file, state)
            if state is None:
                log.warning(
                    "no desired/ tree at %s: the plan is checked against the live inventories "
                    "only; apply it from the checkout it was made from",
                    g.desired,
                )
            cluster = g.connect(timeout)
            operations.verify_saved(saved, cluster)
            request = operations.ApplyRequest(
                saved.plan,
                desired=state,
                saved=True,
                configs=saved.configs,
                parallel=parallel,
                allow_refused=allow_missing_image,
            )
        else:
            state = load_or_fail(g)
            cluster = g.connect(timeout)
            the_plan = gpu_plan(
                cluster,
                _plan_request(
                    state,
                    prune=prune,
                    allow_empty_prune=allow_empty_prune,
                    prune_namespace_contents=prune_namespace_contents,
                    force_conflicts=force_conflicts,
                    recreate=recreate,
                ),
            )
            request = operations.ApplyRequest(
                the_plan,
                desired=state,
                configs=desired_configs(state),
                parallel=parallel,
                allow_refused=allow_missing_image,
            )
        with _stoppable() as stopped:
            result = operations.apply(
                request,
                cluster,
                policy=gpu.policy(state) if state is not None else gpu.GpuPolicy(),
                should_stop=lambda: bool(stopped),
                progress=_progress_bar("nodes"),
            )
        render_apply(result, g.output, _out(), _err())
        if stopped:
            signum = stopped[0]
            _err().write(
                f"interrupted: what was applied is printed above; {len(result.skipped)} node(s) and the "
                "objects after them were not started: run apply again to finish\n"
            )
            sys.exit(128 + signum)
    sys.exit(EXIT_OK if result.ok else EXIT_ERROR)


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
def schemas(g: Globals, directory: Path, check: bool) -> None:
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
        _err().write(f"{'out of date' if check else 'wrote'}: {path}\n")
    sys.exit(EXIT_DRIFT if check and stale else EXIT_OK)


@main.command(context_settings={"ignore_unknown_options": True})
@click.option(
    "--seed",
    "seed",
    required=True,
    metavar="FILE",
    help="Objects to start with (a List or multi-document YAML); `lab` for the built-in lab cluster.",
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
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def sandbox(
    seed: str,
    port: int,
    kubeconfig_out: Path | None,
    fault_rate: float,
    fault_seed: int | None,
    fault_retry_after: int,
    command: tuple[str, ...],
) -> None:
    """Serve a Kubernetes-compatible API on 127.0.0.1 until SIGINT/SIGTERM.

    \b
    With a COMMAND after `--`, run it with KUBECONFIG pointing at the sandbox, then stop
    and exit with its exit code:
      reconcile sandbox --seed lab -- sh -c 'reconcile plan; reconcile apply'
    """
    from reconcile.sandbox.main import run

    with _errors_to_exit_codes():
        code = run(
            seed=seed,
            port=port,
            kubeconfig_out=kubeconfig_out,
            command=list(command),
            err=_err(),
            fault_rate=fault_rate,
            fault_seed=fault_seed,
            fault_retry_after=fault_retry_after,
        )
    sys.exit(code)


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
def placement_command(g: Globals, source: str) -> None:
    """Where every Pod and pod template in desired/workloads can land, against the labels the
    cluster will have after apply: `<kind>/<namespace>/<name> <node>,<node>...` or
    `<kind>/<namespace>/<name> PENDING <the scheduler's reason>`. Exit 1 if anything cannot
    be placed in full."""
    from reconcile.cli.views import render_placement
    from reconcile.engine.placement import placement

    with _errors_to_exit_codes():
        state = load_or_fail(g)
        live = None if source == "desired" else g.connect().list_nodes()
        results = placement(state, live)
    render_placement(results, g.output, _out())
    sys.exit(EXIT_OK if all(r.ok for r in results) else EXIT_DRIFT)


@main.command()
@common_options
@outputs(Format.TEXT)
@click.argument("node")
@click.option(
    "--driver",
    "version",
    required=True,
    metavar="MAJOR.MINOR.REV",
    help="The driver version to move to, e.g. 550.90.07.",
)
@click.option(
    "--dry-run", is_flag=True, help="Run the preflight and print the steps, change nothing."
)
@click.option(
    "--timeout",
    default="300s",
    show_default=True,
    callback=_duration,
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
    help="Update the node's file in desired/ to the new driver (comments and order kept).",
)
def upgrade(
    g: Globals,
    node: str,
    version: str,
    dry_run: bool,
    timeout: float,
    ignore_daemonsets: bool,
    force: bool,
    write_desired: bool,
) -> None:
    """Move one node to another driver the way the GPU Operator's upgrade controller does:
    image in the support matrix first, budgets second, then cordon, drain through the
    Eviction API, relabel, validate, uncordon. Each step moves the node's
    nvidia.com/gpu-driver-upgrade-state label; an interrupted run resumes from it.
    """
    from reconcile.gpu import drivers, operations
    from reconcile.gpu.upgrade import UpgradeFailed

    _check_node_name(node)
    try:
        drivers.split_driver_version(version)
    except ValueError as e:
        fail(str(e))

    def emit(step: Step) -> None:
        _out().write(upgrade_line(step) + "\n")
        _out().flush()

    with _errors_to_exit_codes():
        request = operations.UpgradeRequest(
            node,
            version,
            load_or_fail(g),
            g.desired,
            dry_run=dry_run,
            timeout=timeout,
            ignore_daemonsets=ignore_daemonsets,
            force=force,
            write_desired=write_desired,
        )
        try:
            operations.upgrade(request, g.connect(), emit, lambda line: log.info("%s", line))
        except operations.UpgradeInterrupted as e:
            _err().write(f"{e}\n")
            sys.exit(EXIT_SIGINT)
        except UpgradeFailed as e:
            fail(str(e))
    sys.exit(EXIT_OK)


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
@click.option("--dry-run", is_flag=True, help="Print the changes as a diff instead of writing.")
def import_command(
    g: Globals, selector: str | None, prefixes: tuple[str, ...], dry_run: bool
) -> None:
    """Bring live nodes under git: write desired/nodes/<node>.yaml from their labels.

    Files that exist are updated in place (comments, key order and quoting kept; only
    changed values change); new nodes get a new file. Prints one line per file written.
    """
    from reconcile.cli.views import render_import
    from reconcile.desired.loader import load_desired
    from reconcile.engine.imports import ImportRequest, plan_import, refused_prefix, write_import
    from reconcile.gpu.provenance import DISCOVERED_PREFIXES, OPERATOR_PREFIXES

    for prefix in prefixes:
        if (problem := refused_prefix(prefix)) is not None:
            fail(problem)
    with _errors_to_exit_codes():
        state, problems = load_desired(g.desired) if g.desired.exists() else (None, [])
        if diag.has_errors(problems):
            raise InvalidInput(problems)
        request = ImportRequest(
            g.desired,
            state,
            keep=prefixes or DISCOVERED_PREFIXES,
            excluded=() if prefixes else OPERATOR_PREFIXES,
            selector=selector,
        )
        changes = plan_import(request, g.connect())
        if not dry_run:
            write_import(g.desired, changes)
    render_import(changes, g.output, _out(), dry_run=dry_run)
    sys.exit(EXIT_OK)


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
def rbac_command(g: Globals, service_account: str) -> None:
    """Print the ServiceAccount, ClusterRole, Roles and bindings reconcile needs for
    desired/, and nothing more: workload verbs only in the namespaces desired/ declares
    objects in, for the kinds it declares there. Offline; `kubectl apply -f` the output.
    """
    from reconcile.cli.views import render_rbac
    from reconcile.engine import rbac

    problem = rbac.service_account_problem(service_account)
    if problem:
        fail(f"--service-account {problem}")
    with _errors_to_exit_codes():
        state = load_or_fail(g)
    render_rbac(rbac.objects(state, service_account), g.output, _out())
    sys.exit(EXIT_OK)


@main.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script: `source <(reconcile completion bash)`."""
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)
    if completer is None:  # pragma: no cover - the choice above lists only supported shells
        fail(f"no completion for {shell}")
    script = completer(main, {}, "reconcile", "_RECONCILE_COMPLETE").source()
    _out().write(script if script.endswith("\n") else script + "\n")


# --- GPU facts -------------------------------------------------------------------------------


@main.command(context_settings={"ignore_unknown_options": True})
@common_options
@outputs(*TEXT_AND_JSON)
@click.argument("values", nargs=-1, required=True)
def sanitize(g: Globals, values: tuple[str, ...]) -> None:
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
    if g.output is Format.JSON:
        write_json([{"input": v, "value": s or None} for v, s in results], _out())
    else:
        for _, sanitized in results:
            if sanitized:
                _out().write(sanitized + "\n")
    if len(failed) == 1:
        fail(f"{failed[0]!r} has no alphanumeric character to keep: it cannot be a label value")
    if failed:
        fail(
            f"{', '.join(repr(v) for v in failed)} have no alphanumeric character to keep: "
            "they cannot be label values"
        )
    sys.exit(EXIT_OK)


@main.command()
@common_options
@outputs(*ALL_FORMATS)
def audit(g: Globals) -> None:
    """Check the GPU label conventions on every live GPU node (nvidia.com/gpu.present=true).

    One line `<node> <key> <reason>` per finding (missing, not-a-number, too-long,
    bad-format) and exit 1; otherwise the single line OK and exit 0.
    """
    from reconcile.cli.views import render_findings
    from reconcile.gpu import operations

    with _errors_to_exit_codes():
        findings = operations.audit(g.connect())
    render_findings(
        [audit_line(f) for f in findings],
        [{"node": f.node, "key": f.key, "reason": f.reason} for f in findings],
        g.output,
        _out(),
        title="GPU label audit",
    )
    sys.exit(EXIT_DRIFT if findings else EXIT_OK)


@main.group("drivers")
def drivers_group() -> None:
    """Precompiled driver images: each GPU node's tag, and the support matrix's coverage."""


@drivers_group.command("tag")
@common_options
@outputs(*TEXT_AND_JSON)
@click.argument("node", required=False)
@click.option("--all", "all_nodes", is_flag=True, help="Every GPU node, as `<node> <tag>` lines.")
def drivers_tag(g: Globals, node: str | None, all_nodes: bool) -> None:
    """The precompiled driver image tag of a live node:
    `<cuda.driver.major>-<kernel-version.full>-<os_release.ID><os_release.VERSION_ID>`.

    A missing or empty part is an error (exit 2) naming the label, never an odd tag.
    """
    from reconcile.cli.views import render_tags
    from reconcile.gpu import operations

    if bool(node) == all_nodes:
        fail("give a NODE or --all")
    if node:
        _check_node_name(node)
    with _errors_to_exit_codes():
        found = operations.tags(g.connect(), node)
    render_tags(found, g.output, _out(), with_node=all_nodes)
    if problems := [t.problem for t in found if t.problem]:
        fail("; ".join(problems))
    sys.exit(EXIT_OK)


@drivers_group.command("audit")
@common_options
@outputs(*ALL_FORMATS)
def drivers_audit(g: Globals) -> None:
    """Every live GPU node whose driver image is not in desired/drivers/: `<node> MISSING <tag>`
    and exit 1; otherwise OK and exit 0. A node whose tag cannot be built is an error (exit 2)."""
    from reconcile.cli.views import render_image_audit
    from reconcile.gpu import operations

    with _errors_to_exit_codes():
        coverage = operations.image_audit(load_or_fail(g), g.connect())
    # A node whose tag cannot be built is listed too (`<node> UNKNOWN <why>`): stdout
    # never says OK while the exit code says the audit could not be completed.
    shown = render_image_audit(coverage, g.output, _out())
    if broken := [c for c in shown if c.tag is None]:
        fail("; ".join(f"{c.node}: {c.problem}" for c in broken))
    sys.exit(EXIT_DRIFT if shown else EXIT_OK)


@main.command()
@common_options
@outputs(*TEXT_AND_JSON)
def report(g: Globals) -> None:
    """A summary computed now from the live cluster and desired/: NODES= (GPU nodes),
    SKEW= (GPU nodes whose driver image is missing), MATRIX_ROWS=, and per GPU node its
    tag and driver upgrade state, as shell-sourceable KEY=value lines."""
    from reconcile.cli.views import render_report
    from reconcile.gpu import operations

    with _errors_to_exit_codes():
        summary = operations.report(load_or_fail(g), g.connect())
    render_report(summary, g.output, _out())
    for node in summary.nodes:
        if node.problem:
            log.warning("%s: %s", node.name, node.problem)
    sys.exit(EXIT_OK)


if __name__ == "__main__":  # pragma: no cover
    main()
