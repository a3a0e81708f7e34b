"""The only package that talks to the API server (and the only one importing `kubernetes`
and urllib3), one module per concern:

- `transport`: a request's failure as reconcile's exception (translated once, here, keeping
  the server's Status reason and message and never a header, token or kubeconfig contents)
  and the retry policy;
- `cluster`: `Cluster`, generic resources by path and nodes by the fast path (wire.py);
- `readahead`: reads started early on threads of their own;
- `watching`: a watch's chunked answer as events;
- `discovery`: which resource serves a kind;
- `paths`: REST paths from checked names;
- `kubeconfig`: credentials as kubectl finds them.
"""

from reconcile.kube.client.cluster import (
    APPLY_PATCH,
    MERGE_PATCH,
    PAGE_SIZE,
    PAGES_AHEAD,
    Cluster,
)
from reconcile.kube.client.discovery import Discovery
from reconcile.kube.client.kubeconfig import REFRESH_INTERVAL, USER_AGENT
from reconcile.kube.client.paths import EVENTS, LEASES, PODS, namespace_segment, node_segment
from reconcile.kube.client.readahead import ReadStopped
from reconcile.kube.client.transport import (
    TRANSIENT_STATUS,
    ConnectFailed,
    RetryPolicy,
    translate,
)
from reconcile.kube.client.watching import WatchEvent, WatchExpired

__all__ = [
    "APPLY_PATCH",
    "EVENTS",
    "LEASES",
    "MERGE_PATCH",
    "PAGES_AHEAD",
    "PAGE_SIZE",
    "PODS",
    "REFRESH_INTERVAL",
    "TRANSIENT_STATUS",
    "USER_AGENT",
    "Cluster",
    "ConnectFailed",
    "Discovery",
    "ReadStopped",
    "RetryPolicy",
    "WatchEvent",
    "WatchExpired",
    "namespace_segment",
    "node_segment",
    "translate",
]
