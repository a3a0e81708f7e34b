"""The fast reader of node files agrees with the full one: whatever it accepts, the full
reader (libyaml and the model) reads as the same node with no problem; whatever the full
reader has a word about, the fast one leaves to it."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from reconcile.desired import simple
from reconcile.desired.models import NodeFeatures
from reconcile.desired.yamlpos import parse_yaml

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


# --- the two readers compared on generated files ---------------------------------------------

# Characters YAML reads as line breaks or refuses (control characters, a byte-order mark
# past the start, lone surrogates' neighbours), next to ordinary text.
_ODD = "\u2028\u2029\u0085\x00\x01\x07\x08\x0b\x0c\x1b\x7f\x80\x9f\ufeff\ufffe\t\r"
_TEXT = st.text(alphabet=st.sampled_from(_ODD + "ab #:-'\"\\{}[]&*!|>%@`é✓\U0001f600"), max_size=8)
_KEYS = st.sampled_from(
    ["example.com/a", "example.com/b", "nvidia.com/gpu.count", "a", "on", "1.5", "x:y", "-a"]
)
_TOKENS = st.one_of(
    st.sampled_from(
        ["x", '"x"', "'x'", "", "null", "~", "yes", "07", "true", "1.5", "a b", '"a\\tb"']
    ),
    _TEXT,
)


@st.composite
def _line(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 7))
    if kind == 0:
        return draw(st.sampled_from(["", "  ", " ", "   "])) + "#" + draw(_TEXT)
    if kind == 1:
        return f"  {draw(_KEYS)}:{draw(st.sampled_from([' ', '  ', '']))}{draw(_TOKENS)}"
    if kind == 2:
        return draw(_TEXT)
    if kind == 3:
        return draw(
            st.sampled_from(
                [
                    "---",
                    "...",
                    "%YAML 1.1",
                    "labels: {}",
                    "optional: true",
                    "optional: yes",
                    "annotations:",
                    "  example.com/n: x",
                    "metadata:",
                    "  name: n2",
                    "labels:",
                    "kind: NodeFeatures",
                    "   deeper: x",
                ]
            )
        )
    return f"  {draw(_KEYS)}: {draw(_TOKENS)}{draw(st.sampled_from(['', ' ', ' #' + draw(_TEXT)]))}"


CANONICAL = [
    "apiVersion: reconcile.dev/v1alpha1",
    "kind: NodeFeatures",
    "metadata:",
    "  name: n1",
    "labels:",
    "  example.com/a: x",
    '  nvidia.com/gpu.count: "8"',
]


@st.composite
def _node_file(draw: st.DrawFn) -> str:
    """A node file near the simple shape: its lines shuffled a little, some replaced,
    generated lines inserted, odd characters anywhere, LF or CRLF endings."""
    lines = list(CANONICAL)
    if draw(st.booleans()):
        lines = [*lines[4:], *lines[:4]]  # labels first: not the canonical order
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(lines)))
        lines.insert(at, draw(_line()))
    if draw(st.booleans()) and lines:
        at = draw(st.integers(0, len(lines) - 1))
        lines[at] = draw(_line())
    if draw(st.booleans()):
        at = draw(st.integers(0, len(lines) - 1))
        cut = draw(st.integers(0, len(lines[at])))
        lines[at] = lines[at][:cut] + draw(_TEXT) + lines[at][cut:]
    ending = draw(st.sampled_from(["\n", "\n", "\r\n"]))
    return ending.join(lines) + draw(st.sampled_from(["", ending, ending * 2]))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(_node_file())
@example(HEAD + "labels:\n  # a note\u2028 {bad: [\n  example.com/a: x\n")
@example(HEAD + "labels:\n  example.com/a: x\n  # \x00\n")
@example(HEAD + "labels:\n  example.com/a: x # \x85 y: [\n")
def test_the_fast_reader_is_never_more_permissive_than_the_full_one(text: str) -> None:
    """Whatever the fast reader accepts, the full reader reads with no problem and as
    the same node: same name, labels (null meaning absent) and `optional`."""
    fast = simple.node(text, "f")
    if fast is None:
        return  # left to the full reader, which decides and explains
    model = full(text)
    assert model is not None, f"the fast reader accepted what the full reader refuses: {text!r}"
    assert (fast.name, dict(fast.labels), fast.optional) == (
        model.metadata.name,
        dict(model.labels),
        model.optional,
    )


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["example.com/a", "example.com/b", "nvidia.com/gpu.count", "a"]),
            st.sampled_from(["x", '"x"', "'8'", "", "null", '""', "5.15.0-119-generic"]),
        ),
        min_size=1,
        max_size=4,
        unique_by=lambda pair: pair[0],
    ),
    st.sampled_from(["", "  # a comment\n", "\n"]),
)
def test_the_fast_reader_reads_the_simple_shape_as_the_full_one_does(
    pairs: list[tuple[str, str]], gap: str
) -> None:
    """The comparison above is not empty: the plain shape is read fast, with the same
    values."""
    text = HEAD + "labels:\n" + gap + "".join(f"  {k}: {v}\n" for k, v in pairs)
    fast = simple.node(text, "f")
    model = full(text)
    assert fast is not None and model is not None
    assert dict(fast.labels) == dict(model.labels)
