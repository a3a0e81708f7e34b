"""Command line: argv -> typed options -> one pipeline call -> a view -> an exit code.

Exit codes follow `kubectl diff` and `argocd app diff`: 0 in sync, 1 drift or findings,
2 error (bad input, unreachable cluster, refused request). Only this module prints or
exits. Modules that need the `kubernetes` client are imported inside the commands that
talk to a cluster, so `validate`, `sanitize` and `schemas` start fast.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO, TypeVar

import click

from reconcile import diagnostics as diag
from reconcile.diagnostics import Diagnostic, InvalidInput, ReconcileError
from reconcile.views import Format

if TYPE_CHECKING:
    from reconcile.cluster import Cluster
    from reconcile.models import DesiredState

EXIT_OK = 0
EXIT_DRIFT = 1
EXIT_ERROR = 2
EXIT_SIGINT = 130

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Globals:
    desired: Path
    kubeconfig: str | None
    context: str | None
    output: Format

    def connect(self) -> Cluster:
        from reconcile.cluster import Cluster

        return Cluster.connect(self.kubeconfig, self.context)


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
        help="Kubeconfig file(s); default $KUBECONFIG, ~/.kube/config.",
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
    @functools.wraps(command)
    def wrapper(
        *args: Any,
        desired: Path,
        kubeconfig: str | None,
        context: str | None,
        output: str,
        **kwargs: Any,
    ) -> Any:
        g = Globals(desired, kubeconfig, context, Format(output))
        return command(*args, g=g, **kwargs)

    return wrapper  # type: ignore[return-value]


def _out() -> TextIO:
    return sys.stdout


def _err() -> TextIO:
    return sys.stderr


def fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    _err().write(f"error: {message}\n")
    sys.exit(code)


@contextmanager
def _errors_to_exit_codes() -> Iterator[None]:
    """Turn our exceptions into messages on stderr and exit code 2; Ctrl-C into 130."""
    try:
        yield
    except InvalidInput as e:
        from reconcile.views import render_diagnostics

        render_diagnostics(e.diagnostics, _err())
        fail(f"{e}: nothing was sent to the cluster")
    except ReconcileError as e:
        fail(str(e))
    except KeyboardInterrupt:
        _err().write("interrupted\n")
        sys.exit(EXIT_SIGINT)


def load_or_fail(g: Globals) -> DesiredState:
    """The validated desired state; every problem printed and exit 2 if there is one."""
    from reconcile.loader import load_desired
    from reconcile.views import render_diagnostics

    state, problems = load_desired(g.desired)
    errors = [d for d in problems if d.severity is diag.Severity.ERROR]
    if errors:
        raise InvalidInput(problems)
    render_diagnostics(problems, _err())
    return state


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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
def validate(g: Globals) -> None:
    """Check every file under desired/ without a cluster; print every problem as file:line:col."""
    from reconcile.loader import load_desired
    from reconcile.views import render_validation

    _, problems = load_desired(g.desired)
    render_validation(problems, g.output, _out(), _err())
    sys.exit(EXIT_ERROR if diag.has_errors(problems) else EXIT_OK)


@main.command()
@common_options
@click.option(
    "--out",
    "out_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Save the plan (JSON) for `apply PLAN`.",
)
@click.option(
    "--prune",
    is_flag=True,
    help="Also plan removing labels reconcile set earlier that are no longer declared.",
)
@click.option("--show-owner", is_flag=True, help="Add the writer of each label as a fourth column.")
def plan(g: Globals, out_file: Path | None, prune: bool, show_owner: bool) -> None:
    """Compare desired/ with the live cluster and print each drift as `<node> <key> <value>`."""
    from reconcile.plan import build_plan
    from reconcile.views import render_plan

    with _errors_to_exit_codes():
        state = load_or_fail(g)
        cluster = g.connect()
        the_plan = build_plan(state, cluster.list_nodes(), prune=prune)
        if out_file is not None:
            the_plan.save(out_file)
        render_plan(the_plan, g.output, _out(), _err(), show_owner=show_owner)
    sys.exit(EXIT_DRIFT if the_plan.has_drift else EXIT_OK)


@main.command()
@common_options
@click.argument(
    "plan_file", required=False, type=click.Path(path_type=Path, dir_okay=False, exists=True)
)
@click.option(
    "--prune", is_flag=True, help="Remove labels reconcile set earlier that are no longer declared."
)
@click.option(
    "--parallel",
    type=click.IntRange(1, 64),
    default=4,
    show_default=True,
    help="Nodes written at once.",
)
def apply(g: Globals, plan_file: Path | None, prune: bool, parallel: int) -> None:
    """Fix the drift: one PATCH per drifted node. Prints exactly the lines it changed.

    With PLAN_FILE (from `plan --out`), applies that plan and nothing else, refusing it
    as stale if any of its nodes changed since.
    """
    from reconcile.apply import apply_plan, check_fresh
    from reconcile.plan import Plan, build_plan
    from reconcile.views import render_apply

    with _errors_to_exit_codes():
        if plan_file is not None:
            if prune:
                fail("--prune is decided when planning: use `reconcile plan --prune --out FILE`")
            the_plan = Plan.load(plan_file)
            cluster = g.connect()
            check_fresh(the_plan, cluster.list_nodes())
            result = apply_plan(the_plan, cluster, parallel=parallel)
        else:
            state = load_or_fail(g)
            cluster = g.connect()
            the_plan = build_plan(state, cluster.list_nodes(), prune=prune)
            result = apply_plan(the_plan, cluster, desired=state, parallel=parallel)
        render_apply(result, g.output, _out(), _err())
    sys.exit(EXIT_OK if result.ok else EXIT_ERROR)


@main.command()
@common_options
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

    from reconcile.models import json_schemas

    stale = []
    for name, schema in json_schemas().items():
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
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def sandbox(seed: str, port: int, kubeconfig_out: Path | None, command: tuple[str, ...]) -> None:
    """Serve a Kubernetes-compatible API on 127.0.0.1 until SIGINT/SIGTERM.

    \b
    With a COMMAND after `--`, run it with KUBECONFIG pointing at the sandbox, then stop
    and exit with its exit code:
      reconcile sandbox --seed lab -- sh -c 'reconcile plan; reconcile apply'
    """
    from reconcile.sandbox.main import run

    with _errors_to_exit_codes():
        code = run(
            seed=seed, port=port, kubeconfig_out=kubeconfig_out, command=list(command), err=_err()
        )
    sys.exit(code)


def report_problems(problems: list[Diagnostic]) -> None:
    from reconcile.views import render_diagnostics

    render_diagnostics(problems, _err())


if __name__ == "__main__":  # pragma: no cover
    main()
