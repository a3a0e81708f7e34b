"""A node's NodeFeature objects merged as nfd-master merges them (getAndMergeNodeFeatures
in pkg/nfd-master/nfd-master.go, the MergeInto cases of api/nfd/v1alpha1/feature_test.go
at NFD_COMMIT), and the merged document `nfd eval --features` reads back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reconcile.nfd import NFD_NAMESPACE
from reconcile.nfd.model import Features, NodeFeature, RuleError
from reconcile.nfd.nodefeature import (
    merge_node_features,
    node_feature_document,
)
from reconcile.nfd.reading import read_node_feature

FNK = "feature.node.kubernetes.io"


def nf(
    name: str,
    namespace: str = NFD_NAMESPACE,
    *,
    node: str | None = "node-1",
    features: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if node is not None:
        metadata["labels"] = {"nfd.node.kubernetes.io/node-name": node}
    spec: dict[str, Any] = {"features": features or {}}
    if labels is not None:
        spec["labels"] = labels
    return {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": metadata,
        "spec": spec,
    }


def flags(*names: str) -> dict[str, Any]:
    return {"elements": {n: {} for n in names}}


def attrs(**values: str) -> dict[str, Any]:
    return {"elements": values}


def instances(*values: dict[str, str]) -> dict[str, Any]:
    return {"elements": [{"attributes": v} for v in values]}


def test_features_merge_as_feature_test_go_merges_them() -> None:
    # TestFeature: flags joined, an attribute overridden, instances appended in order.
    first = nf(
        "a",
        features={
            "flags": {"dom.flag": flags("k1", "k2")},
            "attributes": {"dom.attr": attrs(k1="v1", k2="v2")},
            "instances": {
                "dom.inst": instances({"a1": "v1.1", "a2": "v1.2"}, {"a1": "v2.1", "a2": "v2.2"})
            },
        },
    )
    second = nf(
        "b",
        features={
            "flags": {"dom.flag": flags("k3")},
            "attributes": {"dom.attr": attrs(k1="v1.override")},
            "instances": {"dom.inst": instances({"a1": "v3.1", "a3": "v3.3"})},
        },
    )
    merged = merge_node_features([second, first])
    assert merged.features == Features(
        flags={"dom.flag": {"k1", "k2", "k3"}},
        attributes={"dom.attr": {"k1": "v1.override", "k2": "v2"}},
        instances={
            "dom.inst": [
                {"a1": "v1.1", "a2": "v1.2"},
                {"a1": "v2.1", "a2": "v2.2"},
                {"a1": "v3.1", "a3": "v3.3"},
            ]
        },
    )


def test_spec_labels_merge_the_later_object_winning() -> None:
    # TestFeatureSpec: l1 overridden, l3 added, prefixed as nfd-master prefixes them.
    merged = merge_node_features(
        [
            nf("a", labels={"l1": "v1", "l2": "v2"}),
            nf("b", labels={"l1": "v1.override", "l3": "v3"}),
        ]
    )
    assert merged.labels == {f"{FNK}/l1": "v1.override", f"{FNK}/l2": "v2", f"{FNK}/l3": "v3"}


def test_objects_in_nfd_masters_namespace_come_first_then_by_name_then_namespace() -> None:
    objects = [
        nf("a-third-party", "vendor", features={"attributes": {"d.f": attrs(x="vendor")}}),
        nf("z-worker", NFD_NAMESPACE, features={"attributes": {"d.f": attrs(x="nfd")}}),
        nf("a-third-party", "other", features={"attributes": {"d.f": attrs(x="other")}}),
    ]
    # Order: z-worker (nfd namespace), a-third-party/other, a-third-party/vendor: the
    # last one's value wins although its name sorts first.
    assert merge_node_features(objects).features.attributes == {"d.f": {"x": "vendor"}}
    instance_objects = [
        nf("b", "x", features={"instances": {"d.i": instances({"n": "b"})}}),
        nf("a", "x", features={"instances": {"d.i": instances({"n": "a"})}}),
        nf("c", NFD_NAMESPACE, features={"instances": {"d.i": instances({"n": "c"})}}),
    ]
    merged = merge_node_features(instance_objects).features.instances["d.i"]
    assert merged == [{"n": "c"}, {"n": "a"}, {"n": "b"}]
    # Another nfd-master namespace changes which object comes first.
    merged = merge_node_features(instance_objects, namespace="x").features.instances["d.i"]
    assert merged == [{"n": "a"}, {"n": "b"}, {"n": "c"}]


def test_each_objects_labels_are_prefixed_before_they_merge() -> None:
    # addNsToMapKeys per object: a later unprefixed key overrides an earlier prefixed one.
    merged = merge_node_features(
        [nf("a", labels={f"{FNK}/foo": "early"}), nf("b", labels={"foo": "late"})]
    )
    assert merged.labels == {f"{FNK}/foo": "late"}
    # Within one object the prefixed key wins over the unprefixed one.
    merged = merge_node_features([nf("a", labels={"foo": "bare", f"{FNK}/foo": "prefixed"})])
    assert merged.labels == {f"{FNK}/foo": "prefixed"}


def test_deny_node_feature_labels_keeps_only_nfd_workers_own_labels() -> None:
    objects = [
        nf("node-1", labels={"worker": "true"}),
        nf("vendor-features", labels={"vendor": "true"}),
        nf("node-1", "elsewhere", labels={"elsewhere": "true"}),
    ]
    assert set(merge_node_features(objects).labels) == {
        f"{FNK}/worker",
        f"{FNK}/vendor",
        f"{FNK}/elsewhere",
    }
    merged = merge_node_features(objects, deny_node_feature_labels=True)
    assert merged.labels == {f"{FNK}/worker": "true"}


def test_a_nil_feature_stays_nil_until_another_object_gives_it_elements() -> None:
    merged = merge_node_features(
        [
            nf("a", features={"flags": {"d.f": {}}, "attributes": {"d.a": attrs(k="v")}}),
            nf("b", features={"flags": {"d.g": {}}, "attributes": {"d.a": {}}}),
        ]
    )
    assert merged.features.flags == {"d.f": None, "d.g": None}
    assert merged.features.attributes == {"d.a": {"k": "v"}}
    merged = merge_node_features(
        [nf("a", features={"flags": {"d.f": {}}}), nf("b", features={"flags": {"d.f": flags()}})]
    )
    assert merged.features.flags == {"d.f": set()}


def test_only_the_nodes_objects_count_and_the_result_is_named_after_the_node() -> None:
    objects = [
        nf("mine", node="node-1", labels={"a": "1"}),
        nf("theirs", node="node-2", labels={"b": "2"}),
        nf("unlabelled", node=None, labels={"c": "3"}),
    ]
    merged = merge_node_features(objects, node="node-1")
    assert merged == NodeFeature("node-1", Features(), {f"{FNK}/a": "1"})
    with pytest.raises(RuleError, match=r"several nodes \(node-1, node-2\)"):
        merge_node_features(objects)


def test_no_object_is_no_features_and_no_labels() -> None:
    assert merge_node_features([], node="node-1") == NodeFeature("node-1", Features(), {})


def test_an_object_the_crd_refuses_names_the_source() -> None:
    bad = nf("a", features={"attributes": {"d.a": {"elements": {"k": 5}}}})
    with pytest.raises(RuleError) as raised:
        merge_node_features([bad], source="live")
    assert str(raised.value).startswith("live: NodeFeature/a: attributes.d.a.k: must be a string")


def test_the_merged_document_reads_back_as_the_same_node_feature(tmp_path: Path) -> None:
    objects = [
        nf(
            "node-1",
            features={
                "flags": {"kernel.loadedmodule": flags("nvidia", "i2c_core"), "d.nil": {}},
                "attributes": {"kernel.version": attrs(major="5", full="5.15.0-107-generic")},
                "instances": {"pci.device": instances({"vendor": "10de", "class": "0302"})},
            },
            labels={"pci-10de.present": "true"},
        ),
        nf(
            "extra", "vendor", features={"instances": {"pci.device": instances({"vendor": "8086"})}}
        ),
    ]
    merged = merge_node_features(objects, node="node-1")
    document = node_feature_document(merged)
    assert document["metadata"] == {
        "name": "node-1",
        "labels": {"nfd.node.kubernetes.io/node-name": "node-1"},
    }
    assert document["spec"]["features"]["flags"]["d.nil"] == {}
    assert merge_node_features([document]) == merged
    # And through the file reader `nfd eval --features` uses, as YAML.
    from reconcile.desired.writer import dump_documents

    path = tmp_path / "f.yaml"
    path.write_text(dump_documents([document]))
    assert read_node_feature(path) == merged


def test_a_features_file_of_several_objects_is_merged_in_nfd_masters_order(
    tmp_path: Path,
) -> None:
    from reconcile.desired.writer import dump_documents

    path = tmp_path / "f.yaml"
    path.write_text(
        dump_documents(
            [
                nf("b", features={"attributes": {"d.a": attrs(k="from-b")}}),
                nf("a", features={"attributes": {"d.a": attrs(k="from-a")}}),
            ]
        )
    )
    assert read_node_feature(path).features.attributes == {"d.a": {"k": "from-b"}}
