"""The GitHub workflows and the deploy manifests agree, and the pull-request check fails on
what must not merge: the action's step the plan workflow runs (action.yml) runs here, as
bash, against the sandbox. actionlint checks the workflows and the documented examples."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import REPO, TestCluster

PRUNE_FLAGS = ("--prune", "--allow-empty-prune", "--prune-namespace-contents")


def _step(workflow: str, name: str) -> dict[str, str]:
    """The workflow's step `name`, or, when it is the repository's action (`uses: ./`), the
    action's step that runs reconcile."""
    document = yaml.safe_load((REPO / ".github" / "workflows" / workflow).read_text())
    [job] = document["jobs"].values()
    [step] = [s for s in job["steps"] if s.get("name") == name]
    if step.get("uses") == "./":
        action = yaml.safe_load((REPO / "action.yml").read_text())
        [step] = [s for s in action["runs"]["steps"] if s.get("id") == "run"]
    return dict(step)


def _with(workflow: str, name: str) -> dict[str, object]:
    """What the workflow's step `name` (the repository's action) is given."""
    document = yaml.safe_load((REPO / ".github" / "workflows" / workflow).read_text())
    [job] = document["jobs"].values()
    [step] = [s for s in job["steps"] if s.get("name") == name]
    assert step["uses"] == "./"
    return dict(step["with"])


def _prune_policy(words: list[str]) -> list[str]:
    return [w for w in words if w in PRUNE_FLAGS]


def test_the_apply_workflow_prunes_as_the_cronjob_and_the_watch_do() -> None:
    """The action prunes only when told (`prune: true`; tests/unit/test_action.py runs its
    step both ways): the repository's apply workflow tells it, as the CronJob and the watch
    Deployment pass --prune, and nothing more."""
    cronjob = yaml.safe_load((REPO / "deploy" / "cronjob.yaml").read_text())
    [container] = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    watch = yaml.safe_load((REPO / "deploy" / "watch.yaml").read_text())
    [watcher] = [
        c for c in watch["spec"]["template"]["spec"]["containers"] if c["name"] == "reconcile"
    ]
    assert _prune_policy(container["args"]) == ["--prune"]
    assert _prune_policy(watcher["args"]) == ["--prune"]
    assert _with("apply.yml", "apply")["prune"] is True
    script = _step("apply.yml", "apply")["run"]
    [command] = [line for line in script.splitlines() if "reconcile apply --" in line]
    assert _prune_policy(command.split()) == []  # only through "${prune[@]}"
    assert '"${prune[@]}"' in command.split()


def test_the_plan_workflow_plans_with_the_apply_prune_policy() -> None:
    assert _with("plan.yml", "plan")["prune"] is _with("apply.yml", "apply")["prune"] is True
    script = _step("plan.yml", "plan")["run"]
    [command] = [line for line in script.splitlines() if "reconcile plan --" in line]
    assert _prune_policy(command.split()) == []
    assert '"${prune[@]}"' in command.split()


def _run_plan_step(work: Path, kubeconfig: Path | None) -> tuple[int, str]:
    """The workflow's plan step as the runner runs it: bash, with the kubeconfig secret
    (none, as on a fork's pull request, when `kubeconfig` is None)."""
    script = _step("plan.yml", "plan")["run"]
    bin_dir = Path(sys.executable).parent
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(work),
        "COMMAND": "plan",
        "DESIRED": "desired",
        "KUBECONFIG_DATA": kubeconfig.read_text() if kubeconfig is not None else "",
        "PLAN_FILE": "",
        "PLAN_KEY": "",
        "PRUNE": str(_with("plan.yml", "plan")["prune"]).lower(),
        "RUNNER_TEMP": str(work),
        "GITHUB_OUTPUT": str(work / "output"),
        "GITHUB_STEP_SUMMARY": str(work / "summary.md"),
        "NO_COLOR": "1",
    }
    (work / "output").write_text("")
    subprocess.run(
        ["bash", "-eo", "pipefail", "-c", script],
        cwd=work,
        env=env,
        check=True,
        timeout=120,
        stdout=subprocess.DEVNULL,
    )
    said = dict(line.split("=", 1) for line in (work / "output").read_text().splitlines())
    return int(said["exit-code"]), Path(said["report"]).read_text()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="the workflow step is bash")
def test_the_pull_request_check_fails_on_error_findings_not_on_drift(
    lab: TestCluster, workdir: Path
) -> None:
    code, comment = _run_plan_step(workdir, lab.kubeconfig)
    assert code == 1  # drift: gpu.count on lab-node-1
    assert "| lab-node-1 | `nvidia.com/gpu.count` | `9` | `2` |" in comment

    node_file = workdir / "desired" / "nodes" / "lab-node-0.yaml"
    node_file.write_text(node_file.read_text().replace("NVIDIA-A100-SXM4-40GB", "NVIDIA-H100"))
    code, comment = _run_plan_step(workdir, lab.kubeconfig)
    assert code == 2  # a100-job has nowhere to go: an error finding, must not merge
    assert "| **error** | `Pod/nfd-lab/a100-job` |" in comment


def test_the_pull_request_comment_shows_validation_errors(lab: TestCluster, workdir: Path) -> None:
    node_file = workdir / "desired" / "nodes" / "lab-node-0.yaml"
    node_file.write_text(node_file.read_text().replace('gpu.count: "4"', "gpu.count: 4"))
    code, comment = _run_plan_step(workdir, lab.kubeconfig)
    assert code == 2
    assert "#### reconcile validate" in comment
    assert "`desired/nodes/lab-node-0.yaml:16:" in comment


def test_the_workflows_pass_actionlint() -> None:
    """Syntax, expressions, shell scripts, and actions on a runtime GitHub removed."""
    actionlint = shutil.which("actionlint") or str(Path(sys.executable).parent / "actionlint")
    workflows = sorted(str(p) for p in (REPO / ".github" / "workflows").glob("*.yml"))
    result = subprocess.run(
        [actionlint, "-no-color", *workflows], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_documented_workflows_pass_actionlint(tmp_path: Path) -> None:
    """Every workflow the documentation shows (a YAML block with `jobs:`), as a file of a
    repository's .github/workflows."""
    actionlint = shutil.which("actionlint") or str(Path(sys.executable).parent / "actionlint")
    workflows = tmp_path / ".github" / "workflows"
    workflows.mkdir(parents=True)
    written = []
    for page in sorted((REPO / "docs").rglob("*.md")):
        blocks = re.findall(r"^```ya?ml\n(.*?)^```", page.read_text(), flags=re.M | re.S)
        for number, block in enumerate(blocks):
            if re.search(r"^jobs:", block, flags=re.M):
                path = workflows / f"{page.stem}-{number}.yml"
                path.write_text(block)
                written.append(path.name)
    assert {"github-action-0.yml", "github-action-1.yml", "github-action-2.yml"} <= set(written)
    result = subprocess.run(
        [actionlint, "-no-color", *sorted(str(p) for p in workflows.iterdir())],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_a_forks_pull_request_runs_what_needs_no_cluster(workdir: Path) -> None:
    code, comment = _run_plan_step(workdir, None)
    assert code == 0
    assert "#### reconcile validate" in comment
    assert "#### reconcile placement (against desired/nodes alone)" in comment
    assert "Pod/nfd-lab/a100-job 1/1 -> lab-node-0 (1); candidates: lab-node-0" in comment
    assert "The cluster plan runs once a maintainer approves this run" in comment

    node_file = workdir / "desired" / "nodes" / "lab-node-0.yaml"
    node_file.write_text(node_file.read_text().replace('gpu.count: "4"', "gpu.count: 4"))
    code, comment = _run_plan_step(workdir, None)
    assert code == 2  # still fails on what must not merge
