"""Hostile input through the real CLI against the sandbox: always exit 2 with one `error:`
line, never a traceback, and nothing sent to the cluster when the input is at fault."""

from __future__ import annotations

import pytest

from tests.support import TestCluster, run_cli

NODE_RULE = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters"


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@pytest.mark.parametrize(
    "args",
    [
        ("drivers", "tag", "../namespaces/kube-system"),
        ("drivers", "tag", "lab-node-0/status"),
        ("upgrade", "../namespaces/kube-system", "--driver", "550.90.07"),
        ("upgrade", "LAB-NODE-0", "--driver", "550.90.07", "--dry-run"),
    ],
)
def test_a_node_argument_that_is_not_a_node_name_sends_nothing(
    args: tuple[str, ...], sandbox_only: TestCluster
) -> None:
    assert sandbox_only.sandbox is not None
    sandbox_only.sandbox.clear_requests()

    result = run_cli(*args, kubeconfig=sandbox_only.kubeconfig)

    assert result.code == 2
    assert result.stdout == ""
    [line] = error_lines(result.stderr)
    assert line.startswith(f'error: invalid node name "{args[2 if args[0] == "drivers" else 1]}": ')
    assert NODE_RULE in line
    assert sandbox_only.sandbox.requests == []
