"""Credentials as kubectl finds them, turned into the official client's ApiClient.

A kubeconfig that cannot be used is a ConfigError naming the file and what is wrong with
it, never quoting it: a line of a kubeconfig may hold a token.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import re
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Final

import urllib3
from kubernetes import config
from kubernetes.client.api_client import ApiClient
from kubernetes.client.configuration import Configuration
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.kube_config import ConfigNode, KubeConfigLoader, KubeConfigMerger

from reconcile.diagnostics import ConfigError

USER_AGENT: Final = "reconcile/0.1"

REFRESH_INTERVAL: Final = 1.0  # seconds between two runs of the client's refresh hook


class _Configuration(Configuration):
    """The client's configuration, its refresh hook run at most once a second.

    The client's kubeconfig and in-cluster loaders give the configuration a hook that
    runs before every request: it renews a token that is due, then sets every setting
    again (and installs itself anew), the host among them, whose setter reads the proxy
    variables of the whole environment once more: a large share of a PATCH's CPU time
    (the PATCH rate in README's fleet-scale figures). A token is renewed well before it expires (by the kubeconfig
    loader five minutes early, in a pod every minute), so a hook run at most once a
    second still renews every token in time."""

    _refresh_hook: Callable[[Configuration], None] | None = None
    _refresh_due: float = -math.inf

    # The client's stubs type the attribute as None, the value it starts with.
    @property  # type: ignore[override]
    def refresh_api_key_hook(self) -> Callable[[Configuration], None] | None:
        return self._refresh if self._refresh_hook is not None else None

    @refresh_api_key_hook.setter
    def refresh_api_key_hook(self, hook: Callable[[Configuration], None] | None) -> None:
        self._refresh_hook = hook

    def _refresh(self, configuration: Configuration) -> None:
        # No lock: two threads that both find it due both run it, as every request did.
        now = time.monotonic()
        hook = self._refresh_hook
        if hook is None or now < self._refresh_due:
            return
        self._refresh_due = now + REFRESH_INTERVAL
        hook(configuration)


def connected(
    kubeconfig: str | None = None, context: str | None = None, *, in_cluster: bool = False
) -> tuple[ApiClient, str]:
    """An ApiClient with credentials as kubectl finds them: the one `kubeconfig` file,
    else $KUBECONFIG (several files joined by ':', missing ones skipped), else
    ~/.kube/config, and in a pod the service account (the only way with `in_cluster`).
    urllib3 never retries on its own; ConfigError when no usable credentials are found.
    With the client, whose credentials they are, as an error may name them: `user "alice"
    (context "lab")`, or in a pod its service account."""
    configuration = _Configuration()
    whose = "the pod's service account"
    if in_cluster:
        paths = []
    elif kubeconfig:
        if not Path(kubeconfig).is_file():
            raise ConfigError(f"kubeconfig not found: {kubeconfig}")
        paths = [kubeconfig]
    else:
        listed = os.environ.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser())
        paths = [p for p in dict.fromkeys(listed.split(os.pathsep)) if p and Path(p).is_file()]
    try:
        if paths:
            whose = _load_kubeconfig(paths, context, configuration)
        elif os.environ.get("KUBERNETES_SERVICE_HOST") or in_cluster:
            config.load_incluster_config(client_configuration=configuration)
            whose = _service_account(configuration)
        else:
            raise ConfigError(
                "no kubeconfig found: pass --kubeconfig, set KUBECONFIG, or create "
                "~/.kube/config (or run `reconcile sandbox` for a local cluster)"
            )
    except ConfigError:
        raise
    except ConfigException as e:
        raise ConfigError(f"cannot use kubeconfig: {_config_problem(e)}") from None
    except Exception as e:  # what the client's YAML and base64 decoding raise
        shown = ", ".join(paths) or "(in-cluster)"
        raise ConfigError(f"cannot use kubeconfig {shown}: {_broken_config(e)}") from None
    configuration.retries = False  # retries are decided by reconcile, not urllib3
    if skips_tls_verification(configuration):
        _silence_insecure_warnings(str(configuration.host))
    client = ApiClient(configuration)
    client.user_agent = USER_AGENT
    return client, whose


def _service_account(configuration: Configuration) -> str:
    """`service account "system:serviceaccount:NS:NAME"`, the subject of the pod's token
    (a JWT whose claims are not secret; its signature, the part that is, is not read)."""
    token = str((configuration.api_key or {}).get("BearerToken") or "").removeprefix("Bearer ")
    parts = token.split(".")
    if len(parts) == 3:
        try:
            claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
        except ValueError:
            claims = None
        subject = claims.get("sub") if isinstance(claims, dict) else None
        if isinstance(subject, str) and subject.startswith("system:serviceaccount:"):
            return f'service account "{subject}"'
    return "the pod's service account"


def skips_tls_verification(configuration: Configuration) -> bool:
    """True when the server is https and the kubeconfig says insecure-skip-tls-verify."""
    return str(configuration.host).startswith("https://") and not configuration.verify_ssl


def _silence_insecure_warnings(host: str) -> None:
    """Drop urllib3's InsecureRequestWarning (one per request) for this server's host only:
    the filter matches the warning's text, which names the host."""
    hostname = (urllib3.util.parse_url(host).host or "").strip("[]").rstrip(".")
    warnings.filterwarnings(
        "ignore",
        message=f"Unverified HTTPS request is being made to host '{re.escape(hostname)}'",
        category=urllib3.exceptions.InsecureRequestWarning,
    )


def _config_problem(error: ConfigException) -> str:
    # The loader's messages name files and contexts, never credentials.
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def _broken_config(error: Exception) -> str:
    """Why a kubeconfig could not be read, without quoting it: PyYAML's messages carry a
    snippet of the offending line, which may be the line holding the token."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    if mark is not None:
        problem = getattr(error, "problem", None) or "malformed"
        return f"malformed YAML at line {mark.line + 1}, column {mark.column + 1}: {problem}"
    if isinstance(error, binascii.Error):
        return f"a *-data field is not valid base64 ({error})"
    if isinstance(error, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(error, OSError):
        return f"cannot read it or a file it names ({error.strerror})"
    first = str(error).splitlines()[0] if str(error) else ""
    return f"not a usable kubeconfig ({type(error).__name__}: {first})"


def _load_kubeconfig(paths: list[str], context: str | None, configuration: Configuration) -> str:
    """Merge kubeconfig files as kubectl does: for every cluster, user and context name,
    and for current-context, the first file that sets it wins. (The client's own merge
    takes current-context from the last file.) Whose credentials they are: `user "U"
    (context "C")`."""
    merger = KubeConfigMerger(os.pathsep.join(paths))
    if merger.config is None:
        raise ConfigException("Invalid kube-config file. No configuration found.")
    current = next(
        (c for p in merger.paths if (c := (merger.config_files[p] or {}).get("current-context"))),
        None,
    )
    if current:
        merger.config.value["current-context"] = current
    wanted = context or current
    listed = merger.config.value.get("contexts") if isinstance(merger.config.value, dict) else None
    entries = [c.value if isinstance(c, ConfigNode) else c for c in listed or ()]
    names = [str(c.get("name")) for c in entries if isinstance(c, dict)]
    if wanted and wanted not in names:
        what = "context" if context else "current-context"
        raise ConfigError(
            f'{what} "{wanted}" not found in the kubeconfig; '
            f"contexts: {', '.join(names) or '(none)'}"
        )
    loader = KubeConfigLoader(
        config_dict=merger.config, config_base_path=None, active_context=context
    )
    loader.load_and_set(configuration)
    chosen = loader.current_context  # the chosen context's entry, as plain dicts
    name = str(chosen.get("name") or "")
    settings = chosen.get("context")
    user = settings.get("user") if isinstance(settings, dict) else None
    return f'user "{user}" (context "{name}")' if user else f'context "{name}" (no user)'
