"""`reconcile sandbox` as a process: where it listens, how it stops, what it refuses to load."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reconcile.sandbox import Sandbox, SeedError
from tests.support import REPO, mig_node, run_cli


def _start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], Path]:
    kubeconfig = tmp_path / "kubeconfig"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reconcile",
            "sandbox",
            "--seed",
            "lab",
            "--write-kubeconfig",
            str(kubeconfig),
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    deadline = time.monotonic() + 30
    while not kubeconfig.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the sandbox did not start"
        time.sleep(0.05)
    return process, kubeconfig


def _port(kubeconfig: Path) -> int:
    server = json.loads(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    assert server.startswith("https://127.0.0.1:")
    return int(server.rsplit(":", 1)[1])


def test_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    process, kubeconfig = _start(tmp_path)
    port = _port(kubeconfig)
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass

    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=15)

    assert process.returncode == 0
    assert f"on https://127.0.0.1:{port}" in stderr
    assert stderr.rstrip().endswith("sandbox: stopped")
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2)


def test_listens_on_loopback_only(tmp_path: Path) -> None:
    process, kubeconfig = _start(tmp_path)
    try:
        port = _port(kubeconfig)
        listening = subprocess.run(
            ["ss", "-Htln", f"sport = :{port}"], capture_output=True, text=True, check=False
        )
        if listening.returncode == 0 and listening.stdout.strip():
            addresses = {
                line.split()[3].rsplit(":", 1)[0] for line in listening.stdout.splitlines()
            }
            assert addresses == {"127.0.0.1"}
        else:  # no `ss` here: the socket's own address says the same
            with Sandbox() as sandbox:
                assert sandbox.server.server_address[0] == "127.0.0.1"
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=15)
    assert process.returncode == 0


def test_runs_a_command_against_itself_and_returns_its_exit_code(tmp_path: Path) -> None:
    script = (
        "import os, sys, json; "
        "config = json.load(open(os.environ['KUBECONFIG'])); "
        "sys.exit(7 if config['current-context'] == 'reconcile-sandbox' else 1)"
    )
    result = run_cli("sandbox", "--seed", "lab", "--", sys.executable, "-c", script, cwd=tmp_path)

    assert result.code == 7
    assert "sandbox: stopped" in result.stderr


@pytest.mark.slow
def test_the_quickstart_line_plans_and_applies(tmp_path: Path) -> None:
    result = run_cli(
        "sandbox",
        "--seed",
        "lab",
        "--",
        "sh",
        "-c",
        f"{sys.executable} -m reconcile plan; echo plan=$?; {sys.executable} -m reconcile apply; echo apply=$?; "
        f"{sys.executable} -m reconcile plan; echo plan=$?",
        cwd=REPO,
        process=True,  # the child commands write to the process's own stdout
    )

    assert result.code == 0, result.stderr
    assert result.lines == [
        "lab-node-1 nvidia.com/gpu.count 2",
        "plan=1",
        "lab-node-1 nvidia.com/gpu.count 2",
        "apply=0",
        "plan=0",
    ]


def test_seed_file_and_its_refusals(tmp_path: Path) -> None:
    seed = tmp_path / "seed.yaml"
    seed.write_text(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n  labels: {a.io/b: 'bad value'}\n"
    )
    result = run_cli("sandbox", "--seed", str(seed), "--", "true", cwd=tmp_path)
    assert result.code == 2
    assert (
        'Node \'n1\': Node "n1" is invalid: metadata.labels: Invalid value: "bad value"'
        in result.stderr
    )

    seed.write_text("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n")
    result = run_cli("sandbox", "--seed", str(seed), "--", "true", cwd=tmp_path)
    assert (result.code, result.stderr.strip()) == (
        2,
        f"error: seed {seed}: Widget (example.com/v1) is not served by the sandbox",
    )

    result = run_cli("sandbox", "--seed", "no-such-seed", "--", "true", cwd=tmp_path)
    assert result.code == 2
    assert "seed not found: no-such-seed" in result.stderr


def test_in_process_sandbox_can_be_seeded_and_inspected() -> None:
    with Sandbox([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}]) as sandbox:
        assert sandbox.get("nodes", "n1") is not None
        assert sandbox.requests == []
    with pytest.raises(SeedError):
        Sandbox([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "Bad_Name"}}])


def test_kubeconfig_is_private(tmp_path: Path) -> None:
    with Sandbox() as sandbox:
        path = sandbox.write_kubeconfig(tmp_path / "kc")
    assert path.stat().st_mode & 0o077 == 0


def test_kubeconfig_is_created_private_whatever_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0)
    try:
        result = run_cli(
            "sandbox", "--seed", "lab", "--write-kubeconfig", "kc", "--", "true", cwd=tmp_path
        )
    finally:
        os.umask(previous)

    assert result.code == 0, result.stderr
    assert stat.S_IMODE((tmp_path / "kc").stat().st_mode) == 0o600


def test_write_kubeconfig_refuses_to_follow_a_link(tmp_path: Path) -> None:
    target = tmp_path / "shared.txt"
    target.write_text("someone else's file\n")
    target.chmod(0o644)
    (tmp_path / "kc").symlink_to(target)

    result = run_cli(
        "sandbox", "--seed", "lab", "--write-kubeconfig", "kc", "--", "true", cwd=tmp_path
    )

    assert result.code == 2
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        "error: kc is a symbolic link: refusing to write credentials through it"
    ]
    assert target.read_text() == "someone else's file\n"
    assert (tmp_path / "kc").is_symlink()


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_write_kubeconfig_refuses_a_file_another_user_owns(tmp_path: Path) -> None:
    theirs = tmp_path / "kc"
    theirs.write_text("theirs\n")
    os.chown(theirs, 12345, 12345)

    result = run_cli(
        "sandbox", "--seed", "lab", "--write-kubeconfig", "kc", "--", "true", cwd=tmp_path
    )

    assert result.code == 2
    assert "error: kc belongs to another user (uid 12345)" in result.stderr
    assert theirs.read_text() == "theirs\n"


# Changes mig-0's layout, waits up to argv[1] seconds for mig-manager's verdict, prints it
# and the MIG resource the node then advertises.
_MIG_CHANGE = """
import os, sys, time
from kubernetes import client, config
core = client.CoreV1Api(config.new_client_from_config(os.environ["KUBECONFIG"]))
core.patch_node("mig-0", {"metadata": {"labels": {"nvidia.com/mig.config": "all-1g.5gb"}}})
deadline = time.monotonic() + float(sys.argv[1])
state = None
while state not in ("success", "failed") and time.monotonic() < deadline:
    time.sleep(0.05)
    node = core.read_node("mig-0")
    state = (node.metadata.labels or {}).get("nvidia.com/mig.config.state")
print(state, node.status.allocatable.get("nvidia.com/mig-1g.5gb"))
"""


@pytest.mark.parametrize(
    ("options", "wait", "printed"),
    [((), "30", "success 56"), (("--no-mig-manager",), "1.5", "None None")],
)
@pytest.mark.slow
def test_a_mig_manager_stand_in_runs_beside_it_unless_told_not_to(
    tmp_path: Path, options: tuple[str, ...], wait: str, printed: str
) -> None:
    seed = tmp_path / "seed.yaml"
    seed.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [mig_node("mig-0")]}))
    script = tmp_path / "change.py"
    script.write_text(_MIG_CHANGE)

    result = run_cli(
        "sandbox",
        "--seed",
        str(seed),
        *options,
        "--",
        sys.executable,
        str(script),
        wait,
        cwd=tmp_path,
        process=True,  # the command's output is the process's own
    )

    assert result.code == 0, result.stderr
    assert result.lines == [printed]
