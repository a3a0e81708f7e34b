"""What a user reads when something is off: one warning per run, errors that name the
server, the request and the next step, and no repeated prefixes."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import TestCluster, run_cli


def insecure_kubeconfig(cluster: TestCluster, directory: Path) -> Path:
    """The cluster's kubeconfig without its CA, with insecure-skip-tls-verify."""
    document = json.loads(cluster.kubeconfig.read_text())
    for entry in document["clusters"]:
        entry["cluster"].pop("certificate-authority-data", None)
        entry["cluster"]["insecure-skip-tls-verify"] = True
    path = directory / "insecure.kubeconfig"
    path.write_text(json.dumps(document))
    return path


def test_tls_verification_off_is_one_warning_per_run(
    lab: TestCluster, workdir: Path, tmp_path: Path
) -> None:
    kubeconfig = insecure_kubeconfig(lab, tmp_path)
    server = json.loads(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    # A process: in-process, the test runner records warnings instead of printing them.
    result = run_cli("plan", cwd=workdir, kubeconfig=kubeconfig, process=True)
    assert result.code == 1
    assert result.lines == ["lab-node-1 nvidia.com/gpu.count 2"]
    assert result.stderr == f"warning: TLS verification is off for {server}\n"
    quiet = run_cli("plan", "-q", cwd=workdir, kubeconfig=kubeconfig)
    assert quiet.stderr == ""


def test_a_verified_connection_prints_no_warning(lab: TestCluster, workdir: Path) -> None:
    result = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert "TLS" not in result.stderr
