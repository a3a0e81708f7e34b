"""Names never escape their URL segment: checked against their rule, then quoted whole."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reconcile.diagnostics import InvalidName
from reconcile.kube.client import Cluster
from reconcile.kube.objects import ApiResource
from reconcile.sandbox import Sandbox

CLUSTER_ROLES = ApiResource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False)
CONFIG_MAPS = ApiResource("", "v1", "configmaps", "ConfigMap", True)
NODE_RULE = "a lowercase RFC 1123 subdomain must consist of"


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    with Sandbox([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}]) as running:
        yield running


@pytest.fixture
def cluster(sandbox: Sandbox, tmp_path: Path) -> Iterator[Cluster]:
    connected = Cluster.connect(str(sandbox.write_kubeconfig(tmp_path / "kc")))
    yield connected
    connected.close()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda c: c.get_node("../namespaces/kube-system"),
            f'invalid node name "../namespaces/kube-system": {NODE_RULE}',
        ),
        (lambda c: c.patch_node("n1/status", {}), f'invalid node name "n1/status": {NODE_RULE}'),
        (lambda c: c.pods_on("n1,metadata.name=x"), 'invalid node name "n1,metadata.name=x"'),
        (lambda c: c.get_pod("kube-system/..", "p"), 'invalid namespace name "kube-system/.."'),
        (lambda c: c.budgets("A"), 'invalid namespace name "A": a lowercase RFC 1123 label'),
        (lambda c: c.evict("default", ".."), "invalid Pod name \"..\": may not be '..'"),
        (
            lambda c: c.get_object(CONFIG_MAPS, "default", "x/../../y"),
            "invalid ConfigMap name \"x/../../y\": may not contain '/'",
        ),
        (
            lambda c: c.delete_object(CLUSTER_ROLES, "", "."),
            "invalid ClusterRole name \".\": may not be '.'",
        ),
        (lambda c: c.get_node(""), 'invalid node name "": may not be empty'),
    ],
)
def test_an_invalid_name_is_refused_before_any_request(
    sandbox: Sandbox, cluster: Cluster, call: Callable[[Cluster], object], message: str
) -> None:
    with pytest.raises(InvalidName) as refused:
        call(cluster)

    assert str(refused.value).startswith(message)
    assert sandbox.requests == []


def test_a_valid_name_is_sent_as_one_quoted_segment(sandbox: Sandbox, cluster: Cluster) -> None:
    # RBAC names follow the path-segment rule only: '?', '#' and ' ' are valid in them.
    assert cluster.get_object(CLUSTER_ROLES, "", "a?b#c d") is None

    [record] = sandbox.requests
    assert record.path == "/apis/rbac.authorization.k8s.io/v1/clusterroles/a%3Fb%23c%20d"
    assert record.status == 404
