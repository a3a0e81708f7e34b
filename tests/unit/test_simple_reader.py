"""The fast reader of node files agrees with the full one: whatever it accepts, the full
reader (libyaml and the model) reads as the same node with no problem; whatever the full
reader has a word about, the fast one leaves to it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from reconcile.desired import simple
from reconcile.desired.loader import parse_yaml
from reconcile.desired.models import NodeFeatures

HEAD = "apiVersion: reconcile.dev/v1alpha1\nkind: NodeFeatures\nmetadata:\n  name: n1\n"

BODIES = [
    'labels:\n  nvidia.com/gpu.count: "8"\n  feature.node.kubernetes.io/pci-10de.present: "true"\n',
    "labels:\n  example.com/kernel: 5.15.0-119-generic\n",
    "labels:\n  example.com/a: 'single'\n",
    "labels:\n  example.com/a: null\n",
    "labels:\n  example.com/a:\n",
    "labels:\n  example.com/a: ~\n",
    "labels:\n  example.com/a: yes\n",
    "labels:\n  example.com/a: 22.04\n",
    "labels:\n  example.com/a: 0x1F\n",
    "labels:\n  example.com/a: 2001-12-14\n",
    "labels:\n  example.com/a: true\n",
    'labels:\n  example.com/a: "x" # comment\n',
    "labels:\n  example.com/a: x # comment\n",
    'labels:\n  example.com/a: "x"\n  example.com/a: "y"\n',
    'labels:\n  on: "x"\n',
    'labels:\n  "example.com/a": "x"\n',
    'labels:\n  kubernetes.io/hostname: "x"\n',
    'labels:\n  example.com/a: "-bad-"\n',
    'labels:\n  example.com/a: "' + "a" * 64 + '"\n',
    'labels:\n  Example.com/a: "x"\n',
    "labels:\n",
    "labels:\n  # only a comment\n",
    "labels: {}\n",
    'labels:\n    example.com/a: "x"\n',
    'labels:\n  example.com/a: "x"\nannotations:\n  example.com/b: "y"\n',
    'labels:\n  example.com/a: "x"\noptional: true\n',
    'labels:\n  example.com/a: "x"\noptional: yes\n',
    '# a comment\n\nlabels:\n\n  # another\n  example.com/a: "x"\n',
    'labels:\n  example.com/a: "a\\tb"\n',
    "labels:\n  example.com/a: &anchor x\n",
    "labels: {example.com/a: x}\n",
    'labels:\n  example.com/a: "x"   \n  example.com/b: y  \n',
    "labels:\n  example.com/a:   \n",
    'labels:\n  # note: example.com/b: "y"\n  example.com/a: "x"\n',
    'labels:\n  example.com/a: "x"',
]


def full(text: str) -> NodeFeatures | None:
    documents, problems = parse_yaml(text, "f")
    if problems or len(documents) != 1:
        return None
    try:
        return NodeFeatures.model_validate(documents[0].data)
    except ValidationError:
        return None


@pytest.mark.parametrize("body", BODIES)
@pytest.mark.parametrize("head", [HEAD, "---\n" + HEAD, HEAD.replace("n1", '"n1"')])
def test_the_fast_reader_accepts_only_what_the_full_reader_reads_the_same(
    head: str, body: str
) -> None:
    text = head + body
    fast = simple.node(text, "f")
    if fast is None:
        return  # left to the full reader
    model = full(text)
    assert model is not None, "accepted what the full reader has a word about"
    assert (fast.name, fast.labels, fast.optional) == (
        model.metadata.name,
        dict(model.labels),
        model.optional,
    )


def test_the_common_shape_is_read_fast_with_positions() -> None:
    text = HEAD + 'labels:\n  nvidia.com/gpu.count: "8"\n  example.com/k: v1\n'
    node = simple.node(text, "desired/nodes/n1.yaml")
    assert node is not None
    assert str(node.source) == "desired/nodes/n1.yaml:4:9"
    assert dict(node.labels) == {"nvidia.com/gpu.count": "8", "example.com/k": "v1"}


def test_labels_that_repeat_across_files_are_held_once() -> None:
    text = (
        "apiVersion: reconcile.dev/v1alpha1\nkind: NodeFeatures\nmetadata:\n  name: {name}\n"
        'labels:\n  feature.node.kubernetes.io/kernel-version.full: "5.15.0-119-generic"\n'
    )
    first = simple.node(text.format(name="gpu-1"), "gpu-1.yaml")
    second = simple.node(text.format(name="gpu-2"), "gpu-2.yaml")
    env = simple.env_node(
        "gpu-3",
        {"feature.node.kubernetes.io/kernel-version.full": "5.15.0-119-generic"},
        {"feature.node.kubernetes.io/kernel-version.full": 1},
        "gpu-3.env",
    )

    assert first is not None and second is not None and env is not None
    [(key_1, value_1)] = first.labels.items()
    [(key_2, value_2)] = second.labels.items()
    [(key_3, value_3)] = env.labels.items()
    assert key_1 is key_2 is key_3
    assert value_1 is value_2 is value_3
