"""`reconcile nfd`: Node Feature Discovery's rules evaluated offline, as nfd-master would."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from reconcile.app.session import Session
from reconcile.cli.app import TEXT_AND_JSON, common_options, main, outputs, stdout
from reconcile.cli.output import EXIT_OK, Format
from reconcile.diagnostics import ReconcileError
from reconcile.nfd import NFD_NAMESPACE

if TYPE_CHECKING:
    from reconcile.nfd.master import NodeOutput


@main.group("nfd")
def nfd_group() -> None:
    """Node Feature Discovery: what nfd-master writes to a node, from its rules."""


def eval_document(found: NodeOutput, *, groups: bool = False) -> dict[str, Any]:
    """The -o json document of `nfd eval` (its interface: keep it exactly); `groups`
    only when NodeFeatureGroup objects were given."""
    document: dict[str, Any] = {
        "labels": found.labels,
        "annotations": found.annotations,
        "taints": [t.document() for t in found.taints],
        "extendedResources": found.extended_resources,
        "rules": [{"rule": r.rule, "matched": r.matched} for r in found.rules],
    }
    if groups:
        document["groups"] = [
            {"group": g.group, "rule": g.rule, "matched": g.matched} for g in found.groups
        ]
    return document


def _group_lines(found: NodeOutput) -> list[str]:
    lines: list[str] = []
    listed: dict[str, bool] = {}
    for g in found.groups:
        listed[g.group] = listed.get(g.group, False) or g.matched
        lines.append(f"group {g.group} rule {g.rule}: {'matched' if g.matched else 'not matched'}")
        lines += ["  " + line for line in g.explanation]
    for name, matched in listed.items():
        verb = "lists" if matched else "does not list"
        lines.append(f"group {name}: nfd-master {verb} the node in status.nodes")
    return lines


def _feature_gates(values: tuple[str, ...]) -> dict[str, bool]:
    """nfd-master -feature-gates: `Gate=true|false`, comma-separated; only the gates
    that change what `eval` computes."""
    from reconcile.nfd import master

    gates: dict[str, bool] = {}
    for value in values:
        for item in filter(None, value.split(",")):
            name, sep, setting = item.partition("=")
            name = name.strip()
            if not sep or setting.strip().lower() not in ("true", "false"):
                raise ReconcileError(f"--feature-gates: {item!r}: expected Gate=true|false")
            if name != master.DISABLE_AUTO_PREFIX:
                raise ReconcileError(
                    f"--feature-gates: {name!r}: eval knows only {master.DISABLE_AUTO_PREFIX}"
                    f" (NodeFeatureGroups are evaluated whenever RULES holds them)"
                )
            gates[name] = setting.strip().lower() == "true"
    return gates


def _text(found: NodeOutput, node_labels: dict[str, str] | None, owned: set[str] | None) -> str:
    lines: list[str] = []
    for r in found.rules:
        lines.append(f"rule {r.rule}: {'matched' if r.matched else 'not matched'}")
        lines += ["  " + line for line in r.explanation]
    lines.append("")
    lines += [f"label {k}={v}" for k, v in found.labels.items()]
    lines += [f"annotation {k}={v}" for k, v in found.annotations.items()]
    lines += [f"taint {t.key}={t.value}:{t.effect}" for t in found.taints]
    lines += [f"extendedResource {k}={v}" for k, v in found.extended_resources.items()]
    lines += [f"ignored {why}" for why in found.rejected]
    lines += [f"warning {why}" for why in found.warnings]
    if found.groups:
        lines.append("")
        lines += _group_lines(found)
    if node_labels is not None:
        lines.append("")
        for key, value in found.labels.items():
            if key not in node_labels:
                lines.append(f"+ {key}={value}")
            elif node_labels[key] != value:
                lines.append(f"~ {key}={value} (now {node_labels[key]!r})")
        for key in sorted((owned or set()) - set(found.labels)):
            if key in node_labels:
                lines.append(f"- {key}")
    return "\n".join(lines).rstrip("\n") + "\n"


@nfd_group.command("eval")
@common_options
@outputs(*TEXT_AND_JSON)
@click.option(
    "--features",
    "features_file",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    metavar="NODEFEATURE.yaml",
    help="The node's nfd.k8s-sigs.io/v1alpha1 NodeFeature object.",
)
@click.option(
    "--node-labels",
    type=click.Path(path_type=Path, dir_okay=False),
    metavar="LABELS.json",
    help="The node's labels now (a JSON object, or a Node): text output adds what changes.",
)
@click.option("--extra-label-ns", multiple=True, metavar="NS", help="nfd-master -extra-label-ns.")
@click.option("--deny-label-ns", multiple=True, metavar="NS", help="nfd-master -deny-label-ns.")
@click.option("--label-whitelist", metavar="REGEXP", help="nfd-master -label-whitelist.")
@click.option("--enable-taints", is_flag=True, help="nfd-master -enable-taints.")
@click.option(
    "--feature-gates",
    multiple=True,
    metavar="GATE=BOOL",
    help="nfd-master -feature-gates (DisableAutoPrefix).",
)
@click.argument(
    "rule_files", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False)
)
def nfd_eval(
    session: Session,
    output: Format,
    features_file: Path,
    node_labels: Path | None,
    extra_label_ns: tuple[str, ...],
    deny_label_ns: tuple[str, ...],
    label_whitelist: str | None,
    enable_taints: bool,
    feature_gates: tuple[str, ...],
    rule_files: tuple[Path, ...],
) -> int:
    """Evaluate NodeFeatureRule objects (RULES.yaml ...) against one node's NodeFeature, as
    nfd-master does, and print what it would write to that node: labels, annotations,
    taints and extended resources, and whether each rule matched. NodeFeatureGroup
    objects in RULES are evaluated too: whether each group rule matches the node.

    Text output explains every term and expression: matched, or the value that failed.
    A rule nfd-master cannot run (unknown operator, wrong value count, invalid RE2
    pattern, bad template, a value its operator cannot compare) is one `error:` line
    naming its file and rule.
    """
    from reconcile.cli.views import write_document
    from reconcile.kube.regexp import compile_error
    from reconcile.nfd import master, reading
    from reconcile.nfd.model import RuleError

    if label_whitelist is not None and (problem := compile_error(label_whitelist)):
        raise ReconcileError(f"--label-whitelist: {problem}")
    gates = _feature_gates(feature_gates)
    config = master.MasterConfig(
        extra_label_ns=frozenset(extra_label_ns),
        deny_label_ns=frozenset(deny_label_ns),
        label_whitelist=label_whitelist,
        enable_taints=enable_taints,
        disable_auto_prefix=gates.get(master.DISABLE_AUTO_PREFIX, False),
    )
    try:
        node = reading.read_node_feature(features_file)
        objects, groups = reading.read_rules_and_groups(list(rule_files))
        labels = annotations = None
        if node_labels is not None:
            labels, annotations = reading.read_node_labels(node_labels)
        found = master.evaluate(node, objects, config, explain=not output.document, groups=groups)
    except RuleError as e:
        raise ReconcileError(str(e)) from e
    if output.document:
        write_document(eval_document(found, groups=bool(groups)), stdout(), output)
    else:
        owned = None
        if annotations is not None and "nfd.node.kubernetes.io/feature-labels" in annotations:
            owned = set(
                master.add_ns(
                    dict.fromkeys(
                        annotations["nfd.node.kubernetes.io/feature-labels"].split(","), ""
                    ),
                    master.FEATURE_NS,
                )
            ) - {f"{master.FEATURE_NS}/"}
        stdout().write(_text(found, labels, owned))
    return EXIT_OK


@nfd_group.command("features")
@common_options
@outputs(*TEXT_AND_JSON)
@click.option(
    "--nfd-namespace",
    default=NFD_NAMESPACE,
    show_default=True,
    metavar="NS",
    help="The namespace nfd-master runs in: its objects are merged first.",
)
@click.option(
    "--deny-node-feature-labels",
    is_flag=True,
    help="nfd-master restrictions.denyNodeFeatureLabels: only nfd-worker's own object's "
    "labels count.",
)
@click.argument("node")
def nfd_features(
    session: Session,
    output: Format,
    nfd_namespace: str,
    deny_node_feature_labels: bool,
    node: str,
) -> int:
    """Print NODE's live NodeFeature objects merged into one, as nfd-master merges them
    before it evaluates the rules: the file `nfd eval --features` reads.

    Text output (the default) is the YAML document; -o json the same as JSON. Exit 2 when
    the cluster has no NFD CRDs or no NodeFeature names the node.
    """
    from reconcile.cli.views import write_document
    from reconcile.nfd import live
    from reconcile.nfd.model import RuleError
    from reconcile.nfd.nodefeature import node_feature_document

    try:
        merged = live.read_node_features(
            session.connect(),
            node,
            namespace=nfd_namespace,
            deny_node_feature_labels=deny_node_feature_labels,
        )
    except RuleError as e:
        raise ReconcileError(str(e)) from e
    document = node_feature_document(merged)
    write_document(document, stdout(), Format.JSON if output is Format.JSON else Format.YAML)
    return EXIT_OK
