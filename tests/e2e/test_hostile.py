"""Hostile input through the real CLI against the sandbox: always exit 2 with one `error:`
line, never a traceback, and nothing sent to the cluster when the input is at fault."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reconcile.sandbox.resources import resource_for
from tests.support import (
    TestCluster,
    asked_beyond_read_ahead,
    markdown_html,
    markdown_table_rows,
    run_cli,
)

NODE_RULE = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters"
SECRET = "hostile-test-secret-3f9a1c"

# Every command that reads desired/, with the arguments it needs to get that far.
READS_DESIRED: dict[str, tuple[str, ...]] = {
    "validate": ("validate",),
    "plan": ("plan",),
    "apply": ("apply",),
    "drivers audit": ("drivers", "audit"),
    "report": ("report",),
    "placement": ("placement",),
    "import": ("import",),
    "upgrade": ("upgrade", "lab-node-0", "--driver", "550.90.07", "--dry-run"),
}
# Every command that reads a kubeconfig.
READS_KUBECONFIG: dict[str, tuple[str, ...]] = {
    **{name: args for name, args in READS_DESIRED.items() if name != "validate"},
    "audit": ("audit",),
    "drivers tag": ("drivers", "tag", "lab-node-0"),
    "drivers tag --all": ("drivers", "tag", "--all"),
}


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def _append(path: Path, text: str) -> None:
    with path.open("a") as file:
        file.write(text)


def _secret_file(tmp_path: Path) -> Path:
    """Stands in for ~/.kube/config: what a link in a pull request would point at."""
    path = tmp_path / "home" / "config"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"token={SECRET}\n")
    return path


# Ways to break desired/: name -> (what it does to the work directory, the file to blame).
DESIRED_CORPUS: dict[str, tuple[Callable[[Path, Path], object], str]] = {
    "link to a kubeconfig": (
        lambda d, t: (d / "nodes" / "kc.env").symlink_to(_secret_file(t)),
        "desired/nodes/kc.env:1:1: not a regular file: a symbolic link",
    ),
    "link to /proc/self/environ": (
        lambda d, t: (d / "nodes" / "env.env").symlink_to("/proc/self/environ"),
        "desired/nodes/env.env:1:1: not a regular file: a symbolic link",
    ),
    "link inside the tree": (
        lambda d, t: (d / "nodes" / "copy.yaml").symlink_to("lab-node-0.yaml"),
        "desired/nodes/copy.yaml:1:1: not a regular file: a symbolic link",
    ),
    "dangling link": (
        lambda d, t: (d / "nodes" / "new.yaml").symlink_to(t / "written-outside.yaml"),
        "desired/nodes/new.yaml:1:1: not a regular file: a symbolic link",
    ),
    "linked directory": (
        lambda d, t: (d / "workloads" / "more").symlink_to(_secret_file(t).parent),
        "desired/workloads/more:1:1: not a regular file: a symbolic link",
    ),
    "fifo": (
        lambda d, t: os.mkfifo(d / "nodes" / "pipe.env"),
        "desired/nodes/pipe.env:1:1: not a regular file: a FIFO (named pipe)",
    ),
    "!!int abc": (
        lambda d, t: _replace(
            d / "nodes" / "lab-node-1.yaml", 'gpu.count: "2"', "gpu.count: !!int abc"
        ),
        'desired/nodes/lab-node-1.yaml:18:25: YAML cannot read "abc" as an integer',
    ),
    "!!bool 'x'": (
        lambda d, t: _replace(
            d / "nodes" / "lab-node-1.yaml", 'gpu.count: "2"', "gpu.count: !!bool 'x'"
        ),
        'desired/nodes/lab-node-1.yaml:18:25: YAML cannot read "x" as a boolean',
    ),
    "!!timestamp abc": (
        lambda d, t: _replace(
            d / "nodes" / "lab-node-1.yaml", 'gpu.count: "2"', "gpu.count: !!timestamp abc"
        ),
        'desired/nodes/lab-node-1.yaml:18:25: YAML cannot read "abc" as a date',
    ),
    "deleting a label the kubelet owns": (
        lambda d, t: _replace(
            d / "nodes" / "lab-node-1.yaml",
            'gpu.count: "2"',
            'gpu.count: "2"\n  kubernetes.io/os: null',
        ),
        'desired/nodes/lab-node-1.yaml:19:3: label key "kubernetes.io/os" may not be declared: '
        "the kubelet (or cloud provider) rewrites it on every node; changing it breaks scheduling",
    ),
    "declaring reconcile's own inventory annotation": (
        lambda d, t: _append(
            d / "nodes" / "lab-node-1.yaml",
            'annotations:\n  reconcile.dev/managed-labels: "nvidia.com/gpu.count"\n',
        ),
        'desired/nodes/lab-node-1.yaml:24:3: annotation key "reconcile.dev/managed-labels" '
        "may not be declared: reconcile writes it on every apply",
    ),
    "cordoning with a taint": (
        lambda d, t: _append(
            d / "nodes" / "lab-node-1.yaml",
            "taints:\n- {key: node.kubernetes.io/unschedulable, effect: NoSchedule}\n",
        ),
        'desired/nodes/lab-node-1.yaml:24:9: taints.0.key: taint key "node.kubernetes.io/'
        'unschedulable" may not be declared: the node lifecycle controller mirrors '
        "spec.unschedulable into it: cordon a node with `kubectl cordon`",
    ),
    "a NUL byte": (
        lambda d, t: _replace(
            d / "nodes" / "lab-node-1.yaml", 'gpu.count: "2"', 'gpu.count: "2\x00"'
        ),
        "desired/nodes/lab-node-1.yaml:18:27: character U+0000 is not allowed in YAML",
    ),
    "not UTF-8": (
        lambda d, t: (d / "nodes" / "lab-node-1.yaml").write_bytes(
            (d / "nodes" / "lab-node-1.yaml").read_bytes().replace(b'count: "2"', b'count: "\xe92"')
        ),
        "desired/nodes/lab-node-1.yaml:18:26: file is not UTF-8 text",
    ),
    "a comment holding U+2028": (
        lambda d, t: _replace(
            d / "nodes" / "lab-node-1.yaml",
            'gpu.count: "2"',
            'gpu.count: "2"\n  # lab note\u2028 rev: [06',
        ),
        "desired/nodes/lab-node-1.yaml:19:15: malformed YAML",
    ),
    "600 levels of flow nesting": (
        lambda d, t: (d / "workloads" / "deep.yaml").write_text("a: " + "[" * 600 + "]" * 600),
        "desired/workloads/deep.yaml:1:104: nested deeper than 100 levels",
    ),
}


@pytest.mark.parametrize("case", sorted(DESIRED_CORPUS))
def test_bad_desired_input_is_exit_2_with_one_error_and_no_request(
    case: str, sandbox_only: TestCluster, workdir: Path, tmp_path: Path
) -> None:
    assert sandbox_only.sandbox is not None
    breaks, diagnostic = DESIRED_CORPUS[case]
    breaks(workdir / "desired", tmp_path)
    before = sorted((p, p.lstat().st_mtime_ns) for p in (workdir / "desired").rglob("*"))

    for name, args in READS_DESIRED.items():
        sandbox_only.sandbox.clear_requests()
        result = run_cli(*args, cwd=workdir, kubeconfig=sandbox_only.kubeconfig)

        assert result.code == 2, (name, result)
        assert result.stdout == "", name
        assert "Traceback" not in result.stderr, (name, result.stderr)
        assert SECRET not in result.stderr, name
        lines = result.stderr.splitlines()
        assert lines[0].startswith(diagnostic), (name, lines)
        if name == "validate":  # compiler style: the diagnostics are the whole report
            assert len(lines) == 1, lines
        else:
            assert error_lines(result.stderr) == [
                "error: 1 error(s): nothing was changed in the cluster"
            ], (name, lines)
        if name in ("plan", "apply"):  # the nodes were being read meanwhile, nothing else
            assert asked_beyond_read_ahead(sandbox_only.sandbox.requests) == [], name
        else:
            assert sandbox_only.sandbox.requests == [], name
    assert sorted((p, p.lstat().st_mtime_ns) for p in (workdir / "desired").rglob("*")) == before
    assert not (tmp_path / "written-outside.yaml").exists()


def test_a_desired_tree_that_links_out_of_the_checkout_is_refused_before_anything_is_read(
    sandbox_only: TestCluster, workdir: Path, tmp_path: Path
) -> None:
    assert sandbox_only.sandbox is not None
    # Another tree, a fleet even: its clusters.yaml would be read ahead if it were followed.
    other = tmp_path / "other-tree"
    (workdir / "desired").rename(other)
    (other / "nodes" / "lab-node-0.yaml").rename(other / "nodes" / "other-tree-node.yaml")
    (other / "clusters.yaml").write_text("apiVersion: reconcile.dev/v1alpha1\nkind: Fleet\n")
    (workdir / "desired").symlink_to(other, target_is_directory=True)

    for name, args in READS_DESIRED.items():
        sandbox_only.sandbox.clear_requests()
        result = run_cli(*args, cwd=workdir, kubeconfig=sandbox_only.kubeconfig)

        assert result.code == 2, (name, result)
        assert result.stdout == "", name
        assert result.stderr.splitlines() == [
            "error: desired: not a directory: a symbolic link out of the directory it is in: "
            "desired/ must be a directory, or a link to a directory beside it as git-sync's "
            "checkout link is (/git/repo -> /git/.worktrees/<hash>); pass --desired the "
            "directory itself"
        ], name
        assert "other-tree" not in result.stderr, name
        assert sandbox_only.sandbox.requests == [], name


def _broken_kubeconfig(lab: TestCluster, tmp_path: Path, case: str) -> Path:
    """The lab's kubeconfig (so that a request, if one were sent, would be seen), broken."""
    document: dict[str, Any] = json.loads(lab.kubeconfig.read_text())
    user = document["users"][0]["user"]
    path = tmp_path / "broken-kubeconfig"
    if case == "malformed YAML":
        text = json.dumps(document, indent=2)
        path.write_text(text[: text.index('"users"')] + '"users": [\n  {"name": ')
    elif case == "malformed YAML on the token's line":
        path.write_text(f"apiVersion: v1\nusers:\n- name: u\n  user:\n    token: {SECRET}: [\n")
    elif case == "bad base64 in client-key-data":
        user["client-certificate-data"] = "bm90IGEgY2VydA=="
        user["client-key-data"] = f"!!{SECRET}!!"
        path.write_text(json.dumps(document))
    elif case == "a list, not a mapping":
        path.write_text("- apiVersion: v1\n")
    elif case == "not UTF-8":
        path.write_bytes(b"\xff\xfe" + SECRET.encode())
    else:
        raise AssertionError(case)
    return path


KUBECONFIG_CORPUS = {
    "malformed YAML": "error: cannot use kubeconfig broken-kubeconfig: malformed YAML at line",
    "malformed YAML on the token's line": (
        "error: cannot use kubeconfig broken-kubeconfig: malformed YAML at line 5, column"
    ),
    "bad base64 in client-key-data": (
        "error: cannot use kubeconfig broken-kubeconfig: a *-data field is not valid base64"
    ),
    "a list, not a mapping": "error: cannot use kubeconfig broken-kubeconfig: not a usable",
    "not UTF-8": "error: cannot use kubeconfig broken-kubeconfig: not UTF-8 text",
}


@pytest.mark.parametrize("case", sorted(KUBECONFIG_CORPUS))
def test_a_broken_kubeconfig_is_exit_2_with_one_error_and_no_request(
    case: str, sandbox_only: TestCluster, workdir: Path
) -> None:
    assert sandbox_only.sandbox is not None
    kubeconfig = _broken_kubeconfig(sandbox_only, workdir, case)
    sandbox_only.sandbox.clear_requests()

    for name, args in READS_KUBECONFIG.items():
        result = run_cli(*args, "--kubeconfig", kubeconfig.name, cwd=workdir)

        assert result.code == 2, (name, result)
        assert result.stdout == "", name
        assert "Traceback" not in result.stderr, (name, result.stderr)
        assert SECRET not in result.stderr, name
        [line] = error_lines(result.stderr)
        assert line.startswith(KUBECONFIG_CORPUS[case]), (name, line)

    assert sandbox_only.sandbox.requests == []


def test_an_unwritable_plan_file_is_refused_before_any_request(
    sandbox_only: TestCluster, workdir: Path
) -> None:
    assert sandbox_only.sandbox is not None
    sandbox_only.sandbox.clear_requests()

    result = run_cli(
        "plan", "--out", "/nonexistent/plan.json", cwd=workdir, kubeconfig=sandbox_only.kubeconfig
    )

    assert (result.code, result.stdout) == (2, "")
    assert result.stderr == (
        "error: cannot write the plan to /nonexistent/plan.json: "
        "directory /nonexistent does not exist\n"
    )
    assert sandbox_only.sandbox.requests == []


def test_an_internal_error_is_one_line_and_exit_2_with_the_traceback_only_with_v(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(root: Path) -> None:
        raise RuntimeError("GET https://admin:hunter2@example.test/x failed\nsecond line")

    monkeypatch.setattr("reconcile.desired.reader.load_desired", broken)

    quiet = run_cli("validate", cwd=workdir)
    verbose = run_cli("validate", "-v", cwd=workdir)

    assert (quiet.code, quiet.stdout) == (2, "")
    assert quiet.stderr == (
        "error: internal error: RuntimeError: GET https://example.test/x failed "
        "(run with -v for the traceback)\n"
    )
    assert verbose.code == 2
    assert "Traceback (most recent call last)" in verbose.stderr
    assert error_lines(verbose.stderr) == [
        "error: internal error: RuntimeError: GET https://example.test/x failed"
    ]


def test_the_server_url_is_shown_without_user_info(
    sandbox_only: TestCluster, workdir: Path
) -> None:
    document = json.loads(sandbox_only.kubeconfig.read_text())
    cluster = document["clusters"][0]["cluster"]
    plain = cluster["server"]
    cluster["server"] = plain.replace("https://", "https://admin:hunter2@")
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(json.dumps(document))

    result = run_cli("plan", "-v", cwd=workdir, kubeconfig=kubeconfig)

    assert result.code == 1  # the lab's drift
    assert f"request(s) to {plain}, " in result.stderr
    assert "hunter2" not in result.stderr + result.stdout
    assert "admin" not in result.stderr + result.stdout


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
    node = args[2] if args[0] == "drivers" else args[1]
    assert line.startswith(f'error: invalid node name "{node}": ')
    assert NODE_RULE in line
    assert sandbox_only.sandbox.requests == []


def _plant(lab: TestCluster, node: str, labels: dict[str, str], *, name: str | None = None) -> None:
    """Labels (and a name) written straight into the sandbox's store, past its validation:
    the cluster as a proxy or a server that does not validate would show it."""
    assert lab.sandbox is not None
    key = resource_for("v1", "Node")
    assert key is not None
    stored = lab.sandbox.get("nodes", node)
    assert stored is not None
    stored["metadata"]["labels"].update(labels)
    with lab.sandbox.store.lock:
        if name is not None:
            lab.sandbox.store.delete(key.key, ("", node))
            stored["metadata"]["name"] = name
        lab.sandbox.store.put(key.key, ("", stored["metadata"]["name"]), stored)


HOSTILE_STATE = "`touch PWNED`; touch PWNED\n$(touch PWNED) 'it''s' \"x\""
HOSTILE_KERNEL = "$(touch PWNED)|<b>"


def test_sourcing_the_report_of_a_hostile_server_runs_nothing(
    sandbox_only: TestCluster, workdir: Path
) -> None:
    _plant(
        sandbox_only,
        "lab-node-0",
        {
            "nvidia.com/gpu-driver-upgrade-state": HOSTILE_STATE,
            "feature.node.kubernetes.io/kernel-version.full": HOSTILE_KERNEL,
        },
    )
    _plant(sandbox_only, "lab-node-1", {}, name="$(touch PWNED)")

    result = run_cli("report", cwd=workdir, kubeconfig=sandbox_only.kubeconfig)
    assert result.code == 0, result.stderr
    (workdir / "report.env").write_text(result.stdout)
    script = (
        ". ./report.env && printf '%s\\000' "
        '"$LAB_NODE_0_UPGRADE_STATE" "$LAB_NODE_0_TAG" "$NODES" "$__TOUCH_PWNED__TAG"'
    )
    finished = subprocess.run(
        ["sh", "-c", script], cwd=workdir, capture_output=True, check=True, timeout=30
    )

    state, tag, nodes, renamed = finished.stdout.decode().split("\0")[:-1]
    assert state == HOSTILE_STATE
    assert tag == f"550-{HOSTILE_KERNEL}-ubuntu22.04"
    assert nodes == "2"
    assert renamed.startswith("535-")
    assert not (workdir / "PWNED").exists()


def test_a_hostile_live_value_stays_in_its_markdown_cell(
    sandbox_only: TestCluster, workdir: Path
) -> None:
    hostile = "9|`<img src=x onerror=alert(1)>`<!--"
    _plant(sandbox_only, "lab-node-1", {"nvidia.com/gpu.count": hostile})

    result = run_cli("plan", "-o", "markdown", cwd=workdir, kubeconfig=sandbox_only.kubeconfig)

    assert result.code == 1, result.stderr
    assert markdown_table_rows(result.stdout) == [
        ["lab-node-1", "nvidia.com/gpu.count", hostile, "2", "gpu-feature-discovery"]
    ]
    assert markdown_html(result.stdout) == []


def test_a_20_mb_value_is_not_echoed_whole_in_any_format(workdir: Path) -> None:
    _replace(
        workdir / "desired" / "nodes" / "lab-node-1.yaml",
        'gpu.count: "2"',
        f"gpu.count: {'x' * 20_000_000}",
    )
    for output in ("text", "json", "markdown"):
        result = run_cli("validate", "-o", output, cwd=workdir)

        assert result.code == 2, output
        assert "x" * 65 not in result.stdout + result.stderr, output
        assert "...(20000000 bytes)" in result.stdout + result.stderr, output
        assert len(result.stdout + result.stderr) < 4000, output
