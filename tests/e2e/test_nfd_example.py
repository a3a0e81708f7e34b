"""examples/nfd-rules: its README's commands against the lab, and the files it keeps for
reviewing a rule change: the rule writes the label the trainer selects, and the proposed
change takes that label off every lab node."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from tests.support import REPO, TestCluster, run_cli

EXAMPLE = REPO / "examples" / "nfd-rules"
LABEL = "feature.node.kubernetes.io/custom-gpu-training"


def _features(lab: TestCluster, work: Path, node: str) -> Path:
    result = run_cli("nfd", "features", node, kubeconfig=lab.kubeconfig)
    assert result.code == 0, result.stderr
    path = work / f"{node}.yaml"
    path.write_text(result.stdout)
    return path


def _labels(work: Path, features: Path, rule: str) -> dict[str, str]:
    result = run_cli("nfd", "eval", "--features", str(features), rule, "-o", "json", cwd=work)
    assert result.code == 0, result.stderr
    return dict(json.loads(result.stdout)["labels"])


def test_the_readme_commands_show_the_rule_writing_the_trainers_label(
    lab: TestCluster, tmp_path: Path
) -> None:
    work = tmp_path / "nfd-rules"
    shutil.copytree(EXAMPLE, work)
    assert run_cli("validate", cwd=work).code == 0
    features = _features(lab, work, "lab-node-1")
    text = run_cli(
        "nfd", "eval", "--features", str(features), "desired/workloads/rule.yaml", cwd=work
    )
    assert text.code == 0, text.stderr
    assert text.lines[0] == "rule gpu-training/a10-training: matched"
    assert f"label {LABEL}=true" in text.lines
    changed = run_cli("nfd", "eval", "--features", str(features), "changes/rule.yaml", cwd=work)
    assert changed.lines[0] == "rule gpu-training/a10-training: not matched"
    # The README's transcript is what the command prints.
    readme = (EXAMPLE / "README.md").read_text()
    assert "\n".join(text.lines[:7]) in readme


def test_the_proposed_rule_change_removes_the_label_the_trainer_selects(
    lab: TestCluster, tmp_path: Path
) -> None:
    documents = list(yaml.safe_load_all((EXAMPLE / "desired/workloads/training.yaml").read_text()))
    trainer = next(d for d in documents if d["kind"] == "Deployment")
    assert trainer["spec"]["template"]["spec"]["nodeSelector"] == {LABEL: "true"}
    rule = yaml.safe_load((EXAMPLE / "desired/workloads/rule.yaml").read_text())
    change = yaml.safe_load((EXAMPLE / "changes/rule.yaml").read_text())
    assert change["metadata"] == rule["metadata"]  # the same object, edited
    # The example's rule is the one live on the lab (what import brings in).
    code, live = lab.raw("GET", "/apis/nfd.k8s-sigs.io/v1alpha1/nodefeaturerules/gpu-training")
    assert code == 200 and live["spec"] == rule["spec"]

    now, after = {}, {}
    for node in ("lab-node-0", "lab-node-1", "lab-node-2"):
        features = _features(lab, tmp_path, node)
        now[node] = _labels(EXAMPLE, features, "desired/workloads/rule.yaml").get(LABEL)
        after[node] = _labels(EXAMPLE, features, "changes/rule.yaml").get(LABEL)
    assert now == {"lab-node-0": None, "lab-node-1": "true", "lab-node-2": None}
    assert now["lab-node-1"] == lab.labels("lab-node-1")[LABEL]
    assert after == {"lab-node-0": None, "lab-node-1": None, "lab-node-2": None}
