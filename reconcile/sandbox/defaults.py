"""Server-side defaulting, as the API server (defaulters and admission) fills objects in.

The defaults are real ones (k8s.io/kubernetes/pkg/apis/*/v1/defaults.go and the
DefaultTolerationSeconds admission plugin), so that a client comparing a manifest with
the stored object meets the same extra fields it would meet on a real cluster.
"""

from __future__ import annotations

import base64
from typing import Any

from reconcile.sandbox import events

NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}


def _image_pull_policy(image: str) -> str:
    last = image.rsplit("/", 1)[-1]
    if "@" in last:
        return "IfNotPresent"
    tag = last.split(":", 1)[1] if ":" in last else "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def _container(container: dict[str, Any]) -> None:
    container.setdefault("imagePullPolicy", _image_pull_policy(str(container.get("image", ""))))
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("resources", {})
    for port in container.get("ports") or ():
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")


def pod_spec(spec: dict[str, Any], *, admission: bool, pod: bool = False) -> None:
    """A pod's spec (`pod`) or a template's: enableServiceLinks is defaulted for pods only
    (SetDefaults_Pod); a real Deployment's template does not carry it."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    if pod:
        spec.setdefault("enableServiceLinks", True)
    for group in ("containers", "initContainers"):
        for container in spec.get(group) or ():
            if isinstance(container, dict):
                _container(container)
    if admission:
        # Admission runs on pods only (not on templates): priority and toleration seconds.
        spec.setdefault("priority", 0)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
        tolerations = spec.setdefault("tolerations", [])
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if not any(
                t.get("key") == key and t.get("effect") in (None, "NoExecute") for t in tolerations
            ):
                tolerations.append(
                    {
                        "key": key,
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": 300,
                    }
                )


def apply(group: str, kind: str, obj: dict[str, Any], *, creating: bool) -> None:
    """Fill in defaults in place for a create or update of `obj`."""
    spec = obj.get("spec")
    if (group, kind) == ("events.k8s.io", "Event"):
        events.normalize(obj)
    elif (group, kind) == ("coordination.k8s.io", "Lease"):
        lease = spec if isinstance(spec, dict) else {}
        # Behind the CoordinatedLeaderElection gate, off in v1.36: dropped, not refused.
        lease.pop("strategy", None)
        lease.pop("preferredHolder", None)
        obj["spec"] = lease
    elif (group, kind) == ("", "Pod") and isinstance(spec, dict):
        pod_spec(spec, admission=creating, pod=True)
        if creating:
            status = obj.setdefault("status", {})
            status.setdefault("phase", "Pending")
            status.setdefault("qosClass", "BestEffort")
    elif (group, kind) == ("", "Namespace"):
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj.setdefault("status", {}).setdefault("phase", "Active")
        metadata = obj.setdefault("metadata", {})
        metadata.setdefault("labels", {})["kubernetes.io/metadata.name"] = metadata.get("name", "")
    elif (group, kind) == ("", "Node") and creating:
        spec = obj.setdefault("spec", {})
        conditions = (obj.get("status") or {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        taints = spec.get("taints") or []
        if not ready and not any(t.get("key") == NOT_READY_TAINT["key"] for t in taints):
            spec["taints"] = [*taints, dict(NOT_READY_TAINT)]
    elif group == "apps" and isinstance(spec, dict):
        if kind in ("Deployment", "ReplicaSet", "StatefulSet"):
            spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        if kind == "Deployment":
            spec.setdefault("progressDeadlineSeconds", 600)
            strategy = spec.setdefault("strategy", {})
            strategy.setdefault("type", "RollingUpdate")
            if strategy["type"] == "RollingUpdate":
                rolling = strategy.setdefault("rollingUpdate", {})
                rolling.setdefault("maxUnavailable", "25%")
                rolling.setdefault("maxSurge", "25%")
        template_spec = (spec.get("template") or {}).get("spec")
        if isinstance(template_spec, dict):
            pod_spec(template_spec, admission=False)
        if creating:
            obj.setdefault("status", {})
    elif (group, kind) == ("batch", "Job") and isinstance(spec, dict):
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completions", 1)
        spec.setdefault("parallelism", 1)
        template_spec = (spec.get("template") or {}).get("spec")
        if isinstance(template_spec, dict):
            pod_spec(template_spec, admission=False)
    elif (group, kind) == ("", "Secret"):
        # stringData is write-only: the API server's conversion merges it into data
        # (base64, over a key data also has) and never stores it.
        string_data = obj.pop("stringData", None)
        if isinstance(string_data, dict) and string_data:
            stored = obj.get("data")
            data: dict[str, Any] = stored if isinstance(stored, dict) else {}
            for key, value in string_data.items():
                data[key] = base64.b64encode(str(value).encode()).decode()
            obj["data"] = data
        obj.setdefault("type", "Opaque")
    elif (group, kind) == ("", "Service") and isinstance(spec, dict):
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        for port in spec.get("ports") or ():
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
