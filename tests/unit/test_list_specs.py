"""`Cluster.list_specs`: a LIST read page by page into each object's spec and the metadata
that names and selects it, the same objects `list_objects` reads whole."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reconcile.kube.client import Cluster
from reconcile.kube.client.cluster import PAGE_SIZE
from reconcile.kube.objects import ApiResource
from reconcile.sandbox import Sandbox

NAMESPACES = ApiResource("", "v1", "namespaces", "Namespace", False)
SECRETS = ApiResource("", "v1", "secrets", "Secret", True)
COUNT = 2 * PAGE_SIZE + 7  # three pages


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    seeded = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": f"team-{i:04d}", "labels": {"team": str(i % 3)}},
        }
        for i in range(COUNT)
    ]
    with Sandbox(seeded) as sandbox:
        path = sandbox.write_kubeconfig(Path(tmp_path_factory.mktemp("kc")) / "kubeconfig")
        connected = Cluster.connect(str(path))
        yield connected
        connected.close()


def test_every_page_is_read_into_the_spec_and_naming_metadata(cluster: Cluster) -> None:
    whole = cluster.list_objects(NAMESPACES)
    specs = cluster.list_specs(NAMESPACES)
    assert len(specs) == len(whole) >= COUNT
    for full, read in zip(whole, specs, strict=True):
        kept = {"name", "namespace", "labels", "annotations", "resourceVersion"}
        assert read["metadata"] == {k: v for k, v in full["metadata"].items() if k in kept}
        assert read.get("spec") == full.get("spec")
        assert "managedFields" not in read["metadata"] and "status" not in read


def test_a_label_selector_is_sent_with_every_page(cluster: Cluster) -> None:
    picked = cluster.list_specs(NAMESPACES, label_selector="team=1")
    assert len(picked) == len(range(1, COUNT, 3))
    assert {o["metadata"]["labels"]["team"] for o in picked} == {"1"}


def test_a_secrets_kind_is_never_read_by_its_spec(cluster: Cluster) -> None:
    requests = cluster.requests
    with pytest.raises(ValueError, match="Secret is read whole"):
        cluster.list_specs(SECRETS, "default")
    assert cluster.requests == requests
